//! Case validation: a case is admitted only if its oracle fails on the buggy version k times out
//! of k, passes with the gold patch (its minimal fix) k times out of k, its regression tests
//! pass on both, each of its decoys is caught k times out of k ([`decoys`]), it states the
//! property its oracle checks, its texts pass the static checks, and its bundle generator prints
//! the bundle ([`bundle`]).

mod bundle;
mod decoys;
mod measure;
mod regression;

pub use measure::{Measured, measure_buggy_failure_rate};
use regression::regression_under_load;
pub use regression::{Regression, run_regression};

use crate::libtest::RunVerdict;
use crate::seeds::{ROBUSTNESS_SEED_BASE, robustness_seeds};
use crate::verdict::{VerdictPlan, fresh_seed, run_oracle};
use crate::workbench::{BuildTarget, TestBinary, Workbench};
use anyhow::Result;
use faultline_corpus::checks::static_checks;
use faultline_corpus::curated::{Gold, gold_patch};
use faultline_corpus::{
    Case, DataDir, PrepareOptions, PreparedCase, TemplateKind, TreeDiff, prepare,
};
use faultline_sandbox::Toolchain;
use faultline_schema::validation::{CaseValidation, OracleRun, VariantResult};
use faultline_schema::{GradingSettings, OracleKind};
use std::time::{Duration, Instant};

/// Options for validating cases.
#[derive(Debug, Clone)]
pub struct ValidateOptions {
    /// Oracle runs per version.
    pub k: u32,
    /// Rebuild workspaces even when they are prepared.
    pub force_prepare: bool,
    /// Build and run the decoys. Only a measurement of what they cost turns this off: a report
    /// without them does not admit a case.
    pub decoys: bool,
}

impl Default for ValidateOptions {
    fn default() -> Self {
        ValidateOptions {
            k: 5,
            force_prepare: false,
            decoys: true,
        }
    }
}

/// Which version of the code a workbench holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Variant {
    /// The buggy source as published.
    Buggy,
    /// The buggy source with the gold patch applied.
    Gold,
    /// The buggy source with a decoy applied: its regression tests run only when an oracle run
    /// passed, since a decoy the oracle fails every time is caught whatever they say.
    Decoy,
}

/// Fewest decoys a case must have.
pub const MIN_DECOYS: usize = 2;

