//! The build track's harness: a submission's servers run in a deterministic simulation under a
//! seeded fault schedule while clients issue key-value operations against them, and the
//! history the clients record is checked for linearizability.
//!
//! - [`api`]: what a submission implements ([`Server`]) and what it gets ([`Network`],
//!   [`Storage`], [`Clock`]).
//! - [`plan`]: a [`Schedule`] is a seed and a [`FaultPlan`] (loss, duplication, delays,
//!   partitions, crashes, clock skew, the workload, the limits), serde and versioned.
//! - [`generate`]: schedules drawn from a seed, one family of faults each.
//! - [`run`]: one run of a schedule (servers as turmoil hosts, faults our transport and clock
//!   add, clients that retry and record the history).
//! - [`judge`]: a run's verdict: panic, protocol error, linearizability, storage, liveness.
//!
//! Grading a submission (tasks, the sandboxed build and runs, the catalog of buggy variants) is
//! the crate `faultline-build`, so that what a submission links stays small.
//!
//! Features are the build track's aids: without `simulator` only [`api`] is compiled (an agent
//! given the task's text alone links this), `simulator` adds the simulator, and `checker` (on
//! by default, as the grader builds it) adds the linearizability check to the verdict.
//!
//! The same schedule gives the same history byte for byte: every choice is drawn from the
//! schedule's seed (ChaCha8 streams per server incarnation and per client, turmoil's own
//! generator for latencies) and time is simulated.

pub mod api;
#[cfg(feature = "simulator")]
mod client;
#[cfg(feature = "simulator")]
mod clock;
#[cfg(feature = "simulator")]
mod disk;
#[cfg(feature = "simulator")]
pub mod driver;
#[cfg(feature = "simulator")]
pub mod generate;
#[cfg(feature = "simulator")]
pub mod grade;
#[cfg(feature = "simulator")]
pub mod history;
#[cfg(feature = "simulator")]
pub mod plan;
#[cfg(feature = "simulator")]
mod relay;
#[cfg(feature = "simulator")]
mod seed;
#[cfg(feature = "simulator")]
mod sim;
#[cfg(feature = "simulator")]
mod transport;
#[cfg(feature = "simulator")]
pub mod verdict;

pub use api::{
    ClientReply, ClientRequest, Clock, Env, KvOp, MAX_PAYLOAD, Message, Network, NodeId, Quorums,
    Server, Storage, recv_until,
};
#[cfg(feature = "simulator")]
pub use clock::SimClock;
#[cfg(feature = "simulator")]
pub use disk::SimStorage;
#[cfg(feature = "simulator")]
pub use plan::{FaultPlan, PlanError, Schedule};
#[cfg(feature = "simulator")]
pub use sim::{RunReport, run};
#[cfg(feature = "simulator")]
pub use transport::{NetStats, SimNet};
#[cfg(feature = "simulator")]
pub use verdict::{Failure, ScheduleResult, judge};
