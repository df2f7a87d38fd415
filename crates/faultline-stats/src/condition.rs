//! The experimental knob, apart from the data that carries it, so that errors can name it
//! without depending on the data model.

use std::cmp::Ordering;
use std::fmt;
use std::str::FromStr;

/// A condition name that [`Condition::new`] rejected. Its own type, so this
/// module needs nothing from the rest of the crate; it converts into
/// [`crate::StatsError::InvalidCondition`] with `?`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid condition name {name:?}: use lowercase ASCII letters, digits, '-', '_' and ':'")]
pub struct InvalidConditionName {
    /// The rejected name.
    pub name: String,
}

/// What the agent was given besides the repository: one level of the benchmark's
/// experimental factor.
///
/// An open label rather than a fixed list, because context providers (and user-named
/// external ones) add conditions without a change here. `symptom` is the baseline every
/// other level is compared with. Conditions order baseline first and then by name, so
/// tables and the GLMM's coefficients share one stable order.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Condition(String);

impl Condition {
    /// Name of the baseline: the agent sees only the repository and the symptom report.
    pub const BASELINE: &'static str = "symptom";

    /// Validates a name: non-empty, lowercase ASCII letters, digits, `-`, `_` and `:`
    /// (as in `model:small`), so a name is safe in tables, CSV files and R formulas.
    pub fn new(name: impl Into<String>) -> Result<Self, InvalidConditionName> {
        let name = name.into();
        let allowed =
            |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '-' | '_' | ':');
        if name.is_empty() || !name.chars().all(allowed) {
            return Err(InvalidConditionName { name });
        }
        Ok(Self(name))
    }

    /// The baseline condition, `symptom`.
    pub fn symptom() -> Self {
        Self(Self::BASELINE.to_owned())
    }

    /// The curated debug-context bundle, `context`.
    pub fn context() -> Self {
        Self("context".to_owned())
    }

    /// Whether this is the baseline every other condition is compared with.
    pub fn is_baseline(&self) -> bool {
        self.0 == Self::BASELINE
    }

    /// The name, as used in tables and CSV files.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl Ord for Condition {
    fn cmp(&self, other: &Self) -> Ordering {
        (!self.is_baseline(), &self.0).cmp(&(!other.is_baseline(), &other.0))
    }
}

impl PartialOrd for Condition {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl FromStr for Condition {
    type Err = InvalidConditionName;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::new(s)
    }
}

impl fmt::Display for Condition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_validated() {
        for good in ["symptom", "model:small", "ext-provider_2"] {
            assert_eq!(Condition::new(good).unwrap().as_str(), good);
        }
        for bad in ["", "Context", "with space", "naïve", "a,b"] {
            assert_eq!(
                bad.parse::<Condition>(),
                Err(InvalidConditionName {
                    name: bad.to_owned()
                })
            );
        }
    }

    #[test]
    fn baseline_sorts_first_then_by_name() {
        let mut levels: Vec<Condition> = ["static", "context", "symptom", "a", "model:small"]
            .into_iter()
            .map(|n| Condition::new(n).unwrap())
            .collect();
        levels.sort();
        let names: Vec<&str> = levels.iter().map(Condition::as_str).collect();
        assert_eq!(names, ["symptom", "a", "context", "model:small", "static"]);
    }
}
