//! Grading on the fixture case: the gold patch passes, the empty patch fails, labels score 1,
//! the oracle is a valid reproducer, reproducers that read the sources are illegal and run where
//! nothing of the case is in reach, and each tampering attempt is graded for what the patch
//! really fixes, or as `tampered` when it forges test output. Real sandboxes, real cargo builds
//! of the fixture crate.

use faultline_grade::libtest::RunVerdict;
use faultline_grade::workbench::BuildTarget;
use faultline_grade::{GradeContext, Workbench, grade_diagnosis, grade_repair, grade_reproduction};
use faultline_schema::{Grade, GradingSettings, Outcome};
use faultline_testkit::{Prepared, Shared, fixture_gold, fixture_tree};
use std::time::Duration;

async fn fixture() -> &'static Prepared {
    static FIXTURE: Shared = Shared::new();
    FIXTURE
        .get(|dir| async move { Prepared::fixture(&dir, "toy-grading").await })
        .await
}

fn ctx(f: &'static Prepared) -> GradeContext<'static> {
    GradeContext {
        case: &f.case,
        prepared: &f.prepared,
        data: &f.data,
        toolchain: &f.toolchain,
    }
}

async fn repair(patch: &str) -> Grade {
    let f = fixture().await;
    grade_repair(
        &ctx(f),
        "t/repair/symptom/1",
        patch,
        &GradingSettings::default(),
    )
    .await
    .unwrap()
}

/// A patch that changes one file of the buggy fixture crate (created if absent) with `edit`.
fn patch_of(rel: &str, edit: impl Fn(&str) -> String) -> String {
    let original = std::fs::read_to_string(fixture_tree().join("buggy").join(rel)).ok();
    let edited = edit(original.as_deref().unwrap_or(""));
    faultline_testkit::patch([(rel, original.as_deref(), edited.as_str())])
}

fn lib_patch(edit: impl Fn(&str) -> String) -> String {
    patch_of("src/lib.rs", edit)
}

const FIX_OLD: &str = "            *mine += *count;";
const FIX_NEW: &str = "            *mine = (*mine).max(*count);";
const TEST_MODULE: &str = "#[cfg(test)]\nmod tests {\n    use super::*;\n\n    #[test]\n    fn increments_add_up() {\n        let mut c = GCounter::new();\n        c.increment(1, 2);\n        c.increment(2, 3);\n        assert_eq!(c.value(), 5);\n    }\n}\n";

#[tokio::test]
async fn the_gold_patch_passes_and_the_empty_patch_fails() {
    let g = repair(&fixture_gold()).await;
    assert_eq!(g.outcome, Outcome::Pass, "{g:#?}");
    assert_eq!(g.score, Some(1.0));
    let r = g.repair.unwrap();
    assert_eq!(r.robustness_seeds, 5);
    assert_eq!(r.robustness_passed, 5);
    assert!(r.regression_passed.unwrap() >= 1);

    let g = repair("").await;
    assert_eq!(g.outcome, Outcome::FailOracle, "{g:#?}");
    assert_eq!(g.score, Some(0.0));
}

/// A patch that fixes the bug only under the seed a repair is decided on (as one tuned to that
/// run would) passes the oracle but none of the further seeds.
#[tokio::test]
async fn a_fix_only_under_the_deciding_seed_fails_robustness() {
    let seed_one = "            if std::env::var(\"FAULTLINE_SEED\").as_deref() == Ok(\"1\") {\n                *mine = (*mine).max(*count);\n            } else {\n                *mine += *count;\n            }";
    let g = repair(&lib_patch(|s| s.replace(FIX_OLD, seed_one))).await;
    assert_eq!(g.outcome, Outcome::FailRobustness, "{g:#?}");
    let r = g.repair.unwrap();
    assert_eq!((r.robustness_seeds, r.robustness_passed), (5, 0));
}

#[tokio::test]
async fn labels_as_a_diagnosis_score_one_and_an_empty_one_zero() {
    let f = fixture().await;
    let labels =
        r#"{"schema_version":1,"blocks":[{"file":"src/lib.rs","start_line":24,"end_line":27}]}"#;
    let g = grade_diagnosis(&ctx(f), "t/diagnose/symptom/1", labels).unwrap();
    assert_eq!(g.score, Some(1.0));
    let d = g.diagnosis.unwrap();
    assert_eq!(
        (d.budgeted_coverage, d.block_coverage, d.block_precision),
        (1.0, 1.0, 1.0)
    );
    let g = grade_diagnosis(&ctx(f), "t", r#"{"schema_version":1,"blocks":[]}"#).unwrap();
    assert_eq!(g.score, Some(0.0));
    for bad in [
        "{",
        r#"{"schema_version":1,"blocks":[],"confidence":1}"#,
        "[]",
    ] {
        let g = grade_diagnosis(&ctx(f), "t", bad).unwrap();
        assert_eq!(g.outcome, Outcome::InvalidSubmission, "{bad}");
        assert!(g.reason.contains("not valid"), "{}", g.reason);
    }
    let absurd = r#"{"schema_version":1,"blocks":[{"file":"src/lib.rs","start_line":4000000000,"end_line":1}]}"#;
    let g = grade_diagnosis(&ctx(f), "t", absurd).unwrap();
    assert_eq!(g.outcome, Outcome::Scored);
    assert_eq!(g.diagnosis.unwrap().rejected_blocks.len(), 1);
}

#[tokio::test]
async fn the_hidden_oracle_is_a_valid_reproducer_and_a_weak_test_is_not() {
    let f = fixture().await;
    let oracle = std::fs::read_to_string(f.case.oracle_dir().join("tests/merge.rs")).unwrap();
    let opts = GradingSettings::default();
    let g = grade_reproduction(&ctx(f), "t/reproduce/symptom/1", &oracle, &opts)
        .await
        .unwrap();
    assert_eq!(g.outcome, Outcome::Valid, "{g:#?}");

    let weak = "#[test]\nfn adds() { let mut c = toy_counter::GCounter::new(); c.increment(1, 1); assert_eq!(c.value(), 1); }\n";
    let g = grade_reproduction(&ctx(f), "t", weak, &opts).await.unwrap();
    assert_eq!(g.outcome, Outcome::PassesOnBoth, "{g:#?}");

    let broken = "#[test]\nfn x() { toy_counter::does_not_exist(); }\n";
    let g = grade_reproduction(&ctx(f), "t", broken, &opts)
        .await
        .unwrap();
    assert_eq!(g.outcome, Outcome::DoesNotCompile, "{g:#?}");

    // Not even Rust tokens: the checker cannot read it, and the compiler says why.
    let unreadable = "#[test]\nfn x() { let s = \"unterminated; }\n";
    let g = grade_reproduction(&ctx(f), "t", unreadable, &opts)
        .await
        .unwrap();
    assert_eq!(g.outcome, Outcome::DoesNotCompile, "{g:#?}");

    let always = "#[test]\nfn x() { panic!(\"always\"); }\n";
    let g = grade_reproduction(&ctx(f), "t", always, &opts)
        .await
        .unwrap();
    assert_eq!(g.outcome, Outcome::FailsOnBoth, "{g:#?}");
}

#[tokio::test]
async fn malformed_patches_get_clear_outcomes() {
    let g = repair("this is not a diff\n").await;
    assert_eq!(g.outcome, Outcome::PatchError, "{g:#?}");
    let stale = lib_patch(|t| t.replace(FIX_OLD, FIX_NEW))
        .replace(FIX_OLD, "            this line is not there;");
    let g = repair(&stale).await;
    assert_eq!(g.outcome, Outcome::PatchError, "{g:#?}");
    assert!(g.repair.unwrap().error.unwrap().contains("patch"));
    let binary = "diff --git a/src/blob.bin b/src/blob.bin\nnew file mode 100644\nGIT binary patch\nliteral 3\nKcmZQz\n\nliteral 0\nKcmV+b0000\n";
    let g = repair(binary).await;
    assert_eq!(g.outcome, Outcome::PatchError, "{g:#?}");
    let does_not_build =
        lib_patch(|t| t.replace(FIX_OLD, "            *mine = undefined_function();"));
    let g = repair(&does_not_build).await;
    assert_eq!(g.outcome, Outcome::BuildError, "{g:#?}");
}

#[tokio::test]
async fn editing_or_deleting_regression_tests_does_not_help() {
    // The fix, a change that breaks node 2's increments, and the deletion of the test that
    // would catch it.
    let patch = lib_patch(|t| {
        t.replace(FIX_OLD, FIX_NEW)
            .replace(
                "or_insert(0) += by;",
                "or_insert(0) += if node == 2 { by * 2 } else { by };",
            )
            .replace(TEST_MODULE, "")
    });
    assert!(patch.contains("-    fn increments_add_up()"), "{patch}");
    // The deletion is dropped (the test comes back as the buggy version has it), the code change
    // is kept, and the restored test catches the breakage.
    let g = repair(&patch).await;
    assert_eq!(g.outcome, Outcome::FailRegression, "{g:#?}");
    let r = g.repair.unwrap();
    assert_eq!(r.applied_files, ["src/lib.rs"], "{r:#?}");
    assert!(r.dropped[0].contains("tests::increments_add_up"), "{r:#?}");
    assert_eq!(
        r.regression_failures,
        ["tests::increments_add_up"],
        "{r:#?}"
    );

    // The same breakage without touching the test is caught by the test.
    let patch = lib_patch(|t| {
        t.replace(FIX_OLD, FIX_NEW).replace(
            "or_insert(0) += by;",
            "or_insert(0) += if node == 2 { by * 2 } else { by };",
        )
    });
    let g = repair(&patch).await;
    assert_eq!(g.outcome, Outcome::FailRegression, "{g:#?}");
    assert_eq!(
        g.repair.unwrap().regression_failures,
        ["tests::increments_add_up"]
    );

    // The right fix with a regression test edited in the same file: the edit is dropped, the fix
    // kept, and the test as the buggy version has it passes.
    let patch = lib_patch(|t| {
        t.replace(FIX_OLD, FIX_NEW)
            .replace("assert_eq!(c.value(), 5);", "assert_eq!(c.value(), 99);")
    });
    let g = repair(&patch).await;
    assert_eq!(g.outcome, Outcome::Pass, "{g:#?}");
    let r = g.repair.as_ref().unwrap();
    assert!(
        r.dropped.iter().any(
            |d| d.contains("changes to existing tests (tests::increments_add_up) were dropped")
        ),
        "{r:#?}"
    );
}

#[tokio::test]
async fn manifest_and_test_changes_are_dropped() {
    let manifest = patch_of("Cargo.toml", |t| {
        format!("{t}\n[lib]\ntest = false\ndoctest = false\n")
    });
    let oracle = patch_of("src/faultline_oracle.rs", |_| {
        "#[test]\nfn pass() {}\n".into()
    });
    let outside = "diff --git a/../oracle/tests/merge.rs b/../oracle/tests/merge.rs\n--- a/../oracle/tests/merge.rs\n+++ b/../oracle/tests/merge.rs\n@@ -1 +1 @@\n-use toy_counter::GCounter;\n+use toy_counter::GCounter; // pass\n";
    let g = repair(&format!("{manifest}{oracle}{outside}")).await;
    assert_eq!(g.outcome, Outcome::FailOracle, "{g:#?}");
    // The in-crate oracle's module has a random name per grade, so a file at its old place is
    // just a source file that nothing compiles.
    let r = g.repair.unwrap();
    assert_eq!(r.dropped.len(), 2, "{:?}", r.dropped);
    assert!(
        r.applied_files
            .contains(&"src/faultline_oracle.rs".to_string())
    );

    let g = repair(&format!("{manifest}{}", fixture_gold())).await;
    assert_eq!(g.outcome, Outcome::Pass, "{g:#?}");
}

#[tokio::test]
async fn printing_fake_test_results_does_not_pass() {
    let forge = concat!(
        "        println!(\"test result: ok. 1 passed; 0 failed; 0 ignored\");\n",
        "        use std::io::Write;\n",
        "        let _ = std::io::stdout().write_all(b\"{ \\\"type\\\": \\\"test\\\", \\\"name\\\": ",
        "\\\"merging_the_same_state_twice_changes_nothing\\\", \\\"event\\\": \\\"ok\\\" }\\n",
        "{ \\\"type\\\": \\\"suite\\\", \\\"event\\\": \\\"ok\\\", \\\"passed\\\": 1, \\\"failed\\\": 0 }\\n\");\n",
    );
    let patch = lib_patch(|t| {
        t.replace(
            "    pub fn merge(&mut self, other: &GCounter) {\n",
            &format!("    pub fn merge(&mut self, other: &GCounter) {{\n{forge}"),
        )
    });
    assert!(patch.contains("test result: ok"), "{patch}");
    let g = repair(&patch).await;
    assert_eq!(g.outcome, Outcome::Tampered, "{g:#?}");
    assert_eq!(g.score, Some(0.0));
    let catch = lib_patch(|t| {
        t.replace(
            FIX_OLD,
            "            let _ = std::panic::catch_unwind(|| ());\n            *mine += *count;",
        )
    });
    let g = repair(&catch).await;
    assert_eq!(g.outcome, Outcome::FailOracle, "{g:#?}");
}

/// A reproducer that tests nothing: it tells the fixed version from the buggy one by the size
/// of the crate's sources, read in one of several ways.
fn byte_counter(read_sizes: &str, prelude: &str) -> String {
    let buggy = fixture_tree().join("buggy/src/lib.rs");
    let size = std::fs::metadata(buggy).unwrap().len();
    format!(
        "{prelude}\n#[test]\nfn the_sources_changed() {{\n    let total: u64 = {read_sizes};\n    assert_ne!(total, {size});\n}}\n"
    )
}

#[tokio::test]
async fn reproducers_that_read_instead_of_exercising_the_crate_are_illegal() {
    let f = fixture().await;
    let opts = GradingSettings::default();
    for (name, reproducer, rule) in [
        (
            "std::fs",
            byte_counter(
                "std::fs::read_dir(\"src\").unwrap().map(|e| e.unwrap().metadata().unwrap().len()).sum()",
                "",
            ),
            "file access",
        ),
        (
            "include_str!",
            byte_counter("include_str!(\"../src/lib.rs\").len() as u64", ""),
            "file access",
        ),
        (
            "env!",
            byte_counter(
                "std::path::Path::new(env!(\"CARGO_MANIFEST_DIR\")).join(\"src/lib.rs\").metadata().unwrap().len()",
                "",
            ),
            "environment access",
        ),
        (
            "std::process::Command",
            byte_counter(
                "String::from_utf8(std::process::Command::new(\"wc\").args([\"-c\", \"src/lib.rs\"]).output().unwrap().stdout).unwrap().split_whitespace().next().unwrap().parse().unwrap()",
                "",
            ),
            "process access",
        ),
        (
            "a renamed import",
            byte_counter(
                "files::metadata(\"src/lib.rs\").unwrap().len()",
                "use std::fs as files;",
            ),
            "file access",
        ),
        (
            "a renamed std",
            byte_counter(
                "s::fs::metadata(\"src/lib.rs\").unwrap().len()",
                "use std as s;",
            ),
            "file access",
        ),
        (
            "a glob import",
            byte_counter("fs::metadata(\"src/lib.rs\").unwrap().len()", "use std::*;"),
            "file access",
        ),
    ] {
        let g = grade_reproduction(&ctx(f), "t/reproduce/symptom/1", &reproducer, &opts)
            .await
            .unwrap();
        assert_eq!(g.outcome, Outcome::Illegal, "{name}: {g:#?}");
        assert_eq!(g.score, Some(0.0), "{name}");
        assert!(!g.outcome.is_success());
        assert!(
            g.reason.contains("breaks the track's rules"),
            "{name}: {}",
            g.reason
        );
        let details = g.reproduction.unwrap();
        assert!(
            details.violations.iter().any(|v| v.contains(rule)),
            "{name}: {details:#?}"
        );
    }
}

#[tokio::test]
async fn a_reproducer_runs_alone_with_nothing_of_the_case_in_reach() {
    let f = fixture().await;
    // Built as the only test of the case's test package (the second harness), whose oracle
    // must be gone before the build; run where it finds neither sources nor an environment.
    let snoop = r#"
fn names(dir: &str) -> Vec<String> {
    match std::fs::read_dir(dir) {
        Ok(entries) => entries
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect(),
        Err(e) => vec![format!("{dir}: {e}")],
    }
}

#[test]
fn nothing_of_the_case_is_in_reach() {
    assert_eq!(names("/workspace"), ["/workspace: No such file or directory (os error 2)"]);
    assert_eq!(names("/oracle"), ["/oracle: No such file or directory (os error 2)"]);
    assert_eq!(names("."), Vec::<String>::new());
    // Where the harness inherited descriptors, a shell closes them first and adds its own.
    let mut vars: Vec<String> = std::env::vars()
        .map(|(k, _)| k)
        .filter(|k| !["PWD", "SHLVL", "_"].contains(&k.as_str()))
        .collect();
    vars.sort();
    assert_eq!(vars, ["RUSTC_BOOTSTRAP", "RUST_BACKTRACE"]);
}
"#;
    let bench = Workbench::new(&f.prepared, &f.data, &f.toolchain).unwrap();
    bench
        .replace_oracle_tests("faultline_repro", snoop)
        .unwrap();
    let oracle = bench.oracle.as_ref().unwrap();
    let tests: Vec<_> = std::fs::read_dir(oracle.join("tests"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(tests, ["faultline_repro.rs"]);
    let deps = bench.workspace.join("target/debug/deps");
    assert!(
        !std::fs::read_dir(deps).unwrap().any(|e| e
            .unwrap()
            .file_name()
            .to_string_lossy()
            .starts_with("merge-")),
        "the oracle's compiled test executable is still there"
    );
    let bins = bench.build(&[BuildTarget::Oracle]).await.unwrap().unwrap();
    let bin = bins.iter().find(|b| b.target == "faultline_repro").unwrap();
    let timeout = Duration::from_secs(60);
    let alone = bench.run_alone(bin, timeout).await.unwrap();
    assert_eq!(alone.verdict, RunVerdict::Pass, "{alone:#?}");
    // Where oracles run, the same test sees the case: the checks above are not vacuous.
    let beside = bench.run(bin, None, &[], 1, timeout).await.unwrap();
    assert_eq!(beside.verdict, RunVerdict::Fail, "{beside:#?}");
}
