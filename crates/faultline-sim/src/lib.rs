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
//! The same schedule gives the same history byte for byte: every choice is drawn from the
//! schedule's seed (ChaCha8 streams per server incarnation and per client, turmoil's own
//! generator for latencies) and time is simulated.

pub mod api;
mod client;
mod clock;
mod disk;
pub mod driver;
pub mod generate;
pub mod grade;
pub mod history;
pub mod plan;
mod relay;
mod seed;
mod sim;
mod transport;
pub mod verdict;

pub use api::{
    ClientReply, ClientRequest, Clock, Env, KvOp, MAX_PAYLOAD, Message, Network, NodeId, Quorums,
    Server, Storage, recv_until,
};
pub use clock::SimClock;
pub use disk::SimStorage;
pub use plan::{FaultPlan, PlanError, Schedule};
pub use sim::{RunReport, run};
pub use transport::{NetStats, SimNet};
pub use verdict::{Failure, ScheduleResult, judge};
