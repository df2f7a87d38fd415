//! Case validation on a small crate of our own (`tests/fixtures/toy-tree`): a good case passes,
//! and each kind of broken case is rejected with a message that names the problem. These run
//! real sandboxes and real cargo builds of the fixture crate, offline.

use faultline_corpus::{Case, DataDir};
use faultline_grade::{ValidateOptions, validate_case};
use faultline_sandbox::Toolchain;
use faultline_schema::validation::{BundleStatus, CaseValidation};
use faultline_testkit::fixture_case;
use std::fs;
use std::path::Path;

const TRACE: &str = "# Replica state\n\n| round | replica A | replica B |\n|---|---|---|\n\
| 0 | 3 | 0 |\n| 1 | 3 | 3 |\n| 2 | 6 | 6 |\n";

const ORACLE_MERGE: &str =
    include_str!("../../../fixtures/corpus/toy/toy-double-merge/oracle/tests/merge.rs");

fn write_case(root: &Path, id: &str, edit: impl FnOnce(&Path)) -> Case {
    fixture_case(root, id, edit).unwrap()
}

async fn validate(case: &Case, data: &Path) -> CaseValidation {
    validate_k(case, data, ValidateOptions::default().k).await
}

/// Validation with `k` oracle runs per version, for tests about something else than the oracle.
async fn validate_k(case: &Case, data: &Path, k: u32) -> CaseValidation {
    let data = DataDir::new(data.to_owned());
    let toolchain = Toolchain::detect().unwrap();
    let opts = ValidateOptions {
        k,
        ..ValidateOptions::default()
    };
    validate_case(case, &data, &toolchain, &opts).await.unwrap()
}

fn problems(v: &CaseValidation) -> String {
    v.problems.join("\n")
}

#[tokio::test]
async fn a_good_case_passes() {
    let root = tempfile::tempdir().unwrap();
    let case = write_case(root.path(), "toy-good", |_| {});
    let v = validate(&case, &root.path().join("data")).await;
    assert!(v.passed, "{}", problems(&v));
    assert_eq!(v.buggy_failures(), 5);
    assert_eq!(v.gold_passes(), 5);
    let s = v.static_checks.as_ref().unwrap();
    assert!(s.leaks.is_empty());
    assert_eq!(s.symptom_names, Vec::<String>::new());
    assert!(
        v.buggy
            .as_ref()
            .unwrap()
            .regression
            .as_ref()
            .unwrap()
            .tests_passed
            >= 1
    );
    assert_eq!(v.minimal_fix, Some(true));
    assert_eq!(v.decoys_caught(), Some((2, 2)));
    // Caught by the oracle, so the crate's own tests were neither built nor run for them.
    for decoy in v.decoys.as_ref().unwrap() {
        assert!(decoy.result.regression.is_none(), "{}", decoy.name);
    }
    let bundle = v.bundle.unwrap();
    assert_eq!(bundle.status, BundleStatus::Reproduced, "{bundle:?}");
    assert!(bundle.build_secs > 0.0 && bundle.secs >= bundle.build_secs);
}

#[tokio::test]
async fn a_decoy_the_oracle_lets_through_is_rejected() {
    let root = tempfile::tempdir().unwrap();
    let case = write_case(root.path(), "toy-decoy-passes", |dir| {
        // A "decoy" that is the fix itself: no oracle can catch it, so validation must say so.
        fs::copy(dir.join("fix.diff"), dir.join("decoys/take-theirs.diff")).unwrap();
    });
    let v = validate(&case, &root.path().join("data")).await;
    assert!(!v.passed);
    assert_eq!(v.decoys_caught(), Some((1, 2)));
    // The oracle passed it, so its regression tests were built after the oracle and run.
    let through = v
        .decoys
        .as_ref()
        .unwrap()
        .iter()
        .find(|d| !d.caught)
        .unwrap();
    let regression = through.result.regression.as_ref().unwrap();
    assert!(
        regression.passed && regression.tests_passed >= 1,
        "{regression:?}"
    );
    assert!(
        problems(&v).contains(
            "the decoy `take-theirs` (other) is not caught: the oracle fails in only 0 of 5 runs"
        ),
        "{}",
        problems(&v)
    );
}

