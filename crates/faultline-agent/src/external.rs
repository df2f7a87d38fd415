//! External agents: any command can be the agent, so other scaffolds can be evaluated on the same
//! cases and graded the same way.
//!
//! The command runs with `bash -c` in a sandbox of its own, like the built-in agent's commands:
//! the trial's workspace read-write at `/workspace`, the task read-only at `/task`, an output
//! directory at `/output`, the agent's own runtime (a virtualenv, a node prefix, a binary)
//! read-only where `--agent-mount` puts it, and no network. Its environment:
//!
//! | variable | meaning |
//! |---|---|
//! | `FAULTLINE_TASK_DIR` | `task.json`, `symptom.md` and, in the `context` condition, `context/*.md` |
//! | `FAULTLINE_WORKSPACE` | the trial's private copy of the buggy crate, with a warm build cache |
//! | `FAULTLINE_OUTPUT_DIR` | where to write the submission |
//! | `FAULTLINE_TRACK` | `diagnose`, `repair` or `reproduce` |
//!
//! With a model configured, the agent reaches it only through the trial's model gateway
//! ([`faultline_gateway`]), at a port of the sandbox's loopback that leads to the gateway and
//! nowhere else: `OPENAI_BASE_URL` and `OPENAI_API_KEY` (or `ANTHROPIC_BASE_URL` and
//! `ANTHROPIC_API_KEY`), `FAULTLINE_GATEWAY_URL`, `FAULTLINE_GATEWAY_KEY` and `FAULTLINE_MODEL`
//! name the gateway, a key that works there only, and the model. Each call becomes a step of our
//! trajectory (usage, cost, latency, retries, what was asked), and when a limit is reached or the
//! provider fails for good the gateway refuses further calls and the agent is stopped: a limit
//! ends the trial with that limit recorded, a provider failure as an infrastructure error,
//! unscored.
//!
//! It writes `diagnosis.json`, `patch.diff` or `reproducer.rs` to the output directory (for a
//! repair without `patch.diff`, the workspace's changes are taken), and optionally its own
//! `trajectory.json`, kept beside ours as `agent-trajectory.json`. It is killed with everything it
//! started when the trial's wall-clock limit passes. The grader never trusts the workspace, so an
//! external agent cannot change its own grade.
//!
//! With `on_host` the command runs on the host instead, as the harness's user, beside the source
//! store and the corpus (the fixed crate and the oracles are one `grep` away), with the host's
//! paths in those variables; its results are marked not comparable.

use crate::Templates;
use crate::builtin::TrialResult;
use crate::env::TrialEnv;
use crate::record::Recorder;
use crate::scaffolds::{Scaffold, mini_swe_agent};
use crate::stop::Limit;
use anyhow::{Context, Result};
use faultline_gateway::{Gateway, GatewayConfig, GatewayEvent, GatewayStop};
use faultline_model::{ModelClient, PricingTable};
use faultline_sandbox::{ExecRequest, LoopbackRelay, Mount, Sandbox};
use faultline_schema::rundir::TRAJECTORY_FILE;
use faultline_schema::trajectory::{AgentInfo, AgentKind, Step};
use faultline_schema::{ExitStatus, Submission, Track, TrialDir};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::oneshot;

/// The trajectory mini-swe-agent writes to the output directory.
const MINI_TRAJECTORY_FILE: &str = "traj.json";

/// How often the working-time limit is checked while the agent runs between model calls.
const WORKING_TIME_TICK: Duration = Duration::from_millis(500);

/// The port of a sandboxed agent's loopback that leads to its gateway.
pub const GATEWAY_PORT: u16 = 4000;

/// Characters of a sandboxed agent's output kept in `agent.log` (head and tail).
const AGENT_LOG_CAP: usize = 2_000_000;

/// Where the task, the output directory and the workspace are inside the agent's sandbox.
const TASK_GUEST: &str = "/task";
const OUTPUT_GUEST: &str = "/output";
const WORKSPACE_GUEST: &str = "/workspace";

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
    /// The agent's own runtime, mounted read-only into its sandbox.
    pub mounts: Vec<AgentMount>,
    /// Run on the host, outside any sandbox: its scores are not comparable.
    pub on_host: bool,
    /// Which scaffold it is: its word for submitting, and whether its own trajectory is read.
    pub scaffold: Scaffold,
}

/// A directory or file of the host an agent needs (its virtualenv, a node prefix, a binary).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentMount {
    /// Where it is on the host.
    pub host: PathBuf,
    /// Where the agent sees it; the same path as on the host keeps a virtualenv's scripts,
    /// whose first lines name absolute paths, working.
    pub guest: String,
}

impl std::str::FromStr for AgentMount {
    type Err = String;

