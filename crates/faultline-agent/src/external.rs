//! External agents: any command can be the agent, so other scaffolds can be evaluated on the same
//! cases and graded the same way.
//!
//! The command runs on the host (it usually needs the network to reach its model) in its own
//! process group, with these environment variables:
//!
//! | variable | meaning |
//! |---|---|
//! | `FAULTLINE_TASK_DIR` | `task.json`, `symptom.md` and, in the `context` condition, `context/*.md` |
//! | `FAULTLINE_WORKSPACE` | the trial's private copy of the buggy crate, with a warm build cache |
//! | `FAULTLINE_OUTPUT_DIR` | where to write the submission |
//! | `FAULTLINE_TRACK` | `diagnose`, `repair` or `reproduce` |
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
use faultline_schema::rundir::TRAJECTORY_FILE;
use faultline_schema::trajectory::{AgentInfo, AgentKind};
use faultline_schema::{ExitStatus, Submission, Track, TrialDir};
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

/// An agent that is a shell command.
#[derive(Debug, Clone)]
pub struct ExternalAgent {
    /// The name for tables.
    pub name: String,
    /// The command line, run with `bash -c`.
    pub command: String,
}

impl ExternalAgent {
    /// Identifies this configuration in trajectories and results.
    pub fn info(&self) -> AgentInfo {
        let mut settings = std::collections::BTreeMap::new();
        settings.insert("command".into(), self.command.clone().into());
        AgentInfo {
            kind: AgentKind::External,
            name: self.name.clone(),
            model: None,
            protocol: None,
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
        let mut rec = Recorder::new(&env.task, self.info(), trajectory_path);
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
        let mut child = cmd.spawn().context("starting the external agent")?;
        let pgid = child.id();
        let limit = Duration::from_secs(env.task.limits.wall_secs);
        let status = match tokio::time::timeout(limit, child.wait()).await {
            Ok(s) => Some(s?),
            Err(_) => {
                if let Some(pgid) = pgid {
                    let _ = std::process::Command::new("kill")
                        .args(["-s", "KILL", "--", &format!("-{pgid}")])
                        .status();
                }
                let _ = child.wait().await;
                None
            }
        };
        let agent_traj = output.join(TRAJECTORY_FILE);
        if agent_traj.is_file() {
            std::fs::copy(&agent_traj, trial_dir.agent_trajectory_path())?;
        }
        let submission = match Submission::read(&output, env.task.track) {
            None if env.task.track == Track::Repair && status.is_some_and(|s| s.success()) => {
                Some(Submission::Patch(env.diff()?.0))
            }
            read => read,
        };
        let Some(status) = status else {
            let fired = Limit::WallTime(env.task.limits.wall_secs).fired();
            rec.finish(ExitStatus::WallTimeLimit, Some(fired), None)?;
            return Ok(finish(rec, submission.unwrap_or(Submission::None)));
        };
        match submission {
            Some(s) if status.success() => {
                rec.finish(ExitStatus::Submitted, None, None)?;
                Ok(finish(rec, s))
            }
            s => {
                let why = if status.success() {
                    "the agent exited without writing a submission".to_string()
                } else {
                    format!("the agent exited with {status}; see agent.log")
                };
                rec.finish(ExitStatus::AgentError, None, Some(why))?;
                Ok(finish(rec, s.unwrap_or(Submission::None)))
            }
        }
    }
}

fn finish(rec: Recorder, submission: Submission) -> TrialResult {
    TrialResult {
        submission,
        trajectory: rec.trajectory,
        infra_failure: None,
    }
}
