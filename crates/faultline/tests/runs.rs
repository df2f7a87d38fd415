//! Runs of the baselines on the fixture corpus through the real binary: killed mid-run and
//! resumed, sharded and merged, and stopped by a failure of the harness. Real sandboxes and real
//! builds of the fixture crate.

mod common;

use common::{faultline, faultline_on, records};
use faultline_schema::ResultRecord;
use faultline_testkit::fixture_corpus;
use faultline_testkit::fixture_gold;
use std::collections::BTreeMap;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

/// What must not change between equivalent runs: which trial got which grade.
fn outcomes(rs: &[ResultRecord]) -> BTreeMap<String, (String, Option<f64>)> {
    rs.iter()
        .map(|r| {
            (
                r.trial_id.clone(),
                (r.outcome.as_str().to_string(), r.score),
            )
        })
        .collect()
}

/// Every trial's record, apart from when it finished and how long it took.
fn comparable(rs: &[ResultRecord]) -> BTreeMap<String, serde_json::Value> {
    rs.iter()
        .map(|r| {
            let mut v = serde_json::to_value(r).unwrap();
            let fields = v.as_object_mut().unwrap();
            for timing in ["finished_at", "wall_secs", "working_secs"] {
                fields.remove(timing).unwrap();
            }
            (r.trial_id.clone(), v)
        })
        .collect()
}

/// Lines in a run's `results.jsonl` (none before it exists).
fn results_lines(run: &Path) -> usize {
    std::fs::read_to_string(run.join("results.jsonl"))
        .map(|t| t.lines().count())
        .unwrap_or(0)
}

const EXPECTED_TRIALS: usize = 18;

/// The most lines a kill waits for: half the run, so trials are always still in flight when it
/// lands, however fast the ones before it were.
const LAST_KILL_LINE: usize = EXPECTED_TRIALS / 2;

/// Kills that must land while a run is still working.
const KILLS: usize = 20;

