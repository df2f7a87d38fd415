//! A run directory's records, format version 1: `lock.json` (what the run was configured with)
//! and `results.jsonl` (one line per finished trial, appended and fsynced).

use crate::Category;
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
    /// SHA-256 over every file of the case directory: whatever an agent sees or the grader
    /// uses; resuming after it changed is refused.
    pub sha256: String,
}

/// The grading settings of a run: they change verdicts, so the lock records them, the grade
/// cache keys on them, and re-grading an archive uses the ones it was made with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GradingSettings {
    /// Further seeds a seeded oracle is run under after it passes (robustness).
    pub robustness_seeds: u32,
    /// Runs per version when grading reproducers.
    pub reproduction_k: u32,
}

impl Default for GradingSettings {
    fn default() -> Self {
        GradingSettings {
            robustness_seeds: 5,
            reproduction_k: 3,
        }
    }
}

impl GradingSettings {
    /// The settings as locks written before the field was typed recorded them
    /// (`robustness_seeds=N reproduction_k=M`; a missing key has its default); `None` for any
    /// other text.
    pub fn from_legacy_text(text: &str) -> Option<GradingSettings> {
        let mut settings = GradingSettings::default();
        for part in text.split_whitespace() {
            let (key, value) = part.split_once('=')?;
            let value: u32 = value.parse().ok()?;
            match key {
                "robustness_seeds" => settings.robustness_seeds = value,
                "reproduction_k" => settings.reproduction_k = value,
                _ => return None,
            }
        }
        Some(settings)
    }

    /// Reads the lock's field in either form: the typed object, or the legacy text.
    fn deserialize_recorded<'de, D: serde::Deserializer<'de>>(
        d: D,
    ) -> Result<GradingSettings, D::Error> {
        use serde::de::Error;
        match serde_json::Value::deserialize(d)? {
            serde_json::Value::String(text) => GradingSettings::from_legacy_text(&text)
                .ok_or_else(|| {
                    D::Error::custom(format!(
                        "grading settings {text:?} are not `robustness_seeds=N reproduction_k=M`"
                    ))
                }),
            other => GradingSettings::deserialize(other).map_err(|e| {
                D::Error::custom(format!(
                    "grading settings are not {{\"robustness_seeds\": N, \"reproduction_k\": M}}: {e}"
                ))
            }),
        }
    }
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
    /// The provider version of each condition with a bundle (empty in runs made before
    /// providers existed).
    #[serde(default)]
    pub providers: std::collections::BTreeMap<String, String>,
    /// The cases, with hashes.
    pub cases: Vec<LockedCase>,
    /// The build track's tasks, with hashes (empty without the track).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub build_tasks: Vec<LockedCase>,
    /// How many of each task's hidden schedules are graded, when not all (a quick run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub build_schedules: Option<usize>,
    /// The pricing table's version (built-in agents).
    pub pricing: Option<String>,
    /// Grading settings: robustness seeds and reproduction runs. Locks written before they were
    /// typed hold the text `robustness_seeds=N reproduction_k=M`, which is still read.
    #[serde(deserialize_with = "GradingSettings::deserialize_recorded")]
    pub grading: GradingSettings,
    /// The shard this directory holds, as `i/n`, when sharded.
    pub shard: Option<String>,
    /// The sandbox protections agents and grading ran under on the machine that made the run
    /// (empty in runs made before they were recorded).
    #[serde(default)]
    pub protections: Vec<ProtectionRecord>,
}

/// One finished trial: everything the statistics need without opening other files. On the build
/// track, `case_id` is the task's id, `system` is `build`, and the category and tier are the
/// task's.
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
    pub category: Category,
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
    /// Build-track scores (build track only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub build: Option<crate::BuildScores>,
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

#[cfg(test)]
mod tests {
    use super::*;

    fn lock() -> RunLock {
        RunLock {
            schema_version: RUN_SCHEMA_VERSION,
            faultline_version: "0.1.0".into(),
            agents: Vec::new(),
            limits: Limits::default(),
            seed: 0,
            attempts: 3,
            baseline_attempts: 1,
            tracks: vec![Track::Repair],
            conditions: vec![Condition::symptom()],
            providers: Default::default(),
            cases: Vec::new(),
            build_tasks: Vec::new(),
            build_schedules: None,
            pricing: None,
            grading: GradingSettings {
                robustness_seeds: 2,
                reproduction_k: 7,
            },
            shard: None,
            protections: Vec::new(),
        }
    }

    fn with_grading(grading: serde_json::Value) -> Result<RunLock, serde_json::Error> {
        let mut value = serde_json::to_value(lock()).unwrap();
        value["grading"] = grading;
        serde_json::from_value(value)
    }

    #[test]
    fn grading_settings_are_an_object_and_old_locks_still_read() {
        let value = serde_json::to_value(lock()).unwrap();
        assert_eq!(
            value["grading"],
            serde_json::json!({"robustness_seeds": 2, "reproduction_k": 7})
        );
        assert_eq!(serde_json::from_value::<RunLock>(value).unwrap(), lock());
        let old = with_grading("robustness_seeds=2 reproduction_k=7".into()).unwrap();
        assert_eq!(old, lock());
        assert_eq!(
            GradingSettings::from_legacy_text("reproduction_k=4"),
            Some(GradingSettings {
                robustness_seeds: 5,
                reproduction_k: 4
            })
        );
    }

    #[test]
    fn unreadable_grading_settings_are_named() {
        for bad in [
            serde_json::json!("robustness_seeds=x"),
            serde_json::json!("other=1"),
            serde_json::json!({"robustness_seeds": 1}),
            serde_json::json!(3),
        ] {
            let e = with_grading(bad.clone()).unwrap_err().to_string();
            assert!(e.contains("grading settings"), "{bad}: {e}");
        }
    }
}
