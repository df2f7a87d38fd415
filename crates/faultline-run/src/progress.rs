//! Statistics of a run in progress, taken from its events: trials done and running, how many
//! ended in an infrastructure error, what they cost, their outcomes, and when the run should
//! end. Computed here so that whoever shows progress (the `faultline` command's bar or log
//! lines) only draws them.

use faultline_schema::{Outcome, ResultRecord};
use std::collections::BTreeMap;
use std::time::Instant;

/// What a run reports while it works.
#[derive(Debug, Clone)]
pub enum ProgressEvent {
    /// Preparing a case's workspace.
    Preparing(String),
    /// The plan: trials in this shard, already finished, to do now.
    Planned {
        /// Trials in this shard.
        total: usize,
        /// Already finished.
        done: usize,
        /// To run now.
        pending: usize,
    },
    /// A trial started.
    Started(String),
    /// A trial finished and was recorded.
    Finished(Box<ResultRecord>),
}

/// Receives progress events (a terminal display or log lines).
pub trait Progress: Send + Sync {
    /// Called for every event, from any task.
    fn event(&self, e: ProgressEvent);
}

/// What a finished run did.
#[derive(Debug, Clone, Default)]
pub struct RunSummary {
    /// Trials in this shard.
    pub total: usize,
    /// Trials finished before this invocation.
    pub resumed: usize,
    /// Trials run now.
    pub ran: usize,
    /// Trials not run because their condition's bundle was refused for their case.
    pub refused: usize,
    /// Outcomes of all recorded trials.
    pub outcomes: BTreeMap<String, usize>,
    /// Cases this invocation prepared, or checked where they were prepared before.
    pub cases_ready: usize,
    /// Seconds spent preparing (or checking prepared) cases before the first trial.
    pub prepare_secs: f64,
}

/// What a run has done so far, as its progress events tell it.
#[derive(Debug, Clone, Default)]
pub struct ProgressStats {
    /// Trials in this shard.
    pub total: usize,
    /// Trials finished, by earlier invocations and by this one.
    pub done: usize,
    /// Trials running now.
    pub running: usize,
    /// Trials finished by this invocation whose grade is an infrastructure error.
    pub infra_errors: usize,
    /// Dollars spent by the trials finished by this invocation whose cost is known.
    pub cost_usd: f64,
    /// Whether a trial finished by this invocation has no known cost, so that
    /// [`Self::cost_usd`] is only a lower bound.
    pub cost_unknown: bool,
    /// Trials finished by this invocation, by outcome name.
    pub outcomes: BTreeMap<&'static str, usize>,
    /// When the plan was made; the pace is measured from here.
    planned_at: Option<Instant>,
    /// Trials finished since the plan.
    finished_now: usize,
}

impl ProgressStats {
    /// Takes one event into account; `now` is when it happened.
    pub fn record(&mut self, event: &ProgressEvent, now: Instant) {
        match event {
            ProgressEvent::Preparing(_) => {}
            ProgressEvent::Planned { total, done, .. } => {
                self.total = *total;
                self.done = *done;
                self.planned_at = Some(now);
            }
            ProgressEvent::Started(_) => self.running += 1,
            ProgressEvent::Finished(r) => {
                self.running = self.running.saturating_sub(1);
                self.done += 1;
                self.finished_now += 1;
                if r.outcome == Outcome::InfraError {
                    self.infra_errors += 1;
                }
                match r.cost_usd {
                    Some(c) => self.cost_usd += c,
                    None => self.cost_unknown = true,
                }
                *self.outcomes.entry(r.outcome.as_str()).or_insert(0) += 1;
            }
        }
    }

