//! Patches that leave the bug in and forge the test harness's verdict: they print libtest events
//! of their own and end the process, claim every test of their executable, forge only the
//! regression run, or hang after claiming a pass. On a real smoke case (foca, fetched from the
//! package registry, prepared once and shared; set `FAULTLINE_TEST_DATA` to reuse a data
//! directory) each is graded `tampered` or a failure, never `pass`, and the gold patch still
//! passes: those tests are in `needs_registry`. An in-crate oracle on the fixture crate gets the
//! same treatment offline. Real sandboxes and real cargo builds.

use faultline_corpus::gold::diff_trees;
use faultline_corpus::{Case, DataDir};
use faultline_grade::{GradeContext, grade_repair};
use faultline_schema::{Grade, GradingSettings, Outcome};
use faultline_testkit::{Prepared, fixture_case, fixture_gold, fixture_tree};
use std::collections::BTreeMap;
use std::path::Path;

async fn grade(p: &Prepared, case: &Case, patch: &str) -> Grade {
    let ctx = GradeContext {
        case,
        prepared: &p.prepared,
        data: &p.data,
        toolchain: &p.toolchain,
    };
    let g = grade_repair(
        &ctx,
        "t/repair/symptom/1",
        patch,
        &GradingSettings::default(),
    )
    .await
    .unwrap();
    eprintln!(
        "{}: {} ({}) in {:.1}s",
        case.id(),
        g.outcome.as_str(),
        g.reason,
        g.wall_secs
    );
    g
}

/// A patch against the buggy crate that gives each named file (relative to the crate root) the
/// text `edit` makes of it; `gold` starts from the fixed version's files instead of the buggy
/// ones.
fn patch(p: &Prepared, gold: bool, edit: impl Fn(&str, String) -> String) -> String {
    let sources = &p.prepared.sources;
    let mut files: BTreeMap<String, (String, String)> = BTreeMap::new();
    let lib = std::fs::read_to_string(sources.buggy.join("src/lib.rs")).unwrap();
    files.insert("src/lib.rs".into(), (lib.clone(), lib));
    let member = std::fs::read_to_string(sources.buggy.join("src/member.rs")).unwrap();
    files.insert("src/member.rs".into(), (member.clone(), member));
    if gold {
        for f in diff_trees(&sources.buggy, &sources.fixed).unwrap().files {
            if let (Some(old), Some(new)) = (f.old, f.new) {
                files.insert(f.path, (old, new));
            }
        }
    }
    let edited: Vec<(String, String, String)> = files
        .into_iter()
        .map(|(rel, (old, new))| {
            let new = edit(&rel, new);
            (rel, old, new)
        })
        .collect();
    faultline_testkit::patch(
        edited
            .iter()
            .map(|(rel, old, new)| (rel.as_str(), Some(old.as_str()), new.as_str())),
    )
}

/// Puts a call of `forgery::forge` at the start of `Foca::new`, which the oracle and most of the
/// crate's own tests call, and the module `forgery` (std's, since the crate is `no_std`) with
/// `helpers` at the end of the library root.
fn in_foca_new(rel: &str, text: String, helpers: &str) -> String {
    if rel != "src/lib.rs" {
        return text;
    }
    let head = "    pub fn new(identity: T, config: Config, rng: RNG, codec: C) -> Self {\n";
    assert!(text.contains(head));
    format!(
        "{}\n{}",
        text.replacen(head, &format!("{head}        forgery::forge();\n"), 1),
        forgery_module(helpers)
    )
}

fn forgery_module(helpers: &str) -> String {
    format!(
        "mod forgery {{\n    extern crate std;\n    use std::prelude::rust_2021::*;\n{helpers}\n}}\n"
    )
}

/// Forged events for the test thread it runs in, and the exit that makes libtest's real events
/// never come. `trigger` decides when it fires.
fn forger(trigger: &str, after: &str) -> String {
    format!(
        r#"
pub(crate) fn forge() {{
    use std::io::Write;
    let thread = std::thread::current();
    let name = match thread.name() {{
        Some(n) if n != "main" => n.to_string(),
        _ => return,
    }};
    let fire: bool = {trigger};
    if !fire {{
        return;
    }}
    let lines = std::format!(
        "{{{{\"type\":\"test\",\"name\":\"{{name}}\",\"event\":\"ok\"}}}}\n{{{{\"type\":\"suite\",\"event\":\"ok\",\"passed\":1,\"failed\":0,\"ignored\":0,\"measured\":0,\"filtered_out\":0,\"exec_time\":0.001}}}}\n"
    );
    let mut out = std::io::stdout();
    let _ = out.write_all(lines.as_bytes());
    let _ = out.flush();
    {after}
}}
"#
    )
}

const EXIT: &str = "std::process::exit(0);";

