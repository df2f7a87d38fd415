//! `report.json`: the statistics of a run, format version 1, written by `faultline report` and at
//! the end of `faultline run`. The Markdown, terminal and HTML reports render the same numbers.
//!
//! Scores are fractions in `[0, 1]`: pass rates for repair and reproduction, budgeted block
//! coverage for diagnosis (DistDebug's block coverage is reported beside it). Every mean over
//! trials is case-weighted (attempts averaged within a case, cases weighted equally); intervals
//! are percentile case bootstraps with the recorded seed.

use crate::Category;
use crate::grade::Outcome;
use crate::protection::ProtectionRecord;
use crate::task::{Condition, Track};
use crate::trajectory::{ActionKind, AgentKind};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Format version of [`Report`].
pub const REPORT_SCHEMA_VERSION: u32 = 2;

/// The statistics of a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Report {
    /// Format version; 1.
    pub schema_version: u32,
    /// The faultline version that computed the report.
    pub faultline_version: String,
    /// What the run was.
    pub run: RunSummary,
    /// How the intervals were computed.
    pub bootstrap: BootstrapSettings,
    /// One entry per agent configuration, track and condition.
    pub groups: Vec<GroupStats>,
    /// Paired condition-minus-symptom differences, one per condition with a bundle, per agent
    /// and pooled over model agents.
    pub condition_effects: Vec<ConditionEffect>,
    /// What each context provider gave the run's cases, and what it cost.
    #[serde(default)]
    pub providers: Vec<ProviderSummary>,
    /// Paired differences between every two agent configurations, per track and condition.
    pub comparisons: Vec<Comparison>,
    /// The mixed-effects logistic regression of success on condition, per track.
    pub glmm: Vec<GlmmResult>,
    /// The cases of the run.
    pub cases: Vec<CaseSummary>,
    /// Mean score per agent, track, condition and case (the heat map).
    pub cells: Vec<Cell>,
    /// The check of an unpacked archive: its grades against a fresh re-grading.
    pub regrade: Option<RegradeCheck>,
    /// The build track, per agent, task and aid (empty without the track).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub build: Vec<BuildCell>,
}

/// What the run was, from `lock.json` and `results.jsonl`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RunSummary {
    /// The faultline version that made the run (absent without a lock).
    pub faultline_version: Option<String>,
    /// The run's seed (absent without a lock).
    pub seed: Option<u64>,
    /// The agent configurations with their kind (`builtin`, `external`, `baseline`, `imported`).
    pub agents: Vec<AgentSummary>,
    /// Tracks present in the results.
    pub tracks: Vec<Track>,
    /// Conditions present in the results.
    pub conditions: Vec<Condition>,
    /// Trials recorded.
    pub trials: usize,
    /// The sandbox protections the run's lock records (empty without a lock, or for runs made
    /// before they were recorded).
    #[serde(default)]
    pub protections: Vec<ProtectionRecord>,
}

/// An agent configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct AgentSummary {
    /// The name in results.
    pub name: String,
    /// `builtin`, `external`, `baseline` or `imported`; absent when the lock does not name it.
    pub kind: Option<AgentKind>,
    /// The model id, for built-in agents.
    pub model: Option<String>,
}

/// The bootstrap's settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct BootstrapSettings {
    /// Resamples per interval.
    pub resamples: usize,
    /// Coverage of the intervals.
    pub level: f64,
    /// Seed of the ChaCha8 stream (the same for every interval: common random numbers).
    pub seed: u64,
}

/// A mean with its bootstrap interval (absent with fewer than two cases).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Estimate {
    /// The case-weighted mean.
    pub value: f64,
    /// Lower bound of the interval.
    pub lower: Option<f64>,
    /// Upper bound of the interval.
    pub upper: Option<f64>,
}

/// pass@k and pass^k for one k, with the unbiased estimators, averaged over cases.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct PassK {
    /// The k.
    pub k: u32,
    /// Chance that at least one of k attempts succeeds.
    pub pass_at_k: f64,
    /// Chance that all k attempts succeed.
    pub pass_hat_k: f64,
    /// Cases averaged: those with at least k attempts (reports written before this was
    /// recorded read as 0).
    #[serde(default)]
    pub cases: u32,
}