#[test]
fn a_run_killed_twenty_times_resumes_to_a_complete_record() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let run = tmp.path().join("run");
    // A seeded schedule of extra delays after the awaited line, so kills land at different
    // points of the trials in flight, and a failure can be replayed.
    let mut state: u64 = 0x5eed;
    let mut delay = || {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        Duration::from_millis((state >> 33) % 300)
    };
    // Cached grades make trials fast, so a run can finish inside the wait before a kill; such a
    // run is started over and the kill tried again, until twenty kills have landed mid-run.
    let mut kills = 0;
    let mut finished_on_their_own = 0;
    while kills < KILLS {
        assert!(
            finished_on_their_own < KILLS,
            "{finished_on_their_own} runs finished before their kill; only {kills} landed mid-run"
        );
        if results_lines(&run) >= LAST_KILL_LINE {
            // Kills that waited for more lines could find the run finished: start it over.
            std::fs::remove_dir_all(&run).unwrap();
        }
        let kill = kills + 1;
        let before = results_lines(&run);
        let mut child = faultline(&data)
            .args(["run", "toy-double-merge", "--out"])
            .arg(&run)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        // Watch the results for the next trial's line, then let the run go on a little.
        let started = Instant::now();
        while results_lines(&run) <= before {
            assert!(
                child.try_wait().unwrap().is_none(),
                "kill {kill}: the run exited before recording a trial"
            );
            assert!(
                started.elapsed() < Duration::from_secs(600),
                "kill {kill}: no trial recorded in ten minutes"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        std::thread::sleep(delay());
        child.kill().unwrap();
        let status = child.wait().unwrap();
        if status.success() {
            finished_on_their_own += 1;
            std::fs::remove_dir_all(&run).unwrap();
            continue;
        }
        assert_eq!(
            status.signal(),
            Some(9),
            "kill {kill}: the run was not killed mid-run ({status})"
        );
        let after = results_lines(&run);
        assert!(
            before < after && after <= EXPECTED_TRIALS,
            "kill {kill}: {before} then {after} of {EXPECTED_TRIALS} trials recorded"
        );
        for r in records(&run) {
            assert!(r.trial_id.starts_with(&r.agent));
        }
        kills += 1;
    }
    let status = faultline(&data)
        .args(["run", "toy-double-merge", "--out"])
        .arg(&run)
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success());
    // The workbenches the killed runs left in the scratch space were reclaimed by the last one.
    let left: Vec<_> = std::fs::read_dir(data.join("tmp"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| !name.starts_with('.'))
        .collect();
    assert!(left.is_empty(), "left in the scratch space: {left:?}");
    let rs = records(&run);
    let unique: std::collections::BTreeSet<_> = rs.iter().map(|r| r.trial_id.clone()).collect();
    assert_eq!(
        rs.len(),
        EXPECTED_TRIALS,
        "every trial recorded exactly once"
    );
    assert_eq!(unique.len(), EXPECTED_TRIALS);
    for r in &rs {
        let dir = run.join("trials").join(&r.trial_id);
        for f in ["task.json", "trajectory.json", "grade.json"] {
            let text = std::fs::read_to_string(dir.join(f)).unwrap();
            serde_json::from_str::<serde_json::Value>(&text)
                .unwrap_or_else(|e| panic!("{} is corrupt: {e}", dir.join(f).display()));
        }
    }
    let o = outcomes(&rs);
    assert_eq!(o["gold/toy-double-merge/repair/symptom/1"].0, "pass");
    assert_eq!(o["null/toy-double-merge/repair/curated/1"].0, "fail_oracle");
    assert_eq!(o["gold/toy-double-merge/diagnose/symptom/1"].1, Some(1.0));
    // Every diagnosis records DistDebug's block coverage beside its score.
    for r in rs
        .iter()
        .filter(|r| r.track == faultline_schema::Track::Diagnose)
    {
        assert!(r.block_coverage.is_some(), "{}", r.trial_id);
    }
    assert!(o.contains_key("everything/toy-double-merge/diagnose/curated/1"));

    // The same run never interrupted, with a data directory of its own (so no grade the killed
    // runs cached is served to it), records the same results apart from their timing.
    let whole = tmp.path().join("whole");
    let ok = faultline(&tmp.path().join("whole-data"))
        .args(["run", "toy-double-merge", "--out"])
        .arg(&whole)
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(ok.success());
    assert_eq!(comparable(&rs), comparable(&records(&whole)));
}

/// Every file under `dir` with its size and modification time: equal before and after means
/// nothing was written there.
fn snapshot(dir: &Path) -> BTreeMap<String, (u64, std::time::SystemTime)> {
    walkdir::WalkDir::new(dir)
        .into_iter()
        .map(|e| e.unwrap())
        .map(|e| {
            let meta = e.path().symlink_metadata().unwrap();
            (
                e.path().display().to_string(),
                (meta.len(), meta.modified().unwrap()),
            )
        })
        .collect()
}

/// Prepares the toy case into `data`.
fn prepare_toy(data: &Path) {
    let ok = faultline(data)
        .args(["prepare", "toy-double-merge"])
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(ok.success());
}

/// A shard reuses a shared prepared case on its stamp and manifest alone, so the templates'
/// contents are checked where they are used: a grading template changed after preparation grades
/// nothing (the trial is an infrastructure error naming the file), never a pass built on it.
#[test]
fn a_shard_grades_nothing_on_a_damaged_shared_template() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    prepare_toy(&data);
    let workspaces = std::fs::read_dir(data.join("workspaces")).unwrap();
    let prepared = workspaces
        .map(|e| e.unwrap().path())
        .find(|p| p.is_dir())
        .unwrap();
    let lib = prepared.join("grade/workspace/src/lib.rs");
    let mut perms = std::fs::metadata(&lib).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o644);
    std::fs::set_permissions(&lib, perms).unwrap();
    let mut text = std::fs::read_to_string(&lib).unwrap();
    text.push_str("// changed after preparation\n");
    std::fs::write(&lib, text).unwrap();

    let run = tmp.path().join("run");
    let out = faultline(&data)
        .arg("--scratch")
        .arg(tmp.path().join("scratch"))
        .args(["run", "toy-double-merge", "--agent", "baseline:gold"])
        .args(["--tracks", "repair", "--conditions", "symptom", "--out"])
        .arg(&run)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let rs = records(&run);
    assert_eq!(rs.len(), 1);
    assert_eq!(rs[0].outcome.as_str(), "infra_error");
    let grade =
        std::fs::read_to_string(run.join("trials").join(&rs[0].trial_id).join("grade.json"))
            .unwrap();
    assert!(grade.contains("grade/workspace/src/lib.rs"), "{grade}");
}

