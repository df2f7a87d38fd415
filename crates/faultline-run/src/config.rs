//! A run's configuration: what the command line (or a caller of the library) decides.

use crate::agents::AgentSpec;
use crate::build::BuildTask;
use crate::plan::Shard;
use faultline_context::Providers;
use faultline_corpus::Case;
use faultline_model::PricingTable;
use faultline_schema::{Condition, GradingSettings, Limits, Track};
use std::path::PathBuf;

/// Everything a run is configured with.
#[derive(Debug, Clone)]
pub struct RunConfig {
    /// The run directory.
    pub out: PathBuf,
    /// The cases.
    pub cases: Vec<Case>,
    /// The agent configurations.
    pub agents: Vec<AgentSpec>,
    /// Tracks.
    pub tracks: Vec<Track>,
    /// Conditions.
    pub conditions: Vec<Condition>,
    /// The providers of conditions beyond the built-in ones.
    pub providers: Providers,
    /// Every case of the corpus, for the `irrelevant` control (which shows another case's
    /// bundle).
    pub corpus: Vec<Case>,
    /// Attempts per case, track and condition for model and external agents.
    pub attempts: u32,
    /// Attempts for baselines.
    pub baseline_attempts: u32,
    /// Budgets of every trial.
    pub limits: Limits,
    /// The run's seed.
    pub seed: u64,
    /// Trials (sandboxes) at once.
    pub workers: usize,
    /// Model calls at once, over all trials.
    pub model_workers: usize,
    /// This directory's shard of the run.
    pub shard: Option<Shard>,
    /// Accept a lock that differs from this configuration.
    pub force: bool,
    /// Redo trials whose grade was an infrastructure error.
    pub retry_infra: bool,
    /// Prices for built-in agents.
    pub pricing: PricingTable,
    /// Grading settings.
    pub grading: GradingSettings,
    /// The build track's tasks (used when the run's tracks include `build`).
    pub build_tasks: Vec<BuildTask>,
    /// The build track's aid files (`corpus/build/aids`).
    pub build_aids: PathBuf,
    /// Hidden schedules graded per build task: all when `None` (fewer for a quick run; the
    /// lock records it).
    pub build_schedules: Option<usize>,
}
