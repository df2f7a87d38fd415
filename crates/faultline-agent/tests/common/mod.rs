//! Helpers shared by the tests of the built-in agent: one prepared fixture case, script steps,
//! and a trial of the agent against a scripted model server.

#![allow(dead_code)]

use faultline_agent::{BuiltinAgent, Templates, TrialEnv, TrialResult};
use faultline_model::{ModelClient, ModelConfig, PricingTable, Protocol, RetryPolicy};
use faultline_schema::{Condition, Limits, Task, Track};
use faultline_scripted::{Script, ScriptedServer, Step, StepUsage};
use faultline_testkit::{Prepared, Shared};
use std::path::Path;
use std::time::Duration;

/// The model the scripted server plays, priced by [`pricing`].
pub const MODEL: &str = "scripted-model";

/// One prepared fixture case shared by every test of a test binary.
pub async fn fixture() -> &'static Prepared {
    static FIXTURE: Shared = Shared::new();
    FIXTURE
        .get(|dir| async move { Prepared::fixture(&dir, "toy-agent").await })
        .await
}

pub fn tool(command: &str, input: u64, output: u64) -> Step {
    Step::ToolCall {
        command: command.into(),
        text: Some("Next step.".into()),
        id: None,
        raw_arguments: None,
        usage: Some(StepUsage {
            input,
            output,
            ..StepUsage::default()
        }),
    }
}

pub fn pricing() -> PricingTable {
    PricingTable::from_toml_str(&format!(
        "schema_version = 1\ntable_version = \"test\"\nupdated = \"2026-11-29\"\n\n\
         [models.\"{MODEL}\"]\ninput = 1000.0\ncached_input = 100.0\noutput = 2000.0\nsource = \"test\"\nas_of = \"2026-11-29\"\n"
    ))
    .unwrap()
}

/// The agent (tool or text mode, over `protocol`) and a fresh environment on the fixture case,
/// for a model playing `script`.
pub async fn trial(
    script: Vec<Step>,
    protocol: Protocol,
    tool_mode: bool,
    track: Track,
    limits: Limits,
) -> (BuiltinAgent, TrialEnv, ScriptedServer) {
    let f = fixture().await;
    let server = ScriptedServer::start(Script::new(script)).await.unwrap();
    let base = match protocol {
        Protocol::OpenAiChat => server.openai_base_url(),
        Protocol::AnthropicMessages => server.anthropic_base_url(),
    };
    let mut config = ModelConfig::new(protocol, MODEL).with_base_url(base);
    config.retry = RetryPolicy {
        initial_backoff: Duration::from_millis(10),
        max_backoff: Duration::from_millis(50),
        ..RetryPolicy::default()
    };
    config.attempt_timeout = Duration::from_secs(20);
    let agent = BuiltinAgent {
        client: ModelClient::new(config).unwrap(),
        pricing: Some(pricing()),
        templates: Templates::default(),
        tool_mode,
        max_output_tokens: 512,
        temperature: Some(0.0),
        model_permits: None,
    };
    let env = TrialEnv::create(
        &f.case,
        &f.prepared,
        task(f, track, limits),
        f.case.bundle.clone(),
        &f.data,
        &f.toolchain,
    )
    .unwrap();
    (agent, env, server)
}

/// A task of the fixture case in the `context` condition.
pub fn task(f: &Prepared, track: Track, limits: Limits) -> Task {
    Task {
        schema_version: 1,
        trial_id: Task::trial_id(f.case.id(), track, &Condition::curated(), 1),
        case_id: f.case.id().into(),
        track,
        condition: Condition::curated(),
        attempt: 1,
        seed: 7,
        crate_name: "toy-counter".into(),
        bundle_files: vec!["state.md".into()],
        limits,
    }
}

/// Runs a trial of the agent against `script` to its end.
pub async fn run(
    script: Vec<Step>,
    protocol: Protocol,
    tool_mode: bool,
    track: Track,
    limits: Limits,
    trajectory: Option<&Path>,
) -> (TrialResult, ScriptedServer) {
    let (agent, env, server) = trial(script, protocol, tool_mode, track, limits).await;
    let result = agent
        .run(&env, trajectory.map(Path::to_path_buf))
        .await
        .unwrap();
    (result, server)
}

/// Runs a repair trial in tool mode over the OpenAI protocol, with default limits.
pub async fn run_repair(script: Vec<Step>) -> (TrialResult, ScriptedServer) {
    run(
        script,
        Protocol::OpenAiChat,
        true,
        Track::Repair,
        Limits::default(),
        None,
    )
    .await
}

/// An HTTP error of the model API with the provider's error body.
pub fn api_error(status: u16, message: &str) -> Step {
    Step::Error {
        status,
        message: Some(message.into()),
        retry_after: None,
        retry_after_ms: None,
        headers: Default::default(),
    }
}