/// A cluster run in miniature: one preparing job, then four shards at once sharing its data
/// directory read-only, each with scratch space of its own, then a merge.
#[test]
fn four_concurrent_shards_on_a_shared_read_only_data_directory_merge_to_one_run() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let whole = tmp.path().join("whole");
    let ok = faultline(&tmp.path().join("whole-data"))
        .args(["run", "toy-double-merge", "--out"])
        .arg(&whole)
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(ok.success());

    // Before preparing, a shard refuses at once and says what to do.
    let out = faultline(&data)
        .args(["--scratch"])
        .arg(tmp.path().join("early-scratch"))
        .args(["run", "toy-double-merge", "--out"])
        .arg(tmp.path().join("early"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("prepare --all"), "{err}");

    let ok = faultline(&data)
        .args(["prepare", "--all"])
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(ok.success());
    let prepared = snapshot(&data);
    let shards: Vec<_> = (0..4)
        .map(|i| tmp.path().join(format!("shard-{i}")))
        .collect();
    let children: Vec<_> = shards
        .iter()
        .enumerate()
        .map(|(i, dir)| {
            faultline(&data)
                .arg("--scratch")
                .arg(tmp.path().join(format!("scratch-{i}")))
                .args([
                    "run",
                    "toy-double-merge",
                    "--shard",
                    &format!("{i}/4"),
                    "--out",
                ])
                .arg(dir)
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for (i, child) in children.into_iter().enumerate() {
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "shard {i}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(records(&shards[i]).len() < EXPECTED_TRIALS);
    }
    assert_eq!(
        snapshot(&data),
        prepared,
        "the shards wrote into the shared data directory"
    );
    let merged = tmp.path().join("merged");
    let ok = faultline(&data)
        .arg("merge")
        .args(&shards)
        .arg("--out")
        .arg(&merged)
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(ok.success());
    assert_eq!(records(&merged).len(), EXPECTED_TRIALS);
    assert_eq!(comparable(&records(&merged)), comparable(&records(&whole)));

    // Shards of one run cannot be merged with a different run.
    let other = tmp.path().join("other");
    let ok = faultline(&data)
        .args([
            "run",
            "toy-double-merge",
            "--seed",
            "9",
            "--shard",
            "0/3",
            "--out",
        ])
        .arg(&other)
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(ok.success());
    let out = faultline(&data)
        .arg("merge")
        .arg(&shards[1])
        .arg(&other)
        .arg("--out")
        .arg(tmp.path().join("bad"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("differently configured"));
}

/// Validation can read a shared prepared data directory too (two validations at once on one
/// machine, or beside a run): everything it writes, the bundle generator's vendored
/// dependencies included, goes to its scratch directory.
#[test]
fn a_validation_on_a_shared_read_only_data_directory_writes_only_its_scratch() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let scratch = tmp.path().join("scratch");
    prepare_toy(&data);
    let prepared = snapshot(&data);
    let out = faultline(&data)
        .arg("--scratch")
        .arg(&scratch)
        .args(["cases", "validate", "toy-double-merge", "-k", "1"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let after = snapshot(&data);
    let written: Vec<_> = after
        .iter()
        .filter(|(path, seen)| prepared.get(*path) != Some(seen))
        .map(|(path, _)| path)
        .collect();
    assert!(
        written.is_empty(),
        "validation wrote into the data directory: {written:?}"
    );
    assert_eq!(
        after.len(),
        prepared.len(),
        "validation removed files from it"
    );
    assert!(scratch.join("generators").is_dir());
}

#[test]
fn a_changed_configuration_is_refused_unless_forced() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let run = tmp.path().join("run");
    let base = [
        "run",
        "toy-double-merge",
        "--agent",
        "baseline:null",
        "--tracks",
        "diagnose",
    ];
    assert!(
        faultline(&data)
            .args(base)
            .arg("--out")
            .arg(&run)
            .stdout(Stdio::null())
            .status()
            .unwrap()
            .success()
    );
    let out = faultline(&data)
        .args(base)
        .args(["--steps", "10", "--out"])
        .arg(&run)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("different configuration") && err.contains("limits"),
        "{err}"
    );
    let ok = faultline(&data)
        .args(base)
        .args(["--steps", "10", "--force", "--out"])
        .arg(&run)
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(ok.success());
    assert_eq!(records(&run).len(), 2);
}

#[test]
fn a_run_is_not_resumed_over_a_changed_symptom_or_bundle() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let run = tmp.path().join("run");
    // A copy of the fixtures (the case names its sources relative to itself), to change.
    let fixtures = tmp.path().join("fixtures");
    faultline_corpus::store::copy_tree(&fixture_corpus().join(".."), &fixtures, &|_| true).unwrap();
    let case = fixtures.join("corpus/toy/toy-double-merge");
    let go = || {
        faultline_on(&fixtures.join("corpus"), &data)
            .args([
                "run",
                "toy-double-merge",
                "--agent",
                "baseline:null",
                "--tracks",
                "diagnose",
                "--out",
            ])
            .arg(&run)
            .stdout(Stdio::null())
            .output()
            .unwrap()
    };
    assert!(go().status.success());
    assert_eq!(records(&run).len(), 2);
    let refused = |file: &str| {
        let path = case.join(file);
        let original = std::fs::read_to_string(&path).unwrap();
        std::fs::write(
            &path,
            format!("{original}\nOne more line the agent would see.\n"),
        )
        .unwrap();
        let out = go();
        assert!(!out.status.success(), "resumed over a changed {file}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("toy-double-merge")
                && err.contains("hash differently than when the run started"),
            "{file}: {err}"
        );
        // Put back, the case is the one the run started with, and the run resumes.
        std::fs::write(&path, original).unwrap();
        assert!(go().status.success(), "{file}");
    };
    refused("symptom.md");
    refused("context/state.md");
    assert_eq!(records(&run).len(), 2);
}

#[test]
fn predictions_are_imported_and_graded() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let gold = fixture_gold();
    let preds = tmp.path().join("preds.jsonl");
    let lines = [
        serde_json::json!({"instance_id": "toy-double-merge", "model_name_or_path": "org/fixer", "model_patch": gold}),
        serde_json::json!({"instance_id": "toy-double-merge", "model_name_or_path": "org/fixer", "model_patch": "", "condition": "context"}),
    ];
    std::fs::write(
        &preds,
        lines.iter().map(|l| format!("{l}\n")).collect::<String>(),
    )
    .unwrap();
    let run = tmp.path().join("imported");
    let ok = faultline(&data)
        .arg("import")
        .arg(&preds)
        .arg("--out")
        .arg(&run)
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(ok.success());
    let o = outcomes(&records(&run));
    assert_eq!(o["org-fixer/toy-double-merge/repair/symptom/1"].0, "pass");
    assert_eq!(
        o["org-fixer/toy-double-merge/repair/curated/1"].0,
        "fail_oracle"
    );

    std::fs::write(
        &preds,
        "{\"instance_id\": \"nope\", \"model_name_or_path\": \"m\", \"model_patch\": \"\"}\n",
    )
    .unwrap();
    let out = faultline(&data)
        .arg("import")
        .arg(&preds)
        .arg("--out")
        .arg(tmp.path().join("x"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown case `nope`"));
}

#[test]
fn a_failure_of_the_harness_ends_the_run_and_records_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let (data, run) = (tmp.path().join("data"), tmp.path().join("run"));
    // The data directory's scratch space (`tmp/`) is a file: the harness cannot make any trial's
    // copy of the workspace, which is its own failure, not the sandbox's.
    std::fs::create_dir_all(&data).unwrap();
    std::fs::write(data.join("tmp"), "").unwrap();
    let out = faultline(&data)
        .args(["run", "toy-double-merge", "--agent", "external:probe=true"])
        .args([
            "--tracks",
            "diagnose",
            "--conditions",
            "symptom",
            "--attempts",
            "1",
        ])
        .arg("--out")
        .arg(&run)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("a trial could not be recorded") && err.contains("scratch space"),
        "{err}"
    );
    assert!(
        records(&run).is_empty(),
        "the harness's failure was recorded as the trial's"
    );
}

