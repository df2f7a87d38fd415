//! Grading a repair: the patch filtered by the track's rules and applied to a fresh workbench,
//! then the hidden oracle on its primary seed, the crate's own tests, and, for seeded oracles,
//! seeds the agent never saw. Failures of the grader itself become `infra_error`, never a fail.

use super::{GradeContext, begin, cap, conclude, still_intact};
use crate::libtest::RunVerdict;
use crate::patch::{check_tests_kept, filter_patch, restore_tests, split_patch};
use crate::seeds::{PRIMARY_SEED, robustness_seeds};
use crate::validate::run_regression;
use crate::verdict::{OracleVerdict, VerdictPlan, fresh_seed, run_oracle};
use crate::workbench::{BuildTarget, TestBinary, Workbench};
use anyhow::Result;
use faultline_corpus::TemplateKind;
use faultline_corpus::confined::is_refusal;
use faultline_sandbox::LimitHit;
use faultline_schema::grade::RepairDetails;
use faultline_schema::{Grade, GradingSettings, OracleKind, Outcome, Track};
use std::time::{Duration, Instant};

/// Grades a repair patch. Failures of the grader itself become `infra_error`, never a fail.
pub async fn grade_repair(
    ctx: &GradeContext<'_>,
    trial_id: &str,
    patch: &str,
    opts: &GradingSettings,
) -> Result<Grade> {
    let started = Instant::now();
    let g = begin(ctx, trial_id, Track::Repair, patch)?;
    let graded = repair_inner(ctx, patch, opts)
        .await
        .and_then(|verdict| still_intact(ctx, &[TemplateKind::Grading]).map(|()| verdict));
    match graded {
        Ok((outcome, reason, details)) => {
            let mut g = g;
            g.repair = Some(details);
            Ok(conclude(g, outcome, reason, started))
        }
        Err(e) => Ok(conclude(g, Outcome::InfraError, format!("{e:#}"), started)),
    }
}

