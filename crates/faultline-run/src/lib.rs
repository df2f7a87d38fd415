//! Benchmark runs: planning trials, running agents and graders with bounded concurrency,
//! recording results so a killed run resumes, and merging the shards of a cluster sweep.
//!
//! The modules' imports form no circle: `plan` and `records` are the bottom; `build` (the build
//! track's tasks, trial workspaces and grades) uses `plan`; `config` uses `build`; `lock` uses
//! `config`; `runner` uses them all; `regrade`, `report` and `merge` use only the bottom, and
//! `pack` uses `records` and `regrade`. The run
//! directory's layout is `faultline_schema::rundir`; grading and its cache are
//! `faultline_grade`.

pub mod agents;
pub mod build;
pub mod bundles;
pub mod config;
mod lock;
pub mod merge;
pub mod pack;
pub mod plan;
pub mod progress;
pub mod records;
pub mod regrade;
pub mod report;
pub mod runner;

pub use agents::AgentSpec;
pub use plan::Shard;
pub use runner::{Progress, ProgressEvent, RunConfig, RunSummary, run};