/// The statistics of one agent configuration on one track and condition.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct GroupStats {
    /// The agent configuration.
    pub agent: String,
    /// The track.
    pub track: Track,
    /// The condition.
    pub condition: Condition,
    /// Cases with a score.
    pub cases: usize,
    /// Trials recorded, infrastructure errors included.
    pub trials: usize,
    /// Trials lost to infrastructure errors (no score; not failures of the agent).
    pub infra_errors: usize,
    /// The track's score with its interval; absent when no trial has one.
    pub score: Option<Estimate>,
    /// pass@k and pass^k for k = 1 up to the fewest scored attempts of a case (repair and
    /// reproduction only).
    pub pass_k: Vec<PassK>,
    /// Block precision (diagnosis only).
    pub precision: Option<f64>,
    /// DistDebug's block coverage without the line budget, shown beside the score for comparison
    /// (diagnosis only; absent when the results do not record it).
    #[serde(default)]
    pub block_coverage: Option<f64>,
    /// Tokens (input plus output) per trial.
    pub tokens: f64,
    /// Dollars per trial; absent when some trial's cost is unknown.
    pub cost_usd: Option<f64>,
    /// Wall-clock seconds per trial.
    pub wall_secs: f64,
    /// Steps per trial.
    pub steps: f64,
    /// Steps before the first edit, over the trials that edited; absent when none did.
    pub steps_to_first_edit: Option<f64>,
    /// Share of trials that edited the workspace.
    pub edited: f64,
    /// Actions per trial, by kind.
    pub actions: BTreeMap<ActionKind, f64>,
    /// Trials per outcome.
    pub outcomes: BTreeMap<Outcome, usize>,
    /// The score split by case attributes.
    pub breakdowns: Vec<Breakdown>,
}

/// The score on the cases sharing one level of a case attribute.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Breakdown {
    /// `system`, `category`, `tier` or `symptom_names_function`.
    pub attribute: String,
    /// The level (`openraft`, `3`, `true`, ...).
    pub level: String,
    /// Cases at this level.
    pub cases: usize,
    /// The score on them.
    pub score: Estimate,
}

/// The distribution of a paired case-bootstrap difference `first - second`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct PairedDifference {
    /// Cases both sides have.
    pub cases: usize,
    /// The observed mean difference.
    pub mean: f64,
    /// The second side's mean over the same cases (for a condition effect: the score with the
    /// symptom alone), which the difference is read against; 0 in reports written before it
    /// was recorded.
    #[serde(default)]
    pub second_mean: f64,
    /// Lower bound of the interval.
    pub lower: f64,
    /// Upper bound of the interval.
    pub upper: f64,
    /// Standard deviation of the resampled differences.
    pub std_error: f64,
    /// Share of resamples with a positive difference.
    pub share_positive: f64,
    /// Share of resamples with a negative difference.
    pub share_negative: f64,
    /// Quantiles of the resampled differences.
    pub quantiles: Vec<Quantile>,
    /// Histogram of the resampled differences.
    pub histogram: Histogram,
}

/// One quantile.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Quantile {
    /// The probability.
    pub p: f64,
    /// The value.
    pub value: f64,
}

/// An equal-width histogram.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Histogram {
    /// Bin edges, one more than there are bins.
    pub edges: Vec<f64>,
    /// Values per bin.
    pub counts: Vec<usize>,
}

/// A condition minus the symptom alone over the same cases.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ConditionEffect {
    /// The condition compared with `symptom`.
    pub condition: Condition,
    /// The agent configuration; absent for the pool of all model agents: per case, the
    /// configurations that ran it in both conditions, weighted equally.
    pub agent: Option<String>,
    /// The track.
    pub track: Track,
    /// The difference, or why there is none.
    pub difference: Option<PairedDifference>,
    /// Why the difference could not be computed.
    pub error: Option<String>,
}

/// One configuration minus another over the same cases.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Comparison {
    /// The track.
    pub track: Track,
    /// The condition.
    pub condition: Condition,
    /// The first configuration.
    pub first: String,
    /// The second configuration.
    pub second: String,
    /// `first - second`.
    pub difference: PairedDifference,
}

/// A coefficient of the GLMM with its Wald test.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Coefficient {
    /// The estimate on the logit scale.
    pub estimate: f64,
    /// Its standard error.
    pub std_error: f64,
    /// The Wald statistic.
    pub z: f64,
    /// The two-sided p-value.
    pub p_value: f64,
}

/// `success ~ condition + (1|agent) + (1|case)` by Laplace approximation, as lme4's `glmer`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct GlmmFitSummary {
    /// The intercept (symptom condition).
    pub intercept: Coefficient,
    /// One effect per condition with a bundle, against `symptom`.
    pub effects: Vec<GlmmEffect>,
    /// Standard deviation of the agent intercepts.
    pub sd_agent: f64,
    /// Standard deviation of the case intercepts.
    pub sd_case: f64,
    /// The Laplace log-likelihood.
    pub log_likelihood: f64,
    /// Whether a standard deviation is estimated at zero.
    pub singular: bool,
    /// Trials in the fit.
    pub observations: usize,
}

/// One condition's coefficient in the GLMM.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct GlmmEffect {
    /// The condition.
    pub condition: Condition,
    /// Its effect on the logit scale, against `symptom`.
    pub coefficient: Coefficient,
    /// `exp(estimate)`: the odds ratio of success with this condition's bundle.
    pub odds_ratio: f64,
    /// Lower bound of its 95% Wald interval.
    pub odds_ratio_lower: f64,
    /// Upper bound of its 95% Wald interval.
    pub odds_ratio_upper: f64,
}

