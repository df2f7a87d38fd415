//! The repository's corpus: every case loads, enough oracles are seeded, the generated documents
//! are current, every oracle keeps the reproduce track's rules as the gold baseline submits it,
//! and the smoke suite
//! validates from scratch (real crates from the package registry, real sandboxes; in
//! `needs_registry`).

use faultline_agent::{Baseline, baselines};
use faultline_corpus::Corpus;
use faultline_corpus::gold::TreeDiff;
use faultline_legality::{Legality, check_reproducer};
use faultline_schema::Submission;
use faultline_schema::Track;
use faultline_testkit::corpus_dir;
use std::path::Path;

#[test]
fn every_case_loads() {
    let corpus = Corpus::load(&corpus_dir()).unwrap();
    let errors: Vec<String> = corpus.errors.iter().map(ToString::to_string).collect();
    assert!(errors.is_empty(), "{errors:#?}");
    assert!(corpus.cases.len() >= 3);
    corpus.suite("smoke").unwrap();
}

/// Seeded oracles re-check a repair under schedules the agent never saw; the corpus keeps at
/// least this many of them, and at least this share as it grows.
const MIN_SEEDED: usize = 15;
const MIN_SEEDED_SHARE: f64 = 0.4;

#[test]
fn enough_oracles_are_seeded_and_each_reads_its_seed() {
    let corpus = Corpus::load(&corpus_dir()).unwrap();
    let seeded: Vec<_> = corpus
        .cases
        .iter()
        .filter(|c| c.manifest.oracle.seeded)
        .collect();
    for case in &seeded {
        let tests = case.dir.join("oracle").join("tests");
        let reads_seed = std::fs::read_dir(&tests)
            .unwrap_or_else(|e| panic!("{}: {e}", tests.display()))
            .map(|f| std::fs::read_to_string(f.unwrap().path()).unwrap_or_default())
            .any(|text| text.contains("FAULTLINE_SEED"));
        assert!(
            reads_seed,
            "{} is marked seeded but never reads FAULTLINE_SEED",
            case.id()
        );
        assert!(
            case.manifest.oracle.buggy_failure_rate.is_some(),
            "{} records no measured buggy failure rate",
            case.id()
        );
    }
    let share = seeded.len() as f64 / corpus.cases.len() as f64;
    assert!(
        seeded.len() >= MIN_SEEDED && share >= MIN_SEEDED_SHARE,
        "{} of {} oracles are seeded",
        seeded.len(),
        corpus.cases.len()
    );
}

#[test]
fn every_oracle_keeps_the_reproducer_rules_as_the_gold_baseline_submits_it() {
    let corpus = Corpus::load(&corpus_dir()).unwrap();
    for case in &corpus.cases {
        let submitted = baselines::submit(
            Baseline::Gold,
            Track::Reproduce,
            case,
            &TreeDiff::default(),
            "",
            Path::new(""),
        )
        .unwrap();
        let Submission::Reproducer(test) = submitted else {
            panic!("{}: the gold baseline submits no reproducer", case.id());
        };
        assert_eq!(
            check_reproducer(&test),
            Legality::Legal,
            "{}: the oracle would be an illegal reproducer",
            case.id()
        );
    }
}

#[test]
fn the_corpus_readme_table_is_current() {
    let corpus = Corpus::load(&corpus_dir()).unwrap();
    let manifests: Vec<_> = corpus.cases.iter().map(|c| &c.manifest).collect();
    let readme = std::fs::read_to_string(corpus_dir().join("README.md")).unwrap();
    let report =
        serde_json::from_slice(&std::fs::read(corpus_dir().join("VALIDATION.json")).unwrap())
            .unwrap();
    let caught = faultline_report::corpus::decoys_caught(&report);
    let regenerated = faultline_report::corpus::with_table(&readme, &manifests, &caught).unwrap();
    assert!(
        readme == regenerated,
        "corpus/README.md is out of date: run `cargo run -p faultline -- cases list --write-readme`"
    );
}

