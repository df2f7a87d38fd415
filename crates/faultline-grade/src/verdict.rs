//! Verdicts that the code under test cannot forge.
//!
//! The patched crate runs in the same process as libtest, so it can print lines shaped like
//! libtest's events and end the process with any status. Printed events and the exit status are
//! therefore only believed within a setup that every grade builds afresh from a seed the
//! operating system provides:
//!
//! - **Random names.** The oracle's tests are not run under their own names. Wrapper tests with
//!   random names call them, from a module appended to a copy of the oracle's source; an in-crate
//!   oracle is compiled as a module with a random name. Nothing a test thread can see names the
//!   oracle.
//! - **One process per wrapper.** Each wrapper runs alone (`--exact NAME`), and its process must
//!   report exactly that test, once. A forger that ends its process only decides that process,
//!   and one that claims tests it was not asked to run is caught.
//! - **Canaries.** Further wrappers, shaped like the real ones and calling the same oracle test
//!   functions (so forging code gets control inside them too), carry a `should_panic` whose
//!   expected message is random: they fail whatever the test function does. A canary that
//!   reports `ok`, or whose process exits with status 0, is proof of forgery. The regression run,
//!   one process over the crate's own tests, gets canaries of its own that must report `failed`.
//!
//! What stays possible is written down in `docs/grading.md`.
//!
//! The pieces, one job each: `names` draws every random choice from the grade's seed, `wrappers`
//! finds the oracle's tests and writes the wrappers into its source, `plan` decides the whole
//! setup of a grade and writes it into a workbench, `judge` judges one process's output, and
//! `run` runs and judges the oracle's wrappers.

mod judge;
mod names;
mod plan;
mod run;
mod wrappers;

pub use judge::{Judged, judge_regression, judge_wrapper};
pub use names::fresh_seed;
pub use plan::{ORACLE_CANARIES_PER_TEST, REGRESSION_CANARIES, VerdictPlan};
pub use run::{OracleVerdict, run_oracle};
pub use wrappers::{Role, Wrapper};