/// The same command started twice on one run directory: the second is refused at once, naming
/// the first's pid, and the first records every trial once; a writer killed with `kill -9`
/// leaves nothing that refuses the next one.
#[test]
fn a_second_writer_of_a_run_directory_is_refused_and_a_killed_one_lets_go() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let run = tmp.path().join("run");
    let start = || {
        faultline(&data)
            .args(["run", "toy-double-merge", "--out"])
            .arg(&run)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let first = start();
    let holder = run.join(".writer");
    let waited = Instant::now();
    while std::fs::read_to_string(&holder).unwrap_or_default() != first.id().to_string() {
        assert!(waited.elapsed() < Duration::from_secs(60), "no writer lock");
        std::thread::sleep(Duration::from_millis(5));
    }
    for command in [vec!["run", "toy-double-merge", "--out"], vec!["grade"]] {
        let refused = Instant::now();
        let out = faultline(&data).args(&command).arg(&run).output().unwrap();
        assert!(!out.status.success(), "{command:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains(&format!("pid {}", first.id())),
            "{command:?}: {err}"
        );
        assert!(refused.elapsed() < Duration::from_secs(10));
    }
    let out = first.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rs = records(&run);
    let unique: std::collections::BTreeSet<_> = rs.iter().map(|r| &r.trial_id).collect();
    assert_eq!((rs.len(), unique.len()), (EXPECTED_TRIALS, EXPECTED_TRIALS));

    // kill -9 releases the lock: the next writer starts at once.
    std::fs::remove_dir_all(&run).unwrap();
    let mut killed = start();
    while std::fs::read_to_string(&holder).unwrap_or_default() != killed.id().to_string() {
        std::thread::sleep(Duration::from_millis(5));
    }
    killed.kill().unwrap();
    killed.wait().unwrap();
    let out = start().wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(records(&run).len(), EXPECTED_TRIALS);
}

/// Processes that prepare the same case in one data directory at once wait for each other: one
/// builds it, the others find it built, and all succeed.
#[test]
fn concurrent_preparations_of_one_data_directory_wait_for_each_other() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let prepare = || {
        faultline(&data)
            .args(["prepare", "toy-double-merge"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let run = faultline(&data)
        .args([
            "run",
            "toy-double-merge",
            "--agent",
            "baseline:gold",
            "--tracks",
            "repair",
        ])
        .arg("--out")
        .arg(tmp.path().join("run"))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let preparing = [prepare(), prepare()];
    let mut built = 0;
    for child in preparing {
        let out = child.wait_with_output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        built += usize::from(text.contains(" prepared "));
        assert!(
            text.contains(" prepared ") || text.contains(" checked "),
            "{text}"
        );
    }
    let out = run.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(built <= 1, "the case was built {built} times");
    let workspaces: Vec<_> = std::fs::read_dir(data.join("workspaces"))
        .unwrap()
        .flatten()
        .filter(|e| e.file_type().unwrap().is_dir())
        .collect();
    assert_eq!(workspaces.len(), 1);
    assert_eq!(records(&tmp.path().join("run")).len(), 2);
}
