//! A rate a curator measured, such as how often an oracle fails on the buggy version.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A measured rate, written `"F/N"`: `failed` of `runs` runs failed. A placeholder such as
/// `"TBD"` is refused when the case loads, so a rate nobody measured cannot pass for one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(try_from = "String", into = "String")]
#[schemars(with = "String")]
pub struct FailureRate {
    /// Runs that failed.
    pub failed: u32,
    /// Runs made, at least one.
    pub runs: u32,
}

impl TryFrom<String> for FailureRate {
    type Error = String;

    fn try_from(text: String) -> Result<Self, String> {
        let bad = || format!("`{text}` is not a measured rate such as \"100/100\" (failed/runs)");
        let (failed, runs) = text.split_once('/').ok_or_else(bad)?;
        let (failed, runs): (u32, u32) = (
            failed.trim().parse().map_err(|_| bad())?,
            runs.trim().parse().map_err(|_| bad())?,
        );
        if runs == 0 || failed > runs {
            return Err(bad());
        }
        Ok(FailureRate { failed, runs })
    }
}

impl From<FailureRate> for String {
    fn from(rate: FailureRate) -> String {
        format!("{}/{}", rate.failed, rate.runs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rate_is_a_measured_fraction_and_anything_else_is_refused() {
        let read = |text: &str| serde_json::from_value::<FailureRate>(text.into());
        assert_eq!(
            read("97/100").unwrap(),
            FailureRate {
                failed: 97,
                runs: 100
            }
        );
        assert_eq!(String::from(read("97/100").unwrap()), "97/100");
        for bad in ["TBD", "5", "6/5", "1/0", "a/b"] {
            let err = read(bad).unwrap_err().to_string();
            assert!(err.contains("measured rate"), "{bad}: {err}");
        }
    }
}