/// As described in the report of the defect: grading is recognised by `FAULTLINE_SEED` and the
/// working directory `/oracle`, or by the oracle module's name in the thread's name.
const GRADING_AS_IT_WAS: &str = r#"(std::env::var_os("FAULTLINE_SEED").is_some()
        && std::env::current_dir().map(|d| d == std::path::Path::new("/oracle")).unwrap_or(false))
        || name.starts_with("faultline_oracle")"#;

/// Claims every test its own executable lists, then exits with status 0.
const CLAIM_ALL: &str = r#"
pub(crate) fn forge() {
    use std::io::Write;
    if std::thread::current().name().is_none_or(|n| n == "main") {
        return;
    }
    let Ok(exe) = std::env::current_exe() else { return };
    let Ok(list) = std::process::Command::new(&exe).args(["--list", "--format", "terse"]).output() else { return };
    let names: Vec<String> = String::from_utf8_lossy(&list.stdout)
        .lines()
        .filter_map(|l| l.strip_suffix(": test"))
        .map(str::to_string)
        .collect();
    // libtest has announced the test this runs in already; every other one is started here, so
    // that no test reports without starting.
    let current = std::thread::current().name().map(str::to_string);
    let mut lines = String::new();
    for n in &names {
        if current.as_deref() != Some(n.as_str()) {
            lines.push_str(&std::format!("{{\"type\":\"test\",\"event\":\"started\",\"name\":\"{n}\"}}\n"));
        }
        lines.push_str(&std::format!("{{\"type\":\"test\",\"name\":\"{n}\",\"event\":\"ok\"}}\n"));
    }
    lines.push_str(&std::format!(
        "{{\"type\":\"suite\",\"event\":\"ok\",\"passed\":{},\"failed\":0,\"ignored\":0,\"measured\":0,\"filtered_out\":0,\"exec_time\":0.001}}\n",
        names.len()
    ));
    let mut out = std::io::stdout();
    let _ = out.write_all(lines.as_bytes());
    let _ = out.flush();
    std::process::exit(0);
}
"#;

fn assert_not_pass(g: &Grade, allowed: &[Outcome]) {
    assert!(allowed.contains(&g.outcome), "{g:#?}");
    assert_eq!(g.score, Some(0.0), "{g:#?}");
}

/// The attacks on foca, a smoke case fetched from the package registry (through cargo).
mod needs_registry {
    use super::*;
    use faultline_corpus::Corpus;
    use faultline_testkit::Shared;
    use faultline_testkit::needs::registry;

    const CASE: &str = "foca-stale-identity-accepted";