/// Validates one case; infrastructure failures (no sandbox, no network for the first fetch)
/// are errors, everything about the case itself is a problem in the report.
pub async fn validate_case(
    case: &Case,
    data: &DataDir,
    toolchain: &Toolchain,
    opts: &ValidateOptions,
) -> Result<CaseValidation> {
    let started = Instant::now();
    let m = &case.manifest;
    let mut report = CaseValidation {
        case_id: m.id.clone(),
        system: m.system.clone(),
        category: m.category,
        tier: m.tier,
        oracle_kind: m.oracle.kind,
        passed: false,
        problems: Vec::new(),
        static_checks: None,
        buggy: None,
        gold: None,
        minimal_fix: None,
        decoys: None,
        bundle: None,
        prepare_secs: 0.0,
        wall_secs: 0.0,
        case_sha256: Some(case.content_sha256()?),
        validated_at: None,
    };
    let prepare_started = Instant::now();
    let prepared = match prepare(
        case,
        data,
        toolchain,
        &PrepareOptions {
            force: opts.force_prepare,
        },
    )
    .await
    {
        Ok(p) => p,
        Err(e) => {
            report
                .problems
                .push(format!("cannot prepare the workspace: {e:#}"));
            report.wall_secs = started.elapsed().as_secs_f64();
            return Ok(report);
        }
    };
    report.prepare_secs = prepare_started.elapsed().as_secs_f64();
    let (checks, release) = static_checks(case, &prepared.sources)?;
    report.problems.extend(checks.problems.iter().cloned());
    report.static_checks = Some(checks);
    report.problems.extend(curation_problems(case));
    let targets: Vec<std::path::PathBuf> = [&prepared.stamp.agent, &prepared.stamp.grade]
        .iter()
        .flat_map(|t| [Some(&t.workspace), t.oracle.as_ref()])
        .flatten()
        .map(|dir| dir.join("target"))
        .collect();
    let targets: Vec<&std::path::Path> = targets.iter().map(|t| t.as_path()).collect();
    report
        .problems
        .extend(faultline_corpus::workspace::requirements::undeclared(
            case, &targets,
        ));
    let gold = match gold_patch(case, &prepared.sources) {
        Ok(gold) => gold,
        Err(e) => {
            report.problems.push(format!("{e:#}"));
            Gold {
                diff: release,
                minimal: false,
            }
        }
    };
    report.minimal_fix = Some(gold.minimal);
    let (bundle, bundle_problems) = bundle::check_bundle(case, &prepared, data, toolchain).await?;
    report.problems.extend(bundle_problems);
    report.bundle = Some(bundle);

    let buggy = run_variant(
        case,
        &prepared,
        data,
        toolchain,
        &gold.diff,
        Variant::Buggy,
        opts.k,
    )
    .await?;
    let gold_result = run_variant(
        case,
        &prepared,
        data,
        toolchain,
        &gold.diff,
        Variant::Gold,
        opts.k,
    )
    .await?;
    if opts.decoys {
        let decoys = decoys::run_decoys(case, &prepared, data, toolchain, opts.k).await?;
        report.problems.extend(decoys::problems(&decoys, opts.k));
        report.decoys = Some(decoys.into_iter().map(|(result, _)| result).collect());
    } else {
        report
            .problems
            .push("the decoys were not run, so the oracle's strength is unknown".into());
    }
    // Each variant's workbench checked the template before copying it; the report stands only
    // if it is still intact after all of them.
    prepared.check(TemplateKind::Grading)?;
    for (name, v) in [("buggy", &buggy), ("gold", &gold_result)] {
        if let Some(e) = &v.build_error {
            report.problems.push(format!(
                "the tests do not build on the {name} version:\n{e}"
            ));
        }
        if let Some(r) = &v.regression
            && !r.failures.is_empty()
        {
            report.problems.push(format!(
                "regression tests fail on the {name} version: {}",
                r.failures.join(", ")
            ));
        }
        if let Some(r) = &v.regression
            && !r.flaky.is_empty()
        {
            report.problems.push(format!(
                "flaky regression tests on the {name} version (run {} times, two at once): {}; \
                 add them to [regression] skip in case.toml, with a comment saying why",
                r.runs.unwrap_or(1),
                r.flaky.join(", ")
            ));
        }
        if v.runs.iter().any(|r| r.verdict == RunVerdict::NoTests) {
            report.problems.push(format!(
                "the oracle selected no tests on the {name} version"
            ));
        }
        if v.runs.iter().any(|r| r.verdict == RunVerdict::Tampered) {
            report.problems.push(format!(
                "the oracle's test output was forged or contradicts itself on the {name} version"
            ));
        }
    }
    let k = opts.k;
    let buggy_failures = buggy.runs.iter().filter(|r| r.failed).count() as u32;
    let gold_passes = gold_result.runs.iter().filter(|r| r.passed).count() as u32;
    if buggy.build_error.is_none() && buggy_failures < k {
        report.problems.push(format!(
            "the oracle fails on the buggy version in only {buggy_failures} of {k} runs; it must fail every time"
        ));
    }
    if gold_result.build_error.is_none() && gold_passes < k {
        report.problems.push(format!(
            "the oracle passes with the gold patch in only {gold_passes} of {k} runs; it is flaky or wrong"
        ));
    }
    let robustness_failed: Vec<String> = gold_result
        .robustness_runs
        .iter()
        .filter(|r| !r.passed)
        .map(|r| r.seed.to_string())
        .collect();
    if !robustness_failed.is_empty() {
        report.problems.push(format!(
            "the oracle fails with the gold patch on seed {} of the {} grading checks every \
             repair's robustness on (from {ROBUSTNESS_SEED_BASE}), so a correct repair would be \
             graded fail_robustness; the oracle is flaky or wrong for some seeds",
            robustness_failed.join(", "),
            gold_result.robustness_runs.len()
        ));
    }
    report.buggy = Some(buggy);
    report.gold = Some(gold_result);
    report.passed = report.problems.is_empty();
    report.wall_secs = started.elapsed().as_secs_f64();
    Ok(report)
}

