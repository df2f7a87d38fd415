//! The sandbox protections a run or a grade ran under, as recorded in `lock.json` and in every
//! `grade.json`: a score earned without them is not comparable with one earned under them.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Whether a protection held.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ProtectionState {
    /// In force.
    Active,
    /// Turned off by the configuration.
    Off,
    /// Asked for but not possible on the machine.
    Unavailable,
}

/// One protection: its name, whether it held, and how (or why not).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ProtectionRecord {
    /// A short name, such as `dedicated identity` or `memory limit`.
    pub name: String,
    /// Whether it held.
    pub state: ProtectionState,
    /// How it was in force, or why it was not.
    pub detail: String,
}

/// The protections that did not hold, whether the machine could not give them or the
/// configuration turned them off, as `name (why)`: either way a score earned without them is not
/// comparable with one earned under them.
pub fn lacking(records: &[ProtectionRecord]) -> Vec<String> {
    records
        .iter()
        .filter(|p| p.state != ProtectionState::Active)
        .map(|p| match p.state {
            ProtectionState::Off => format!("{} (turned off: {})", p.name, p.detail),
            _ => format!("{} ({})", p.name, p.detail),
        })
        .collect()
}
