//! The case validation report (`faultline cases validate --json`), format version 1.

use crate::grade::RunVerdict;
use crate::{Category, OracleKind};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Format version of [`ValidationReport`].
pub const VALIDATION_SCHEMA_VERSION: u32 = 1;

/// The result of validating a set of cases.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct ValidationReport {
    /// Format version; 1.
    pub schema_version: u32,
    /// The faultline version that validated.
    pub faultline_version: String,
    /// When validation finished (UTC, RFC 3339).
    pub finished_at: String,
    /// Oracle runs per version (k).
    pub k: u32,
    /// One entry per case, in id order.
    pub cases: Vec<CaseValidation>,
}

/// The validation of one case.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct CaseValidation {
    /// The case id.
    pub case_id: String,
    /// The system.
    pub system: String,
    /// The failure category.
    pub category: Category,
    /// The tier.
    pub tier: u8,
    /// `external` or `in-crate`.
    pub oracle_kind: OracleKind,
    /// Whether every check passed.
    pub passed: bool,
    /// Every rule the case breaks, in words; empty when it passes.
    pub problems: Vec<String>,
    /// The checks that need no build (absent if the case could not be prepared).
    pub static_checks: Option<StaticReport>,
    /// Oracle runs on the buggy version.
    pub buggy: Option<VariantResult>,
    /// Oracle runs with the gold patch applied: the case's minimal fix (`fix.diff`), or the
    /// release diff for a case that has none (which is then a problem).
    pub gold: Option<VariantResult>,
    /// Whether the gold patch was the case's minimal fix (absent in reports written before
    /// minimal fixes existed).
    #[serde(default)]
    pub minimal_fix: Option<bool>,
    /// Each decoy of the case, graded like the gold patch (absent in reports written before
    /// decoys existed).
    #[serde(default)]
    pub decoys: Option<Vec<DecoyResult>>,
    /// Whether the bundle generator reproduced the committed bundle (absent in reports written
    /// before it was checked, or when the case could not be prepared).
    #[serde(default)]
    pub bundle: Option<BundleCheck>,
    /// Seconds spent preparing the workspace (near zero when it was already prepared).
    pub prepare_secs: f64,
    /// Seconds for the whole validation of this case.
    pub wall_secs: f64,
    /// SHA-256 over every file of the case directory when it was validated, so a report can
    /// tell that a case changed since (absent in reports written before it was recorded).
    #[serde(default)]
    pub case_sha256: Option<String>,
    /// When this case's validation finished (UTC, RFC 3339); a merged report keeps each
    /// case's own date.
    #[serde(default)]
    pub validated_at: Option<String>,
}

impl CaseValidation {
    /// Oracle runs that failed on the buggy version.
    pub fn buggy_failures(&self) -> u32 {
        self.buggy
            .as_ref()
            .map_or(0, |v| v.runs.iter().filter(|r| r.failed).count() as u32)
    }

    /// Oracle runs that passed with the gold patch.
    pub fn gold_passes(&self) -> u32 {
        self.gold
            .as_ref()
            .map_or(0, |v| v.runs.iter().filter(|r| r.passed).count() as u32)
    }

    /// Decoys caught every time, and decoys tried (`None` for reports from before decoys).
    pub fn decoys_caught(&self) -> Option<(usize, usize)> {
        self.decoys
            .as_ref()
            .map(|d| (d.iter().filter(|d| d.caught).count(), d.len()))
    }
}

/// A decoy patch graded like the gold patch. It is caught when it builds and then every oracle
/// run fails or the regression tests fail; one that does not build proves nothing.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct DecoyResult {
    /// The decoy's name (`decoys/<name>.diff`).
    pub name: String,
    /// Its class, as in `case.toml`.
    pub class: crate::case::DecoyClass,
    /// Whether the oracle failed on every run or the regression tests failed.
    pub caught: bool,
    /// The oracle and regression results with the decoy applied.
    pub result: VariantResult,
}

