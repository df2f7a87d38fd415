//! The built-in agent against a scripted model server (a real HTTP server speaking the real wire
//! formats) on a real prepared case: the fixture crate, in a real sandbox.

mod common;

use common::{MODEL, api_error, fixture, run, run_repair, tool};
use faultline_agent::{BuiltinAgent, EnvError, Templates, TrialEnv};
use faultline_corpus::manifest::Kind;
use faultline_model::{ModelClient, ModelConfig, Protocol};
use faultline_schema::trajectory::LimitKind;
use faultline_schema::{
    ActionKind, Condition, ExitStatus, Limits, Submission, Task, Track, Trajectory,
};
use faultline_scripted::{Script, ScriptedServer, Step};
use std::time::Duration;

#[tokio::test]
async fn a_scripted_model_reads_edits_builds_tests_and_submits_a_repair() {
    let dir = tempfile::tempdir().unwrap();
    let traj_path = dir.path().join("trajectory.json");
    let script = vec![
        tool("cat src/lib.rs", 1000, 50),
        tool("grep -n 'fn merge' src/lib.rs", 1200, 40),
        tool(
            "sed -i 's/\\*mine += \\*count;/*mine = (*mine).max(*count);/' src/lib.rs",
            1400,
            60,
        ),
        tool("cargo build 2>&1 | tail -3", 1500, 20),
        tool("cargo test 2>&1 | grep 'test result'", 1600, 20),
        tool("echo FAULTLINE_SUBMIT", 1700, 10),
    ];
    let (result, server) = run(
        script,
        Protocol::OpenAiChat,
        true,
        Track::Repair,
        Limits {
            cost_usd: None,
            ..Limits::default()
        },
        Some(&traj_path),
    )
    .await;
    let t = &result.trajectory;
    assert_eq!(t.exit_status, ExitStatus::Submitted, "{:?}", t.error);
    let Submission::Patch(patch) = &result.submission else {
        panic!("expected a patch, got {:?}", result.submission);
    };
    assert!(
        patch.contains("+            *mine = (*mine).max(*count);"),
        "{patch}"
    );
    assert!(patch.contains("-            *mine += *count;"), "{patch}");

    let kinds: Vec<ActionKind> = t
        .steps
        .iter()
        .map(|s| s.action.as_ref().unwrap().kind)
        .collect();
    use ActionKind::*;
    assert_eq!(kinds, [Read, Search, Edit, Build, Test, Submit]);
    assert_eq!(t.totals.steps, 6);
    assert_eq!(t.totals.steps_to_first_edit, Some(3));
    assert_eq!(t.totals.tokens.input, 8400);
    assert_eq!(t.totals.tokens.output, 200);
    let cost = t.totals.cost_usd.unwrap();
    assert!(
        (cost - (8400.0 * 1000.0 + 200.0 * 2000.0) / 1e6).abs() < 1e-9,
        "{cost}"
    );
    let test_output = &t.steps[4].action.as_ref().unwrap().output;
    assert!(test_output.contains("test result: ok"), "{test_output}");
    assert!(t.steps[2].diff.is_some() && t.steps[3].diff.is_none());

    let on_disk: Trajectory = faultline_schema::io::read_json(&traj_path, "trajectory").unwrap();
    assert_eq!(on_disk.steps.len(), 6);
    assert_eq!(on_disk.exit_status, ExitStatus::Submitted);
    assert_eq!(on_disk.messages, result.trajectory.messages);
    let requests = server.requests();
    assert_eq!(requests.len(), 6);
    let first = requests[0].body.to_string();
    assert!(
        first.contains("node") || first.contains("Replica state"),
        "bundle missing"
    );
    assert!(requests[5].body.to_string().contains("exit code: 0"));
}

