//! What a grade on the build track records: the share of hidden fault schedules a submission
//! passed, how the others failed, and which catalogued bugs it failed like. The grader's full
//! per-schedule report is a file of its own in the trial directory.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The build track's scores of one grade.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BuildScores {
    /// Hidden schedules passed.
    pub passed: usize,
    /// Hidden schedules graded.
    pub total: usize,
    /// Schedules failed, per kind of failure (`linearizability`, `liveness`, `panic`,
    /// `protocol`, `storage`, `timeout`, `checker_budget`).
    pub failures: BTreeMap<String, usize>,
    /// Schedules whose history was not linearizable.
    pub linearizability_violations: usize,
    /// The catalogued buggy variants this submission failed like (every one of a variant's
    /// catalogued schedules that the submission also failed, failed the same way): the kinds of
    /// bug that survived the trial's aid.
    pub resembles: Vec<String>,
    /// Set when the submission did not build (the end of the compiler's output).
    pub build_error: Option<String>,
    /// The rules of what a server may reach that the sources broke; a submission that breaks
    /// one is not built.
    pub rule_violations: Vec<String>,
}
