//! Judging one run: did the servers stay correct (no panic, no malformed answer, a linearizable
//! history, storage within its limit) and available (every operation answered in time)?

#[cfg(feature = "checker")]
use faultline_linearize::models::KvModel;
#[cfg(feature = "checker")]
use faultline_linearize::{CheckOptions, Verdict, check};
use serde::{Deserialize, Serialize};

use crate::history::digest;
use crate::plan::Schedule;
use crate::sim::RunReport;
use crate::transport::NetStats;

/// Search steps the linearizability check may take on one history. Histories of a correct
/// store take a few thousand per key; the budget is steps, not seconds, so every machine reaches
/// the same verdict.
#[cfg(feature = "checker")]
const CHECK_STEPS: u64 = 50_000_000;
/// Steps for shrinking a counterexample on top of the verdict's.
#[cfg(feature = "checker")]
const MINIMIZE_STEPS: u64 = 5_000_000;
/// Protocol errors quoted in a failure.
const QUOTED: usize = 5;

/// Why a schedule failed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Failure {
    /// A server panicked.
    Panic {
        /// What the simulator reported.
        message: String,
    },
    /// A server answered a get with an acknowledgement, or a write with a value.
    Protocol {
        /// How many such answers.
        count: usize,
        /// The first few.
        first: Vec<String>,
    },
    /// The history is not linearizable.
    Linearizability {
        /// The key whose operations admit no order.
        key: String,
        /// A small set of that key's operations that admit none, even with the context.
        operations: Vec<String>,
        /// Operations of that key the set needs as background, each free to have taken effect
        /// anywhere in its interval or not at all (typically the write a stale read saw).
        context: Vec<String>,
        /// Whether removing any one of them makes them linearizable.
        one_minimal: bool,
    },
    /// The checker's step budget ran out before a verdict (counted as a failure: the grade
    /// must not pass what it could not check).
    CheckerBudget,
    /// A server held more bytes in storage than the limit.
    Storage {
        /// Which server.
        node: u32,
        /// Its most bytes at once.
        peak_bytes: u64,
        /// The limit.
        limit: u64,
    },
    /// Operations were still unanswered when the run's time was up.
    Liveness {
        /// Operations answered.
        completed: usize,
        /// Operations of the workload.
        operations: u32,
    },
    /// The run took longer than the grader's wall-clock limit (a server that never yields).
    Timeout {
        /// The limit, in seconds.
        seconds: u64,
    },
}

impl Failure {
    /// The failure's kind as written in results, e.g. `linearizability`.
    pub fn kind(&self) -> &'static str {
        match self {
            Failure::Panic { .. } => "panic",
            Failure::Protocol { .. } => "protocol",
            Failure::Linearizability { .. } => "linearizability",
            Failure::CheckerBudget => "checker_budget",
            Failure::Storage { .. } => "storage",
            Failure::Liveness { .. } => "liveness",
            Failure::Timeout { .. } => "timeout",
        }
    }
}

/// The result of one schedule.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScheduleResult {
    /// The schedule's name.
    pub schedule: String,
    /// Its seed.
    pub seed: u64,
    /// Whether the servers passed.
    pub passed: bool,
    /// Why not.
    pub failure: Option<Failure>,
    /// Operations answered.
    pub completed: usize,
    /// Operations of the workload.
    pub operations: u32,
    /// Simulated time the run took.
    pub sim_ms: u64,
    /// SHA-256 of the history's JSON lines: a rerun must reproduce it.
    pub history_sha256: String,
    /// The most bytes any server held in storage.
    pub peak_storage: u64,
    /// What happened to messages.
    pub net: NetStats,
}

/// Judges `report`, the run of `schedule`.
pub fn judge(schedule: &Schedule, report: &RunReport) -> ScheduleResult {
    let operations = schedule.plan.workload.operations;
    let completed = report
        .history
        .operations()
        .iter()
        .filter(|o| o.ret.is_some())
        .count();
    ScheduleResult {
        schedule: schedule.name.clone(),
        seed: schedule.seed,
        passed: false,
        failure: None,
        completed,
        operations,
        sim_ms: report.sim_ms,
        history_sha256: digest(&report.history),
        peak_storage: report.peak_storage.iter().copied().max().unwrap_or(0),
        net: report.net.clone(),
    }
    .with(first_failure(schedule, report, completed))
}