async fn repair_inner(
    ctx: &GradeContext<'_>,
    patch: &str,
    opts: &GradingSettings,
) -> Result<(Outcome, String, RepairDetails)> {
    let mut details = RepairDetails::default();
    let filtered = filter_patch(patch);
    details.dropped = filtered.dropped.clone();
    if !patch.trim().is_empty() && split_patch(patch).is_empty() {
        return Ok((
            Outcome::PatchError,
            "the submission is not a unified diff".into(),
            details,
        ));
    }
    if !filtered.refused.is_empty() {
        return Ok((
            Outcome::PatchError,
            format!(
                "the patch may only create, change or delete regular files under src/: {}",
                filtered.refused.join("; ")
            ),
            details,
        ));
    }
    if filtered.applied.is_empty() && filtered.dropped.iter().any(|d| d.contains("binary")) {
        return Ok((
            Outcome::PatchError,
            "the patch only holds binary changes".into(),
            details,
        ));
    }
    let bench = Workbench::new(ctx.prepared, ctx.data, ctx.toolchain)?;
    if let Err(e) = bench.apply_patch(&filtered.patch) {
        details.error = Some(cap(&e, 4000));
        return Ok((
            Outcome::PatchError,
            "the patch does not apply".into(),
            details,
        ));
    }
    let pristine = &ctx.prepared.stamp.agent.workspace;
    let files = bench.files();
    for path in &filtered.applied {
        let original = std::fs::read_to_string(pristine.join(path)).unwrap_or_default();
        let patched = if files.is_file(path) {
            files.read_to_string(path)?
        } else {
            String::new()
        };
        let changed = check_tests_kept(&original, &patched);
        if changed.is_empty() {
            details.applied_files.push(path.clone());
        } else if let Some(restored) = restore_tests(&original, &patched) {
            files.write(path, restored.as_bytes())?;
            details.applied_files.push(path.clone());
            details.dropped.push(format!(
                "{path}: changes to existing tests ({}) were dropped, the rest of the file kept",
                changed.join(", ")
            ));
        } else {
            if pristine.join(path).exists() {
                files.write(path, original.as_bytes())?;
            } else {
                files.remove_file(path)?;
            }
            details.dropped.push(format!(
                "{path}: changes existing tests ({}), so the file was kept as it was",
                changed.join(", ")
            ));
        }
    }
    let seed = fresh_seed()?;
    details.grade_seed = Some(format!("{seed:016x}"));
    let plan = VerdictPlan::new(seed, ctx.case, &bench)?;
    plan.inject(&bench)?;
    // The oracle is built on its own first, so that its verdict does not depend on whether the
    // crate's unit tests still compile against the patch.
    let oracle_target = match ctx.case.manifest.oracle.kind {
        OracleKind::External => BuildTarget::Oracle,
        OracleKind::InCrate => BuildTarget::Lib,
    };
    let oracle_binaries = match build_or_outcome(&bench, &[oracle_target]).await? {
        Ok(b) => b,
        Err((o, err)) => {
            details.error = Some(cap(&err, 4000));
            let reason = match o {
                Outcome::Timeout => "the build ran out of time",
                Outcome::ResourceLimit => "the build ran into a resource limit of the sandbox",
                _ => "the patched crate or the oracle does not compile",
            };
            return Ok((o, reason.into(), details));
        }
    };
    let timeout = Duration::from_secs(ctx.case.manifest.oracle.timeout_secs);
    bench.hide(&plan.hidden_sources(&bench))?;
    let oracle = run_oracle(&bench, &oracle_binaries, &plan, PRIMARY_SEED, timeout).await?;
    details.oracle = Some(oracle.verdict);
    if let Some(stop) = limit_stop(oracle.limit, oracle.verdict, "the oracle") {
        return Ok((Outcome::ResourceLimit, stop, details));
    }
    match oracle.verdict {
        RunVerdict::Pass => {}
        RunVerdict::Timeout => {
            return Ok((
                Outcome::Timeout,
                "the oracle ran out of time".into(),
                details,
            ));
        }
        RunVerdict::Tampered => return Ok(forged(&oracle, details)),
        v => {
            let which = oracle.reason.map(|r| format!(" ({r})")).unwrap_or_default();
            return Ok((
                Outcome::FailOracle,
                format!("the hidden oracle's verdict: {v}{which}"),
                details,
            ));
        }
    }
    let regression_binaries =
        match build_regression(ctx, &bench, &details.applied_files, &plan).await? {
            Ok(b) => b,
            Err((o, err)) => {
                details.error = Some(cap(&err, 4000));
                let (outcome, reason) = match o {
                    Outcome::Timeout | Outcome::ResourceLimit => (
                        o,
                        "the regression tests' build ran out of time or into a resource limit",
                    ),
                    _ => (
                        Outcome::FailRegression,
                        "the crate's own tests do not compile against the patch",
                    ),
                };
                return Ok((outcome, reason.into(), details));
            }
        };
    bench.hide(&plan.hidden_sources(&bench))?;
    let regression = run_regression(&bench, &regression_binaries, ctx.case, &plan).await?;
    details.regression_passed = Some(regression.run.tests_passed);
    details.regression_failures = regression.run.failures.clone();
    let regression_verdict = if regression.run.passed {
        RunVerdict::Pass
    } else {
        RunVerdict::Fail
    };
    if let Some(stop) = limit_stop(regression.limit, regression_verdict, "the regression tests") {
        return Ok((Outcome::ResourceLimit, stop, details));
    }
    if let Some(why) = regression.forged {
        return Ok((
            Outcome::Tampered,
            format!("the regression run's output was forged: {why}"),
            details,
        ));
    }
    if !regression.run.passed {
        return Ok((
            Outcome::FailRegression,
            format!(
                "{} regression tests fail",
                regression.run.failures.len().max(1)
            ),
            details,
        ));
    }
    if ctx.case.manifest.oracle.seeded {
        for seed in robustness_seeds(opts.robustness_seeds) {
            let v = run_oracle(&bench, &oracle_binaries, &plan, seed, timeout).await?;
            if v.verdict == RunVerdict::Tampered {
                return Ok(forged(&v, details));
            }
            if let Some(stop) = limit_stop(v.limit, v.verdict, "the oracle under a further seed") {
                return Ok((Outcome::ResourceLimit, stop, details));
            }
            details.robustness_seeds += 1;
            if v.verdict == RunVerdict::Pass {
                details.robustness_passed += 1;
            }
        }
        if details.robustness_passed < details.robustness_seeds {
            return Ok((
                Outcome::FailRobustness,
                format!(
                    "passes the oracle's first schedule but only {} of {} further seeds",
                    details.robustness_passed, details.robustness_seeds
                ),
                details,
            ));
        }
    }
    let reason = if ctx.case.manifest.oracle.seeded {
        "the oracle, the regression tests and the robustness seeds pass"
    } else {
        "the oracle and the regression tests pass (the oracle explores no schedules, so no \
         further seeds were tried)"
    };
    Ok((Outcome::Pass, reason.into(), details))
}