#[tokio::test]
async fn the_text_fallback_submits_a_diagnosis_over_the_anthropic_protocol() {
    let diagnosis =
        r#"{"schema_version":1,"blocks":[{"file":"src/lib.rs","start_line":24,"end_line":27}]}"#;
    let script = vec![
        Step::text("Let me look.\n```bash\nnl -ba src/lib.rs | sed -n '20,30p'\n```"),
        Step::text(format!(
            "Found it.\n```bash\ncat > diagnosis.json <<'EOF'\n{diagnosis}\nEOF\n```"
        )),
        Step::text("```bash\necho FAULTLINE_SUBMIT && cat diagnosis.json\n```"),
    ];
    let (result, _server) = run(
        script,
        Protocol::AnthropicMessages,
        false,
        Track::Diagnose,
        Limits::default(),
        None,
    )
    .await;
    assert_eq!(result.trajectory.exit_status, ExitStatus::Submitted);
    assert_eq!(
        result.submission,
        Submission::Diagnosis(format!("{diagnosis}\n"))
    );
    // Replies without usage have an unknown cost, never a cost of zero.
    assert_eq!(result.trajectory.totals.cost_usd, None);
    assert_eq!(result.trajectory.totals.calls_without_usage, 3);
}

#[tokio::test]
async fn the_step_limit_ends_a_trial() {
    let script = (0..5).map(|_| tool("ls", 10, 1)).collect();
    let limits = Limits {
        steps: 2,
        ..Limits::default()
    };
    let (result, server) = run(
        script,
        Protocol::OpenAiChat,
        true,
        Track::Repair,
        limits,
        None,
    )
    .await;
    let t = &result.trajectory;
    assert_eq!(t.exit_status, ExitStatus::StepLimit);
    assert_eq!(t.limit_fired.as_ref().unwrap().limit, LimitKind::Steps);
    assert_eq!(t.totals.steps, 2);
    assert_eq!(server.requests().len(), 2);
    assert_eq!(result.submission, Submission::None);
}

#[tokio::test]
async fn the_cost_limit_ends_a_trial() {
    let script = (0..5).map(|_| tool("ls", 10_000, 100)).collect();
    let limits = Limits {
        cost_usd: Some(15.0),
        ..Limits::default()
    };
    let (result, _server) = run(
        script,
        Protocol::OpenAiChat,
        true,
        Track::Repair,
        limits,
        None,
    )
    .await;
    let t = &result.trajectory;
    assert_eq!(t.exit_status, ExitStatus::CostLimit);
    assert_eq!(t.totals.steps, 2, "10.2 dollars per call, limit 15");
}

#[tokio::test]
async fn the_token_limit_ends_a_trial() {
    let script = (0..5).map(|_| tool("ls", 80, 30)).collect();
    let limits = Limits {
        tokens: Some(200),
        ..Limits::default()
    };
    let (result, _server) = run(
        script,
        Protocol::OpenAiChat,
        true,
        Track::Repair,
        limits,
        None,
    )
    .await;
    assert_eq!(result.trajectory.exit_status, ExitStatus::TokenLimit);
    assert_eq!(result.trajectory.totals.steps, 2);
}

#[tokio::test]
async fn the_wall_time_limit_ends_a_hanging_trial() {
    let script = vec![tool("ls", 1, 1), Step::Hang {}];
    let limits = Limits {
        wall_secs: 3,
        ..Limits::default()
    };
    let started = std::time::Instant::now();
    let (result, _server) = run(
        script,
        Protocol::OpenAiChat,
        true,
        Track::Repair,
        limits,
        None,
    )
    .await;
    assert_eq!(result.trajectory.exit_status, ExitStatus::WallTimeLimit);
    let fired = result.trajectory.limit_fired.as_ref().unwrap();
    assert_eq!((fired.limit, fired.value), (LimitKind::WallSecs, 3.0));
    assert!(started.elapsed() < Duration::from_secs(15));
}

#[tokio::test]
async fn three_unparseable_replies_end_a_trial() {
    let script = vec![
        Step::text("I believe the bug is in merge."),
        Step::text("```bash\nls\n```\nand also\n```bash\npwd\n```"),
        Step::text("Still thinking."),
        tool("ls", 1, 1),
    ];
    let (result, server) = run(
        script,
        Protocol::OpenAiChat,
        false,
        Track::Repair,
        Limits::default(),
        None,
    )
    .await;
    let t = &result.trajectory;
    assert_eq!(t.exit_status, ExitStatus::FormatErrors);
    assert_eq!(t.totals.steps, 3);
    assert!(t.steps.iter().all(|s| s.format_error.is_some()));
    assert!(
        server.requests()[1]
            .body
            .to_string()
            .contains("No command found")
    );
}

