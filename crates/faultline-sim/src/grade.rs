//! Grading a server on many schedules: the per-schedule results and the share passed, as the
//! JSON result file a grade writes.

use std::io::Write;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::api::Server;
use crate::history::to_jsonl;
use crate::plan::{PlanError, Schedule};
use crate::sim::run;
use crate::verdict::{ScheduleResult, judge};

/// The result format's version.
pub const RESULT_VERSION: u32 = 1;

/// A submission's grade on a task's schedules.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GradeReport {
    /// Always [`RESULT_VERSION`].
    pub version: u32,
    /// The task.
    pub task: String,
    /// What was graded (a directory, with the patch applied to it if any).
    pub submission: String,
    /// Set when the submission did not build: the end of the compiler's output. No schedule
    /// ran.
    pub build_error: Option<String>,
    /// Set when the submission's sources break the rules of what a server may reach (a file,
    /// the environment, a process, the network, unsafe code...), one line per violation: it
    /// was neither built nor run.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rule_violations: Vec<String>,
    /// Every schedule's result, in the task's order.
    pub schedules: Vec<ScheduleResult>,
    /// Schedules passed.
    pub passed: usize,
    /// Schedules in the task.
    pub total: usize,
    /// `passed / total` (0 when nothing ran).
    pub share_passed: f64,
    /// Wall-clock seconds building the submission.
    #[serde(default)]
    pub build_seconds: f64,
    /// Wall-clock seconds running and judging the schedules (one process, one thread).
    #[serde(default)]
    pub run_seconds: f64,
}

impl GradeReport {
    /// A report over `schedules` results, of `total` schedules.
    pub fn new(task: &str, submission: &str, schedules: Vec<ScheduleResult>, total: usize) -> Self {
        let passed = schedules.iter().filter(|s| s.passed).count();
        GradeReport {
            version: RESULT_VERSION,
            task: task.to_string(),
            submission: submission.to_string(),
            build_error: None,
            rule_violations: Vec::new(),
            share_passed: if total == 0 {
                0.0
            } else {
                passed as f64 / total as f64
            },
            schedules,
            passed,
            total,
            build_seconds: 0.0,
            run_seconds: 0.0,
        }
    }

    /// The report of a submission refused before its build for breaking the rules.
    pub fn refused(task: &str, submission: &str, total: usize, violations: Vec<String>) -> Self {
        GradeReport {
            rule_violations: violations,
            ..GradeReport::new(task, submission, Vec::new(), total)
        }
    }

    /// The report of a submission that did not build.
    pub fn build_failed(task: &str, submission: &str, total: usize, error: String) -> Self {
        GradeReport {
            build_error: Some(error),
            ..GradeReport::new(task, submission, Vec::new(), total)
        }
    }
}

/// Runs and judges one schedule; with `histories`, a failed schedule's history is written there
/// as `<name>.jsonl` for a reader to inspect.
pub fn grade_one<S: Server>(
    schedule: &Schedule,
    histories: Option<&Path>,
) -> Result<ScheduleResult, PlanError> {
    let report = run::<S>(schedule)?;
    let result = judge(schedule, &report);
    if let Some(dir) = histories.filter(|_| !result.passed) {
        let path = dir.join(format!("{}.jsonl", schedule.name));
        if let Err(e) = std::fs::write(&path, to_jsonl(&report.history)) {
            eprintln!("cannot write {}: {e}", path.display());
        }
    }
    Ok(result)
}

/// Grades `S` on every schedule in this process, writing each result as a JSON line to `out`
/// as soon as it is known, after `marker` and a space: a server's own prints to the same stream
/// are not mistaken for results.
pub fn grade_all<S: Server>(
    schedules: &[Schedule],
    histories: Option<&Path>,
    marker: &str,
    out: &mut impl Write,
) -> Result<Vec<ScheduleResult>, PlanError> {
    let mut results = Vec::with_capacity(schedules.len());
    for schedule in schedules {
        let result = grade_one::<S>(schedule, histories)?;
        let line = serde_json::to_string(&result).expect("a result always encodes");
        // A reader that went away (the grader stopped waiting) is not this run's failure.
        let _ = writeln!(out, "{marker} {line}").and_then(|()| out.flush());
        results.push(result);
    }
    Ok(results)
}
