//! `task.json`: what one trial asks of an agent, format version 1. It is written into the task
//! directory an external agent receives, together with `symptom.md` and (in the `context`
//! condition) `context/*.md`.

pub use crate::condition::Condition;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::fmt;

/// Format version of [`Task`].
pub const TASK_SCHEMA_VERSION: u32 = 1;

/// What the agent must produce.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Track {
    /// Name the causal code blocks (`diagnosis.json`).
    Diagnose,
    /// Fix the bug (the workspace diff, or a submitted patch).
    Repair,
    /// Write a test that fails on the buggy version and passes on the fixed one.
    Reproduce,
    /// Implement a protocol from a task's text; graded on hidden fault schedules.
    Build,
}

impl Track {
    /// Every track.
    pub const ALL: [Track; 4] = [
        Track::Diagnose,
        Track::Repair,
        Track::Reproduce,
        Track::Build,
    ];
    /// The tracks on a case's bug.
    pub const BUGS: [Track; 3] = [Track::Diagnose, Track::Repair, Track::Reproduce];

    /// The snake_case name.
    pub fn as_str(self) -> &'static str {
        match self {
            Track::Diagnose => "diagnose",
            Track::Repair => "repair",
            Track::Reproduce => "reproduce",
            Track::Build => "build",
        }
    }
}

impl fmt::Display for Track {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Track {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Track::ALL
            .into_iter()
            .find(|t| t.as_str() == s)
            .ok_or_else(|| {
                format!("unknown track `{s}`; expected diagnose, repair, reproduce or build")
            })
    }
}

/// The budgets of one trial; the one that fired is recorded in the trajectory.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    /// Model calls (steps) allowed; DDBench uses 450.
    pub steps: u32,
    /// Dollars allowed; refused up front when the model's price is unknown.
    pub cost_usd: Option<f64>,
    /// Total tokens (input + output) allowed.
    pub tokens: Option<u64>,
    /// Wall-clock seconds for the whole trial; DDBench uses 30 minutes.
    pub wall_secs: u64,
    /// Working seconds: wall time minus time spent waiting on model retries.
    pub working_secs: Option<u64>,
    /// Seconds one command may run before its process tree is killed.
    pub command_timeout_secs: u64,
    /// Characters kept of a command's output (head and tail).
    pub output_cap_chars: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            steps: 450,
            cost_usd: Some(5.0),
            tokens: None,
            wall_secs: 30 * 60,
            working_secs: None,
            command_timeout_secs: 300,
            output_cap_chars: 10_000,
        }
    }
}

/// One trial's task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Task {
    /// Format version; 1.
    pub schema_version: u32,
    /// `<case>/<track>/<condition>/<attempt>`.
    pub trial_id: String,
    /// The case.
    pub case_id: String,
    /// The track.
    pub track: Track,
    /// The condition.
    pub condition: Condition,
    /// Attempt number, from 1.
    pub attempt: u32,
    /// Seed for every random choice of this trial.
    pub seed: u64,
    /// The name of the crate under `/workspace`.
    pub crate_name: String,
    /// File names of the bundle (in `context/`), empty in the symptom condition.
    pub bundle_files: Vec<String>,
    /// The budgets.
    pub limits: Limits,
}

impl Task {
    /// The id of a trial.
    pub fn trial_id(case: &str, track: Track, condition: &Condition, attempt: u32) -> String {
        format!("{case}/{track}/{condition}/{attempt}")
    }
}
