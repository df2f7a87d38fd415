//! The repository's corpus: every case loads, the generated documents are current, and the
//! smoke suite validates from scratch (real crates from the package registry, real sandboxes).

use faultline_corpus::Corpus;
use std::path::{Path, PathBuf};
use std::process::Command;

fn corpus_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../corpus")
}

#[test]
fn every_case_loads() {
    let corpus = Corpus::load(&corpus_dir()).unwrap();
    let errors: Vec<String> = corpus.errors.iter().map(ToString::to_string).collect();
    assert!(errors.is_empty(), "{errors:#?}");
    assert!(corpus.cases.len() >= 3);
    corpus.suite("smoke").unwrap();
}

#[test]
fn the_corpus_readme_table_is_current() {
    let corpus = Corpus::load(&corpus_dir()).unwrap();
    let manifests: Vec<_> = corpus.cases.iter().map(|c| &c.manifest).collect();
    let readme = std::fs::read_to_string(corpus_dir().join("README.md")).unwrap();
    let regenerated = faultline_report::corpus::with_table(&readme, &manifests).unwrap();
    assert!(
        readme == regenerated,
        "corpus/README.md is out of date: run `cargo run -p faultline -- cases list --write-readme`"
    );
}

#[test]
fn the_validation_report_covers_every_case() {
    let corpus = Corpus::load(&corpus_dir()).unwrap();
    let report = std::fs::read_to_string(corpus_dir().join("VALIDATION.md")).unwrap_or_default();
    for case in &corpus.cases {
        let row = report
            .lines()
            .find(|l| l.starts_with(&format!("| {} |", case.id())))
            .unwrap_or_else(|| panic!("VALIDATION.md has no row for {}; regenerate it", case.id()));
        assert!(row.ends_with("| PASS |"), "{row}");
    }
}

#[test]
fn the_smoke_suite_validates_from_scratch() {
    // A fresh data directory: the sources are fetched through cargo, the workspaces built cold.
    let tmp = tempfile::tempdir().unwrap();
    let data = std::env::var_os("FAULTLINE_TEST_DATA")
        .map(PathBuf::from)
        .unwrap_or_else(|| tmp.path().to_path_buf());
    let out = Command::new(env!("CARGO_BIN_EXE_faultline"))
        .arg("--corpus")
        .arg(corpus_dir())
        .args(["cases", "validate", "--suite", "smoke", "--json"])
        .env("FAULTLINE_DATA", &data)
        .output()
        .unwrap();
    let report: faultline_schema::validation::ValidationReport =
        serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{e}\n{}", String::from_utf8_lossy(&out.stderr)));
    for c in &report.cases {
        assert!(c.passed, "{}: {:#?}", c.case_id, c.problems);
        assert_eq!(c.buggy_failures(), report.k);
        assert_eq!(c.gold_passes(), report.k);
    }
    assert!(out.status.success());
}
