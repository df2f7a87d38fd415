//! The sandbox protections a run was made under are recorded (its `lock.json` and every
//! `grade.json`) and shown by its report; a run made with one of them off says so at the top and
//! the bottom of the Markdown report, in the HTML report's banner and on the terminal. Real binary,
//! real sandboxes, the fixture corpus.

mod common;

use common::{faultline, records};
use faultline_schema::{Grade, ProtectionState, RunLock};
use std::path::Path;
use std::process::Output;

fn run(data: &Path, out: &Path, extra: &[&str]) -> Output {
    let output = faultline(data)
        .args(extra)
        .args([
            "run",
            "toy-double-merge",
            "--agent",
            "baseline:gold",
            "--tracks",
            "repair",
            "--conditions",
            "symptom",
            "--out",
        ])
        .arg(out)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

fn lock(run: &Path) -> RunLock {
    serde_json::from_str(&std::fs::read_to_string(run.join("lock.json")).unwrap()).unwrap()
}

fn grades(run: &Path) -> Vec<Grade> {
    walkdir(run)
        .into_iter()
        .filter(|p| p.file_name().is_some_and(|n| n == "grade.json"))
        .map(|p| serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap())
        .collect()
}

fn walkdir(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(walkdir(&path));
        } else {
            out.push(path);
        }
    }
    out
}

fn markdown(data: &Path, run: &Path) -> String {
    let md = run.join("report.md");
    let status = faultline(data)
        .arg("report")
        .arg(run)
        .arg("--markdown")
        .arg(&md)
        .output()
        .unwrap();
    assert!(status.status.success());
    std::fs::read_to_string(md).unwrap()
}

#[test]
fn protections_are_recorded_and_a_run_without_one_says_so_everywhere() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let protected = tmp.path().join("protected");
    run(&data, &protected, &[]);
    let recorded = lock(&protected).protections;
    for name in [
        "memory limit",
        "disk limit",
        "process limit",
        "network isolation",
    ] {
        assert!(
            recorded.iter().any(|p| p.name == name),
            "{name} is not recorded: {recorded:?}"
        );
    }
    let all_active = recorded.iter().all(|p| p.state == ProtectionState::Active);
    if std::env::var_os("FAULTLINE_REQUIRE_PROTECTIONS").is_some() {
        assert!(all_active, "{recorded:?}");
    }
    let results = records(&protected);
    assert!(
        !results.is_empty() && results.iter().all(|r| r.outcome.as_str() == "pass"),
        "the gold patch does not pass under every protection"
    );
    let graded = grades(&protected);
    assert_eq!(graded.len(), results.len());
    for g in &graded {
        assert!(
            g.protections.iter().any(|p| p.name == "memory limit"),
            "{:?}",
            g.protections
        );
    }
    let md = markdown(&data, &protected);
    assert!(md.contains("Sandbox protections"), "{md}");
    if all_active {
        assert!(!md.contains("Not comparable"), "{md}");
    }

    let unprotected = tmp.path().join("unprotected");
    let out = run(&data, &unprotected, &["--sandbox-memory", "none"]);
    let memory = lock(&unprotected)
        .protections
        .into_iter()
        .find(|p| p.name == "memory limit")
        .unwrap();
    assert_eq!(memory.state, ProtectionState::Off);
    let terminal = String::from_utf8_lossy(&out.stdout);
    assert!(
        terminal.contains("Not comparable") && terminal.contains("memory limit"),
        "{terminal}"
    );
    let md = markdown(&data, &unprotected);
    assert_eq!(md.matches("Not comparable").count(), 2, "{md}");
    let (first, last) = (
        md.find("Not comparable").unwrap(),
        md.rfind("Not comparable").unwrap(),
    );
    assert!(first < md.find("Attempts are averaged").unwrap(), "{md}");
    assert!(
        last > md.len() * 3 / 4,
        "the notice is not at the bottom: {md}"
    );
    let html = std::fs::read_to_string(unprotected.join("report.html")).unwrap();
    assert!(html.contains("id=\"protection-notice\""), "no banner");
    assert!(html.contains("memory limit"));
}