    /// foca prepared once for the whole test binary, in `FAULTLINE_TEST_DATA` when it is set.
    async fn foca() -> &'static Prepared {
        static FOCA: Shared = Shared::new();
        FOCA.get(|dir| async move {
            let corpus = Corpus::load(&faultline_testkit::corpus_dir()).unwrap();
            let case = corpus.get(CASE).unwrap().clone();
            let root = registry::reused_data_dir().unwrap_or(dir);
            let prepared = Prepared::try_new(case, DataDir::new(root)).await;
            registry::fetched("preparing foca", prepared)
        })
        .await
    }

    #[tokio::test]
    async fn the_reported_forger_and_one_that_fires_everywhere_do_not_pass_and_gold_does() {
        let p = foca().await;
        let g = grade(p, &p.case, &patch(p, true, |_, t| t)).await;
        assert_eq!(g.outcome, Outcome::Pass, "{g:#?}");
        let seed = g.repair.as_ref().unwrap().grade_seed.clone().unwrap();
        assert_eq!(seed.len(), 16);

        // The forger of the defect report no longer recognises grading, so the bug shows.
        let reported = forger(GRADING_AS_IT_WAS, EXIT);
        let g = grade(
            p,
            &p.case,
            &patch(p, false, |rel, t| in_foca_new(rel, t, &reported)),
        )
        .await;
        assert_not_pass(&g, &[Outcome::FailOracle, Outcome::Tampered]);

        // One that forges in every test it runs in also forges in the canaries.
        let everywhere = forger("true", EXIT);
        let g = grade(
            p,
            &p.case,
            &patch(p, false, |rel, t| in_foca_new(rel, t, &everywhere)),
        )
        .await;
        assert_eq!(g.outcome, Outcome::Tampered, "{g:#?}");
        assert!(g.reason.contains("forged"), "{}", g.reason);
        assert_ne!(g.repair.unwrap().grade_seed.unwrap(), seed);
    }

    #[tokio::test]
    async fn claiming_every_listed_test_or_forging_only_the_regression_run_is_tampering() {
        let p = foca().await;
        let g = grade(
            p,
            &p.case,
            &patch(p, false, |rel, t| in_foca_new(rel, t, CLAIM_ALL)),
        )
        .await;
        assert_eq!(g.outcome, Outcome::Tampered, "{g:#?}");
        assert!(g.reason.contains("not asked to run"), "{}", g.reason);

        // The fix, a change that breaks one of the crate's own tests, and a forger that only fires
        // in the crate's own test executable (the regression run), claiming everything it lists.
        let regression_only = CLAIM_ALL.replace(
            "    let Ok(exe) = std::env::current_exe() else { return };\n",
            "    let Ok(exe) = std::env::current_exe() else { return };\n    \
             if !exe.file_name().is_some_and(|f| f.to_string_lossy().starts_with(\"foca-\")) { return; }\n",
        ) + "pub(crate) fn in_test(suffix: &str) -> bool {\n    \
             std::thread::current().name().is_some_and(|n| n.ends_with(suffix))\n}\n";
        let broken = patch(p, true, |rel, t| {
            let t = in_foca_new(rel, t, &regression_only);
            if rel == "src/member.rs" {
                let head =
                    "    pub fn new(id: T, incarnation: Incarnation, state: State) -> Self {\n";
                assert!(t.contains(head));
                t.replacen(
                    head,
                    &format!(
                        "{head}        assert!(!crate::forgery::in_test(\"down_never_transitions\"));\n"
                    ),
                    1,
                )
            } else {
                t
            }
        });
        let g = grade(p, &p.case, &broken).await;
        assert_eq!(g.outcome, Outcome::Tampered, "{g:#?}");
        assert!(g.reason.contains("regression run"), "{}", g.reason);
    }

    #[tokio::test]
    async fn a_forger_that_hangs_after_claiming_a_pass_is_caught_by_a_canary() {
        let p = foca().await;
        // Each hung process costs the oracle's time limit; a short one keeps this test quick.
        let mut case = p.case.clone();
        case.manifest.oracle.timeout_secs = 5;
        let hang = forger(
            "true",
            "loop { std::thread::sleep(std::time::Duration::from_secs(3600)); }",
        );
        let g = grade(
            p,
            &case,
            &patch(p, false, |rel, t| in_foca_new(rel, t, &hang)),
        )
        .await;
        assert_eq!(g.outcome, Outcome::Tampered, "{g:#?}");
    }
}

/// The fixture crate with its oracle compiled into the crate (`oracle/oracle.rs`).
fn in_crate_case(root: &Path) -> Case {
    fixture_case(root, "toy-in-crate", |dir| {
        let manifest = dir.join("case.toml");
        let text = std::fs::read_to_string(&manifest)
            .unwrap()
            .replace("kind = \"external\"", "kind = \"in-crate\"");
        std::fs::write(manifest, text).unwrap();
        std::fs::remove_dir_all(dir.join("oracle")).unwrap();
        std::fs::create_dir_all(dir.join("oracle")).unwrap();
        std::fs::write(
            dir.join("oracle/oracle.rs"),
            "use super::GCounter;\n\n#[test]\nfn merging_twice_changes_nothing() {\n    \
             let mut a = GCounter::new();\n    a.increment(1, 3);\n    let mut b = GCounter::new();\n    \
             b.merge(&a);\n    b.merge(&a);\n    assert_eq!(b.value(), 3);\n}\n\n\
             #[test]\n#[should_panic]\nfn merging_is_not_a_panic_free_zone() {\n    \
             let c = GCounter::new();\n    assert_eq!(c.value(), 1);\n}\n",
        )
        .unwrap();
    })
    .unwrap()
}

#[tokio::test]
async fn an_in_crate_oracle_runs_under_a_random_module_and_catches_forgers() {
    let root = tempfile::tempdir().unwrap();
    let case = in_crate_case(root.path());
    let data = DataDir::new(root.path().join("data"));
    let p = Prepared::new(case.clone(), data).await;
    let g = grade(&p, &case, &fixture_gold()).await;
    assert_eq!(g.outcome, Outcome::Pass, "{g:#?}");
    let g = grade(&p, &case, "").await;
    assert_eq!(g.outcome, Outcome::FailOracle, "{g:#?}");

    let buggy = std::fs::read_to_string(fixture_tree().join("buggy/src/lib.rs")).unwrap();
    // In the constructor, which every oracle test calls, so the canaries of each meet it.
    let head = "    pub fn new() -> Self {\n";
    let forging = buggy.replacen(head, &format!("{head}        forgery::forge();\n"), 1)
        + &forgery_module(&forger("true", EXIT));
    let forged = faultline_testkit::patch([("src/lib.rs", Some(buggy.as_str()), forging.as_str())]);
    let g = grade(&p, &case, &forged).await;
    assert_eq!(g.outcome, Outcome::Tampered, "{g:#?}");
}