    /// Seconds from `now` until every trial is done, at the mean pace of the trials finished
    /// since the plan; `None` before the plan or before one of them finished.
    pub fn eta_secs(&self, now: Instant) -> Option<f64> {
        let planned_at = self.planned_at?;
        if self.finished_now == 0 {
            return None;
        }
        let per = now.duration_since(planned_at).as_secs_f64() / self.finished_now as f64;
        Some(per * self.total.saturating_sub(self.done) as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// A trial's end as `results.jsonl` records it, with the fields these statistics read.
    fn finished(trial: &str, outcome: &str, cost_usd: Option<f64>) -> ProgressEvent {
        let line = serde_json::json!({
            "schema_version": 1,
            "trial_id": trial,
            "case_id": "toy-kv-lost-write",
            "system": "toy-kv",
            "category": "replication-consistency",
            "tier": 2,
            "symptom_names_function": false,
            "track": "repair",
            "condition": "symptom",
            "attempt": 1,
            "agent": "null",
            "exit_status": "submitted",
            "outcome": outcome,
            "score": null,
            "block_precision": null,
            "file_coverage": null,
            "tokens": { "input": 0, "cached_input": 0, "cache_write": 0, "output": 0, "reasoning": 0 },
            "cost_usd": cost_usd,
            "steps": 0,
            "steps_to_first_edit": null,
            "wall_secs": 1.0,
            "working_secs": 1.0,
            "actions": {},
            "finished_at": "2026-01-01T00:00:00Z",
        });
        ProgressEvent::Finished(Box::new(serde_json::from_value(line).unwrap()))
    }

    fn planned(total: usize, done: usize) -> ProgressEvent {
        ProgressEvent::Planned {
            total,
            done,
            pending: total - done,
        }
    }

    #[test]
    fn trials_are_counted_by_state_outcome_and_cost() {
        let now = Instant::now();
        let mut stats = ProgressStats::default();
        for event in [
            ProgressEvent::Preparing("toy-kv-lost-write".into()),
            planned(5, 1),
            ProgressEvent::Started("a".into()),
            ProgressEvent::Started("b".into()),
            ProgressEvent::Started("c".into()),
            finished("a", "pass", Some(0.25)),
            finished("b", "infra_error", Some(0.5)),
        ] {
            stats.record(&event, now);
        }
        assert_eq!(
            (stats.total, stats.done, stats.running, stats.infra_errors),
            (5, 3, 1, 1)
        );
        assert_eq!(stats.cost_usd, 0.75);
        assert!(!stats.cost_unknown);
        assert_eq!(
            stats.outcomes.into_iter().collect::<Vec<_>>(),
            [("infra_error", 1), ("pass", 1)]
        );
    }

    #[test]
    fn a_trial_without_a_known_cost_makes_the_cost_a_lower_bound() {
        let now = Instant::now();
        let mut stats = ProgressStats::default();
        stats.record(&planned(2, 0), now);
        stats.record(&finished("a", "fail_oracle", Some(1.5)), now);
        stats.record(&finished("b", "fail_oracle", None), now);
        assert_eq!(stats.cost_usd, 1.5);
        assert!(stats.cost_unknown);
        assert_eq!(stats.outcomes.get("fail_oracle"), Some(&2));
    }

    #[test]
    fn the_eta_follows_the_pace_since_the_plan() {
        let start = Instant::now();
        let at = |secs| start + Duration::from_secs(secs);
        let mut stats = ProgressStats::default();
        assert_eq!(stats.eta_secs(at(0)), None);
        stats.record(&planned(4, 1), at(0));
        assert_eq!(stats.eta_secs(at(5)), None);
        // One trial in 10 s, two to go.
        stats.record(&finished("a", "pass", None), at(10));
        assert_eq!(stats.eta_secs(at(10)), Some(20.0));
        // Two trials in 30 s, one to go.
        stats.record(&finished("b", "pass", None), at(30));
        assert_eq!(stats.eta_secs(at(30)), Some(15.0));
        stats.record(&finished("c", "pass", None), at(36));
        assert_eq!(stats.eta_secs(at(36)), Some(0.0));
    }
}
