//! A run directory's records, format version 1: `lock.json` (what the run was configured with)
//! and `results.jsonl` (one line per finished trial, appended and fsynced).

use crate::grade::Outcome;
use crate::protection::ProtectionRecord;
use crate::task::{Condition, Limits, Track};
use crate::trajectory::{ActionKind, AgentInfo, ExitStatus, Tokens};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Format version of [`RunLock`] and [`ResultRecord`].
pub const RUN_SCHEMA_VERSION: u32 = 1;

/// A case as the run saw it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct LockedCase {
    /// The case id.
    pub id: String,
    /// SHA-256 over the case's files.
    pub sha256: String,
}

/// What a run was configured with; resuming under a different configuration is refused.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RunLock {
    /// Format version; 1.
    pub schema_version: u32,
    /// The faultline version.
    pub faultline_version: String,
    /// The agent configurations, by name.
    pub agents: Vec<AgentInfo>,
    /// The budgets of every trial.
    pub limits: Limits,
    /// The run's base seed.
    pub seed: u64,
    /// Attempts per case, track and condition (model and external agents).
    pub attempts: u32,
    /// Attempts for baselines, which are deterministic.
    pub baseline_attempts: u32,
    /// The tracks.
    pub tracks: Vec<Track>,
    /// The conditions.
    pub conditions: Vec<Condition>,
    /// The cases, with hashes.
    pub cases: Vec<LockedCase>,
    /// The pricing table's version (built-in agents).
    pub pricing: Option<String>,
    /// Grading settings: robustness seeds and reproduction runs.
    pub grading: String,
    /// The shard this directory holds, as `i/n`, when sharded.
    pub shard: Option<String>,
    /// The sandbox protections agents and grading ran under on the machine that made the run
    /// (empty in runs made before they were recorded).
    #[serde(default)]
    pub protections: Vec<ProtectionRecord>,
}

/// One finished trial: everything the statistics need without opening other files.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ResultRecord {
    /// Format version; 1.
    pub schema_version: u32,
    /// The trial.
    pub trial_id: String,
    /// The case.
    pub case_id: String,
    /// The case's system.
    pub system: String,
    /// The case's category.
    pub category: String,
    /// The case's tier.
    pub tier: u8,
    /// Whether the symptom names a function holding a labeled block.
    pub symptom_names_function: bool,
    /// The track.
    pub track: Track,
    /// The condition.
    pub condition: Condition,
    /// Attempt number, from 1.
    pub attempt: u32,
    /// The agent configuration's name.
    pub agent: String,
    /// How the agent's part ended.
    pub exit_status: ExitStatus,
    /// The grade.
    pub outcome: Outcome,
    /// The track's headline score (absent for infrastructure errors); for diagnosis, the
    /// budgeted coverage.
    pub score: Option<f64>,
    /// DistDebug's block coverage, without the line budget (diagnosis only; absent in lines
    /// written before it was recorded, whose `score` is this block coverage).
    #[serde(default)]
    pub block_coverage: Option<f64>,
    /// Block precision (diagnosis only).
    pub block_precision: Option<f64>,
    /// File-level coverage (diagnosis only).
    pub file_coverage: Option<f64>,
    /// Tokens used.
    pub tokens: Tokens,
    /// Dollars, absent when unknown.
    pub cost_usd: Option<f64>,
    /// Steps taken.
    pub steps: u32,
    /// Steps before the first edit.
    pub steps_to_first_edit: Option<u32>,
    /// Wall-clock seconds of the agent's part.
    pub wall_secs: f64,
    /// Working seconds of the agent's part.
    pub working_secs: f64,
    /// Actions per kind.
    pub actions: BTreeMap<ActionKind, u32>,
    /// When the trial finished (RFC 3339).
    pub finished_at: String,
}
