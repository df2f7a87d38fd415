//! The `model:NAME` provider against a scripted model server speaking the real wire protocol:
//! the reply becomes the bundle, priced; a reply that quotes the fix is refused; an outage is
//! the run's error and is not cached as the provider's answer.

use faultline_context::{Inputs, ModelProvider, Providers};
use faultline_model::{ModelClient, ModelConfig, PricingTable, Protocol, RetryPolicy};
use faultline_schema::{BundleStatus, Condition};
use faultline_scripted::{Script, ScriptedServer, Step, StepUsage};
use faultline_testkit::{Prepared, Shared};
use std::sync::Arc;
use std::time::Duration;

const MODEL: &str = "scripted-writer";

async fn fixture() -> &'static Prepared {
    static FIXTURE: Shared = Shared::new();
    FIXTURE
        .get(|dir| async move { Prepared::fixture(&dir, "toy-model-provider").await })
        .await
}

fn text(reply: &str) -> Step {
    Step::Text {
        text: reply.into(),
        truncated: false,
        usage: Some(StepUsage {
            input: 1_000,
            output: 500,
            ..StepUsage::default()
        }),
    }
}

async fn scripted(script: Vec<Step>) -> (Providers, ScriptedServer) {
    let server = ScriptedServer::start(Script::new(script)).await.unwrap();
    let mut config =
        ModelConfig::new(Protocol::OpenAiChat, MODEL).with_base_url(server.openai_base_url());
    config.retry = RetryPolicy {
        max_retries: 1,
        initial_backoff: Duration::from_millis(10),
        max_backoff: Duration::from_millis(20),
        ..RetryPolicy::default()
    };
    let pricing = PricingTable::from_toml_str(&format!(
        "schema_version = 1\ntable_version = \"test\"\nupdated = \"2026-12-01\"\n\n\
         [models.\"{MODEL}\"]\ninput = 2.0\ncached_input = 0.2\noutput = 10.0\nsource = \"test\"\n\
         as_of = \"2026-12-01\"\n"
    ))
    .unwrap();
    let mut providers = Providers::default();
    providers.models.insert(
        "writer".into(),
        ModelProvider {
            name: "writer".into(),
            client: Arc::new(ModelClient::new(config).unwrap()),
            pricing,
        },
    );
    (providers, server)
}

/// The bundle, cached in `data`: each test has a data directory of its own, since the tests'
/// providers share a name, a model and instructions, and so a cache key.
async fn bundle(
    providers: &Providers,
    data: &faultline_corpus::DataDir,
) -> anyhow::Result<faultline_context::Bundle> {
    let f = fixture().await;
    let inputs = Inputs {
        case: &f.case,
        corpus: &[],
        prepared: &f.prepared,
        data,
        toolchain: &f.toolchain,
    };
    providers
        .bundle(&Condition::new("model:writer").unwrap(), &inputs)
        .await
}

#[tokio::test]
async fn a_model_writes_a_priced_bundle_from_the_symptom_and_the_crate_map() {
    let (providers, server) = scripted(vec![text(
        "Here it is.\n=== paths.md ===\n# Where to look\n\nThe merge of two replicas.\n\
         === questions.md ===\n# Questions\n\nIs merging twice harmless?\n",
    )])
    .await;
    let root = tempfile::tempdir().unwrap();
    let data = faultline_corpus::DataDir::new(root.path().to_path_buf());
    let b = bundle(&providers, &data).await.unwrap();
    assert_eq!(b.record.status, BundleStatus::Ready, "{:?}", b.record);
    let names: Vec<&str> = b.files.iter().map(|f| f.name.as_str()).collect();
    assert_eq!(names, ["paths.md", "questions.md"]);
    // 1,000 input tokens at $2 and 500 output tokens at $10 per million.
    let cost = b.record.cost_usd.unwrap();
    assert!((cost - 0.007).abs() < 1e-12, "{cost}");
    // The model was shown the symptom and the crate's functions, and nothing of the answer.
    let sent = server.requests()[0].body.to_string();
    let first_line = fixture().await.case.symptom.lines().next().unwrap();
    assert!(sent.contains(&first_line[..40]) && sent.contains("GCounter::merge"));
    assert!(!sent.contains("max(*count)"), "the fix reached the model");
    // Cached: a second bundle needs no call.
    assert_eq!(bundle(&providers, &data).await.unwrap(), b);
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn a_model_that_quotes_the_fix_is_refused_and_an_outage_is_an_error() {
    let (providers, _server) = scripted(vec![text(
        "=== fix.md ===\nReplace the sum with `*mine = (*mine).max(*count);` in merge.\n",
    )])
    .await;
    let root = tempfile::tempdir().unwrap();
    let data = faultline_corpus::DataDir::new(root.path().to_path_buf());
    let b = bundle(&providers, &data).await.unwrap();
    assert_eq!(b.record.status, BundleStatus::Refused);
    assert!(b.record.refusal.unwrap().contains("leak check"));
    assert!(b.files.is_empty());
    // A server that keeps failing: the bundle is an error, and nothing is cached for it.
    let down = Step::Error {
        status: 503,
        message: Some("overloaded".into()),
        retry_after: None,
        retry_after_ms: None,
        headers: Default::default(),
    };
    let (mut failing, _server) = scripted(vec![down.clone(), down]).await;
    let model = failing.models.get_mut("writer").unwrap();
    model.name = "writer".into();
    let root = tempfile::tempdir().unwrap();
    let f = fixture().await;
    let data = faultline_corpus::DataDir::new(root.path().to_path_buf());
    let inputs = Inputs {
        case: &f.case,
        corpus: &[],
        prepared: &f.prepared,
        data: &data,
        toolchain: &f.toolchain,
    };
    let err = failing
        .bundle(&Condition::new("model:writer").unwrap(), &inputs)
        .await
        .unwrap_err();
    assert!(
        format!("{err:#}").contains("the model provider writer failed"),
        "{err:#}"
    );
    assert!(!data.bundle_cache().exists(), "an outage was cached");
}
