//! A model API that fails for good, through the real binary against a scripted model server on
//! loopback: the trial is an unscored `infra_error`, the run says so and exits with status 2, and
//! `--retry-infra` then completes the trial; a server that refuses tool definitions stops the run
//! at its first trial. Real sandbox, real builds of the fixture crate.

mod common;

use common::{faultline, records};
use faultline_schema::Outcome;
use faultline_scripted::{Script, ScriptedServer, Step};
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Output;

fn run_once(data: &Path, run: &Path, base_url: &str, more: &[&str]) -> Output {
    faultline(data)
        .args(["run", "toy-double-merge", "--model", "scripted-model"])
        .args(["--base-url", base_url, "--cost", "0", "--max-retries", "1"])
        .args(["--tracks", "diagnose"])
        .args(["--attempts", "1"])
        .args(more)
        .arg("--out")
        .arg(run)
        .env_remove("FAULTLINE_MODEL")
        .output()
        .unwrap()
}

#[test]
fn an_outage_is_an_infra_error_that_retry_infra_redoes() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let outage = || Step::Error {
        status: 503,
        message: Some("no replica available".into()),
        retry_after: None,
        retry_after_ms: None,
        headers: BTreeMap::new(),
    };
    // Two 503s use up the first attempt and its one retry; the model then answers the redo.
    let script = Script::new(vec![
        outage(),
        outage(),
        Step::ToolCall {
            command: "echo FAULTLINE_SUBMIT".into(),
            text: None,
            id: None,
            raw_arguments: None,
            usage: None,
        },
    ]);
    let server = runtime.block_on(ScriptedServer::start(script)).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let (data, run) = (tmp.path().join("data"), tmp.path().join("run"));

    let symptom = ["--conditions", "symptom"];
    let first = run_once(&data, &run, &server.openai_base_url(), &symptom);
    let err = String::from_utf8_lossy(&first.stderr);
    assert_eq!(first.status.code(), Some(2), "{err}");
    assert!(err.contains("--retry-infra"), "{err}");
    let recorded = records(&run);
    assert_eq!(recorded.len(), 1);
    assert_eq!(recorded[0].outcome, Outcome::InfraError);
    assert_eq!(recorded[0].score, None, "an outage must not be scored");
    assert_eq!(server.requests().len(), 2);

    let plain = run_once(&data, &run, &server.openai_base_url(), &symptom);
    assert_eq!(
        plain.status.code(),
        Some(2),
        "a resumed run keeps the error"
    );
    assert_eq!(
        server.requests().len(),
        2,
        "a resume without --retry-infra redid the trial"
    );

    let redo = run_once(
        &data,
        &run,
        &server.openai_base_url(),
        &["--conditions", "symptom", "--retry-infra"],
    );
    let err = String::from_utf8_lossy(&redo.stderr);
    assert!(redo.status.success(), "{err}");
    let last = records(&run).pop().unwrap();
    assert_ne!(last.outcome, Outcome::InfraError, "{last:?}");
    assert_eq!(
        last.score,
        Some(0.0),
        "an empty diagnosis scores 0: {last:?}"
    );
    assert_eq!(server.requests().len(), 3);
}

#[test]
fn an_unset_key_variable_stops_the_run_before_it_starts() {
    let tmp = tempfile::tempdir().unwrap();
    let out = faultline(&tmp.path().join("data"))
        .args(["run", "toy-double-merge", "--model", "m"])
        .args(["--base-url", "http://127.0.0.1:9/v1"])
        .args(["--api-key-env", "FAULTLINE_TEST_NO_SUCH_KEY"])
        .arg("--out")
        .arg(tmp.path().join("run"))
        .env_remove("FAULTLINE_TEST_NO_SUCH_KEY")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("FAULTLINE_TEST_NO_SUCH_KEY") && err.contains("not set"),
        "{err}"
    );
    assert!(!tmp.path().join("run").join("results.jsonl").exists());
}

#[test]
fn a_server_that_refuses_tools_stops_the_run_at_its_first_trial() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let refusal = Step::Error {
        status: 400,
        message: Some("tool calls need the server started with a tool call parser".into()),
        retry_after: None,
        retry_after_ms: None,
        headers: BTreeMap::new(),
    };
    let server = runtime
        .block_on(ScriptedServer::start(Script::new(vec![refusal])))
        .unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    let out = run_once(
        &tmp.path().join("data"),
        &run,
        &server.openai_base_url(),
        &["--conditions", "symptom,context", "--workers", "1"],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("--text-mode"), "{err}");
    assert_eq!(
        server.requests().len(),
        1,
        "a second trial asked the server again"
    );
    let recorded = records(&run);
    assert_eq!(recorded.len(), 1);
    assert_eq!(recorded[0].outcome, Outcome::InfraError);
}