#[tokio::test]
async fn a_non_retryable_api_error_is_a_model_error() {
    let (result, server) = run_repair(vec![api_error(401, "invalid key")]).await;
    assert_eq!(result.trajectory.exit_status, ExitStatus::ModelError);
    assert!(result.trajectory.error.as_deref().unwrap().contains("auth"));
    // A refused key is the run's configuration, not the agent's doing.
    assert!(result.infra_failure.is_some());
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn a_command_that_never_ends_is_killed_and_the_trial_goes_on() {
    let script = vec![tool("sleep 600", 1, 1), tool("echo FAULTLINE_SUBMIT", 1, 1)];
    let limits = Limits {
        command_timeout_secs: 1,
        ..Limits::default()
    };
    let (result, _server) = run(
        script,
        Protocol::OpenAiChat,
        true,
        Track::Repair,
        limits,
        None,
    )
    .await;
    let t = &result.trajectory;
    assert_eq!(t.exit_status, ExitStatus::Submitted);
    let first = t.steps[0].action.as_ref().unwrap();
    assert!(first.timed_out);
    assert!(first.output.contains("killed after 1 seconds"));
    assert_eq!(result.submission, Submission::Patch(String::new()));
}

#[tokio::test]
async fn a_reproducer_is_written_run_and_submitted() {
    let test = "#[test]\nfn double_merge() {\n    let mut a = toy_counter::GCounter::new();\n    a.increment(1, 3);\n    let mut b = toy_counter::GCounter::new();\n    b.merge(&a);\n    b.merge(&a);\n    assert_eq!(b.value(), 3);\n}\n";
    let script = vec![
        tool(
            &format!("cat > tests/faultline_repro.rs <<'EOF'\n{test}EOF"),
            1,
            1,
        ),
        tool(
            "cargo test --test faultline_repro 2>&1 | grep -E 'test result|panicked'",
            1,
            1,
        ),
        tool(
            "echo FAULTLINE_SUBMIT && cat tests/faultline_repro.rs",
            1,
            1,
        ),
    ];
    let (result, _server) = run(
        script,
        Protocol::OpenAiChat,
        true,
        Track::Reproduce,
        Limits::default(),
        None,
    )
    .await;
    let t = &result.trajectory;
    assert_eq!(t.exit_status, ExitStatus::Submitted, "{:?}", t.error);
    let ran = &t.steps[1].action.as_ref().unwrap().output;
    assert!(ran.contains("test result: FAILED"), "{ran}");
    assert_eq!(result.submission, Submission::Reproducer(test.to_string()));
    assert_eq!(
        t.totals.steps_to_first_edit,
        Some(1),
        "the stub installed by the harness is not an edit"
    );
}

#[tokio::test]
async fn trajectories_export_to_mini_swe_agent_and_atif() {
    let script = vec![
        tool("ls src", 100, 10),
        tool("echo FAULTLINE_SUBMIT", 120, 5),
    ];
    let (result, _server) = run(
        script,
        Protocol::OpenAiChat,
        true,
        Track::Repair,
        Limits {
            cost_usd: None,
            ..Limits::default()
        },
        None,
    )
    .await;
    let t = &result.trajectory;
    let mini = faultline_agent::export::to_mini_swe_agent(t, Some(""));
    assert_eq!(mini["trajectory_format"], "mini-swe-agent-1.1");
    assert_eq!(mini["info"]["exit_status"], "Submitted");
    assert_eq!(mini["info"]["model_stats"]["api_calls"], 2);
    assert_eq!(
        mini["info"]["model_stats"]["instance_cost"],
        t.totals.cost_usd.unwrap()
    );
    assert!(mini["info"]["model_stats"].get("cost_unknown").is_none());
    // Unpriced, the cost is still a number, with a note that it is not the cost.
    let mut unpriced = t.clone();
    unpriced.totals.cost_usd = None;
    let mini_unpriced = faultline_agent::export::to_mini_swe_agent(&unpriced, None);
    assert_eq!(mini_unpriced["info"]["model_stats"]["instance_cost"], 0.0);
    assert_eq!(mini_unpriced["info"]["model_stats"]["cost_unknown"], true);
    let messages = mini["messages"].as_array().unwrap();
    assert_eq!(messages.len(), t.messages.len() + 1);
    assert_eq!(messages.last().unwrap()["role"], "exit");
    assert_eq!(
        messages.last().unwrap()["extra"]["exit_status"],
        "Submitted"
    );
    let first_call = messages.iter().find(|m| m["role"] == "assistant").unwrap();
    assert_eq!(first_call["extra"]["actions"][0]["command"], "ls src");
    assert!(first_call["extra"]["timestamp"].as_f64().unwrap() > 1.7e9);
    let result = messages.iter().find(|m| m["role"] == "tool").unwrap();
    assert_eq!(result["extra"]["returncode"], 0);
    assert!(
        result["extra"]["raw_output"]
            .as_str()
            .unwrap()
            .contains("lib.rs")
    );
    let atif = faultline_agent::export::to_atif(t);
    assert_eq!(atif["schema_version"], "ATIF-v1.7");
    let steps = atif["steps"].as_array().unwrap();
    assert_eq!(steps.len(), 4);
    let ids: Vec<u64> = steps
        .iter()
        .map(|s| s["step_id"].as_u64().unwrap())
        .collect();
    assert_eq!(ids, [1, 2, 3, 4]);
    assert_eq!(steps[2]["tool_calls"][0]["arguments"]["command"], "ls src");
    assert_eq!(steps[2]["metrics"]["prompt_tokens"], 100);
    assert_eq!(atif["final_metrics"]["total_prompt_tokens"], 220);
    assert_eq!(atif["final_metrics"]["total_steps"], 4);
    assert_eq!(atif["final_metrics"]["extra"]["model_calls"], 2);
}

async fn external(
    command: &str,
    track: Track,
    wall_secs: u64,
) -> (faultline_agent::TrialResult, tempfile::TempDir) {
    let f = fixture().await;
    let limits = Limits {
        wall_secs,
        ..Limits::default()
    };
    let task = common::task(f, track, limits);
    let env = TrialEnv::create(
        &f.case,
        &f.prepared,
        task,
        f.case.bundle.clone(),
        &f.data,
        &f.toolchain,
    )
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let agent = faultline_agent::ExternalAgent {
        name: "script".into(),
        command: command.into(),
        model: None,
        mounts: Vec::new(),
        on_host: false,
        scaffold: Default::default(),
    };
    let trial = faultline_schema::RunDir::new(dir.path()).trial("t");
    let r = agent.run(&env, &trial, None).await.unwrap();
    (r, dir)
}

#[tokio::test]
async fn an_external_agent_gets_the_task_and_submits() {
    let cmd = r#"test -f "$FAULTLINE_TASK_DIR/context/state.md" && grep -q merge "$FAULTLINE_WORKSPACE/src/lib.rs" && echo '{"schema_version":1,"blocks":[]}' > "$FAULTLINE_OUTPUT_DIR/diagnosis.json" && echo '{"anything": 1}' > "$FAULTLINE_OUTPUT_DIR/trajectory.json""#;
    let (r, dir) = external(cmd, Track::Diagnose, 60).await;
    assert_eq!(
        r.trajectory.exit_status,
        ExitStatus::Submitted,
        "{:?}",
        r.trajectory.error
    );
    assert!(matches!(r.submission, Submission::Diagnosis(ref d) if d.contains("blocks")));
    assert!(dir.path().join("trials/t/agent-trajectory.json").is_file());
    assert!(dir.path().join("trials/t/task/task.json").is_file());

    let repair = r#"sed -i 's/\*mine += \*count;/*mine = (*mine).max(*count);/' "$FAULTLINE_WORKSPACE/src/lib.rs""#;
    let (r, _dir) = external(repair, Track::Repair, 60).await;
    assert!(matches!(r.submission, Submission::Patch(ref p) if p.contains("max(*count)")));

    let (r, _dir) = external("exit 3", Track::Diagnose, 60).await;
    assert_eq!(r.trajectory.exit_status, ExitStatus::AgentError);
    assert!(
        r.trajectory
            .error
            .as_deref()
            .unwrap()
            .contains("exit status: 3")
    );

    let started = std::time::Instant::now();
    let (r, _dir) = external("sleep 300 & sleep 300; wait", Track::Diagnose, 1).await;
    assert_eq!(r.trajectory.exit_status, ExitStatus::WallTimeLimit);
    assert!(started.elapsed() < Duration::from_secs(20));
}

#[tokio::test]
async fn nothing_in_the_sandbox_names_the_case() {
    let script = vec![
        tool(
            "cat /proc/self/mountinfo; env; ls -la / /workspace /vendor | head -100",
            1,
            1,
        ),
        tool("echo FAULTLINE_SUBMIT", 1, 1),
    ];
    let (result, _server) = run_repair(script).await;
    let seen = &result.trajectory.steps[0].action.as_ref().unwrap().output;
    assert!(seen.contains("/workspace"), "{seen}");
    assert!(
        !seen.contains("toy-agent"),
        "the case id leaks into the sandbox:\n{seen}"
    );
}

#[tokio::test]
async fn a_sandbox_that_cannot_start_is_a_sandbox_error() {
    let f = fixture().await;
    let server = ScriptedServer::start(Script::new(vec![tool("ls", 1, 1)]))
        .await
        .unwrap();
    let config =
        ModelConfig::new(Protocol::OpenAiChat, MODEL).with_base_url(server.openai_base_url());
    let agent = BuiltinAgent {
        client: ModelClient::new(config).unwrap(),
        pricing: None,
        templates: Templates::default(),
        tool_mode: true,
        max_output_tokens: 64,
        temperature: None,
        model_permits: None,
    };
    let task = Task {
        schema_version: 1,
        trial_id: "x/repair/symptom/1".into(),
        case_id: f.case.id().into(),
        track: Track::Repair,
        condition: Condition::symptom(),
        attempt: 1,
        seed: 1,
        crate_name: "toy-counter".into(),
        bundle_files: vec![],
        limits: Limits::default(),
    };
    let mut env = TrialEnv::create(
        &f.case,
        &f.prepared,
        task,
        Vec::new(),
        &f.data,
        &f.toolchain,
    )
    .unwrap();
    // A directory the sandbox mounts vanishes before the first command (an operator's mistake,
    // a cleaner deleting scratch files).
    let doomed = tempfile::tempdir().unwrap();
    let spec = env
        .sandbox
        .spec()
        .clone()
        .mount(faultline_sandbox::Mount::ro(doomed.path(), "/extra"));
    env.sandbox = faultline_sandbox::Sandbox::new(spec).unwrap();
    drop(doomed);
    let result = agent.run(&env, None).await;
    let t = match result {
        Ok(r) => r.trajectory,
        Err(e) => panic!("the harness itself failed: {e:#}"),
    };
    assert_eq!(t.exit_status, ExitStatus::SandboxError, "{:?}", t.error);
}

/// Whose failure it is when a trial's environment cannot be made decides what the runner does
/// with it: the harness's own (its scratch space is not a directory) ends the run; the
/// environment's (an agent template that differs from its manifest) is the trial's
/// infrastructure error.
#[tokio::test]
async fn an_environment_that_cannot_be_made_says_whose_failure_it_is() {
    let f = fixture().await;
    let tmp = tempfile::tempdir().unwrap();
    let not_a_directory = tmp.path().join("file");
    std::fs::write(&not_a_directory, "").unwrap();
    let no_scratch = faultline_corpus::DataDir::new(not_a_directory);
    let task = || common::task(f, Track::Repair, Limits::default());
    match TrialEnv::create(
        &f.case,
        &f.prepared,
        task(),
        Vec::new(),
        &no_scratch,
        &f.toolchain,
    ) {
        Err(EnvError::Harness(_)) => {}
        other => panic!("expected the harness's failure, got {other:?}"),
    }
    // The shared template stays intact: its manifest, in a copy, records one file another size.
    let mut damaged = f.prepared.clone();
    let mut manifest = (*damaged.manifest).clone();
    for entries in manifest.dirs.values_mut() {
        if let Some(file) = entries.values_mut().find(|e| e.kind == Kind::File) {
            file.size += 1;
        }
    }
    damaged.manifest = std::sync::Arc::new(manifest);
    match TrialEnv::create(&f.case, &damaged, task(), Vec::new(), &f.data, &f.toolchain) {
        Err(EnvError::Unavailable(e)) => {
            assert!(
                format!("{e:#}").contains("differs from what was prepared"),
                "{e:#}"
            );
        }
        other => panic!("expected an unavailable environment, got {other:?}"),
    }
}

/// An agent written the way scaffolds are: an OpenAI client reading its base URL and key from the
/// environment, calling until it is told no (one call after another, or `at-once`), then writing
/// a diagnosis. It prints what it saw.
const GATEWAY_CLIENT: &str = r#"
import json, os, sys, urllib.request, urllib.error
base, key = os.environ["OPENAI_BASE_URL"], os.environ["OPENAI_API_KEY"]
print("key-prefix", key[:9])
print("environment", json.dumps(dict(os.environ)))
for pid in os.listdir("/proc"):
    try:
        print("environ of", pid, open(f"/proc/{pid}/environ", "rb").read().decode(errors="replace"))
    except (OSError, ValueError):
        pass
def call(i):
    body = json.dumps({"model": "anything", "messages": [{"role": "user", "content": f"call {i}"}]})
    req = urllib.request.Request(base + "/chat/completions", body.encode(),
                                 {"Authorization": "Bearer " + key, "Content-Type": "application/json"})
    try:
        reply = json.load(urllib.request.urlopen(req))
        print("reply", reply["choices"][0]["message"]["content"])
    except urllib.error.HTTPError as e:
        print("refused", e.code, e.read().decode())
        sys.exit(1)
calls = range(int(sys.argv[1]))
if sys.argv[2:] == ["at-once"]:
    from concurrent.futures import ThreadPoolExecutor
    with ThreadPoolExecutor(len(calls)) as pool:
        list(pool.map(call, calls))
else:
    for i in calls:
        call(i)
out = os.environ["FAULTLINE_OUTPUT_DIR"]
open(out + "/diagnosis.json", "w").write('{"schema_version":1,"blocks":[]}')
"#;

/// The provider's key in these tests: the harness's canary where CI sets one (a value of the
/// harness's own environment), so that a key read from the harness's environment would show.
fn real_key() -> String {
    std::env::var("FAULTLINE_TEST_CANARY").unwrap_or_else(|_| "sk-real-provider-key".into())
}

async fn through_gateway(
    script: Vec<Step>,
    calls: &str,
    limits: Limits,
) -> (faultline_agent::TrialResult, String, ScriptedServer) {
    let f = fixture().await;
    let options = faultline_scripted::ServerOptions {
        require_key: Some(real_key()),
        ..Default::default()
    };
    let server = ScriptedServer::start_with(Script::new(script), options)
        .await
        .unwrap();
    let mut config =
        ModelConfig::new(Protocol::OpenAiChat, MODEL).with_base_url(server.openai_base_url());
    config.retry.max_retries = 1;
    config.retry.initial_backoff = Duration::from_millis(10);
    let client =
        ModelClient::with_resolved_api_key(config, Some(faultline_model::ApiKey::new(real_key())))
            .unwrap();
    let env = TrialEnv::create(
        &f.case,
        &f.prepared,
        common::task(f, Track::Diagnose, limits),
        f.case.bundle.clone(),
        &f.data,
        &f.toolchain,
    )
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let runtime = dir.path().join("runtime");
    std::fs::create_dir(&runtime).unwrap();
    std::fs::write(runtime.join("agent.py"), GATEWAY_CLIENT).unwrap();
    let agent = faultline_agent::ExternalAgent {
        name: "gateway-client".into(),
        command: format!("python3 /agent/agent.py {calls}"),
        model: Some(faultline_agent::GatewayModel {
            client: std::sync::Arc::new(client),
            pricing: Some(common::pricing()),
        }),
        mounts: vec![faultline_agent::AgentMount {
            host: runtime,
            guest: "/agent".into(),
        }],
        on_host: false,
        scaffold: Default::default(),
    };
    let trial = faultline_schema::RunDir::new(dir.path()).trial("t");
    let result = agent.run(&env, &trial, None).await.unwrap();
    let log = std::fs::read_to_string(trial.agent_log_path()).unwrap();
    (result, log, server)
}

#[tokio::test]
async fn an_external_agent_calls_its_model_through_the_gateway_and_each_call_is_a_step() {
    let (r, log, server) = through_gateway(
        vec![tool("ls", 1000, 100), tool("ls", 2000, 100)],
        "2",
        Limits::default(),
    )
    .await;
    assert_eq!(r.trajectory.exit_status, ExitStatus::Submitted, "{log}");
    assert!(log.contains("key-prefix fl-trial-"), "{log}");
    // The agent printed its environment and every environment it could read in /proc.
    assert!(log.contains("environment {"), "{log}");
    assert!(
        !log.contains(&real_key()),
        "the provider's key reached the agent:\n{log}"
    );
    assert_eq!(server.requests().len(), 2);
    let totals = &r.trajectory.totals;
    assert_eq!(totals.steps, 2);
    assert_eq!(totals.tokens.input, 3000);
    assert_eq!(totals.tokens.output, 200);
    // The test price is $1000/M input and $2000/M output.
    assert!((totals.cost_usd.unwrap() - 3.4).abs() < 1e-9, "{totals:?}");
    assert_eq!(r.trajectory.agent.model.as_deref(), Some(MODEL));
    assert!(
        r.trajectory
            .steps
            .iter()
            .all(|s| s.model.as_ref().unwrap().request.is_some())
    );
}

#[tokio::test]
async fn calls_an_external_agent_makes_at_once_are_each_a_step() {
    let script = vec![tool("ls", 10, 1), tool("ls", 20, 1), tool("ls", 30, 1)];
    let (r, log, server) = through_gateway(script, "3 at-once", Limits::default()).await;
    assert_eq!(r.trajectory.exit_status, ExitStatus::Submitted, "{log}");
    assert_eq!(server.requests().len(), 3);
    assert_eq!(r.trajectory.totals.steps, 3, "{log}");
    assert_eq!(r.trajectory.totals.tokens.input, 60);
}

#[tokio::test]
async fn a_limit_the_gateway_enforces_ends_an_external_trial_with_that_limit() {
    let limits = Limits {
        steps: 2,
        ..Limits::default()
    };
    let script = vec![tool("ls", 10, 1), tool("ls", 10, 1), tool("ls", 10, 1)];
    let (r, log, server) = through_gateway(script, "5", limits).await;
    assert_eq!(r.trajectory.exit_status, ExitStatus::StepLimit, "{log}");
    let fired = r.trajectory.limit_fired.as_ref().unwrap();
    assert_eq!((fired.limit, fired.value), (LimitKind::Steps, 2.0));
    assert_eq!(server.requests().len(), 2);
    assert_eq!(r.trajectory.totals.steps, 2);
    assert!(r.infra_failure.is_none());
}

#[tokio::test]
async fn an_outage_ends_an_external_trial_as_an_infrastructure_error() {
    let (r, log, _server) =
        through_gateway(vec![api_error(503, "down"); 4], "1", Limits::default()).await;
    assert_eq!(r.trajectory.exit_status, ExitStatus::ModelError, "{log}");
    let why = r
        .infra_failure
        .as_deref()
        .expect("an infrastructure failure");
    assert!(why.contains("503") || why.contains("server"), "{why}");
    assert!(matches!(r.submission, Submission::None));
}

/// An external agent runs in the sandbox: the source store (which holds the fixed crate), the
/// corpus (which holds the oracles) and the host's network are out of its reach, and what it
/// tried is in its log.
#[tokio::test]
async fn an_external_agent_cannot_read_the_answers_or_reach_the_host() {
    let f = fixture().await;
    let store = f.data.root.display().to_string();
    let corpus = std::path::absolute("../../corpus").unwrap();
    let host_service = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = host_service.local_addr().unwrap().port();
    let cmd = format!(
        "ls {store} 2>&1 | head -3; ls {} 2>&1 | head -3; \
         (exec 3<>/dev/tcp/127.0.0.1/{port}) 2>/dev/null && echo HOST-REACHED; \
         echo '{{\"schema_version\":1,\"blocks\":[]}}' > \"$FAULTLINE_OUTPUT_DIR/diagnosis.json\"",
        corpus.display()
    );
    let (r, dir) = external(&cmd, Track::Diagnose, 60).await;
    let log = std::fs::read_to_string(dir.path().join("trials/t/agent.log")).unwrap();
    assert_eq!(r.trajectory.exit_status, ExitStatus::Submitted, "{log}");
    assert_eq!(log.matches("No such file or directory").count(), 2, "{log}");
    assert!(!log.contains("HOST-REACHED"), "{log}");
    assert_eq!(r.trajectory.agent.settings["sandboxed"], true);
}
