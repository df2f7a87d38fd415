//! How the built-in agent's trials end, and what each ending leaves in the trajectory: the
//! endings and turns that `agent_loop.rs` does not reach, against the same scripted model
//! server and fixture case.

mod common;

use common::{api_error, run, run_repair, tool, trial};
use faultline_model::Protocol;
use faultline_schema::trajectory::{LimitKind, ResourceLimit, Role};
use faultline_schema::{ExitStatus, Limits, Track, Trajectory};
use faultline_scripted::Step;

/// A tool call whose arguments are not JSON: a format error in tool mode.
fn garbled_call() -> Step {
    Step::ToolCall {
        command: "ls".into(),
        text: None,
        id: None,
        raw_arguments: Some("{not json".into()),
        usage: None,
    }
}

/// An OpenAI chat completion, sent verbatim.
fn raw_completion(choices: &str, input: u64, output: u64) -> Step {
    Step::Raw {
        status: 200,
        body: format!(
            r#"{{"id":"x","object":"chat.completion","created":0,"model":"m","choices":{choices},"usage":{{"prompt_tokens":{input},"completion_tokens":{output},"total_tokens":{}}}}}"#,
            input + output
        ),
    }
}

fn read(path: &std::path::Path) -> Trajectory {
    faultline_schema::io::read_json(path, "trajectory").unwrap()
}

#[tokio::test]
async fn a_trial_allowed_no_steps_records_its_prompts() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("trajectory.json");
    let limits = Limits {
        steps: 0,
        ..Limits::default()
    };
    let script = vec![tool("ls", 1, 1)];
    let (result, server) = run(
        script,
        Protocol::OpenAiChat,
        true,
        Track::Repair,
        limits,
        Some(&path),
    )
    .await;
    let t = &result.trajectory;
    assert_eq!(t.exit_status, ExitStatus::StepLimit);
    let roles: Vec<&str> = t.messages.iter().map(|m| m.role.as_str()).collect();
    assert_eq!(roles, ["system", "user"]);
    assert_eq!(read(&path).messages, t.messages);
    assert!(server.requests().is_empty());
}

#[tokio::test]
async fn only_the_first_of_several_tool_calls_runs_and_each_is_answered() {
    let two_calls = r#"[{"index":0,"finish_reason":"tool_calls","message":{"role":"assistant","content":"Both.","tool_calls":[{"id":"call_a","type":"function","function":{"name":"bash","arguments":"{\"command\":\"ls\"}"}},{"id":"call_b","type":"function","function":{"name":"bash","arguments":"{\"command\":\"pwd\"}"}}]}}]"#;
    let script = vec![
        raw_completion(two_calls, 10, 5),
        tool("echo FAULTLINE_SUBMIT", 1, 1),
    ];
    let (result, server) = run_repair(script).await;
    let t = &result.trajectory;
    assert_eq!(t.exit_status, ExitStatus::Submitted, "{:?}", t.error);
    assert_eq!(t.steps[0].action.as_ref().unwrap().command, "ls");
    let answers: Vec<(&str, &str)> = t
        .messages
        .iter()
        .filter_map(|m| Some((m.tool_call_id.as_deref()?, m.content.as_str())))
        .take(2)
        .collect();
    assert_eq!(answers[0].0, "call_a");
    assert!(answers[0].1.starts_with("exit code: 0\n"), "{answers:?}");
    assert_eq!(
        answers[1],
        ("call_b", "Not executed: run one command per turn.")
    );
    let sent = server.requests()[1].body["messages"].clone();
    let ids: Vec<&str> = sent
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["tool_call_id"].as_str())
        .collect();
    assert_eq!(ids, ["call_a", "call_b"]);
}

#[tokio::test]
async fn tool_mode_format_errors_answer_the_call_and_a_command_resets_the_count() {
    let script = vec![
        garbled_call(),
        garbled_call(),
        tool("ls", 1, 1),
        garbled_call(),
        garbled_call(),
        tool("echo FAULTLINE_SUBMIT", 1, 1),
    ];
    let (result, server) = run_repair(script).await;
    let t = &result.trajectory;
    assert_eq!(t.exit_status, ExitStatus::Submitted, "{:?}", t.error);
    let errors = t.steps.iter().filter(|s| s.format_error.is_some()).count();
    assert_eq!(errors, 4);
    // The errors went back as the calls' results: the only user message is the task.
    assert_eq!(
        t.messages.iter().filter(|m| m.role == Role::User).count(),
        1
    );
    assert!(
        server.requests()[1]
            .body
            .to_string()
            .contains("JSON object with a non-empty string")
    );
}

