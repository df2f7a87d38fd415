//! Benchmark runs: planning trials, running agents and graders with bounded concurrency,
//! recording results so a killed run resumes, and merging the shards of a cluster sweep.

pub mod grading;
pub mod merge;
pub mod pack;
pub mod plan;
pub mod progress;
pub mod regrade;
pub mod report;
pub mod results;
pub mod runner;

pub use plan::Shard;
pub use runner::{AgentSpec, Progress, ProgressEvent, RunConfig, RunSummary, run};