    /// `HOST` (seen at the same path) or `HOST:GUEST`.
    fn from_str(text: &str) -> Result<Self, String> {
        let (host, guest) = text.split_once(':').unwrap_or((text, text));
        let host = std::path::absolute(host).map_err(|e| format!("agent mount {host}: {e}"))?;
        if !host.exists() {
            return Err(format!(
                "agent mount {}: no such file or directory",
                host.display()
            ));
        }
        let guest = if guest == text {
            host.to_string_lossy().into_owned()
        } else {
            guest.to_string()
        };
        if !guest.starts_with('/') || guest == "/" {
            return Err(format!(
                "agent mount {text}: the place inside must be an absolute path below /"
            ));
        }
        Ok(AgentMount { host, guest })
    }
}

/// The upstream of an external agent's gateway.
#[derive(Debug, Clone)]
pub struct GatewayModel {
    /// The client every call goes through (the built-in agent's retries, timeouts and decoding).
    pub client: Arc<ModelClient>,
    /// Prices; `None` records every cost as unknown.
    pub pricing: Option<PricingTable>,
}

/// How the agent's process ended.
enum Ended {
    /// It exited by itself, successfully or not (`status` says how, for the record).
    Exited { success: bool, status: String },
    /// The wall-clock limit passed.
    WallTime,
    /// The harness stopped it (the gateway stopped serving).
    Stopped,
    /// It wrote past the sandbox's disk limit.
    DiskLimit,
}

impl ExternalAgent {
    /// Identifies this configuration in trajectories and results.
    pub fn info(&self) -> AgentInfo {
        let mut settings = std::collections::BTreeMap::new();
        settings.insert("command".into(), self.command.clone().into());
        settings.insert("sandboxed".into(), (!self.on_host).into());
        if let Some(release) = self.scaffold.release() {
            settings.insert("scaffold".into(), release.into());
        }
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
        // A socket's path must fit in 108 bytes, so it lives in a short temporary directory.
        let socket_dir = tempfile::Builder::new().prefix("fl-gw").tempdir()?;
        let mut gateway = match &self.model {
            Some(model) => {
                let config = GatewayConfig {
                    client: model.client.clone(),
                    price,
                    limits: env.task.limits.clone(),
                    hold_calls: true,
                };
                let gateway = if self.on_host {
                    Gateway::start(config).await
                } else {
                    Gateway::start_on_socket(config, &socket_dir.path().join("gateway.sock")).await
                };
                Some(gateway.context("starting the model gateway")?)
            }
            None => None,
        };
        let task_dir = trial_dir.external_task_dir();
        env.write_task_dir(&task_dir)?;
        let prompts = Templates::default().render_submitting_with(
            &env.task,
            &env.symptom,
            &env.bundle,
            true,
            self.scaffold.sentinel(),
        )?;
        std::fs::write(task_dir.join("system.md"), &prompts.system)?;
        std::fs::write(task_dir.join("prompt.md"), &prompts.task)?;
        let output = trial_dir.agent_output_dir();
        std::fs::create_dir_all(&output)?;
        let (stop_tx, stop_rx) = oneshot::channel::<()>();
        let stop = async {
            let _ = stop_rx.await;
        };
        let wall = Duration::from_secs(env.task.limits.wall_secs);
        let log_path = trial_dir.agent_log_path();
        let sandbox = match self.on_host {
            true => None,
            false => Some(self.sandbox(env, &task_dir, &output, gateway.as_ref())?),
        };
        let host_env = gateway
            .as_ref()
            .map(|g| g.agent_env(&g.loopback().unwrap_or_default()));
        let process = async {
            match &sandbox {
                Some(sandbox) => self.run_in_sandbox(sandbox, &log_path, wall, stop).await,
                None => self.run_on_host(env, trial_dir, host_env, wall, stop).await,
            }
        };
        tokio::pin!(process);
        let mut stop_tx = Some(stop_tx);
        let mut gateway_stop = None;
        let mut steps = CallSteps::default();
        let mut stop_agent = |stop: GatewayStop, gateway_stop: &mut Option<GatewayStop>| {
            gateway_stop.get_or_insert(stop);
            stop_tx.take().map(|tx| tx.send(()));
        };
        let ended = loop {
            tokio::select! {
                ended = &mut process => break ended?,
                Some(event) = next_event(gateway.as_mut()), if gateway_stop.is_none() => {
                    if let Some(stop) = steps.on_event(event, env, &mut rec)? {
                        stop_agent(stop, &mut gateway_stop);
                    }
                }
                () = tokio::time::sleep(WORKING_TIME_TICK), if gateway.is_some() && gateway_stop.is_none() => {
                    if let Some(stop) = gateway.as_ref().and_then(Gateway::stop_for_working_time) {
                        stop_agent(stop, &mut gateway_stop);
                    }
                }
            }
        };
        // Calls answered before the agent ended are recorded even if their events came last.
        if let Some(gateway) = &mut gateway {
            while let Ok(event) = gateway.try_next_event() {
                if let Some(stop) = steps.on_event(event, env, &mut rec)? {
                    gateway_stop.get_or_insert(stop);
                }
            }
        }
        steps.flush(env, &mut rec)?;
        drop(gateway);
        let agent_traj = output.join(TRAJECTORY_FILE);
        if agent_traj.is_file() {
            std::fs::copy(&agent_traj, trial_dir.agent_trajectory_path())?;
        }
        if self.scaffold == Scaffold::MiniSweAgent {
            let traj = output.join(MINI_TRAJECTORY_FILE);
            // A missing or unreadable record leaves the steps without their commands.
            if let Some(traj) = std::fs::read(&traj)
                .ok()
                .and_then(|bytes| serde_json::from_slice(&bytes).ok())
            {
                mini_swe_agent::attach_actions(&traj, &mut rec);
            }
        }
        let submission = match Submission::read(&output, env.task.track) {
            None if matches!(env.task.track, Track::Repair | Track::Build)
                && matches!(ended, Ended::Exited { success: true, .. }) =>
            {
                Some(Submission::Patch(env.diff()?.0))
            }
            read => read,
        };
        let submitted = || submission.clone().unwrap_or(Submission::None);
        match (ended, gateway_stop) {
            (_, Some(GatewayStop::Limit(fired))) => {
                rec.finish(fired.limit.exit_status(), Some(fired), None)?;
                Ok(finish(rec, submitted(), None))
            }
            (_, Some(GatewayStop::Infrastructure(why))) => {
                rec.finish(ExitStatus::ModelError, None, Some(why.clone()))?;
                Ok(finish(rec, Submission::None, Some(why)))
            }
            (Ended::WallTime | Ended::Stopped, _) => {
                let fired = Limit::WallTime(env.task.limits.wall_secs).fired();
                rec.finish(ExitStatus::WallTimeLimit, Some(fired), None)?;
                Ok(finish(rec, submitted(), None))
            }
            (Ended::DiskLimit, _) => {
                let why = "the agent wrote past the sandbox's disk limit".to_string();
                rec.finish(ExitStatus::ResourceLimit, None, Some(why))?;
                Ok(finish(rec, Submission::None, None))
            }
            (Ended::Exited { success: true, .. }, _) if submission.is_some() => {
                rec.finish(ExitStatus::Submitted, None, None)?;
                Ok(finish(rec, submitted(), None))
            }
            (Ended::Exited { success, status }, _) => {
                let why = if success {
                    "the agent exited without writing a submission".to_string()
                } else {
                    format!("the agent exited with {status}; see agent.log")
                };
                rec.finish(ExitStatus::AgentError, None, Some(why))?;
                Ok(finish(rec, submitted(), None))
            }
        }
    }