#[tokio::test]
async fn a_minimal_fix_that_does_not_fix_is_rejected() {
    let root = tempfile::tempdir().unwrap();
    let case = write_case(root.path(), "toy-fix-does-not-fix", |dir| {
        fs::write(
            dir.join("fix.diff"),
            "--- a/src/lib.rs\n+++ b/src/lib.rs\n@@ -22,3 +22,3 @@\n-    /// Folds another replica's state into this one.\n+    /// Folds another replica's state into this one, once.\n     pub fn merge(&mut self, other: &GCounter) {\n         for (node, count) in &other.counts {\n",
        )
        .unwrap();
        let path = dir.join("case.toml");
        let text = fs::read_to_string(&path).unwrap();
        let start = text.find("property = ").unwrap();
        // The property's closing quotes end the first line with `"""`.
        let end = text[start..].find("\"\"\"\n").unwrap() + start + 4;
        fs::write(&path, format!("{}{}", &text[..start], &text[end..])).unwrap();
    });
    let v = validate(&case, &root.path().join("data")).await;
    assert!(!v.passed);
    assert_eq!(v.minimal_fix, Some(true));
    let p = problems(&v);
    assert!(
        p.contains("passes with the gold patch in only 0 of 5 runs"),
        "{p}"
    );
    assert!(p.contains("states no `property`"), "{p}");
}

#[test]
fn decoy_files_and_declarations_must_match() {
    let root = tempfile::tempdir().unwrap();
    let err = fixture_case(root.path(), "toy-decoy-undeclared", |dir| {
        fs::write(dir.join("decoys/extra.diff"), "").unwrap();
    })
    .unwrap_err();
    assert!(
        format!("{err:#}").contains("not a decoy declared in case.toml"),
        "{err:#}"
    );
    let err = fixture_case(root.path(), "toy-decoy-missing", |dir| {
        fs::remove_file(dir.join("decoys/take-theirs.diff")).unwrap();
    })
    .unwrap_err();
    assert!(
        format!("{err:#}").contains("the decoy `take-theirs` declared in case.toml has no patch"),
        "{err:#}"
    );
}

#[tokio::test]
async fn a_bundle_that_drifted_from_its_generator_is_rejected() {
    let root = tempfile::tempdir().unwrap();
    let case = write_case(root.path(), "toy-bundle-drifts", |dir| {
        let edited = TRACE.replace("| 2 | 6 | 6 |", "| 2 | 6 | 7 |");
        fs::write(dir.join("context/state.md"), edited).unwrap();
    });
    let v = validate_k(&case, &root.path().join("data"), 1).await;
    assert!(!v.passed);
    let bundle = v.bundle.as_ref().unwrap();
    assert_eq!(bundle.status, BundleStatus::Drifts, "{bundle:?}");
    assert_eq!(bundle.drifted, ["state.md"]);
    let p = problems(&v);
    assert!(
        p.contains("context/state.md is not what its generator prints"),
        "{p}"
    );
    assert!(p.contains("First difference at line 7"), "{p}");
    assert!(p.contains("\"| 2 | 6 | 7 |\\n\""), "{p}");
    assert!(p.contains("\"| 2 | 6 | 6 |\\n\""), "{p}");
}

