//! The build track through the real binary on the repository's own build tasks: a model agent
//! (a scripted model server on loopback) that writes the task's reference into its sandboxed
//! workspace passes, the `null` baseline (the skeleton) fails, and the records and the grade
//! carry the build scores; an external agent runs in the same sandbox over the same view of the
//! harness, its model reached through the gateway. Real sandbox, real builds, real hidden
//! schedules (the first few). The tests share one data directory, one at a time, so the
//! harness's dependencies are built once.

mod common;

use common::{faultline_on, records};
use faultline_schema::{Outcome, Track};
use faultline_scripted::{Script, ScriptedServer, Step};
use std::path::{Path, PathBuf};
use std::sync::{LazyLock, Mutex, MutexGuard};

/// Hidden schedules graded per task here: enough to tell the reference from the skeleton.
const SCHEDULES: &str = "3";

/// The data directory the tests share, and the lock that runs them one at a time. A process
/// directory, because a `static` is never dropped: a plain temporary directory left its 260 MB
/// of builds behind after every run.
static DATA: LazyLock<(faultline_testkit::ProcessDir, Mutex<()>)> = LazyLock::new(|| {
    (
        faultline_testkit::ProcessDir::new().unwrap(),
        Mutex::new(()),
    )
});

fn shared_data() -> (PathBuf, MutexGuard<'static, ()>) {
    let guard = DATA.1.lock().unwrap_or_else(|e| e.into_inner());
    (DATA.0.path().join("data"), guard)
}

fn repository_corpus() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../corpus")
}

fn call(command: String) -> Step {
    Step::ToolCall {
        command,
        text: None,
        id: None,
        raw_arguments: None,
        usage: None,
    }
}

/// The commands that write every file of `dir` under `src/` with a here-document, as an agent
/// would, then build and submit.
fn writing_steps(dir: &Path) -> Vec<Step> {
    let mut steps = Vec::new();
    let mut files: Vec<PathBuf> = walk(dir);
    files.sort();
    for file in files {
        let rel = file
            .strip_prefix(dir)
            .unwrap()
            .to_string_lossy()
            .into_owned();
        let text = std::fs::read_to_string(&file).unwrap();
        assert!(!text.contains("FAULTLINE_EOF"));
        steps.push(call(format!(
            "mkdir -p \"$(dirname src/{rel})\" && cat > src/{rel} <<'FAULTLINE_EOF'\n{text}FAULTLINE_EOF"
        )));
    }
    steps.push(call("cargo build --offline 2>&1 | tail -3".into()));
    steps.push(call("echo FAULTLINE_SUBMIT".into()));
    steps
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(walk(&path));
        } else {
            out.push(path);
        }
    }
    out
}

/// `faultline run` of `agents` on the build track's raft-kv task under the `task` aid, into `run`
/// with the shared data directory, its model `server`; the run's records.
fn run_raft_kv<const N: usize>(
    run: &Path,
    server: &ScriptedServer,
    agents: [String; N],
) -> Vec<faultline_schema::ResultRecord> {
    let (data, _one_at_a_time) = shared_data();
    let out = faultline_on(&repository_corpus(), &data)
        .args(["run", "--tracks", "build", "--conditions", "task"])
        .args(["--build-schedules", SCHEDULES])
        .args(agents)
        .args(["--base-url", &server.openai_base_url(), "--cost", "0"])
        .args(["--attempts", "1", "--workers", "1"])
        .args(["--tasks", "raft-kv"])
        .arg("--out")
        .arg(run)
        .env_remove("FAULTLINE_MODEL")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    records(run)
}