    /// The agent's sandbox: the trial's (workspace, toolchain, vendored sources), plus the
    /// task, the output directory, the agent's runtime and the way to its gateway.
    fn sandbox(
        &self,
        env: &TrialEnv,
        task_dir: &Path,
        output: &Path,
        gateway: Option<&Gateway>,
    ) -> Result<Sandbox> {
        let mut spec = env
            .sandbox
            .spec()
            .clone()
            .mount(Mount::ro(task_dir, TASK_GUEST))
            .mount(Mount::rw(output, OUTPUT_GUEST))
            .env("FAULTLINE_TASK_DIR", TASK_GUEST)
            .env("FAULTLINE_WORKSPACE", WORKSPACE_GUEST)
            .env("FAULTLINE_OUTPUT_DIR", OUTPUT_GUEST)
            .env("FAULTLINE_TRACK", env.task.track.as_str());
        for m in &self.mounts {
            spec = spec.mount(Mount::ro(&m.host, m.guest.clone()));
        }
        if let Some(gateway) = gateway
            && let faultline_gateway::Endpoint::Socket(socket) = gateway.endpoint()
        {
            spec = spec.relay(LoopbackRelay {
                port: GATEWAY_PORT,
                socket: socket.clone(),
            });
            for (key, value) in gateway.agent_env(&format!("127.0.0.1:{GATEWAY_PORT}")) {
                spec = spec.env(key, value);
            }
        }
        Sandbox::new(spec).context("setting up the agent's sandbox")
    }