/// The checks of a case that need its sources but no build.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct StaticReport {
    /// Tokens in `symptom.md` (o200k).
    pub symptom_tokens: usize,
    /// Tokens in all bundle files together.
    pub bundle_tokens: usize,
    /// Number of bundle files.
    pub bundle_files: usize,
    /// Source files the gold patch changes.
    pub gold_files: usize,
    /// Lines the gold patch adds or removes.
    pub gold_changed_lines: u32,
    /// Number of labeled blocks.
    pub blocks: usize,
    /// Leaks found in the symptom and the bundle.
    pub leaks: Vec<LeakFinding>,
    /// The causal functions (enclosing a labeled block) that the symptom names.
    pub symptom_names: Vec<String>,
    /// Rules broken; empty when the static checks pass.
    pub problems: Vec<String>,
}

/// One leak: where it is and why it counts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct LeakFinding {
    /// The text that leaks (`symptom.md` or `context/<file>`).
    pub file: String,
    /// 1-based line in that text.
    pub line: usize,
    /// What kind of leak it is.
    pub kind: LeakKind,
    /// The offending fragment.
    pub excerpt: String,
}

/// The kinds of leak the check knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum LeakKind {
    /// A line the gold patch adds.
    FixLine,
    /// The fixed version number or commit.
    FixedVersion,
    /// An upstream issue, pull request, commit or repository reference.
    UpstreamReference,
    /// A quoted string found on a line the fix rewrites.
    QuoteLocatesFix,
}

/// The bundle generator (`context/generator/`) built against the buggy version and run once per
/// bundle file, its output compared byte for byte with the committed file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct BundleCheck {
    /// What the comparison found.
    pub status: BundleStatus,
    /// The bundle files (`context/<file>`) whose generated text differs from the committed one.
    #[serde(default)]
    pub drifted: Vec<String>,
    /// Why the generator could not be built or run, when it could not.
    #[serde(default)]
    pub reason: Option<String>,
    /// Seconds to build the generator (vendoring its dependencies included).
    pub build_secs: f64,
    /// Seconds for the whole check.
    pub secs: f64,
}

/// What the bundle check found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum BundleStatus {
    /// The generator printed every bundle file exactly.
    Reproduced,
    /// The generator ran, and at least one file differs from what it printed.
    Drifts,
    /// The generator is missing, does not build, or exited with an error.
    Failed,
}

impl BundleStatus {
    /// The status as the report writes it.
    pub fn name(self) -> &'static str {
        match self {
            BundleStatus::Reproduced => "reproduced",
            BundleStatus::Drifts => "drifts",
            BundleStatus::Failed => "failed",
        }
    }
}

/// Oracle and regression results for one version of the code.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct VariantResult {
    /// The build error, when the oracle or the regression tests did not compile.
    pub build_error: Option<String>,
    /// Seconds to build the tests.
    pub build_secs: f64,
    /// One entry per oracle run.
    pub runs: Vec<OracleRun>,
    /// With the gold patch of a seeded oracle: one run on each seed grading checks a repair's
    /// robustness on by default, which a correct repair must pass too (absent in reports
    /// written before they were run; empty for other versions).
    #[serde(default)]
    pub robustness_runs: Vec<OracleRun>,
    /// The regression tests, run once.
    pub regression: Option<RegressionRun>,
}

/// One run of the oracle.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct OracleRun {
    /// The seed passed as `FAULTLINE_SEED`.
    pub seed: u64,
    /// How the run ended: pass, fail, timeout, crash, no_tests, tampered.
    pub verdict: RunVerdict,
    /// Every oracle test passed.
    pub passed: bool,
    /// The run is a legitimate failure (a test failed, the process crashed or hung).
    pub failed: bool,
    /// Wall-clock seconds of the sandboxed run.
    pub wall_secs: f64,
    /// Seconds libtest measured for the tests themselves.
    pub test_secs: Option<f64>,
}

/// One run of the regression tests (in validation, the verdict of several).
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct RegressionRun {
    /// Every selected test passed, every time.
    pub passed: bool,
    /// Tests that ran and passed.
    pub tests_passed: u32,
    /// Names of tests that failed or did not finish (in validation: in every run).
    pub failures: Vec<String>,
    /// Wall-clock seconds.
    pub wall_secs: f64,
    /// Validation only: tests that failed in some runs and passed in others, when the set was
    /// run repeatedly, two copies at once, to find them before they fail someone's grade.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub flaky: Vec<String>,
    /// Validation only: how many times the set ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runs: Option<u32>,
}
