//! A 450-step trial of the built-in agent against the scripted model server, on the fixture
//! case: the harness's memory over the run (it should stay flat apart from the trajectory it
//! keeps) and the per-step cost of the loop, with 9 KB of command output per step: the harness's
//! time per step at the end against at the start. Run:
//! `cargo bench -p faultline-agent --bench long_trial`.

use faultline_agent::{BuiltinAgent, Templates, TrialEnv};
use faultline_model::{ModelClient, ModelConfig, Protocol};
use faultline_schema::{Condition, Limits, Task, Track};
use faultline_scripted::{Script, ScriptedServer, ServerOptions, Step, StepUsage};
use faultline_testkit::Prepared;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

const STEPS: u32 = 450;

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        })
        .unwrap_or(0)
}

#[tokio::main]
async fn main() {
    let dir = tempfile::tempdir().unwrap();
    let f = Prepared::fixture(dir.path(), "toy-long-trial").await;
    let steps: Vec<Step> = (0..STEPS)
        .map(|i| Step::ToolCall {
            command: format!("echo step {i} && yes output-of-step-{i} | head -c 9000"),
            text: None,
            id: None,
            raw_arguments: None,
            usage: Some(StepUsage {
                input: 1000 + u64::from(i) * 50,
                output: 30,
                ..StepUsage::default()
            }),
        })
        .collect();
    // The server runs in this process; it keeps no requests, so the RSS below is the harness's.
    let server = ScriptedServer::start_with(
        Script::new(steps),
        ServerOptions {
            forget_requests: true,
            ..ServerOptions::default()
        },
    )
    .await
    .unwrap();
    let config =
        ModelConfig::new(Protocol::OpenAiChat, "scripted").with_base_url(server.openai_base_url());
    let agent = BuiltinAgent {
        client: ModelClient::new(config).unwrap(),
        pricing: None,
        templates: Templates::default(),
        tool_mode: true,
        max_output_tokens: 256,
        temperature: None,
        model_permits: None,
    };
    let task = Task {
        schema_version: 1,
        trial_id: "bench/repair/symptom/1".into(),
        case_id: f.case.id().into(),
        track: Track::Repair,
        condition: Condition::symptom(),
        attempt: 1,
        seed: 1,
        crate_name: "toy-counter".into(),
        bundle_files: vec![],
        limits: Limits {
            steps: STEPS,
            cost_usd: None,
            ..Limits::default()
        },
    };
    let env = TrialEnv::create(
        &f.case,
        &f.prepared,
        task,
        Vec::new(),
        &f.data,
        &f.toolchain,
    )
    .unwrap();
    let samples = Arc::new(std::sync::Mutex::new(Vec::new()));
    let done = Arc::new(AtomicBool::new(false));
    let sampler = {
        let (samples, done) = (samples.clone(), done.clone());
        tokio::spawn(async move {
            let start = Instant::now();
            while !done.load(Ordering::Relaxed) {
                samples
                    .lock()
                    .unwrap()
                    .push((start.elapsed().as_secs_f64(), rss_kib()));
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };
    let traj_path = dir.path().join("trajectory.json");
    let started = Instant::now();
    let result = agent.run(&env, Some(traj_path.clone())).await.unwrap();
    let wall = started.elapsed().as_secs_f64();
    done.store(true, Ordering::Relaxed);
    sampler.await.unwrap();
    let t = &result.trajectory;
    let samples = samples.lock().unwrap().clone();
    let at = |frac: f64| samples[((samples.len() - 1) as f64 * frac) as usize].1;
    let command_secs: Vec<f64> = t
        .steps
        .iter()
        .filter_map(|s| s.action.as_ref().map(|a| a.duration_secs))
        .collect();
    let mut sorted = command_secs.clone();
    sorted.sort_by(f64::total_cmp);
    println!(
        "steps: {} ({:?}), wall {wall:.1}s, {:.1} ms per step",
        t.totals.steps,
        t.exit_status,
        1000.0 * wall / f64::from(t.totals.steps)
    );
    println!(
        "command in sandbox: median {:.1} ms, p90 {:.1} ms",
        1000.0 * sorted[sorted.len() / 2],
        1000.0 * sorted[sorted.len() * 9 / 10]
    );
    // The harness's own time per step: the step's span less its model call and its command.
    let spans: Vec<f64> = t
        .steps
        .windows(2)
        .map(|w| {
            let model = w[0].model.as_ref().map_or(0.0, |m| m.latency_secs);
            let command = w[0].action.as_ref().map_or(0.0, |a| a.duration_secs);
            w[1].started_secs - w[0].started_secs - model - command
        })
        .collect();
    let mean_ms = |s: &[f64]| 1000.0 * s.iter().sum::<f64>() / s.len() as f64;
    let (first, last) = (&spans[..50], &spans[spans.len() - 50..]);
    println!(
        "harness time per step: {:.2} ms over steps 1-50, {:.2} ms over the last 50 ({:.2}x)",
        mean_ms(first),
        mean_ms(last),
        mean_ms(last) / mean_ms(first)
    );
    println!(
        "harness RSS: {} KiB at 10% of the run, {} KiB at 50%, {} KiB at 100%; trajectory file {} KiB",
        at(0.1),
        at(0.5),
        at(1.0),
        std::fs::metadata(&traj_path).unwrap().len() / 1024
    );
}