#[test]
fn the_validation_report_covers_every_case_as_it_is_now() {
    let corpus = Corpus::load(&corpus_dir()).unwrap();
    let json = std::fs::read(corpus_dir().join("VALIDATION.json"))
        .expect("corpus/VALIDATION.json is missing; run `faultline cases validate --all --markdown corpus/VALIDATION.md`");
    let report: faultline_schema::validation::ValidationReport =
        serde_json::from_slice(&json).unwrap();
    let markdown = std::fs::read_to_string(corpus_dir().join("VALIDATION.md")).unwrap();
    assert!(
        markdown == faultline_report::validation::markdown(&report),
        "VALIDATION.md does not match VALIDATION.json; regenerate both with `faultline cases validate`"
    );
    for case in &corpus.cases {
        let row = report
            .cases
            .iter()
            .find(|c| c.case_id == case.id())
            .unwrap_or_else(|| {
                panic!(
                    "VALIDATION.json has no row for {}; validate it with --merge",
                    case.id()
                )
            });
        assert!(
            row.passed,
            "{} failed validation: {:?}",
            case.id(),
            row.problems
        );
        assert_eq!(
            row.case_sha256.as_deref(),
            Some(case.content_sha256().unwrap().as_str()),
            "{} changed since it was validated; validate it again with --merge",
            case.id()
        );
    }
    assert_eq!(
        report.cases.len(),
        corpus.cases.len(),
        "rows for cases that no longer exist"
    );
}

/// Real cases fetched from the package registry.
mod needs_registry {
    use super::*;
    use faultline_testkit::needs::registry;
    use std::process::Command;

    /// The two lightest cases of the smoke suite (about 140 s each to validate at k = 5 on an idle
    /// machine, against 470 and 520 s for the other two), so the whole test command stays near its
    /// time budget; `corpus/VALIDATION.md` and the test above keep every case's full validation
    /// current.
    const FROM_SCRATCH: [&str; 2] = [
        "foca-stale-identity-accepted",
        "raft-rs-campaign-during-snapshot-panics",
    ];
    /// Oracle runs per version: enough to see a flaky oracle disagree with itself.
    const K: &str = "2";

    /// Validates real cases from scratch, then runs the gold baseline's reproducers on the cases
    /// it prepared: every one must stay `valid` under the reproduce track's rules.
    #[test]
    fn real_cases_validate_from_scratch() {
        // A fresh data directory: the sources are fetched through cargo, the workspaces built cold.
        let tmp = tempfile::tempdir().unwrap();
        let data = registry::reused_data_dir().unwrap_or_else(|| tmp.path().to_path_buf());
        let out = Command::new(env!("CARGO_BIN_EXE_faultline"))
            .arg("--corpus")
            .arg(corpus_dir())
            .args(["cases", "validate", "--json", "-k", K])
            .args(FROM_SCRATCH)
            .env("FAULTLINE_DATA", &data)
            .output()
            .unwrap();
        let report: faultline_schema::validation::ValidationReport =
            serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
                let stderr = String::from_utf8_lossy(&out.stderr);
                panic!("{e}\n{stderr}\n{}", registry::note())
            });
        assert_eq!(report.cases.len(), FROM_SCRATCH.len());
        for c in &report.cases {
            assert!(c.passed, "{}: {:#?}", c.case_id, c.problems);
            assert_eq!(c.buggy_failures(), report.k);
            assert_eq!(c.gold_passes(), report.k);
        }
        assert!(out.status.success());

        let run = tmp.path().join("gold-reproducers");
        let out = Command::new(env!("CARGO_BIN_EXE_faultline"))
            .arg("--corpus")
            .arg(corpus_dir())
            .args([
                "run",
                "--agent",
                "baseline:gold",
                "--tracks",
                "reproduce",
                "--conditions",
                "symptom",
                "--out",
            ])
            .arg(&run)
            .args(FROM_SCRATCH)
            .env("FAULTLINE_DATA", &data)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}\n{}",
            String::from_utf8_lossy(&out.stderr),
            registry::note()
        );
        let results = std::fs::read_to_string(run.join("results.jsonl")).unwrap();
        let records: Vec<faultline_schema::ResultRecord> = results
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(records.len(), report.cases.len(), "{results}");
        for r in &records {
            assert_eq!(r.outcome, faultline_schema::Outcome::Valid, "{r:#?}");
        }
    }
}