/// What one context provider gave the run's cases.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ProviderSummary {
    /// The condition the provider's bundles are shown in.
    pub condition: Condition,
    /// The provider and its version.
    pub provider_version: String,
    /// Cases whose bundle agents saw.
    pub ready: usize,
    /// Cases whose bundle was refused, each with the reason (no trial ran there).
    pub refused: Vec<Refusal>,
    /// Mean tokens of a shown bundle.
    pub mean_tokens: f64,
    /// Dollars the provider spent over all cases (model providers); absent when free.
    pub cost_usd: Option<f64>,
    /// Per agent and track: dollars per solved case, the agent's cost and the provider's.
    pub cost_per_solved: Vec<CostPerSolved>,
}

/// A bundle refused for one case.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Refusal {
    /// The case.
    pub case: String,
    /// Why.
    pub reason: String,
}

/// The economics of one agent on one track with a provider, against the symptom alone.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct CostPerSolved {
    /// The agent configuration.
    pub agent: String,
    /// The track.
    pub track: Track,
    /// Dollars per solved case with the provider's bundle, its cost included; absent when
    /// nothing was solved or a cost is unknown.
    pub with_provider: Option<f64>,
    /// Dollars per solved case with the symptom alone.
    pub symptom_only: Option<f64>,
}

/// The GLMM of one track: the agents it covers and the fit, or why there is none.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct GlmmResult {
    /// The track.
    pub track: Track,
    /// The agents in the fit (model and external agents; baselines are deterministic).
    pub agents: Vec<String>,
    /// Cases in the fit.
    pub cases: usize,
    /// The fit.
    pub fit: Option<GlmmFitSummary>,
    /// Why there is no fit.
    pub error: Option<String>,
}

/// A case as the report breaks results down by it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct CaseSummary {
    /// The case id.
    pub id: String,
    /// Its system.
    pub system: String,
    /// Its category.
    pub category: Category,
    /// Its tier.
    pub tier: u8,
    /// Whether the symptom names a function holding a labeled block.
    pub symptom_names_function: bool,
}

/// The mean score of one agent, track, condition and case.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Cell {
    /// The agent configuration.
    pub agent: String,
    /// The track.
    pub track: Track,
    /// The condition.
    pub condition: Condition,
    /// The case.
    pub case: String,
    /// Scored attempts.
    pub attempts: usize,
    /// Mean over the scored attempts; absent when every attempt was an infrastructure error.
    pub mean: Option<f64>,
}

/// One agent's builds of one task under one aid: how much of the hidden schedules they passed,
/// and which catalogued bugs their failures looked like (the kinds of bug the aid let through).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct BuildCell {
    /// The agent configuration.
    pub agent: String,
    /// The build task.
    pub task: String,
    /// The aid (the trial's condition).
    pub aid: Condition,
    /// Scored trials.
    pub trials: usize,
    /// Mean share of hidden schedules passed; absent when no trial was scored.
    pub mean_share: Option<f64>,
    /// Schedules whose history was not linearizable, over all trials.
    pub linearizability_violations: usize,
    /// Catalogued buggy variants, with the number of trials that failed like each.
    pub survived: std::collections::BTreeMap<String, usize>,
}

/// The grades of an unpacked archive against a fresh re-grading of its submissions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RegradeCheck {
    /// Trials re-graded.
    pub trials: usize,
    /// Trials whose outcome and score came out the same.
    pub identical: usize,
    /// The trials that differ.
    pub differences: Vec<RegradeDifference>,
}

/// A trial whose re-grade differs from the archived grade.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RegradeDifference {
    /// The trial.
    pub trial_id: String,
    /// The outcome in the archive.
    pub archived_outcome: Outcome,
    /// The score in the archive.
    pub archived_score: Option<f64>,
    /// The outcome now.
    pub outcome: Outcome,
    /// The score now.
    pub score: Option<f64>,
}

/// `pack.json`: what a `faultline pack` archive holds, format version 1, so an unpacked copy
/// can be checked file by file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct PackManifest {
    /// Format version; 1.
    pub schema_version: u32,
    /// The faultline version that packed it.
    pub faultline_version: String,
    /// When (RFC 3339).
    pub packed_at: String,
    /// Every other file, relative to the run directory, with its SHA-256 and size.
    pub files: Vec<PackedFile>,
}

/// One file of an archive.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct PackedFile {
    /// Path relative to the run directory, `/`-separated.
    pub path: String,
    /// SHA-256 of the contents.
    pub sha256: String,
    /// Size in bytes.
    pub bytes: u64,
}

/// Format version of [`PackManifest`].
pub const PACK_SCHEMA_VERSION: u32 = 1;
