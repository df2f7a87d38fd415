//! A run of the baselines with context providers through the real binary: every provider's
//! bundle is recorded in the run, a refused one keeps its trials from running, and the report
//! gives each provider its own effect and row.

mod common;

use common::{faultline, records};
use faultline_schema::bundle::BundleDir;
use faultline_schema::{BundleStatus, Condition, Report, RunDir};
use std::collections::BTreeSet;
use std::process::Stdio;

#[test]
fn a_run_with_providers_records_their_bundles_and_reports_each_effect() {
    let tmp = tempfile::tempdir().unwrap();
    let (data, run) = (tmp.path().join("data"), tmp.path().join("run"));
    // The documented example provider.
    let program = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../docs/examples/mentions.sh")
        .canonicalize()
        .unwrap();
    let status = faultline(&data)
        .args([
            "run",
            "toy-double-merge",
            "--agent",
            "baseline:gold",
            "--agent",
            "baseline:null",
            "--agent",
            "baseline:stacktrace",
            "--tracks",
            "diagnose,repair",
            "--conditions",
            "symptom,context,irrelevant,static,mentions",
            "--provider",
        ])
        .arg(format!("mentions={}", program.display()))
        .arg("--out")
        .arg(&run)
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success());

    let dir = RunDir::new(&run);
    let bundle = |c: &str| {
        dir.bundle("toy-double-merge", &c.parse().unwrap())
            .read()
            .unwrap()
            .unwrap_or_else(|| panic!("no {c} bundle recorded"))
    };
    for c in ["curated", "static", "mentions"] {
        let (record, files) = bundle(c);
        assert_eq!(record.status, BundleStatus::Ready, "{record:?}");
        assert!(!files.is_empty() && record.tokens > 0);
    }
    assert!(
        bundle("mentions").1[0]
            .text
            .starts_with("# Where the symptom's code words appear")
    );
    // The fixture corpus has one case of its system: the control has nothing to show.
    let (irrelevant, _) = bundle("irrelevant");
    assert_eq!(irrelevant.status, BundleStatus::Refused);
    assert!(
        BundleDir::at(run.join("bundles/toy-double-merge/symptom"))
            .read()
            .unwrap()
            .is_none()
    );

    let conditions: BTreeSet<Condition> = records(&run).into_iter().map(|r| r.condition).collect();
    let names: Vec<&str> = conditions.iter().map(Condition::as_str).collect();
    assert_eq!(names, ["symptom", "curated", "mentions", "static"]);
    // Each trial's task names the files its condition showed.
    let task: faultline_schema::Task = serde_json::from_str(
        &std::fs::read_to_string(
            run.join("trials/null/toy-double-merge/repair/static/1/task.json"),
        )
        .unwrap(),
    )
    .unwrap();
    assert_eq!(task.bundle_files, ["static-analysis.md"]);

    let report: Report =
        serde_json::from_str(&std::fs::read_to_string(run.join("report.json")).unwrap()).unwrap();
    let effects: BTreeSet<(String, String)> = report
        .condition_effects
        .iter()
        .map(|e| (e.condition.to_string(), e.agent.clone().unwrap_or_default()))
        .collect();
    for c in ["curated", "static", "mentions"] {
        assert!(effects.contains(&(c.into(), "gold".into())), "{effects:?}");
    }
    let providers: Vec<(&str, usize, usize)> = report
        .providers
        .iter()
        .map(|p| (p.condition.as_str(), p.ready, p.refused.len()))
        .collect();
    assert_eq!(
        providers,
        [
            ("curated", 1, 0),
            ("irrelevant", 0, 1),
            ("mentions", 1, 0),
            ("static", 1, 0)
        ]
    );
    let md = tmp.path().join("report.md");
    let ok = faultline(&data)
        .arg("report")
        .arg(&run)
        .arg("--markdown")
        .arg(&md)
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(ok.success());
    let text = std::fs::read_to_string(&md).unwrap();
    assert!(text.contains("## Context providers"), "{text}");
    assert!(text.contains("no other case of system `toy`"), "{text}");
}
