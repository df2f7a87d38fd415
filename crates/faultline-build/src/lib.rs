//! The build track's grader, over the harness in `faultline-sim`.
//!
//! - [`task`]: a task directory's `task.toml` (the crate, the server type, the hidden
//!   schedules' seeds and profile).
//! - [`runner`]: grading one submission: its `src/` taken under the skeleton's manifest, the
//!   legality check, the driver built and every schedule run, each in a sandbox ([`confine`]).
//! - [`catalog`]: the buggy variants of a task's reference and the schedules that catch each.

pub mod catalog;
mod confine;
mod error;
pub mod runner;
pub mod task;
