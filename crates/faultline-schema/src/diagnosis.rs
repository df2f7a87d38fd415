//! `diagnosis.json`: the causal code blocks an agent names, format version 1.
//!
//! ```json
//! {
//!   "schema_version": 1,
//!   "blocks": [
//!     { "file": "src/transaction.rs", "start_line": 640, "end_line": 648,
//!       "symbol": "TransactionMut::apply_delete", "explanation": "..." }
//!   ],
//!   "summary": "optional free text"
//! }
//! ```

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Format version of [`Diagnosis`].
pub const DIAGNOSIS_SCHEMA_VERSION: u32 = 1;

/// Most blocks a diagnosis may name; more is an invalid submission, not a better score.
pub const MAX_DIAGNOSIS_BLOCKS: usize = 50;

/// Lines of a diagnosis that the score reads: its blocks count in its own order until they name
/// more lines than this, so naming more code cannot buy a higher score. Three blocks as long as
/// the longest labeled block of the corpus (20 lines; no case labels more than 3 blocks), so every
/// case's labeled blocks fit three times over (the rule and its numbers: `docs/grading.md`).
pub const DIAGNOSIS_LINE_BUDGET: u32 = 60;

/// A diagnosis.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Diagnosis {
    /// Format version; 1.
    pub schema_version: u32,
    /// The blocks, most important first.
    pub blocks: Vec<DiagnosedBlock>,
    /// Free text: the agent's account of the failure.
    #[serde(default)]
    pub summary: Option<String>,
}

/// One named block.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DiagnosedBlock {
    /// Path relative to the crate root (`src/x.rs`); `./` and `/workspace/` prefixes are accepted.
    pub file: String,
    /// First line, 1-based, inclusive.
    pub start_line: u32,
    /// Last line, 1-based, inclusive.
    pub end_line: u32,
    /// The enclosing function or item.
    #[serde(default)]
    pub symbol: Option<String>,
    /// Why this block causes the failure.
    #[serde(default)]
    pub explanation: Option<String>,
}

/// Why a diagnosis was not accepted. The message, recorded as the grade's reason, is complete,
/// so the parser's error is not also the `source`.
#[derive(Debug, thiserror::Error)]
pub enum DiagnosisError {
    /// Not JSON of the right shape (unknown fields included), with line and column.
    #[error("diagnosis.json is not valid: {0}")]
    Json(serde_json::Error),
    /// Valid JSON, but it breaks a rule of the format.
    #[error("diagnosis.json is not valid: {0}")]
    Invalid(String),
}

impl Diagnosis {
    /// Parses and checks a diagnosis.
    pub fn from_json(text: &str) -> Result<Diagnosis, DiagnosisError> {
        let d: Diagnosis = serde_json::from_str(text).map_err(DiagnosisError::Json)?;
        if d.schema_version != DIAGNOSIS_SCHEMA_VERSION {
            return Err(DiagnosisError::Invalid(format!(
                "schema_version {} is not supported; use {DIAGNOSIS_SCHEMA_VERSION}",
                d.schema_version
            )));
        }
        if d.blocks.len() > MAX_DIAGNOSIS_BLOCKS {
            return Err(DiagnosisError::Invalid(format!(
                "{} blocks named; at most {MAX_DIAGNOSIS_BLOCKS} are accepted",
                d.blocks.len()
            )));
        }
        Ok(d)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_rejects() {
        let ok =
            r#"{"schema_version":1,"blocks":[{"file":"src/a.rs","start_line":3,"end_line":5}]}"#;
        assert_eq!(Diagnosis::from_json(ok).unwrap().blocks.len(), 1);
        let unknown = ok.replace("\"end_line\":5", "\"end_line\":5,\"confidence\":0.9");
        assert!(
            Diagnosis::from_json(&unknown)
                .unwrap_err()
                .to_string()
                .contains("unknown field `confidence`")
        );
        assert!(Diagnosis::from_json("{").is_err());
        assert!(Diagnosis::from_json(&ok.replace(":1,", ":2,")).is_err());
    }
}
