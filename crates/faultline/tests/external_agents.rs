//! External agents through the real binary: sandboxed by default, their model reached through
//! the trial's gateway (metered into the trajectory), and run on the host only when asked, which
//! the lock, every grade and the report then say makes the scores not comparable. Real sandbox,
//! real builds of the fixture crate, a scripted model server on loopback.

mod common;

use common::{faultline, records};
use faultline_scripted::{Script, ScriptedServer, Step, StepUsage};
use serde_json::Value;
use std::path::Path;
use std::process::Output;

/// One model call through the gateway with Python's standard library, then an empty diagnosis.
const AGENT: &str = r#"python3 -c '
import json, os, urllib.request
req = urllib.request.Request(os.environ["OPENAI_BASE_URL"] + "/chat/completions",
    json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]}).encode(),
    {"Authorization": "Bearer " + os.environ["OPENAI_API_KEY"], "Content-Type": "application/json"})
print(json.load(urllib.request.urlopen(req))["choices"][0]["message"]["content"])
open(os.environ["FAULTLINE_OUTPUT_DIR"] + "/diagnosis.json", "w").write("{\"schema_version\":1,\"blocks\":[]}")
'"#;

fn run(data: &Path, out: &Path, base_url: &str, more: &[&str]) -> Output {
    faultline(data)
        .args(["run", "toy-double-merge", "--agent"])
        .arg(format!("external:py={AGENT}"))
        .args([
            "--model",
            "scripted-model",
            "--base-url",
            base_url,
            "--cost",
            "0",
        ])
        .args(["--tracks", "diagnose", "--conditions", "symptom"])
        .args(["--attempts", "1"])
        .args(more)
        .arg("--out")
        .arg(out)
        .env_remove("FAULTLINE_MODEL")
        .output()
        .unwrap()
}

fn json(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn agent_sandbox_records(v: &Value) -> Vec<Value> {
    v["protections"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["name"] == "agent sandbox")
        .cloned()
        .collect()
}

#[test]
fn an_external_agent_is_sandboxed_and_metered_and_on_the_host_only_when_asked() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let reply = || Step::Text {
        text: "looked".into(),
        truncated: false,
        usage: Some(StepUsage {
            input: 40,
            output: 2,
            ..StepUsage::default()
        }),
    };
    let server = runtime
        .block_on(ScriptedServer::start(Script::new(vec![reply(), reply()])))
        .unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");

    let sandboxed = tmp.path().join("sandboxed");
    let out = run(&data, &sandboxed, &server.openai_base_url(), &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let recorded = records(&sandboxed);
    assert_eq!(recorded.len(), 1, "{err}");
    let trial = sandboxed.join("trials").join(&recorded[0].trial_id);
    let trajectory = json(&trial.join("trajectory.json"));
    assert_eq!(trajectory["exit_status"], "submitted", "{err}");
    assert_eq!(trajectory["agent"]["settings"]["sandboxed"], true);
    assert_eq!(trajectory["totals"]["steps"], 1);
    assert_eq!(trajectory["totals"]["tokens"]["input"], 40);
    assert!(agent_sandbox_records(&json(&sandboxed.join("lock.json"))).is_empty());
    assert!(agent_sandbox_records(&json(&trial.join("grade.json"))).is_empty());

    let on_host = tmp.path().join("on-host");
    let out = run(
        &data,
        &on_host,
        &server.openai_base_url(),
        &["--agents-on-host"],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let recorded = records(&on_host);
    let trial = on_host.join("trials").join(&recorded[0].trial_id);
    for file in [on_host.join("lock.json"), trial.join("grade.json")] {
        let found = agent_sandbox_records(&json(&file));
        assert_eq!(found.len(), 1, "{}", file.display());
        assert_eq!(found[0]["state"], "off");
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    let shown = format!("{stdout}{err}");
    assert!(shown.contains("not comparable"), "{shown}");
    assert_eq!(server.requests().len(), 2);
}

mod needs_pypi {
    use super::common::{faultline, records};
    use faultline_agent::scaffolds::mini_swe_agent;
    use faultline_schema::Outcome;
    use std::path::PathBuf;
    use std::process::Command;

    /// A `preds.json` written by mini-swe-agent's own SWE-bench runner code is imported as it is.
    #[test]
    fn mini_swe_agents_preds_json_is_imported() {
        let root = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("pypi");
        let dir = mini_swe_agent::PACKAGE
            .install(&root)
            .expect("installing mini-swe-agent from PyPI");
        let tmp = tempfile::tempdir().unwrap();
        let preds = tmp.path().join("preds.json");
        let gold = faultline_testkit::fixture_gold();
        let write = Command::new(dir.join("venv/bin/python"))
            .args([
                "-c",
                "import sys; from pathlib import Path\n\
                 from minisweagent.run.benchmarks.swebench import update_preds_file\n\
                 update_preds_file(Path(sys.argv[1]), 'toy-double-merge', 'mini-gold', sys.argv[2])",
            ])
            .arg(&preds)
            .arg(&gold)
            .env("MSWEA_SILENT_STARTUP", "1")
            .output()
            .unwrap();
        assert!(
            write.status.success(),
            "{}",
            String::from_utf8_lossy(&write.stderr)
        );
        let run = tmp.path().join("run");
        let out = faultline(&tmp.path().join("data"))
            .arg("import")
            .arg(&preds)
            .arg("--out")
            .arg(&run)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let recorded = records(&run);
        assert_eq!(recorded.len(), 1);
        assert_eq!(recorded[0].agent, "mini-gold");
        assert_eq!(recorded[0].outcome, Outcome::Pass);
    }
}
