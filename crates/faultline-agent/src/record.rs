//! Keeping a trial's trajectory and writing it atomically after every step.

use anyhow::{Context, Result};
use faultline_schema::trajectory::{
    AgentInfo, ChatMessage, LimitFired, Step, TRAJECTORY_SCHEMA_VERSION, Totals,
};
use faultline_schema::{ExitStatus, Task, Trajectory};
use sha2::{Digest, Sha256};
use std::path::PathBuf;
use std::time::{Instant, SystemTime};

/// The trajectory of a running trial and where it is written.
#[derive(Debug)]
pub struct Recorder {
    /// The trajectory so far.
    pub trajectory: Trajectory,
    path: Option<PathBuf>,
    started: Instant,
    last_diff_sha: String,
    retry_wait_secs: f64,
    cost_sum: f64,
    cost_unknown: bool,
}

impl Recorder {
    /// Starts a trajectory; `path` is where it is written after every step (none: kept in memory).
    pub fn new(task: &Task, agent: AgentInfo, path: Option<PathBuf>) -> Recorder {
        Recorder {
            trajectory: Trajectory {
                schema_version: TRAJECTORY_SCHEMA_VERSION,
                trial_id: task.trial_id.clone(),
                case_id: task.case_id.clone(),
                track: task.track,
                condition: task.condition,
                agent,
                limits: task.limits.clone(),
                exit_status: ExitStatus::Running,
                limit_fired: None,
                error: None,
                started_at: humantime::format_rfc3339_seconds(SystemTime::now()).to_string(),
                totals: Totals {
                    cost_usd: Some(0.0),
                    ..Totals::default()
                },
                messages: Vec::new(),
                steps: Vec::new(),
            },
            path,
            started: Instant::now(),
            last_diff_sha: hex::encode(Sha256::digest(b"")),
            retry_wait_secs: 0.0,
            cost_sum: 0.0,
            cost_unknown: false,
        }
    }

    /// Takes the workspace diff at the start of the trial as the baseline for detecting edits.
    pub fn starting_from(mut self, diff_sha256: String) -> Recorder {
        self.last_diff_sha = diff_sha256;
        self
    }

    /// Records the trial's cost as unknown from the start: the agent's model has no price, so
    /// no sum of its calls, not even 0, is its cost.
    pub fn unpriced(mut self) -> Recorder {
        self.cost_unknown = true;
        self.trajectory.totals.cost_usd = None;
        self
    }

    /// Counts time lost to a model call that failed for good (its attempts and the waits
    /// between them) as waiting, not working.
    pub fn add_lost_time(&mut self, secs: f64) {
        self.retry_wait_secs += secs;
        self.refresh_times();
    }

    /// Seconds since the trial started.
    pub fn elapsed(&self) -> f64 {
        self.started.elapsed().as_secs_f64()
    }

    /// Seconds since the start that were not spent waiting on model retries.
    pub fn working(&self) -> f64 {
        self.elapsed() - self.retry_wait_secs
    }

    /// Appends messages of the conversation; they are written with the next step or the end.
    pub fn extend_messages(&mut self, messages: impl IntoIterator<Item = ChatMessage>) {
        self.trajectory.messages.extend(messages);
    }

    /// Records a finished step, updates the totals, and writes the trajectory.
    pub fn push_step(&mut self, mut step: Step, diff: String) -> Result<()> {
        let t = &mut self.trajectory.totals;
        t.steps += 1;
        if let Some(m) = &step.model {
            match &m.tokens {
                Some(tok) => t.tokens.add(tok),
                None => t.calls_without_usage += 1,
            }
            match m.cost_usd {
                Some(c) => self.cost_sum += c,
                None => self.cost_unknown = true,
            }
            t.cost_usd = (!self.cost_unknown).then_some(self.cost_sum);
            t.model_secs += m.latency_secs;
            self.retry_wait_secs += m.retry_wait_secs;
        }
        if let Some(a) = &step.action {
            *t.actions.entry(a.kind).or_insert(0) += 1;
            t.command_secs += a.duration_secs;
        }
        if self.last_diff_sha != step.diff_sha256 {
            step.diff = Some(diff);
            t.steps_to_first_edit.get_or_insert(step.index);
            self.last_diff_sha = step.diff_sha256.clone();
        }
        self.trajectory.steps.push(step);
        self.refresh_times();
        self.save()
    }

    /// Adds the cost of a billed call that produced no step (a reply that failed mid-way).
    pub fn add_unstepped_cost(&mut self, cost: Option<f64>) {
        match cost {
            Some(c) => self.cost_sum += c,
            None => self.cost_unknown = true,
        }
        self.trajectory.totals.cost_usd = (!self.cost_unknown).then_some(self.cost_sum);
    }

    fn refresh_times(&mut self) {
        let wall = self.elapsed();
        let t = &mut self.trajectory.totals;
        t.wall_secs = wall;
        t.working_secs = wall - self.retry_wait_secs;
    }

    /// Ends the trial with an exit status (and the limit or error behind it) and writes it.
    pub fn finish(
        &mut self,
        status: ExitStatus,
        limit: Option<LimitFired>,
        error: Option<String>,
    ) -> Result<()> {
        self.trajectory.exit_status = status;
        self.trajectory.limit_fired = limit;
        self.trajectory.error = error;
        self.refresh_times();
        self.save()
    }

    /// Writes the trajectory atomically, if it has a path.
    pub fn save(&self) -> Result<()> {
        if let Some(p) = &self.path {
            faultline_schema::io::write_json_atomic(p, &self.trajectory)
                .with_context(|| format!("writing the trajectory {}", p.display()))?;
        }
        Ok(())
    }
}