#[test]
fn an_agent_that_writes_the_reference_passes_and_the_skeleton_fails() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let corpus = repository_corpus();
    let steps = writing_steps(&corpus.join("build/raft-kv/reference/src"));
    let server = runtime
        .block_on(ScriptedServer::start(Script::new(steps)))
        .unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    let agents = [
        "--agent",
        "baseline:null",
        "--agent",
        "model:scripted-model",
    ];
    let recorded = run_raft_kv(&run, &server, agents.map(String::from));
    assert_eq!(recorded.len(), 2, "{recorded:?}");
    for r in &recorded {
        assert_eq!(r.track, Track::Build);
        assert_eq!(r.case_id, "raft-kv");
        assert_eq!(r.condition.as_str(), "task");
        let build = r.build.as_ref().expect("build scores");
        assert_eq!(build.total, 3);
    }
    let agent = recorded
        .iter()
        .find(|r| r.agent == "scripted-model")
        .expect("the model agent's record");
    assert_eq!(agent.outcome, Outcome::Pass, "{agent:?}");
    assert_eq!(agent.score, Some(1.0));
    let null = recorded.iter().find(|r| r.agent == "null").unwrap();
    assert_eq!(null.outcome, Outcome::FailOracle);
    assert_eq!(null.score, Some(0.0));
    assert_eq!(
        null.build.as_ref().unwrap().failures.get("liveness"),
        Some(&3),
        "the skeleton answers nothing"
    );
    // The agent's submission is its sources only, as a patch of the skeleton.
    let patch =
        std::fs::read_to_string(run.join("trials/scripted-model/raft-kv/build/task/1/patch.diff"))
            .unwrap();
    assert!(patch.contains("+++ b/src/lib.rs"), "{patch}");
    assert!(!patch.contains("Cargo.toml") && !patch.contains("target/"));
    let report = std::fs::read_to_string(
        run.join("trials/scripted-model/raft-kv/build/task/1/build-report.json"),
    )
    .unwrap();
    assert!(report.contains("\"share_passed\": 1.0"), "{report}");
    // The report carries the track: a build cell per agent, with the share passed, and the
    // skeleton's failures matched against the catalogue.
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("report.json")).unwrap()).unwrap();
    let cells = report["build"].as_array().expect("build cells");
    assert_eq!(cells.len(), 2, "{cells:?}");
    let share = |agent: &str| {
        cells
            .iter()
            .find(|c| c["agent"] == agent)
            .and_then(|c| c["mean_share"].as_f64())
    };
    assert_eq!(share("scripted-model"), Some(1.0));
    assert_eq!(share("null"), Some(0.0));
    let html = std::fs::read_to_string(run.join("report.html")).unwrap();
    assert!(html.contains("Build track: what survived each aid"));
}

/// What the external agent below records of its surroundings, into a file its submission carries:
/// who it runs as, what the harness's view holds and whether it can write there, whether a file
/// of the host's (the test's own temporary directory) is in reach, and its model's answer through
/// the gateway.
const PROBE: &str = r#"sh -c '
{
  echo "crates: $(ls /harness/crates | tr "\n" " ")"
  if touch /harness/planted 2>/dev/null; then echo "harness: writable"; else echo "harness: read-only"; fi
  if cat "$HOST_FILE" 2>/dev/null; then echo "host: read"; else echo "host: out of reach"; fi
  if [ -e /harness/corpus ]; then echo "corpus: present"; else echo "corpus: absent"; fi
  python3 -c "
import json, os, urllib.request
req = urllib.request.Request(os.environ[\"OPENAI_BASE_URL\"] + \"/chat/completions\",
    json.dumps({\"model\": \"m\", \"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]}).encode(),
    {\"Authorization\": \"Bearer \" + os.environ[\"OPENAI_API_KEY\"], \"Content-Type\": \"application/json\"})
print(\"model: \" + json.load(urllib.request.urlopen(req))[\"choices\"][0][\"message\"][\"content\"])
"
} > src/probe.txt 2>&1
'"#;

#[test]
fn an_external_agent_builds_in_the_sandbox_over_the_aids_view_only() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let server = runtime
        .block_on(ScriptedServer::start(Script::new(vec![Step::Text {
            text: "looked".into(),
            truncated: false,
            usage: None,
        }])))
        .unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let host_file = tmp.path().join("host-secret.txt");
    std::fs::write(&host_file, "host secret\n").unwrap();
    let run = tmp.path().join("run");
    let agent = PROBE.replace("$HOST_FILE", &host_file.to_string_lossy());
    let agents = [
        "--agent".to_string(),
        format!("external:probe={agent}"),
        "--model".to_string(),
        "scripted-model".to_string(),
    ];
    let recorded = run_raft_kv(&run, &server, agents);
    assert_eq!(recorded.len(), 1, "{recorded:?}");
    let record = &recorded[0];
    assert_eq!(record.track, Track::Build);
    assert_eq!(
        record.outcome,
        Outcome::FailOracle,
        "the skeleton it left fails"
    );
    assert_eq!(record.build.as_ref().map(|b| b.total), Some(3));
    let trial = run.join("trials").join(&record.trial_id);
    let patch = std::fs::read_to_string(trial.join("patch.diff")).unwrap();
    let probe: Vec<&str> = patch
        .lines()
        .filter_map(|l| l.strip_prefix('+'))
        .filter(|l| !l.starts_with("++"))
        .collect();
    assert_eq!(
        probe,
        [
            "crates: faultline-linearize faultline-sim ",
            "harness: read-only",
            "host: out of reach",
            "corpus: absent",
            "model: looked",
        ],
        "{patch}"
    );
    let trajectory: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(trial.join("trajectory.json")).unwrap())
            .unwrap();
    assert_eq!(trajectory["agent"]["settings"]["sandboxed"], true);
    assert_eq!(
        trajectory["totals"]["steps"], 1,
        "the gateway metered the call"
    );
    assert_eq!(server.requests().len(), 1);
}
