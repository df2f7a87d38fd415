//! Context providers on the prepared fixture case, in the real sandbox: the gate every bundle
//! passes (budget, leak check, file rules), the cache, the built-in providers, and an external
//! provider that reaches for the answer.

use faultline_context::{Bundle, ExternalProvider, Inputs, Providers};
use faultline_corpus::Case;
use faultline_schema::{BundleStatus, Condition};
use faultline_testkit::{Prepared, Shared, fixture_case};
use std::path::{Path, PathBuf};
use std::time::Duration;

async fn fixture() -> &'static Prepared {
    static FIXTURE: Shared = Shared::new();
    FIXTURE
        .get(|dir| async move { Prepared::fixture(&dir, "toy-providers").await })
        .await
}

/// An external provider named `name` running `script` (a `/bin/sh` script).
fn provider(dir: &Path, name: &str, script: &str) -> Providers {
    let program = dir.join(format!("{name}.sh"));
    std::fs::write(&program, format!("#!/bin/sh\n{script}")).unwrap();
    std::fs::set_permissions(
        &program,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let mut p = ExternalProvider::parse(&format!("{name}={}", program.display())).unwrap();
    p.timeout = Duration::from_secs(60);
    let mut providers = Providers::default();
    providers.external.insert(name.to_string(), p);
    providers
}

async fn bundle(providers: &Providers, condition: &str, corpus: &[Case]) -> Bundle {
    let f = fixture().await;
    let inputs = Inputs {
        case: &f.case,
        corpus,
        prepared: &f.prepared,
        data: &f.data,
        toolchain: &f.toolchain,
    };
    providers
        .bundle(&condition.parse().unwrap(), &inputs)
        .await
        .unwrap()
}

fn refusal(b: &Bundle) -> &str {
    assert_eq!(b.record.status, BundleStatus::Refused, "{:?}", b.record);
    assert!(b.files.is_empty(), "a refused bundle shows nothing");
    b.record.refusal.as_deref().unwrap()
}

/// The secrets a provider must never reach, as host paths: the oracle and the case directory,
/// the fixed sources, and the grading template (which holds the oracle).
fn secrets(f: &Prepared) -> Vec<PathBuf> {
    vec![
        f.case.dir.join("oracle"),
        f.case.dir.clone(),
        f.prepared.sources.fixed.clone(),
        f.prepared
            .template(faultline_corpus::TemplateKind::Grading)
            .workspace
            .clone(),
    ]
}

#[tokio::test]
async fn a_provider_that_reaches_for_the_answer_is_denied_and_recorded() {
    let f = fixture().await;
    let dir = tempfile::tempdir().unwrap();
    let oracle_text = std::fs::read_to_string(f.case.dir.join("oracle/Cargo.toml")).unwrap();
    let reads: String = secrets(f)
        .iter()
        .map(|p| format!("cat {0}/Cargo.toml {0}/src/lib.rs\n", p.display()))
        .collect();
    // Strict: the first failed read ends the provider, and its run is refused with the log.
    let strict = provider(dir.path(), "strict", &format!("set -e\n{reads}"));
    let b = bundle(&strict, "strict", &[]).await;
    assert!(
        refusal(&b).contains("the provider failed"),
        "{:?}",
        b.record
    );
    let log = b.record.log_tail.as_deref().unwrap();
    assert!(log.contains("No such file or directory"), "{log}");
    assert!(log.contains(&f.case.dir.join("oracle").display().to_string()));
    // Lenient: it swallows the errors and writes whatever it could read. Nothing of the answer
    // is there, while what an agent may read (the crate, the symptom) is.
    let lenient = provider(
        dir.path(),
        "lenient",
        &format!(
            "{{\n{reads}}} > /output/found.md 2>/dev/null\n\
             {{ ls $FAULTLINE_WORKSPACE/src; cat $FAULTLINE_SYMPTOM; }} > /output/seen.md\n"
        ),
    );
    let b = bundle(&lenient, "lenient", &[]).await;
    assert_eq!(b.record.status, BundleStatus::Ready, "{:?}", b.record);
    let found = &b.files.iter().find(|x| x.name == "found.md").unwrap().text;
    assert!(
        !found.contains(oracle_text.trim()),
        "the oracle leaked: {found}"
    );
    assert!(found.trim().is_empty(), "a secret was readable: {found}");
    let seen = &b.files.iter().find(|x| x.name == "seen.md").unwrap().text;
    assert!(seen.contains("lib.rs") && seen.contains(f.case.symptom.lines().next().unwrap()));
}

#[tokio::test]
async fn a_bundle_that_quotes_the_fix_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let p = provider(
        dir.path(),
        "quoter",
        "echo 'Try this: *mine = (*mine).max(*count);' > /output/hint.md\n",
    );
    let b = bundle(&p, "quoter", &[]).await;
    assert!(refusal(&b).contains("leak check"), "{:?}", b.record);
    assert!(!b.record.leaks.is_empty());
}

