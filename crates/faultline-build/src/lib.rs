//! The build track's grader, over the harness in `faultline-sim`.
//!
//! - [`task`]: a task directory's `task.toml` (the crate, the server type, the hidden
//!   schedules' seeds and profile).
//! - [`runner`]: grading one submission: its `src/` taken under the skeleton's manifest, the
//!   legality check, the driver built and every schedule run, each in a sandbox ([`confine`]).
//! - [`catalog`]: the buggy variants of a task's reference and the schedules that catch each.
//! - [`trial`]: what an agent works in: the skeleton over a view of the harness that holds only
//!   what the trial's aid gives, in a sandbox.

pub mod catalog;
mod confine;
mod error;
pub mod runner;
pub mod task;
pub mod trial;
