//! `grade.json`: the verdict on one submission, format version 1, written beside the trial.

use crate::protection::ProtectionRecord;
use crate::task::Track;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Format version of [`Grade`].
pub const GRADE_SCHEMA_VERSION: u32 = 1;

/// The outcome of grading a submission.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Repair: the oracle, the regression tests and the robustness seeds all pass.
    Pass,
    /// Repair: the hidden oracle fails.
    FailOracle,
    /// Repair: the oracle passes but a regression test fails.
    FailRegression,
    /// Repair: the oracle passes on its own seed but fails under seeds the agent never saw.
    FailRobustness,
    /// Repair: the patch does not apply, is binary, or touches nothing the crate compiles.
    PatchError,
    /// Repair: the patched crate or the oracle does not compile.
    BuildError,
    /// Repair: the oracle or the regression tests ran out of time.
    Timeout,
    /// Repair: the test output was forged (a test that fails whatever happens reported `ok`, a
    /// run reported tests it was not asked to run, or its events contradict themselves).
    Tampered,
    /// Repair or reproduction: a build or a test ran into a resource limit of the grading
    /// sandbox (memory, disk or processes; the reason names it). Scores 0 and is never cached,
    /// so a grade under higher limits decides again.
    ResourceLimit,
    /// Diagnosis: scored (see the scores).
    Scored,
    /// Reproduction: fails on the buggy version and passes with the gold patch, k times each.
    Valid,
    /// Reproduction: fails on both versions.
    FailsOnBoth,
    /// Reproduction: passes on both versions.
    PassesOnBoth,
    /// Reproduction: the test does not compile against the crate's public API.
    DoesNotCompile,
    /// Reproduction: its result changes between runs.
    Flaky,
    /// Reproduction: the test breaks a rule of the track (it reads files, the environment,
    /// other processes or the network, or uses unsafe code); the details name the rule.
    Illegal,
    /// The submission is missing or malformed (bad JSON, unknown fields, absurd lines).
    InvalidSubmission,
    /// The grader itself failed; never counted as a failure of the agent.
    InfraError,
}

impl Outcome {
    /// Whether this outcome counts as a success of its track.
    pub fn is_success(self) -> bool {
        matches!(self, Outcome::Pass | Outcome::Valid)
    }

    /// The snake_case name.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Pass => "pass",
            Outcome::FailOracle => "fail_oracle",
            Outcome::FailRegression => "fail_regression",
            Outcome::FailRobustness => "fail_robustness",
            Outcome::PatchError => "patch_error",
            Outcome::BuildError => "build_error",
            Outcome::Timeout => "timeout",
            Outcome::Tampered => "tampered",
            Outcome::ResourceLimit => "resource_limit",
            Outcome::Scored => "scored",
            Outcome::Valid => "valid",
            Outcome::FailsOnBoth => "fails_on_both",
            Outcome::PassesOnBoth => "passes_on_both",
            Outcome::DoesNotCompile => "does_not_compile",
            Outcome::Flaky => "flaky",
            Outcome::Illegal => "illegal",
            Outcome::InvalidSubmission => "invalid_submission",
            Outcome::InfraError => "infra_error",
        }
    }
}

/// How one run of a test executable (the oracle, a reproducer) ended, judged from its exit
/// status and libtest's events.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RunVerdict {
    /// Every selected test ran and passed, and the process exited 0.
    Pass,
    /// At least one test failed.
    Fail,
    /// The wall-clock limit fired.
    Timeout,
    /// The process died or exited without finishing the suite (abort, stack overflow, exit).
    Crash,
    /// No test was selected, so nothing was checked.
    NoTests,
    /// The event stream contradicts itself.
    Tampered,
}

impl RunVerdict {
    /// Whether this run counts as the code failing the tests (a legitimate failure, as opposed
    /// to a run that checked nothing or was forged).
    pub fn is_failure(self) -> bool {
        matches!(
            self,
            RunVerdict::Fail | RunVerdict::Timeout | RunVerdict::Crash
        )
    }

    /// The snake_case name.
    pub fn as_str(self) -> &'static str {
        match self {
            RunVerdict::Pass => "pass",
            RunVerdict::Fail => "fail",
            RunVerdict::Timeout => "timeout",
            RunVerdict::Crash => "crash",
            RunVerdict::NoTests => "no_tests",
            RunVerdict::Tampered => "tampered",
        }
    }
}