#[tokio::test]
async fn a_generator_that_does_not_build_is_rejected() {
    let root = tempfile::tempdir().unwrap();
    let case = write_case(root.path(), "toy-generator-broken", |dir| {
        let main = dir.join("context/generator/src/main.rs");
        let text = fs::read_to_string(&main)
            .unwrap()
            .replace("scenario::exchange(2,", "scenario::exchange_states(2,");
        fs::write(main, text).unwrap();
    });
    let v = validate_k(&case, &root.path().join("data"), 1).await;
    assert!(!v.passed);
    let bundle = v.bundle.as_ref().unwrap();
    assert_eq!(bundle.status, BundleStatus::Failed, "{bundle:?}");
    let p = problems(&v);
    assert!(p.contains("the bundle generator does not build"), "{p}");
    assert!(p.contains("exchange_states"), "{p}");
}

#[tokio::test]
async fn an_oracle_that_passes_on_the_buggy_version_is_rejected() {
    let root = tempfile::tempdir().unwrap();
    let case = write_case(root.path(), "toy-oracle-too-weak", |dir| {
        fs::write(
            dir.join("oracle/tests/merge.rs"),
            "#[test]\nfn increments_add_up() {\n    let mut c = toy_counter::GCounter::new();\n    \
             c.increment(1, 2);\n    assert_eq!(c.value(), 2);\n}\n",
        )
        .unwrap();
    });
    let v = validate(&case, &root.path().join("data")).await;
    assert!(!v.passed);
    assert_eq!(v.buggy_failures(), 0);
    assert!(
        problems(&v).contains("fails on the buggy version in only 0 of 5 runs"),
        "{}",
        problems(&v)
    );
}

#[tokio::test]
async fn a_flaky_oracle_is_rejected() {
    let root = tempfile::tempdir().unwrap();
    let case = write_case(root.path(), "toy-flaky-oracle", |dir| {
        let flaky = ORACLE_MERGE.replace(
            "    let mut a = GCounter::new();",
            "    let seed: u64 = std::env::var(\"FAULTLINE_SEED\").unwrap().parse().unwrap();\n    \
             assert!(seed % 5 != 3, \"fails one run in five\");\n    let mut a = GCounter::new();",
        );
        fs::write(dir.join("oracle/tests/merge.rs"), flaky).unwrap();
    });
    let v = validate(&case, &root.path().join("data")).await;
    assert!(!v.passed);
    assert_eq!(v.gold_passes(), 4);
    assert!(
        problems(&v).contains("passes with the gold patch in only 4 of 5 runs; it is flaky"),
        "{}",
        problems(&v)
    );
}

/// Grading checks a repair of a seeded oracle on seeds validation's k runs never use; an oracle
/// that breaks on one of them would fail every correct repair, so validation runs the gold patch
/// on them too.
#[tokio::test]
async fn an_oracle_the_gold_patch_fails_on_a_robustness_seed_is_rejected() {
    let root = tempfile::tempdir().unwrap();
    let case = write_case(root.path(), "toy-robustness-seed", |dir| {
        let narrow = ORACLE_MERGE.replace(
            "    let mut a = GCounter::new();",
            "    let seed: u64 = std::env::var(\"FAULTLINE_SEED\").unwrap().parse().unwrap();\n    \
             assert_ne!(seed, 1002, \"breaks on one seed\");\n    let mut a = GCounter::new();",
        );
        assert_ne!(narrow, ORACLE_MERGE, "the oracle changed shape");
        fs::write(dir.join("oracle/tests/merge.rs"), narrow).unwrap();
    });
    let v = validate_k(&case, &root.path().join("data"), 2).await;
    assert!(!v.passed);
    assert_eq!(v.gold_passes(), 2, "{}", problems(&v));
    let gold = v.gold.as_ref().unwrap();
    let seeds: Vec<(u64, bool)> = gold
        .robustness_runs
        .iter()
        .map(|r| (r.seed, r.passed))
        .collect();
    assert_eq!(
        seeds,
        vec![
            (1000, true),
            (1001, true),
            (1002, false),
            (1003, true),
            (1004, true)
        ]
    );
    assert!(
        problems(&v).contains("fails with the gold patch on seed 1002 of the 5"),
        "{}",
        problems(&v)
    );
    assert!(v.buggy.as_ref().unwrap().robustness_runs.is_empty());
}