    /// Runs the command in its sandbox, killed with everything it started when the wall-clock
    /// limit passes or `stop` completes; its output goes to `agent.log`.
    async fn run_in_sandbox(
        &self,
        sandbox: &Sandbox,
        log_path: &Path,
        wall: Duration,
        stop: impl std::future::Future<Output = ()>,
    ) -> Result<Ended> {
        let req = ExecRequest::bash(&self.command, wall)
            .cap(AGENT_LOG_CAP)
            .workdir(WORKSPACE_GUEST);
        let (out, stopped) = sandbox.exec_until(&req, stop).await?;
        std::fs::write(log_path, format!("{}{}", out.stdout.text, out.stderr.text))
            .with_context(|| format!("writing {}", log_path.display()))?;
        Ok(if stopped {
            Ended::Stopped
        } else if out.timed_out {
            Ended::WallTime
        } else if out.disk_limit_hit {
            Ended::DiskLimit
        } else {
            let status = match (out.exit_code, out.signal) {
                (Some(code), _) => format!("exit status: {code}"),
                (None, Some(signal)) => format!("signal {signal}"),
                (None, None) => "an unknown status".to_string(),
            };
            Ended::Exited {
                success: out.success(),
                status,
            }
        })
    }

    /// Runs the command on the host, in its own process group, killed with the group when the
    /// wall-clock limit passes or `stop` completes.
    async fn run_on_host(
        &self,
        env: &TrialEnv,
        trial_dir: &TrialDir,
        gateway_env: Option<Vec<(String, String)>>,
        wall: Duration,
        stop: impl std::future::Future<Output = ()>,
    ) -> Result<Ended> {
        let log = std::fs::File::create(trial_dir.agent_log_path())?;
        let mut cmd = tokio::process::Command::new("bash");
        cmd.arg("-c")
            .arg(&self.command)
            .env("FAULTLINE_TASK_DIR", trial_dir.external_task_dir())
            .env("FAULTLINE_WORKSPACE", &env.workspace)
            .env("FAULTLINE_OUTPUT_DIR", trial_dir.agent_output_dir())
            .env("FAULTLINE_TRACK", env.task.track.as_str())
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .process_group(0)
            .kill_on_drop(true);
        if let (Some(gateway_env), Some(model)) = (gateway_env, &self.model) {
            let config = model.client.config();
            let real_key = config
                .api_key_env
                .clone()
                .unwrap_or_else(|| config.protocol.default_api_key_env().to_string());
            cmd.env_remove(real_key).envs(gateway_env);
        }
        let mut child = cmd.spawn().context("starting the external agent")?;
        let pgid = child.id();
        let ended = tokio::select! {
            status = child.wait() => {
                let status = status?;
                return Ok(Ended::Exited { success: status.success(), status: status.to_string() });
            }
            () = tokio::time::sleep(wall) => Ended::WallTime,
            () = stop => Ended::Stopped,
        };
        if let Some(pgid) = pgid {
            let _ = std::process::Command::new("kill")
                .args(["-s", "KILL", "--", &format!("-{pgid}")])
                .status();
        }
        let _ = child.wait().await;
        Ok(ended)
    }
}

/// The next event of the gateway; never, without one.
async fn next_event(gateway: Option<&mut Gateway>) -> Option<GatewayEvent> {
    match gateway {
        Some(gateway) => gateway.next_event().await,
        None => std::future::pending().await,
    }
}

/// Calls through the gateway becoming steps of the trajectory. A step's workspace state is the
/// one its command left, which is known when the agent's next call arrives (the gateway holds
/// that call until it is taken) or the agent ends, so each call waits for then to be recorded.
/// Calls the agent made at once wait together.
#[derive(Default)]
struct CallSteps {
    pending: Vec<faultline_gateway::GatewayCall>,
}

impl CallSteps {
    /// Takes one event of the gateway; returns why it stopped, if it did.
    fn on_event(
        &mut self,
        event: GatewayEvent,
        env: &TrialEnv,
        rec: &mut Recorder,
    ) -> Result<Option<GatewayStop>> {
        match event {
            GatewayEvent::Arrived(arrival) => {
                // The agent waits for this call's answer: the workspace is as its last command
                // left it, which is that command's step's state.
                self.flush(env, rec)?;
                arrival.proceed();
            }
            GatewayEvent::Call(call) => self.pending.push(*call),
            GatewayEvent::Stopped(stop) => return Ok(Some(stop)),
        }
        Ok(None)
    }

    fn flush(&mut self, env: &TrialEnv, rec: &mut Recorder) -> Result<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let (diff, diff_sha256) = env.diff()?;
        for call in self.pending.drain(..) {
            let step = Step {
                index: rec.trajectory.totals.steps + 1,
                started_secs: call.started_secs,
                model: Some(call.model),
                thought: call.text.filter(|t| !t.trim().is_empty()),
                action: None,
                format_error: None,
                diff: None,
                diff_sha256: diff_sha256.clone(),
            };
            rec.push_step(step, diff.clone())?;
            rec.add_lost_time(call.lost_secs);
        }
        Ok(())
    }
}

fn finish(rec: Recorder, submission: Submission, infra_failure: Option<String>) -> TrialResult {
    TrialResult {
        submission,
        trajectory: rec.trajectory,
        infra_failure,
    }
}
