//! The experimental knob, apart from the data that carries it, so that errors can name it
//! without depending on the data model.

use std::fmt;

/// The two matched conditions of a case; the benchmark's experimental knob.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Condition {
    /// The agent sees only the repository and the symptom report (the baseline).
    Symptom,
    /// The agent additionally gets the curated debug-context bundle.
    Context,
}

impl Condition {
    /// Both conditions, baseline first, so loops and tables share one order.
    pub const ALL: [Condition; 2] = [Condition::Symptom, Condition::Context];

    /// Lower-case name used in tables and CSV files.
    pub fn as_str(self) -> &'static str {
        match self {
            Condition::Symptom => "symptom",
            Condition::Context => "context",
        }
    }
}

impl fmt::Display for Condition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