#[tokio::test]
async fn a_labeled_block_outside_the_source_is_rejected() {
    let root = tempfile::tempdir().unwrap();
    let case = write_case(root.path(), "toy-block-outside", |dir| {
        let path = dir.join("case.toml");
        let text = fs::read_to_string(&path)
            .unwrap()
            .replace("start = 24\nend = 27", "start = 200\nend = 204");
        fs::write(path, text).unwrap();
    });
    let v = validate(&case, &root.path().join("data")).await;
    assert!(!v.passed);
    assert!(
        problems(&v).contains("the block lies outside the source"),
        "{}",
        problems(&v)
    );
}

#[tokio::test]
async fn a_bundle_that_contains_a_line_of_the_fix_is_rejected() {
    let root = tempfile::tempdir().unwrap();
    let case = write_case(root.path(), "toy-bundle-leaks", |dir| {
        fs::write(
            dir.join("context/state.md"),
            format!(
                "{TRACE}\nA debugger session showed `*mine = (*mine).max(*count);` would help.\n"
            ),
        )
        .unwrap();
    });
    let v = validate(&case, &root.path().join("data")).await;
    assert!(!v.passed);
    let p = problems(&v);
    assert!(
        p.contains("leak in context/state.md line 9: FixLine"),
        "{p}"
    );
}

#[test]
fn a_malformed_case_toml_names_the_file_and_line() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("toy").join("toy-malformed");
    fs::create_dir_all(&dir).unwrap();
    let text = include_str!("../../../fixtures/corpus/toy/toy-double-merge/case.toml")
        .replace("toy-double-merge", "toy-malformed")
        .replace("tier = 3", "tier = \"three\"");
    fs::write(dir.join("case.toml"), text).unwrap();
    let err = Case::load(&dir).unwrap_err().to_string();
    assert!(err.contains("toy-malformed/case.toml"), "{err}");
    assert!(err.contains("line 9"), "{err}");
}

#[tokio::test]
async fn a_regression_test_that_fails_only_sometimes_is_reported_for_skip() {
    let root = tempfile::tempdir().unwrap();
    let flaky_test = "\n    #[test]\n    fn counts_its_runs() {\n        \
        let path = std::path::Path::new(env!(\"CARGO_MANIFEST_DIR\")).join(\"target/runs\");\n        \
        let n: u32 = std::fs::read_to_string(&path).ok().and_then(|s| s.parse().ok()).unwrap_or(0);\n        \
        std::fs::write(&path, (n + 1).to_string()).unwrap();\n        \
        assert!(n % 2 == 0, \"fails every other run\");\n    }\n}\n";
    let case = case_on_changed_tree(root.path(), "toy-flaky-regression", |crate_root| {
        let lib = crate_root.join("src/lib.rs");
        let text = fs::read_to_string(&lib).unwrap();
        let end = text.rfind('}').unwrap();
        fs::write(&lib, format!("{}{flaky_test}", &text[..end])).unwrap();
    });
    let v = validate_k(&case, &root.path().join("data"), 2).await;
    assert!(!v.passed);
    let p = problems(&v);
    assert!(
        p.contains("flaky regression tests on the gold version (run 3 times, two at once): tests::counts_its_runs"),
        "{p}"
    );
    assert!(!p.contains("regression tests fail on"), "{p}");
}

/// A case over a copy of the fixture crate whose two versions `change` edited alike.
fn case_on_changed_tree(root: &Path, id: &str, change: impl Fn(&Path)) -> Case {
    let tree = root.join("tree");
    for version in ["buggy", "fixed"] {
        let from = faultline_testkit::fixture_tree().join(version);
        let to = tree.join(version);
        for entry in walkdir::WalkDir::new(&from) {
            let entry = entry.unwrap();
            let target = to.join(entry.path().strip_prefix(&from).unwrap());
            if entry.file_type().is_dir() {
                fs::create_dir_all(&target).unwrap();
            } else {
                fs::copy(entry.path(), &target).unwrap();
            }
        }
        change(&to);
    }
    write_case(root, id, |dir| {
        let path = dir.join("case.toml");
        let fixture = faultline_testkit::fixture_tree().canonicalize().unwrap();
        let text = fs::read_to_string(&path)
            .unwrap()
            .replace(&fixture.display().to_string(), &tree.display().to_string());
        fs::write(&path, text).unwrap();
    })
}