impl ScheduleResult {
    fn with(mut self, failure: Option<Failure>) -> Self {
        self.passed = failure.is_none();
        self.failure = failure;
        self
    }

    /// A schedule that failed without a run to judge: stopped by the grader's wall clock, or
    /// lost with the process that ran it.
    pub fn unrun(schedule: &Schedule, failure: Failure) -> Self {
        ScheduleResult {
            schedule: schedule.name.clone(),
            seed: schedule.seed,
            passed: false,
            failure: Some(failure),
            completed: 0,
            operations: schedule.plan.workload.operations,
            sim_ms: 0,
            history_sha256: String::new(),
            peak_storage: 0,
            net: NetStats::default(),
        }
    }
}

fn first_failure(schedule: &Schedule, report: &RunReport, completed: usize) -> Option<Failure> {
    if let Some(message) = &report.crashed_with {
        return Some(Failure::Panic {
            message: message.clone(),
        });
    }
    if !report.protocol_errors.is_empty() {
        return Some(Failure::Protocol {
            count: report.protocol_errors.len(),
            first: report
                .protocol_errors
                .iter()
                .take(QUOTED)
                .cloned()
                .collect(),
        });
    }
    if let Some(failure) = linearizability(report) {
        return Some(failure);
    }
    let limit = schedule.plan.limits.storage_bytes;
    if let Some((node, &peak)) = report
        .peak_storage
        .iter()
        .enumerate()
        .find(|(_, peak)| **peak > limit)
    {
        return Some(Failure::Storage {
            node: u32::try_from(node).unwrap_or(u32::MAX),
            peak_bytes: peak,
            limit,
        });
    }
    (completed < operations_of(schedule)).then_some(Failure::Liveness {
        completed,
        operations: schedule.plan.workload.operations,
    })
}

/// Whether the history is linearizable against the key-value model, within the step budget.
#[cfg(feature = "checker")]
fn linearizability(report: &RunReport) -> Option<Failure> {
    let options = CheckOptions {
        max_steps: Some(CHECK_STEPS),
        timeout: None,
        minimize: true,
        minimize_max_steps: Some(MINIMIZE_STEPS),
    };
    let result = check(&KvModel, &report.history, &options);
    match result.verdict {
        Verdict::Linearizable => None,
        Verdict::Unknown => Some(Failure::CheckerBudget),
        Verdict::Illegal => {
            let ops = report.history.operations();
            let lines = |indices: &[usize]| indices.iter().map(|&i| describe(&ops[i])).collect();
            Some(match result.counterexample {
                Some(c) => Failure::Linearizability {
                    operations: lines(&c.operations),
                    context: lines(&c.context),
                    key: c.key,
                    one_minimal: c.one_minimal,
                },
                None => Failure::Linearizability {
                    key: String::new(),
                    operations: Vec::new(),
                    context: Vec::new(),
                    one_minimal: false,
                },
            })
        }
    }
}

/// Without the checker (an agent's `simulator` aid) histories are not judged: a run passes on
/// the other checks alone.
#[cfg(not(feature = "checker"))]
fn linearizability(_: &RunReport) -> Option<Failure> {
    None
}

fn operations_of(schedule: &Schedule) -> usize {
    schedule.plan.workload.operations as usize
}

/// One operation for a report: who, when, what, and what came back.
#[cfg(feature = "checker")]
fn describe(
    op: &faultline_linearize::Operation<
        faultline_linearize::models::KvInput,
        faultline_linearize::models::KvOutput,
    >,
) -> String {
    let input = serde_json::to_string(&op.input).unwrap_or_default();
    match &op.ret {
        Some(r) => format!(
            "client {} called {input} at {} us, returned {} at {} us",
            op.client,
            op.call,
            serde_json::to_string(&r.output).unwrap_or_default(),
            r.time
        ),
        None => format!(
            "client {} called {input} at {} us, never returned",
            op.client, op.call
        ),
    }
}