#[tokio::test]
async fn an_oversized_or_malformed_bundle_is_refused_not_cut() {
    let dir = tempfile::tempdir().unwrap();
    let long = provider(
        dir.path(),
        "long",
        "i=0; while [ $i -lt 3000 ]; do echo \"replica $i gossip\"; i=$((i+1)); done > /output/a.md\n",
    );
    let b = bundle(&long, "long", &[]).await;
    assert!(refusal(&b).contains("the budget is 1500"), "{:?}", b.record);
    assert!(b.record.tokens > 1500);
    let many = provider(
        dir.path(),
        "many",
        "for n in 1 2 3 4; do echo note > /output/$n.md; done\n",
    );
    assert!(refusal(&bundle(&many, "many", &[]).await).contains("at most 3"));
    let binary = provider(dir.path(), "binary", "echo x > /output/trace.json\n");
    assert!(refusal(&bundle(&binary, "binary", &[]).await).contains("trace.json"));
    let silent = provider(dir.path(), "silent", "true\n");
    assert!(refusal(&bundle(&silent, "silent", &[]).await).contains("no Markdown file"));
}

#[tokio::test]
async fn a_bundle_is_cached_until_its_provider_changes() {
    let dir = tempfile::tempdir().unwrap();
    let script = "cat /proc/sys/kernel/random/uuid > /output/id.md\n";
    let p = provider(dir.path(), "stamp", script);
    let first = bundle(&p, "stamp", &[]).await;
    assert_eq!(
        first.record.status,
        BundleStatus::Ready,
        "{:?}",
        first.record
    );
    assert_eq!(
        bundle(&p, "stamp", &[]).await,
        first,
        "the cache was not used"
    );
    // The same name with another program is another version: produced again.
    let changed = provider(dir.path(), "stamp", &format!("# edited\n{script}"));
    let second = bundle(&changed, "stamp", &[]).await;
    assert_ne!(
        second.record.provider_version,
        first.record.provider_version
    );
    assert_ne!(second.files, first.files);
}

#[tokio::test]
async fn the_built_in_providers_on_the_fixture() {
    let f = fixture().await;
    let providers = Providers::default();
    let curated = bundle(&providers, "curated", &[]).await;
    assert_eq!(curated.files, f.case.bundle);
    let static_bundle = bundle(&providers, "static", &[]).await;
    assert_eq!(static_bundle.record.status, BundleStatus::Ready);
    // The symptom names no code, so the provider maps the crate instead.
    assert!(static_bundle.files[0].text.contains("GCounter::merge"));
    // The control needs another case of the same system...
    let alone = bundle(&providers, "irrelevant", std::slice::from_ref(&f.case)).await;
    assert!(refusal(&alone).contains("no other case of system `toy`"));
    // ...and shows the first one, after this case in id order, whose bundle passes this case's
    // gate: one that quotes the fix is passed over.
    let root = tempfile::tempdir().unwrap();
    let other = |id: &str, text: &'static str| {
        fixture_case(root.path(), id, move |dir| {
            std::fs::write(dir.join("context/state.md"), text).unwrap();
        })
        .unwrap()
    };
    let corpus = [
        other("toy-a-before", "Replica a logged 2 merges.\n"),
        f.case.clone(),
        other(
            "toy-q-leaks",
            "Merging now does *mine = (*mine).max(*count);\n",
        ),
        other("toy-r-clean", "Replica b logged 4 merges.\n"),
    ];
    let control = bundle(&providers, "irrelevant", &corpus).await;
    assert_eq!(control.record.source_case.as_deref(), Some("toy-r-clean"));
    assert_eq!(control.files[0].text, "Replica b logged 4 merges.\n");
    // With only the leaking one, the control is refused and says why.
    let leaky = [f.case.clone(), corpus[2].clone()];
    let refused = bundle(&providers, "irrelevant", &leaky).await;
    assert!(
        refusal(&refused).contains("toy-q-leaks: the leak check"),
        "{:?}",
        refused.record
    );
    let unknown = Providers::default().check(&[Condition::new("mine").unwrap()]);
    assert!(
        unknown
            .unwrap_err()
            .to_string()
            .contains("--provider mine=")
    );
}
