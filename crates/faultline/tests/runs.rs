//! Runs of the baselines on the fixture corpus through the real binary: killed and resumed, and
//! sharded and merged. Real sandboxes and real builds of the fixture crate.

mod common;

use common::{corpus, faultline, faultline_on, records};
use faultline_schema::ResultRecord;
use std::collections::BTreeMap;
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

const EXPECTED_TRIALS: usize = 18;

#[test]
fn a_run_killed_twenty_times_resumes_to_a_complete_record() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let run = tmp.path().join("run");
    // A seeded schedule of kill times, so a failure can be replayed.
    let mut state: u64 = 0x5eed;
    let mut next = || {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        300 + (state >> 33) % 4000
    };
    let mut kills = 0;
    while kills < 20 {
        let mut child = faultline(&data)
            .args(["run", "toy-double-merge", "--out"])
            .arg(&run)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let wait = Duration::from_millis(next());
        let started = Instant::now();
        let mut exited = false;
        while started.elapsed() < wait {
            if child.try_wait().unwrap().is_some() {
                exited = true;
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        if exited {
            // The run finished before the kill: start over to keep killing mid-run.
            std::fs::remove_dir_all(&run).unwrap();
            continue;
        }
        child.kill().unwrap();
        child.wait().unwrap();
        kills += 1;
        for r in records(&run) {
            assert!(r.trial_id.starts_with(&r.agent));
        }
    }
    let status = faultline(&data)
        .args(["run", "toy-double-merge", "--out"])
        .arg(&run)
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success());
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
    assert_eq!(o["null/toy-double-merge/repair/context/1"].0, "fail_oracle");
    assert_eq!(o["gold/toy-double-merge/diagnose/symptom/1"].1, Some(1.0));
    // Every diagnosis records DistDebug's block coverage beside its score.
    for r in rs
        .iter()
        .filter(|r| r.track == faultline_schema::Track::Diagnose)
    {
        assert!(r.block_coverage.is_some(), "{}", r.trial_id);
    }
    assert!(o.contains_key("everything/toy-double-merge/diagnose/context/1"));
}

#[test]
fn three_shards_merged_equal_one_run() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let whole = tmp.path().join("whole");
    let ok = faultline(&data)
        .args(["run", "toy-double-merge", "--out"])
        .arg(&whole)
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(ok.success());
    let mut shards = Vec::new();
    for i in 0..3 {
        let dir = tmp.path().join(format!("shard-{i}"));
        let ok = faultline(&data)
            .args([
                "run",
                "toy-double-merge",
                "--shard",
                &format!("{i}/3"),
                "--out",
            ])
            .arg(&dir)
            .stdout(Stdio::null())
            .status()
            .unwrap();
        assert!(ok.success());
        assert!(records(&dir).len() < EXPECTED_TRIALS);
        shards.push(dir);
    }
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
    assert_eq!(outcomes(&records(&merged)), outcomes(&records(&whole)));
    assert_eq!(records(&merged).len(), EXPECTED_TRIALS);

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
    faultline_corpus::store::copy_tree(&corpus().join(".."), &fixtures, &|_| true).unwrap();
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
    let tree = corpus().join("../toy-tree");
    let gold = faultline_corpus::gold::diff_trees(&tree.join("buggy"), &tree.join("fixed"))
        .unwrap()
        .unified();
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
        o["org-fixer/toy-double-merge/repair/context/1"].0,
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