/// The reason to stop at a resource limit: a run that did not pass and ran into one is decided
/// by the limit, not by the code (a pass despite a limit stands).
fn limit_stop(limit: Option<LimitHit>, verdict: RunVerdict, what: &str) -> Option<String> {
    let limit = limit?.name();
    (verdict != RunVerdict::Pass && verdict != RunVerdict::Tampered).then(|| {
        format!("{what} ran into the sandbox's {limit} limit (`--sandbox-{limit}` raises it)")
    })
}

/// The grade of an oracle run whose output was forged.
fn forged(v: &OracleVerdict, details: RepairDetails) -> (Outcome, String, RepairDetails) {
    let why = v
        .reason
        .as_deref()
        .unwrap_or("its events contradict themselves");
    (
        Outcome::Tampered,
        format!("the oracle's output was forged: {why}"),
        details,
    )
}

/// Builds the regression tests. The tests are always trusted text: the buggy version's, and when
/// those no longer compile against the patch (it changed an internal API they use), the fixed
/// version's tests in the files the patch touched, as the reference fix left them.
async fn build_regression(
    ctx: &GradeContext<'_>,
    bench: &Workbench,
    applied: &[String],
    plan: &VerdictPlan,
) -> Result<Result<Vec<TestBinary>, (Outcome, String)>> {
    let targets = BuildTarget::regression(ctx.case);
    let first = build_or_outcome(bench, &targets).await?;
    let Err((Outcome::BuildError, first_error)) = &first else {
        return Ok(first);
    };
    let swap = || -> Result<bool> {
        let mut swapped = false;
        for path in applied {
            let Ok(reference) = std::fs::read_to_string(ctx.prepared.sources.fixed.join(path))
            else {
                continue;
            };
            swapped |= bench.take_tests_from(path, &reference)?;
        }
        if swapped {
            // The swap rewrote files whole, which can take the injected modules' declarations
            // with it.
            plan.inject(bench)?;
        }
        Ok(swapped)
    };
    match swap() {
        Ok(true) => build_or_outcome(bench, &targets).await,
        Ok(false) => Ok(Err((Outcome::BuildError, first_error.clone()))),
        // Code the oracle ran left something other than a regular file there: that is the
        // submission's doing, so the failed build stands.
        Err(e) if e.downcast_ref::<std::io::Error>().is_some_and(is_refusal) => Ok(Err((
            Outcome::BuildError,
            format!("{first_error}\n\n{e:#}"),
        ))),
        Err(e) => Err(e),
    }
}

/// Builds targets; a failed build becomes its outcome (build error, timeout or resource limit)
/// and the compiler's words.
async fn build_or_outcome(
    bench: &Workbench,
    targets: &[BuildTarget],
) -> Result<Result<Vec<TestBinary>, (Outcome, String)>> {
    Ok(bench.build(targets).await?.map_err(|f| match f.limit {
        Some(limit) => (
            Outcome::ResourceLimit,
            format!(
                "the build ran into the sandbox's {} limit\n\n{}",
                limit.name(),
                f.stderr
            ),
        ),
        None if f.timed_out => (Outcome::Timeout, f.stderr),
        None => (Outcome::BuildError, f.stderr),
    }))
}