/// Published crates often ship tests that cannot compile outside their upstream workspace (a
/// path-only dev-dependency stripped on publishing). Only the regression targets a case declares
/// are built, so such a crate's case prepares and validates on the test file it names.
#[tokio::test]
async fn only_the_declared_regression_targets_are_built() {
    let root = tempfile::tempdir().unwrap();
    let broken_unit_tests = "\n#[cfg(test)]\nmod upstream_only {\n    \
        use upstream_dev_utils::Fixture;\n}\n";
    let working_tests = "#[test]\nfn a_fresh_counter_is_zero() {\n    \
        assert_eq!(toy_counter::GCounter::new().value(), 0);\n}\n";
    let case = case_on_changed_tree(root.path(), "toy-declared-targets", |crate_root| {
        let lib = crate_root.join("src/lib.rs");
        let text = fs::read_to_string(&lib).unwrap();
        fs::write(&lib, format!("{text}{broken_unit_tests}")).unwrap();
        fs::create_dir_all(crate_root.join("tests")).unwrap();
        fs::write(crate_root.join("tests/counter.rs"), working_tests).unwrap();
    });
    let toml = case.dir.join("case.toml");
    let text = fs::read_to_string(&toml).unwrap();
    fs::write(
        &toml,
        format!("{text}\n[regression]\ntargets = [\"test:counter\"]\n"),
    )
    .unwrap();
    let case = Case::load(&case.dir).unwrap();
    let v = validate_k(&case, &root.path().join("data"), 2).await;
    assert!(v.passed, "{}", problems(&v));
    let regression = v.gold.as_ref().unwrap().regression.as_ref().unwrap();
    assert_eq!(regression.tests_passed, 1, "{regression:?}");
}

/// The measured rate counts the seeds whose run failed: an oracle that lets seeds 3 and 8 pass
/// on the buggy version fails 8 of 10 runs, and says which seeds passed.
#[tokio::test]
async fn the_buggy_failure_rate_is_measured_seed_by_seed() {
    let root = tempfile::tempdir().unwrap();
    let case = write_case(root.path(), "toy-measured", |dir| {
        let lenient = ORACLE_MERGE.replace(
            "fn merging_the_same_state_twice_changes_nothing() {\n",
            "fn merging_the_same_state_twice_changes_nothing() {\n    \
             let seed: u64 = std::env::var(\"FAULTLINE_SEED\").unwrap().parse().unwrap();\n    \
             if seed % 5 == 3 {\n        return;\n    }\n",
        );
        assert_ne!(lenient, ORACLE_MERGE, "the oracle changed shape");
        fs::write(dir.join("oracle/tests/merge.rs"), lenient).unwrap();
    });
    let data = DataDir::new(root.path().join("data"));
    let toolchain = Toolchain::detect().unwrap();
    let prepared = faultline_corpus::prepare(&case, &data, &toolchain, &Default::default())
        .await
        .unwrap();
    let mut seen = Vec::new();
    let measured = faultline_grade::validate::measure_buggy_failure_rate(
        &case,
        &prepared,
        &data,
        &toolchain,
        10,
        |seed, _| seen.push(seed),
    )
    .await
    .unwrap();
    assert_eq!((measured.rate.failed, measured.rate.runs), (8, 10));
    assert_eq!(measured.passing_seeds, vec![3, 8]);
    assert_eq!(seen, (1..=10).collect::<Vec<u64>>());
    assert_eq!(measured.verdicts.get("pass"), Some(&2));
}
