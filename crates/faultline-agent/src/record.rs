//! Keeping a trial's trajectory: each step is appended to `trajectory.partial.jsonl` as it is
//! recorded (one JSON line, so the harness's time per step does not grow with the trial and a
//! kill leaves every complete line readable), and the whole trajectory is written atomically to
//! `trajectory.json` when the trial ends, when the partial log is removed.

use anyhow::{Context, Result};
use faultline_schema::trajectory::{
    Action, AgentInfo, ChatMessage, LimitFired, Step, TRAJECTORY_SCHEMA_VERSION, Totals,
};
use faultline_schema::{ExitStatus, Task, Trajectory};
use serde::Serialize;
use sha2::{Digest, Sha256};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Instant, SystemTime};

/// The trajectory of a running trial and where it is written.
#[derive(Debug)]
pub struct Recorder {
    /// The trajectory so far.
    pub trajectory: Trajectory,
    path: Option<PathBuf>,
    /// The partial log, opened at the first step.
    partial: Option<std::fs::File>,
    /// Messages already in the partial log.
    messages_logged: usize,
    started: Instant,
    last_diff_sha: String,
    retry_wait_secs: f64,
    cost_sum: f64,
    cost_unknown: bool,
}

impl Recorder {
    /// Starts a trajectory; `path` is where it is written when the trial ends, its steps logged
    /// beside it as they come ([`partial_path`]); none: kept in memory.
    pub fn new(task: &Task, agent: AgentInfo, path: Option<PathBuf>) -> Recorder {
        Recorder {
            trajectory: Trajectory {
                schema_version: TRAJECTORY_SCHEMA_VERSION,
                trial_id: task.trial_id.clone(),
                case_id: task.case_id.clone(),
                track: task.track,
                condition: task.condition.clone(),
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
            partial: None,
            messages_logged: 0,
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
        self.refresh_times();
        self.log_step(&step)?;
        self.trajectory.steps.push(step);
        Ok(())
    }

    /// Appends a step, with the messages recorded since the last one and the totals after it,
    /// to the partial log as one line.
    fn log_step(&mut self, step: &Step) -> Result<()> {
        let Some(path) = &self.path else {
            return Ok(());
        };
        let partial = partial_path(path);
        if self.partial.is_none() {
            self.partial = Some(std::fs::File::create(&partial).with_context(|| {
                format!("writing the trajectory's step log {}", partial.display())
            })?);
        }
        let line = PartialLine {
            messages: &self.trajectory.messages[self.messages_logged..],
            step,
            totals: &self.trajectory.totals,
        };
        let mut bytes = serde_json::to_vec(&line)?;
        bytes.push(b'\n');
        let file = self.partial.as_mut().expect("opened above");
        file.write_all(&bytes)
            .with_context(|| format!("writing the trajectory's step log {}", partial.display()))?;
        self.messages_logged = self.trajectory.messages.len();
        Ok(())
    }

    /// Gives a recorded step (by position) the action it led to and the format error its reply
    /// had, as a scaffold's own record tells them after the trial; the totals follow.
    pub fn attach(&mut self, index: usize, action: Option<Action>, format_error: Option<String>) {
        let Some(step) = self.trajectory.steps.get_mut(index) else {
            return;
        };
        let totals = &mut self.trajectory.totals;
        if let Some(a) = &action {
            *totals.actions.entry(a.kind).or_insert(0) += 1;
            totals.command_secs += a.duration_secs;
        }
        step.action = action.or(step.action.take());
        step.format_error = format_error.or(step.format_error.take());
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
        if let Some(p) = &self.path {
            faultline_schema::io::write_json_atomic(p, &self.trajectory)
                .with_context(|| format!("writing the trajectory {}", p.display()))?;
            if self.partial.take().is_some() {
                let partial = partial_path(p);
                std::fs::remove_file(&partial)
                    .with_context(|| format!("removing {}", partial.display()))?;
            }
        }
        Ok(())
    }
}

/// One line of the partial log.
#[derive(Serialize)]
struct PartialLine<'a> {
    messages: &'a [ChatMessage],
    step: &'a Step,
    totals: &'a Totals,
}

/// Where the steps of a trial in progress are logged, beside its trajectory.
pub fn partial_path(trajectory: &Path) -> PathBuf {
    trajectory.with_extension("partial.jsonl")
}

/// A recorder of a repair trial of a built-in agent, for tests.
#[cfg(test)]
pub(crate) fn test_recorder(limits: &faultline_schema::Limits, path: Option<PathBuf>) -> Recorder {
    use faultline_schema::trajectory::AgentKind;
    use faultline_schema::{Condition, Track};
    let task = Task {
        schema_version: 1,
        trial_id: "c/repair/symptom/1".into(),
        case_id: "c".into(),
        track: Track::Repair,
        condition: Condition::symptom(),
        attempt: 1,
        seed: 1,
        crate_name: "kv".into(),
        bundle_files: Vec::new(),
        limits: limits.clone(),
    };
    let agent = AgentInfo {
        kind: AgentKind::Builtin,
        name: "m".into(),
        model: None,
        protocol: None,
        settings: Default::default(),
    };
    Recorder::new(&task, agent, path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use faultline_schema::Limits;
    use faultline_schema::trajectory::Role;

    fn step(index: u32) -> Step {
        Step {
            index,
            started_secs: 0.0,
            model: None,
            thought: Some(format!("thought {index}")),
            action: None,
            format_error: None,
            diff: None,
            diff_sha256: format!("{index}"),
        }
    }

    fn message(text: &str) -> ChatMessage {
        ChatMessage {
            role: Role::User,
            content: text.into(),
            tool_calls: Vec::new(),
            tool_call_id: None,
        }
    }

    #[test]
    fn steps_are_appended_as_lines_and_the_trajectory_is_written_at_the_end() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("trajectory.json");
        let mut rec = test_recorder(&Limits::default(), Some(path.clone()));
        rec.extend_messages([message("task")]);
        rec.push_step(step(1), "d1".into()).unwrap();
        rec.extend_messages([message("feedback")]);
        rec.push_step(step(2), "d2".into()).unwrap();
        // Mid-trial (as a kill would leave it): no trajectory yet, one complete line per step,
        // each with the messages that came before it.
        assert!(!path.exists());
        let log = std::fs::read_to_string(partial_path(&path)).unwrap();
        let lines: Vec<serde_json::Value> = log
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0]["messages"][0]["content"], "task");
        assert_eq!(lines[1]["messages"][0]["content"], "feedback");
        assert_eq!(lines[1]["step"]["index"], 2);
        assert_eq!(lines[1]["totals"]["steps"], 2);

        rec.finish(ExitStatus::Submitted, None, None).unwrap();
        let written: Trajectory = faultline_schema::io::read_json(&path, "trajectory").unwrap();
        assert_eq!(written.steps.len(), 2);
        assert_eq!(written.messages.len(), 2);
        assert!(!partial_path(&path).exists());
    }
}
