//! The one error type of this crate.

use crate::condition::{Condition, InvalidConditionName};

/// Everything that can go wrong in an analysis, so that callers get a clear
/// message instead of a panic or a silently wrong number.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum StatsError {
    /// An input that needs at least one element was empty.
    #[error("no data: {what} is empty")]
    Empty {
        /// Which input was empty.
        what: &'static str,
    },
    /// A configuration or case name was the empty string.
    #[error("empty {what} name in an observation")]
    EmptyName {
        /// `"config"` or `"case"`.
        what: &'static str,
    },
    /// An observed value was NaN or infinite.
    #[error("non-finite value {value} for config {config:?}, case {case:?}, attempt {attempt}")]
    NonFinite {
        /// Configuration of the offending observation.
        config: String,
        /// Case of the offending observation.
        case: String,
        /// Attempt number of the offending observation.
        attempt: u32,
        /// The value itself.
        value: f64,
    },
    /// A per-case score was NaN or infinite.
    #[error("non-finite score {value} for case {case:?}")]
    NonFiniteScore {
        /// The case.
        case: String,
        /// The score itself.
        value: f64,
    },
    /// A per-case score list named the same case twice.
    #[error("case {case:?} given twice")]
    DuplicateCase {
        /// The repeated case.
        case: String,
    },
    /// An observed value lay outside `[0, 1]`.
    #[error("value {value} outside [0, 1] for config {config:?}, case {case:?}, attempt {attempt}")]
    OutOfRange {
        /// Configuration of the offending observation.
        config: String,
        /// Case of the offending observation.
        case: String,
        /// Attempt number of the offending observation.
        attempt: u32,
        /// The value itself.
        value: f64,
    },
    /// The same (config, case, condition, attempt) was observed twice.
    #[error(
        "duplicate observation for config {config:?}, case {case:?}, {condition}, attempt {attempt}"
    )]
    Duplicate {
        /// Configuration of the duplicate.
        config: String,
        /// Case of the duplicate.
        case: String,
        /// Condition of the duplicate.
        condition: Condition,
        /// Attempt number of the duplicate.
        attempt: u32,
    },
    /// A pass/fail statistic met a value other than 0 or 1.
    #[error(
        "value {value} is not pass/fail (0 or 1) for config {config:?}, case {case:?}, attempt {attempt}"
    )]
    NotBinary {
        /// Configuration of the offending observation.
        config: String,
        /// Case of the offending observation.
        case: String,
        /// Attempt number of the offending observation.
        attempt: u32,
        /// The value itself.
        value: f64,
    },
    /// No observation exists for the requested configuration and condition.
    #[error("no observations for config {config:?} under {condition}")]
    UnknownGroup {
        /// Requested configuration.
        config: String,
        /// Requested condition.
        condition: Condition,
    },
    /// `k` was 0 or larger than the number of attempts `n`.
    #[error("k = {k} is invalid with n = {n} attempts{} (need 1 <= k <= n)", in_case(.case))]
    InvalidK {
        /// Case whose attempt count is too small, when known.
        case: Option<String>,
        /// Attempts available.
        n: u32,
        /// Requested k.
        k: u32,
    },
    /// Attempt and pass counts were inconsistent (more passes than attempts, or no attempts).
    #[error("invalid counts: {passes} passes out of {attempts} attempts")]
    InvalidCounts {
        /// Number of attempts.
        attempts: u32,
        /// Number of passes.
        passes: u32,
    },
    /// A paired comparison found a case on only one side.
    #[error(
        "case {case:?} is present in the {present_in} sample only; a paired comparison needs the same cases on both sides"
    )]
    UnpairedCase {
        /// The case without a partner.
        case: String,
        /// `"first"` or `"second"`.
        present_in: &'static str,
    },
    /// A breakdown needed an attribute that a case does not have.
    #[error("case {case:?} has no {attribute} attribute")]
    MissingAttribute {
        /// The case lacking the attribute.
        case: String,
        /// Name of the attribute.
        attribute: &'static str,
    },
    /// A condition name was empty or used characters outside lowercase ASCII letters,
    /// digits, `-`, `_` and `:`.
    #[error(transparent)]
    InvalidCondition(#[from] InvalidConditionName),
    /// The GLMM compares every condition with the baseline, which the data lacks.
    #[error(
        "the GLMM needs the baseline condition {baseline} to compare with, found only {found}",
        baseline = Condition::BASELINE
    )]
    MissingBaseline {
        /// The conditions present, comma-separated.
        found: String,
    },
    /// An option was outside its valid range.
    #[error("invalid option: {0}")]
    InvalidOption(String),
    /// A bootstrap had too few cases to say anything about variability.
    #[error("need at least {needed} cases, found {found}")]
    TooFewCases {
        /// Minimum number of cases.
        needed: usize,
        /// Number of cases given.
        found: usize,
    },
    /// A model term has fewer than two levels, so its effect is not identifiable.
    #[error("the GLMM needs at least two levels of {factor}, found {levels}")]
    SingleLevel {
        /// `"condition"`, `"config"` or `"case"`.
        factor: &'static str,
        /// Number of levels found.
        levels: usize,
    },
    /// Every attempt under one condition had the same outcome, so the
    /// logit-scale fixed effects are infinite (complete separation).
    #[error(
        "every attempt under condition {condition} {outcome}; the GLMM's fixed effects would be infinite (complete separation)"
    )]
    Separation {
        /// The condition without variation.
        condition: Condition,
        /// `"passed"` or `"failed"`.
        outcome: &'static str,
    },
    /// The GLMM fit broke down numerically.
    #[error("GLMM fit failed: {0}")]
    GlmmFailed(String),
}

/// Shorthand used throughout the crate.
pub type Result<T> = std::result::Result<T, StatsError>;

fn in_case(case: &Option<String>) -> String {
    case.as_ref()
        .map(|c| format!(" in case {c:?}"))
        .unwrap_or_default()
}