/// What a curator owes every case besides a working oracle: the property it checks, a minimal
/// fix, and enough decoys to show the oracle tells a fix from a suppression.
fn curation_problems(case: &Case) -> Vec<String> {
    let mut problems = Vec::new();
    if case.manifest.property.is_none() {
        problems.push(
            "case.toml states no `property` (what the fix restores beyond the symptom)".into(),
        );
    }
    if !case.minimal_fix_path().is_file() {
        problems.push(format!(
            "the case has no minimal fix ({}): the release diff stands in for it",
            faultline_corpus::curated::MINIMAL_FIX_FILE
        ));
    }
    if case.manifest.decoys.len() < MIN_DECOYS {
        problems.push(format!(
            "the case has {} decoys; it needs at least {MIN_DECOYS} ([[decoys]] in case.toml)",
            case.manifest.decoys.len()
        ));
    }
    problems
}

/// Builds one version in a fresh workbench (the buggy one, or it with `patch` applied: the gold
/// patch or a decoy) and runs its oracle k times and its regression tests once.
pub async fn run_variant(
    case: &Case,
    prepared: &PreparedCase,
    data: &DataDir,
    toolchain: &Toolchain,
    patch: &TreeDiff,
    variant: Variant,
    k: u32,
) -> Result<VariantResult> {
    let bench = Workbench::new(prepared, data, toolchain)?;
    if variant != Variant::Buggy
        && let Err(e) = bench.apply_patch(&patch.unified())
    {
        return Ok(VariantResult {
            build_error: Some(format!("the patch does not apply: {e}")),
            build_secs: 0.0,
            runs: Vec::new(),
            robustness_runs: Vec::new(),
            regression: None,
        });
    }
    if variant != Variant::Buggy {
        // As grading keeps them: the buggy version's tests, whatever the fix did to them.
        swap_tests(&bench, patch, |f| f.old.clone())?;
    }
    let plan = match VerdictPlan::new(fresh_seed()?, case, &bench) {
        Ok(plan) => plan,
        Err(e) => {
            return Ok(VariantResult {
                build_error: Some(format!("the oracle's tests cannot be wrapped: {e:#}")),
                build_secs: 0.0,
                runs: Vec::new(),
                robustness_runs: Vec::new(),
                regression: None,
            });
        }
    };
    plan.inject(&bench)?;
    let m = &case.manifest;
    let oracle_target = match m.oracle.kind {
        OracleKind::External => BuildTarget::Oracle,
        OracleKind::InCrate => BuildTarget::Lib,
    };
    let mut targets = BuildTarget::regression(case);
    if !targets.contains(&oracle_target) {
        targets.push(oracle_target.clone());
    }
    // A decoy's regression tests matter only when an oracle run passes, so it builds the oracle
    // alone first: most decoys are caught without compiling the crate's own tests.
    let first = match variant {
        Variant::Decoy => std::slice::from_ref(&oracle_target),
        _ => &targets[..],
    };
    let build_started = Instant::now();
    let binaries = match build_with_fallback(&bench, &plan, patch, prepared, variant, first).await?
    {
        Ok(b) => b,
        Err(stderr) => return Ok(unbuilt(stderr, build_started)),
    };
    let mut build_secs = build_started.elapsed().as_secs_f64();
    bench.hide(&plan.hidden_sources(&bench))?;
    let timeout = Duration::from_secs(m.oracle.timeout_secs);
    let runs = oracle_runs(&bench, &binaries, &plan, 1..=u64::from(k), timeout).await?;
    // Grading checks a repair of a seeded oracle on further seeds; the gold patch must pass them.
    let robustness_runs = if variant == Variant::Gold && m.oracle.seeded {
        let seeds = robustness_seeds(GradingSettings::default().robustness_seeds);
        oracle_runs(&bench, &binaries, &plan, seeds, timeout).await?
    } else {
        Vec::new()
    };
    if variant == Variant::Decoy && runs.iter().all(|r| r.failed) {
        return Ok(VariantResult {
            build_error: None,
            build_secs,
            runs,
            robustness_runs: Vec::new(),
            regression: None,
        });
    }
    let binaries = if first.len() < targets.len() {
        let started = Instant::now();
        let built = build_with_fallback(&bench, &plan, patch, prepared, variant, &targets).await?;
        build_secs += started.elapsed().as_secs_f64();
        match built {
            Ok(b) => b,
            Err(stderr) => {
                return Ok(VariantResult {
                    build_error: Some(stderr),
                    build_secs,
                    runs,
                    robustness_runs: Vec::new(),
                    regression: None,
                });
            }
        }
    } else {
        binaries
    };
    let run = if variant == Variant::Decoy {
        let regression = run_regression(&bench, &binaries, case, &plan).await?;
        let mut run = regression.run;
        if let Some(why) = regression.forged {
            run.passed = false;
            run.failures.push(format!("forged output: {why}"));
        }
        run
    } else {
        regression_under_load(&bench, &binaries, case, &plan, k).await?
    };
    Ok(VariantResult {
        build_error: None,
        build_secs,
        runs,
        robustness_runs,
        regression: Some(run),
    })
}