#[tokio::test]
async fn the_working_time_limit_ends_a_trial_as_a_wall_time_limit() {
    let script = vec![tool("sleep 2", 1, 1), tool("ls", 1, 1)];
    let limits = Limits {
        working_secs: Some(1),
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
    assert_eq!(t.exit_status, ExitStatus::WallTimeLimit);
    let fired = t.limit_fired.as_ref().unwrap();
    assert_eq!((fired.limit, fired.value), (LimitKind::WorkingSecs, 1.0));
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn a_billed_reply_that_cannot_be_read_is_a_model_error_and_is_paid_for() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("trajectory.json");
    let script = vec![tool("ls", 5, 5), raw_completion("[]", 1000, 50)];
    let (result, _server) = run(
        script,
        Protocol::OpenAiChat,
        true,
        Track::Repair,
        Limits::default(),
        Some(&path),
    )
    .await;
    let t = &result.trajectory;
    assert_eq!(t.exit_status, ExitStatus::ModelError);
    assert!(t.error.as_deref().unwrap().contains("(malformed_response)"));
    // A reply outside the protocol is the server's failure, not the agent's.
    assert!(result.infra_failure.is_some());
    assert_eq!(t.totals.steps, 1);
    // One step of 5 + 5 tokens, then the unreadable reply's 1000 + 50, at $1000 and $2000 per
    // million input and output tokens.
    let cost = t.totals.cost_usd.unwrap();
    assert!((cost - (0.015 + 1.1)).abs() < 1e-9, "{cost}");
    let on_disk = read(&path);
    assert_eq!(on_disk.exit_status, ExitStatus::ModelError);
    assert_eq!(on_disk.messages, t.messages);
}

#[tokio::test]
async fn a_sandbox_error_keeps_the_reply_it_could_not_run() {
    let (agent, mut env, _server) = trial(
        vec![tool("ls", 1, 1)],
        Protocol::OpenAiChat,
        true,
        Track::Repair,
        Limits::default(),
    )
    .await;
    // A directory the sandbox mounts vanishes before the first command.
    let doomed = tempfile::tempdir().unwrap();
    let spec = env
        .sandbox
        .spec()
        .clone()
        .mount(faultline_sandbox::Mount::ro(doomed.path(), "/extra"));
    env.sandbox = faultline_sandbox::Sandbox::new(spec).unwrap();
    drop(doomed);
    let t = agent.run(&env, None).await.unwrap().trajectory;
    assert_eq!(t.exit_status, ExitStatus::SandboxError, "{:?}", t.error);
    assert_eq!(t.totals.steps, 0);
    let last = t.messages.last().unwrap();
    assert_eq!(
        (last.role.as_str(), last.tool_calls.len()),
        ("assistant", 1)
    );
}

#[tokio::test]
async fn a_disk_bomb_ends_a_trial_as_a_resource_limit() {
    let script = vec![
        tool(
            "for i in $(seq 1 40); do head -c 4M /dev/zero > f$i; done; echo WROTE-ALL",
            1,
            1,
        ),
        tool("ls", 1, 1),
    ];
    let (agent, mut env, server) = trial(
        script,
        Protocol::OpenAiChat,
        true,
        Track::Repair,
        Limits::default(),
    )
    .await;
    let mut spec = env.sandbox.spec().clone();
    spec.limits.disk_bytes = Some(32 << 20);
    env.sandbox = faultline_sandbox::Sandbox::new(spec).unwrap();
    if !faultline_testkit::protected(&env.sandbox.protections().disk_limit, "disk limit") {
        return;
    }
    let result = agent.run(&env, None).await.unwrap();
    let t = &result.trajectory;
    assert_eq!(t.exit_status, ExitStatus::ResourceLimit, "{:?}", t.error);
    assert!(t.error.as_deref().unwrap().contains("disk limit"));
    assert_eq!(t.limit_fired, None);
    let bomb = t.steps[0].action.as_ref().unwrap();
    assert_eq!(bomb.limit, Some(ResourceLimit::Disk));
    assert!(
        bomb.output
            .contains("killed for writing past its disk limit"),
        "{}",
        bomb.output
    );
    assert_eq!(server.requests().len(), 1);
    assert_eq!(result.submission, faultline_schema::Submission::None);
}

#[tokio::test]
async fn a_trajectory_that_cannot_be_written_fails_the_run_not_the_trial() {
    let (agent, env, _server) = trial(
        vec![tool("ls", 1, 1)],
        Protocol::OpenAiChat,
        true,
        Track::Repair,
        Limits::default(),
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("a-file");
    std::fs::write(&file, "").unwrap();
    let err = agent
        .run(&env, Some(file.join("trajectory.json")))
        .await
        .unwrap_err();
    assert!(
        format!("{err:#}").contains("writing the trajectory"),
        "{err:#}"
    );
}

/// A 500 answer, as an overloaded or broken model server gives.
fn server_error() -> Step {
    api_error(500, "upstream unavailable")
}

#[tokio::test]
async fn an_outage_past_the_retry_budget_is_not_the_agents_failure() {
    // The first attempt and all six retries of the default policy get a 500.
    let (result, server) = run_repair(vec![server_error(); 7]).await;
    assert_eq!(server.requests().len(), 7);
    let t = &result.trajectory;
    assert_eq!(t.exit_status, ExitStatus::ModelError);
    let why = result
        .infra_failure
        .as_deref()
        .expect("an infrastructure failure");
    assert!(
        why.contains("HTTP 500") && why.contains("6 retries"),
        "{why}"
    );
    // The failed call (seven attempts, at least 110 ms of backoff between them) is time the
    // agent did not work.
    let lost = t.totals.wall_secs - t.totals.working_secs;
    assert!(lost >= 0.11, "lost {lost} s of {} s", t.totals.wall_secs);
}

#[tokio::test]
async fn a_prompt_past_the_context_window_stays_the_agents_failure() {
    let script = vec![tool("ls", 5, 5), Step::ContextLength {}];
    let (result, _server) = run(
        script,
        Protocol::AnthropicMessages,
        true,
        Track::Repair,
        Limits::default(),
        None,
    )
    .await;
    assert_eq!(result.trajectory.exit_status, ExitStatus::ModelError);
    assert!(
        result
            .trajectory
            .error
            .as_deref()
            .unwrap()
            .contains("context_length"),
        "{:?}",
        result.trajectory.error
    );
    assert_eq!(result.infra_failure, None);
}

#[tokio::test]
async fn an_unpriced_models_cost_stays_unknown_when_its_calls_fail() {
    let (mut agent, env, _server) = trial(
        vec![server_error(); 7],
        Protocol::OpenAiChat,
        true,
        Track::Repair,
        Limits::default(),
    )
    .await;
    agent.pricing = None;
    let result = agent.run(&env, None).await.unwrap();
    assert_eq!(result.trajectory.exit_status, ExitStatus::ModelError);
    assert_eq!(result.trajectory.totals.cost_usd, None);
}

#[tokio::test]
async fn time_running_out_inside_a_call_the_provider_keeps_failing_is_not_the_agents() {
    let limits = Limits {
        wall_secs: 3,
        ..Limits::default()
    };
    // Each attempt stalls until the client's one-second attempt timeout; the trial's three
    // seconds run out while the client is still retrying.
    let (mut agent, env, server) = trial(
        vec![Step::Hang {}; 8],
        Protocol::OpenAiChat,
        true,
        Track::Repair,
        limits.clone(),
    )
    .await;
    let mut config = agent.client.config().clone();
    config.attempt_timeout = std::time::Duration::from_secs(1);
    agent.client = faultline_model::ModelClient::new(config).unwrap();
    let result = agent.run(&env, None).await.unwrap();
    let why = result
        .infra_failure
        .as_deref()
        .expect("an infrastructure failure");
    assert!(
        why.contains("time ran out") && why.contains("failed attempt"),
        "{why}"
    );
    assert!(server.requests().len() >= 2);
    let t = &result.trajectory;
    assert!(t.totals.working_secs < 1.0, "{:?}", t.totals);

    // A model that is merely slow (one attempt still running when the time is up) is the
    // agent's limit, as before.
    let (agent, env, _server) = trial(
        vec![Step::Hang {}],
        Protocol::OpenAiChat,
        true,
        Track::Repair,
        limits,
    )
    .await;
    let result = agent.run(&env, None).await.unwrap();
    assert_eq!(result.trajectory.exit_status, ExitStatus::WallTimeLimit);
    assert_eq!(result.infra_failure, None);
}