impl std::fmt::Display for RunVerdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Diagnosis scores: the budgeted coverage that ranks, and DistDebug's measures beside it (the
/// matching rule is in docs/grading.md).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
pub struct DiagnosisScores {
    /// The track's score: the share of labeled blocks that some diagnosed block overlaps, among
    /// the blocks read, in the diagnosis's order, before it names more than 60 lines
    /// (`DIAGNOSIS_LINE_BUDGET`), so that naming more code cannot raise it. Grades written before
    /// it existed (grader version 2 and older) read as 0; `faultline grade` recomputes them.
    #[serde(default)]
    pub budgeted_coverage: f64,
    /// How many of the diagnosis's blocks, from the first, were read before the line budget ran
    /// out (all of them when it did not).
    #[serde(default)]
    pub blocks_read: u32,
    /// DistDebug's block coverage, with no budget: the share of labeled blocks that some
    /// diagnosed block overlaps. Kept for comparison with DistDebug; naming whole files earns it.
    pub block_coverage: f64,
    /// Share of the diagnosed lines that lie inside labeled blocks.
    pub block_precision: f64,
    /// Share of the labeled blocks' files that the diagnosis names.
    pub file_coverage: f64,
    /// Line-level F1 between diagnosed and labeled lines.
    pub line_f1: f64,
    /// Number of blocks named.
    pub blocks_named: u32,
    /// Number of lines named (after merging overlaps).
    pub lines_named: u32,
    /// Blocks that were ignored, with the reason (file missing, range outside the file, reversed).
    pub rejected_blocks: Vec<String>,
}

/// Repair details.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
pub struct RepairDetails {
    /// Files the patch changed that were applied.
    pub applied_files: Vec<String>,
    /// Files the patch changed that were dropped (tests, manifests, build scripts, the oracle's
    /// location, anything outside the crate's sources), with the reason.
    pub dropped: Vec<String>,
    /// Oracle verdict on the primary seed.
    pub oracle: Option<RunVerdict>,
    /// Regression: tests passed, and the names that failed.
    pub regression_passed: Option<u32>,
    /// Regression failures.
    pub regression_failures: Vec<String>,
    /// Robustness: seeds tried beyond the first.
    pub robustness_seeds: u32,
    /// Robustness: seeds that passed.
    pub robustness_passed: u32,
    /// The build error or patch error text (capped).
    pub error: Option<String>,
    /// The per-grade seed (16 hex digits, drawn from the operating system) that the names of the
    /// oracle's wrappers, canaries and modules, the canaries' expected messages and the order of
    /// the runs were derived from, so that an audit can replay them.
    pub grade_seed: Option<String>,
}

/// Reproduction details.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
pub struct ReproductionDetails {
    /// Runs on the buggy version that failed, of `k`.
    pub buggy_failures: u32,
    /// Runs with the gold patch that passed, of `k`.
    pub gold_passes: u32,
    /// Runs per version.
    pub k: u32,
    /// Changes the agent made to the crate itself, discarded before grading.
    pub discarded_files: Vec<String>,
    /// The compiler error, if it did not compile.
    pub error: Option<String>,
    /// The rules an illegal reproducer breaks, one line each: where, which rule, what.
    #[serde(default)]
    pub violations: Vec<String>,
}

/// Hashes of everything the grade depends on, for the grade cache and for audits.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
pub struct GradeInputs {
    /// SHA-256 of the submission file.
    pub submission_sha256: String,
    /// SHA-256 over every file of the case directory (`case.toml`, symptom, bundle, oracle,
    /// lockfile), the same hash the run's lock and the validation record.
    pub case_sha256: String,
    /// The faultline version.
    pub faultline_version: String,
}

/// The verdict on one submission.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Grade {
    /// Format version; 1.
    pub schema_version: u32,
    /// The trial.
    pub trial_id: String,
    /// The case.
    pub case_id: String,
    /// The track.
    pub track: Track,
    /// The outcome.
    pub outcome: Outcome,
    /// A one-line reason, for humans.
    pub reason: String,
    /// The headline number of the track: 1/0 for repair and reproduction, budgeted coverage for
    /// diagnosis, the share of hidden schedules passed for a build; absent for infrastructure
    /// errors.
    pub score: Option<f64>,
    /// Diagnosis scores.
    pub diagnosis: Option<DiagnosisScores>,
    /// Repair details.
    pub repair: Option<RepairDetails>,
    /// Reproduction details.
    pub reproduction: Option<ReproductionDetails>,
    /// Build-track scores (absent on the other tracks and in grades made before the track).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub build: Option<crate::BuildScores>,
    /// What was graded.
    pub inputs: GradeInputs,
    /// When (RFC 3339).
    pub graded_at: String,
    /// Seconds grading took.
    pub wall_secs: f64,
    /// The sandbox protections the grading sandbox ran under (absent in grades made before they
    /// were recorded).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub protections: Vec<ProtectionRecord>,
}