/// Builds `targets`; when a patched version's tests no longer compile, builds again with the
/// fixed release's tests, as grading does. `Ok(Err(stderr))` is a version that does not build.
async fn build_with_fallback(
    bench: &Workbench,
    plan: &VerdictPlan,
    patch: &TreeDiff,
    prepared: &PreparedCase,
    variant: Variant,
    targets: &[BuildTarget],
) -> Result<Result<Vec<TestBinary>, String>> {
    let mut built = bench.build(targets).await?;
    if variant != Variant::Buggy
        && built.as_ref().is_err_and(|f| !f.timed_out)
        && swap_tests(bench, patch, |f| {
            std::fs::read_to_string(prepared.sources.fixed.join(&f.path)).ok()
        })?
    {
        plan.inject(bench)?;
        built = bench.build(targets).await?;
    }
    Ok(built.map_err(|failure| failure.stderr))
}

/// One oracle run per seed, in order.
async fn oracle_runs(
    bench: &Workbench,
    binaries: &[TestBinary],
    plan: &VerdictPlan,
    seeds: impl Iterator<Item = u64>,
    timeout: Duration,
) -> Result<Vec<OracleRun>> {
    let mut runs = Vec::new();
    for seed in seeds {
        let run = run_oracle(bench, binaries, plan, seed, timeout).await?;
        runs.push(OracleRun {
            seed,
            verdict: run.verdict,
            passed: run.verdict == RunVerdict::Pass,
            failed: run.verdict.is_failure(),
            wall_secs: run.wall_secs,
            test_secs: run.test_secs,
        });
    }
    Ok(runs)
}

/// The result of a version that did not build.
fn unbuilt(stderr: String, build_started: Instant) -> VariantResult {
    VariantResult {
        build_error: Some(stderr),
        build_secs: build_started.elapsed().as_secs_f64(),
        runs: Vec::new(),
        robustness_runs: Vec::new(),
        regression: None,
    }
}

/// Gives every file the patch changes the test items of a reference text (the buggy version of
/// that file, or the fixed release's, as grading falls back to when the buggy tests no longer
/// compile against a patch), keeping the rest; whether any file changed.
fn swap_tests(
    bench: &Workbench,
    patch: &TreeDiff,
    reference: impl Fn(&faultline_corpus::gold::FileDiff) -> Option<String>,
) -> Result<bool> {
    let mut swapped = false;
    for file in patch.files.iter().filter(|f| f.new.is_some()) {
        if let Some(reference) = reference(file) {
            swapped |= bench.take_tests_from(&file.path, &reference)?;
        }
    }
    Ok(swapped)
}
