//! External agents: any command can be the agent, so other scaffolds can be evaluated on the same
//! cases and graded the same way.
//!
//! The command runs on the host in its own process group, with these environment variables:
//!
//! | variable | meaning |
//! |---|---|
//! | `FAULTLINE_TASK_DIR` | `task.json`, `symptom.md` and, in the `context` condition, `context/*.md` |
//! | `FAULTLINE_WORKSPACE` | the trial's private copy of the buggy crate, with a warm build cache |
//! | `FAULTLINE_OUTPUT_DIR` | where to write the submission |
//! | `FAULTLINE_TRACK` | `diagnose`, `repair` or `reproduce` |
//!
//! With a model configured, the agent reaches it only through the trial's model gateway
//! ([`faultline_gateway`]): `OPENAI_BASE_URL` and `OPENAI_API_KEY` (or `ANTHROPIC_BASE_URL` and
//! `ANTHROPIC_API_KEY`), `FAULTLINE_GATEWAY_URL`, `FAULTLINE_GATEWAY_KEY` and `FAULTLINE_MODEL`
//! name the gateway, a key that works there only, and the model. The provider's own key variable
//! is removed from the agent's environment. Each call becomes a step of our trajectory (usage,
//! cost, latency, retries, what was asked), and when a limit is reached or the provider fails for
//! good the gateway refuses further calls and the agent is stopped: a limit ends the trial with
//! that limit recorded, a provider failure as an infrastructure error, unscored.
//!
//! It writes `diagnosis.json`, `patch.diff` or `reproducer.rs` to the output directory (for a
//! repair without `patch.diff`, the workspace's changes are taken), and optionally its own
//! `trajectory.json`, kept beside ours as `agent-trajectory.json`. It is killed with its whole
//! process group when the trial's wall-clock limit passes. The grader never trusts the
//! workspace, so an external agent cannot change its own grade.

use crate::builtin::TrialResult;
use crate::env::TrialEnv;
use crate::record::Recorder;
use crate::stop::Limit;
use anyhow::{Context, Result};
use faultline_gateway::{Gateway, GatewayConfig, GatewayEvent, GatewayStop};
use faultline_model::{ModelClient, PricingTable};
use faultline_schema::rundir::TRAJECTORY_FILE;
use faultline_schema::trajectory::{AgentInfo, AgentKind, LimitFired, LimitKind, Step};
use faultline_schema::{ExitStatus, Submission, Track, TrialDir};
use std::path::PathBuf;
use std::process::{ExitStatus as ProcessStatus, Stdio};
use std::sync::Arc;
use std::time::Duration;

/// How often the working-time limit is checked while the agent runs between model calls.
const WORKING_TIME_TICK: Duration = Duration::from_millis(500);

/// An agent that is a shell command.
#[derive(Debug, Clone)]
pub struct ExternalAgent {
    /// The name for tables.
    pub name: String,
    /// The command line, run with `bash -c`.
    pub command: String,
    /// The model the agent reaches through the trial's gateway; without one the agent gets no
    /// gateway (and no model, unless it brings its own).
    pub model: Option<GatewayModel>,
}

/// The upstream of an external agent's gateway.
#[derive(Debug, Clone)]
pub struct GatewayModel {
    /// The client every call goes through (the built-in agent's retries, timeouts and decoding).
    pub client: Arc<ModelClient>,
    /// Prices; `None` records every cost as unknown.
    pub pricing: Option<PricingTable>,
}

/// How the agent's process ended, or why it was stopped.
enum Ending {
    Exited(ProcessStatus),
    WallTime,
    Gateway(GatewayStop),
}

impl ExternalAgent {
    /// Identifies this configuration in trajectories and results.
    pub fn info(&self) -> AgentInfo {
        let mut settings = std::collections::BTreeMap::new();
        settings.insert("command".into(), self.command.clone().into());
        let config = self.model.as_ref().map(|m| m.client.config());
        if let Some(config) = config {
            settings.insert("base_url".into(), config.effective_base_url().into());
            settings.insert("gateway".into(), true.into());
        }
        AgentInfo {
            kind: AgentKind::External,
            name: self.name.clone(),
            model: config.map(|c| c.model.clone()),
            protocol: config.map(|c| format!("{:?}", c.protocol)),
            settings,
        }
    }

