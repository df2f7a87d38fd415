//! What `faultline bench store --dir` has measured so far (`bench-store.json`), format version 1:
//! kept beside the bench's data directory so that a bench too long for one sitting (the whole
//! corpus takes hours) resumes where it was killed.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Format version of [`StoreBench`].
pub const STORE_BENCH_SCHEMA_VERSION: u32 = 1;

/// The file name in the bench's directory.
pub const STORE_BENCH_FILE: &str = "bench-store.json";

/// Each case's times so far, in the order they were measured.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct StoreBench {
    /// Format version; 1.
    pub schema_version: u32,
    /// One entry per case the bench has started.
    pub cases: Vec<StoreBenchCase>,
}

/// One case's measurements.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct StoreBenchCase {
    /// The case id.
    pub case_id: String,
    /// Seconds its preparation took; absent while it has not finished.
    pub prepare_secs: Option<f64>,
    /// Whether a bench was killed while preparing it, so that the time is of a preparation that
    /// found part of its work done (objects stored, sources fetched) and understates.
    pub resumed: bool,
    /// Seconds of bare builds of what its preparation compiles (`cargo build` and `cargo test
    /// --no-run` of the buggy crate, and the oracle's tests); absent while they have not finished.
    pub bare_secs: Option<f64>,
    /// The one-minute load average when its preparation started, to judge how far two rows
    /// measured at different times compare.
    pub load_before: Option<f64>,
}

impl StoreBench {
    /// A bench that has measured nothing.
    pub fn new() -> Self {
        StoreBench {
            schema_version: STORE_BENCH_SCHEMA_VERSION,
            cases: Vec::new(),
        }
    }

    /// The entry of `case_id`, made (empty) if the bench has not started it.
    pub fn entry(&mut self, case_id: &str) -> &mut StoreBenchCase {
        let at = match self.cases.iter().position(|c| c.case_id == case_id) {
            Some(at) => at,
            None => {
                self.cases.push(StoreBenchCase {
                    case_id: case_id.to_string(),
                    prepare_secs: None,
                    resumed: false,
                    bare_secs: None,
                    load_before: None,
                });
                self.cases.len() - 1
            }
        };
        &mut self.cases[at]
    }
}