    /// Runs the command for one trial; `trial_dir` receives the task, output and log.
    pub async fn run(
        &self,
        env: &TrialEnv,
        trial_dir: &TrialDir,
        trajectory_path: Option<PathBuf>,
    ) -> Result<TrialResult> {
        let mut rec =
            Recorder::new(&env.task, self.info(), trajectory_path).starting_from(env.diff()?.1);
        let price = self
            .model
            .as_ref()
            .and_then(|m| m.pricing.as_ref()?.price(&m.client.config().model).cloned());
        if self.model.is_some() && price.is_none() {
            rec = rec.unpriced();
        }
        let mut gateway = match &self.model {
            Some(model) => Some(
                Gateway::start(GatewayConfig {
                    client: model.client.clone(),
                    price,
                    limits: env.task.limits.clone(),
                })
                .await
                .context("starting the model gateway")?,
            ),
            None => None,
        };
        let task_dir = trial_dir.external_task_dir();
        env.write_task_dir(&task_dir)?;
        let output = trial_dir.agent_output_dir();
        std::fs::create_dir_all(&output)?;
        let log = std::fs::File::create(trial_dir.agent_log_path())?;
        let mut cmd = tokio::process::Command::new("bash");
        cmd.arg("-c")
            .arg(&self.command)
            .env("FAULTLINE_TASK_DIR", &task_dir)
            .env("FAULTLINE_WORKSPACE", &env.workspace)
            .env("FAULTLINE_OUTPUT_DIR", &output)
            .env("FAULTLINE_TRACK", env.task.track.as_str())
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .process_group(0)
            .kill_on_drop(true);
        if let (Some(gateway), Some(model)) = (&gateway, &self.model) {
            let config = model.client.config();
            let real_key = config
                .api_key_env
                .clone()
                .unwrap_or_else(|| config.protocol.default_api_key_env().to_string());
            cmd.env_remove(real_key).envs(gateway.agent_env());
        }
        let mut child = cmd.spawn().context("starting the external agent")?;
        let pgid = child.id();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(env.task.limits.wall_secs);
        let ending = loop {
            tokio::select! {
                status = child.wait() => break Ending::Exited(status?),
                () = tokio::time::sleep_until(deadline) => break Ending::WallTime,
                Some(event) = next_event(&mut gateway) => match event {
                    GatewayEvent::Call(call) => record_call(env, &mut rec, *call)?,
                    GatewayEvent::Stopped(stop) => break Ending::Gateway(stop),
                },
                () = tokio::time::sleep(WORKING_TIME_TICK), if gateway.is_some() => {
                    if let Some(stop) = gateway.as_ref().and_then(Gateway::stop_for_working_time) {
                        break Ending::Gateway(stop);
                    }
                }
            }
        };
        if !matches!(ending, Ending::Exited(_)) {
            if let Some(pgid) = pgid {
                let _ = std::process::Command::new("kill")
                    .args(["-s", "KILL", "--", &format!("-{pgid}")])
                    .status();
            }
            let _ = child.wait().await;
        }
        // Calls answered before the agent ended are recorded even if their events came last.
        if let Some(gateway) = &mut gateway {
            while let Ok(event) = gateway.try_next_event() {
                if let GatewayEvent::Call(call) = event {
                    record_call(env, &mut rec, *call)?;
                }
            }
        }
        let agent_traj = output.join(TRAJECTORY_FILE);
        if agent_traj.is_file() {
            std::fs::copy(&agent_traj, trial_dir.agent_trajectory_path())?;
        }
        let submission = match Submission::read(&output, env.task.track) {
            None if env.task.track == Track::Repair
                && matches!(&ending, Ending::Exited(s) if s.success()) =>
            {
                Some(Submission::Patch(env.diff()?.0))
            }
            read => read,
        };
        let status = match ending {
            Ending::WallTime => {
                let fired = Limit::WallTime(env.task.limits.wall_secs).fired();
                rec.finish(ExitStatus::WallTimeLimit, Some(fired), None)?;
                return Ok(finish(rec, submission.unwrap_or(Submission::None), None));
            }
            Ending::Gateway(GatewayStop::Limit(fired)) => {
                rec.finish(limit_status(&fired), Some(fired), None)?;
                return Ok(finish(rec, submission.unwrap_or(Submission::None), None));
            }
            Ending::Gateway(GatewayStop::Infrastructure(why)) => {
                rec.finish(ExitStatus::ModelError, None, Some(why.clone()))?;
                return Ok(finish(rec, Submission::None, Some(why)));
            }
            Ending::Exited(status) => status,
        };
        match submission {
            Some(s) if status.success() => {
                rec.finish(ExitStatus::Submitted, None, None)?;
                Ok(finish(rec, s, None))
            }
            s => {
                let why = if status.success() {
                    "the agent exited without writing a submission".to_string()
                } else {
                    format!("the agent exited with {status}; see agent.log")
                };
                rec.finish(ExitStatus::AgentError, None, Some(why))?;
                Ok(finish(rec, s.unwrap_or(Submission::None), None))
            }
        }
    }
}

/// The next event of the gateway; never, without one.
async fn next_event(gateway: &mut Option<Gateway>) -> Option<GatewayEvent> {
    match gateway {
        Some(gateway) => gateway.next_event().await,
        None => std::future::pending().await,
    }
}

/// A call through the gateway as a step of the trajectory, with the workspace's state after it.
fn record_call(
    env: &TrialEnv,
    rec: &mut Recorder,
    call: faultline_gateway::GatewayCall,
) -> Result<()> {
    let (diff, diff_sha256) = env.diff()?;
    let step = Step {
        index: rec.trajectory.totals.steps + 1,
        started_secs: call.started_secs,
        model: Some(call.model),
        thought: call.text.filter(|t| !t.trim().is_empty()),
        action: None,
        format_error: None,
        diff: None,
        diff_sha256,
    };
    rec.push_step(step, diff)?;
    rec.add_lost_time(call.lost_secs);
    Ok(())
}

/// The exit status a limit enforced by the gateway ends the trial with.
fn limit_status(fired: &LimitFired) -> ExitStatus {
    match fired.limit {
        LimitKind::Steps => ExitStatus::StepLimit,
        LimitKind::CostUsd => ExitStatus::CostLimit,
        LimitKind::Tokens => ExitStatus::TokenLimit,
        LimitKind::WallSecs | LimitKind::WorkingSecs => ExitStatus::WallTimeLimit,
    }
}

fn finish(rec: Recorder, submission: Submission, infra_failure: Option<String>) -> TrialResult {
    TrialResult {
        submission,
        trajectory: rec.trajectory,
        infra_failure,
    }
}
