//! Grading a reproducer: one integration-test file that must keep the track's rules
//! ([`crate::legality`]), then fail on the buggy version and pass with the gold patch, k times
//! each, built where neither the oracle nor its build products exist.

use super::{GradeContext, begin, cap, conclude, still_intact};
use crate::libtest::RunVerdict;
use crate::workbench::{BuildTarget, TestBinary, Workbench};
use anyhow::Result;
use faultline_corpus::TemplateKind;
use faultline_corpus::curated::gold_patch;
use faultline_corpus::workspace::{REPRODUCER_PATH, install_reproducer};
use faultline_legality::{Legality, check_reproducer};
use faultline_schema::grade::ReproductionDetails;
use faultline_schema::{Grade, GradingSettings, OracleKind, Outcome, Track};
use std::time::{Duration, Instant};

/// Grades a reproducer: one integration-test file, built against the crate's public API, which
/// must fail on the buggy version and pass with the gold patch, k times each. It must keep the
/// track's rules ([`crate::legality`]), or it is `illegal` without being built. It is built in a
/// copy of the agent's template, where neither the oracle nor its build products exist, and run
/// in a sandbox that holds only its executable.
pub async fn grade_reproduction(
    ctx: &GradeContext<'_>,
    trial_id: &str,
    test_file: &str,
    opts: &GradingSettings,
) -> Result<Grade> {
    let started = Instant::now();
    let mut g = begin(ctx, trial_id, Track::Reproduce, test_file)?;
    let mut details = ReproductionDetails {
        k: opts.reproduction_k,
        ..Default::default()
    };
    if test_file.trim().is_empty() {
        g.reproduction = Some(details);
        return Ok(conclude(
            g,
            Outcome::InvalidSubmission,
            "the reproducer is empty",
            started,
        ));
    }
    let unreadable = match check_reproducer(test_file) {
        Legality::Legal => None,
        Legality::Unreadable(why) => Some(why),
        Legality::Illegal(violations) => {
            let reason = match violations.as_slice() {
                [] => "the reproducer breaks the track's rules".to_string(),
                [first, rest @ ..] => format!(
                    "the reproducer breaks the track's rules: {} (line {}: {}){}",
                    first.rule,
                    first.line,
                    first.found,
                    match rest.len() {
                        0 => String::new(),
                        n => format!(", and {n} more"),
                    }
                ),
            };
            details.violations = violations.iter().map(ToString::to_string).collect();
            g.reproduction = Some(details);
            return Ok(conclude(g, Outcome::Illegal, reason, started));
        }
    };
    let graded = reproduction_inner(ctx, test_file, opts, details, unreadable)
        .await
        .and_then(|verdict| {
            still_intact(ctx, &[TemplateKind::Agent, TemplateKind::Grading]).map(|()| verdict)
        });
    match graded {
        Ok((outcome, reason, details)) => {
            g.reproduction = Some(details);
            Ok(conclude(g, outcome, reason, started))
        }
        Err(e) => Ok(conclude(g, Outcome::InfraError, format!("{e:#}"), started)),
    }
}

/// Builds and runs a reproducer that the static check passed, or could not read (`unreadable`
/// says why): such a file is illegal if it compiles, since nobody checked what it does.
async fn reproduction_inner(
    ctx: &GradeContext<'_>,
    test_file: &str,
    opts: &GradingSettings,
    mut details: ReproductionDetails,
    unreadable: Option<String>,
) -> Result<(Outcome, String, ReproductionDetails)> {
    let k = opts.reproduction_k;
    // Judged against the minimal fix: a test of another change shipped in the same release
    // fails there, and so is not a reproducer of this bug.
    let gold = gold_patch(ctx.case, &ctx.prepared.sources)?.diff;
    let mut harness = ReproHarness::Crate;
    let mut per_version = Vec::new();
    for with_gold in [false, true] {
        let patch = with_gold.then(|| gold.unified());
        let mut built = build_reproducer(ctx, test_file, patch.as_deref(), harness).await?;
        if let Err((_, crate_error)) = &built
            && !with_gold
            && ctx.case.manifest.oracle.kind == OracleKind::External
        {
            harness = ReproHarness::OracleDependencies;
            built = build_reproducer(ctx, test_file, patch.as_deref(), harness)
                .await?
                .map_err(|(timed_out, harness_error)| {
                    let both = format!(
                        "as an integration test of the crate:\n{crate_error}\n\nwith the dependencies of the case's test package:\n{harness_error}"
                    );
                    (timed_out, both)
                });
        }
        let (bench, bin) = match built {
            Ok(b) => b,
            Err((timed_out, error)) => {
                details.error = Some(cap(&error, 4000));
                let o = if timed_out {
                    Outcome::Timeout
                } else {
                    Outcome::DoesNotCompile
                };
                return Ok((
                    o,
                    format!("{REPRODUCER_PATH} does not compile against the crate"),
                    details,
                ));
            }
        };
        if let Some(why) = &unreadable {
            details.violations = vec![format!("the checker cannot read the file: {why}")];
            return Ok((
                Outcome::Illegal,
                "the reproducer compiles but the harness cannot read it to check the track's rules"
                    .into(),
                details,
            ));
        }
        let mut verdicts = Vec::new();
        for _ in 0..k {
            let timeout = Duration::from_secs(ctx.case.manifest.oracle.timeout_secs);
            verdicts.push(bench.run_alone(&bin, timeout).await?.verdict);
        }
        per_version.push(verdicts);
    }
    let failures = |v: &[RunVerdict]| v.iter().filter(|x| x.is_failure()).count() as u32;
    let passes = |v: &[RunVerdict]| {
        v.iter()
            .filter(|x| matches!(x, RunVerdict::Pass | RunVerdict::NoTests))
            .count() as u32
    };
    details.buggy_failures = failures(&per_version[0]);
    details.gold_passes = passes(&per_version[1]);
    let buggy_fail_all = details.buggy_failures == k;
    let buggy_pass_all = passes(&per_version[0]) == k;
    let gold_pass_all = details.gold_passes == k;
    let gold_fail_all = failures(&per_version[1]) == k;
    let (outcome, reason) = if per_version
        .iter()
        .flatten()
        .any(|v| *v == RunVerdict::Tampered)
    {
        (
            Outcome::InvalidSubmission,
            "the test's output contradicts itself".to_string(),
        )
    } else if buggy_fail_all && gold_pass_all {
        (
            Outcome::Valid,
            format!(
                "fails on the buggy version {k}/{k} and passes with the fix {k}/{k}{}",
                match harness {
                    ReproHarness::Crate => "",
                    ReproHarness::OracleDependencies =>
                        " (built with the dependencies of the case's test package)",
                }
            ),
        )
    } else if buggy_fail_all && gold_fail_all {
        (Outcome::FailsOnBoth, "fails with the fix too".into())
    } else if buggy_pass_all && gold_pass_all {
        (Outcome::PassesOnBoth, "passes on the buggy version".into())
    } else if buggy_pass_all && gold_fail_all {
        (
            Outcome::FailsOnBoth,
            "passes on the buggy version and fails with the fix".into(),
        )
    } else {
        (
            Outcome::Flaky,
            format!(
                "results vary between runs: buggy fails {}/{k}, fixed passes {}/{k}",
                details.buggy_failures, details.gold_passes
            ),
        )
    };
    Ok((outcome, reason, details))
}

/// Where a reproducer is compiled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ReproHarness {
    /// As `tests/faultline_repro.rs` of the crate, with its own dependencies and dev-dependencies,
    /// in a copy of the agent's template (no oracle in any form).
    Crate,
    /// As the only test of the case's external test package, so that it may use that package's
    /// dependencies (a test-support crate, an async runtime, a codec). The oracle's test files are
    /// deleted and its compiled test executables and incremental state removed before the build,
    /// so the reproducer cannot reach the oracle.
    OracleDependencies,
}

/// Builds a reproducer on the buggy version or with a patch; `Err` carries whether the build
/// timed out and the compiler's words.
async fn build_reproducer(
    ctx: &GradeContext<'_>,
    test_file: &str,
    patch: Option<&str>,
    harness: ReproHarness,
) -> Result<Result<(Workbench, TestBinary), (bool, String)>> {
    let (bench, target) = match harness {
        ReproHarness::Crate => {
            let bench = Workbench::without_oracle(ctx.prepared, ctx.data, ctx.toolchain)?;
            (bench, BuildTarget::Test("faultline_repro".into()))
        }
        ReproHarness::OracleDependencies => {
            let bench = Workbench::new(ctx.prepared, ctx.data, ctx.toolchain)?;
            bench.replace_oracle_tests("faultline_repro", test_file)?;
            (bench, BuildTarget::Oracle)
        }
    };
    if let Some(patch) = patch
        && let Err(e) = bench.apply_patch(patch)
    {
        anyhow::bail!("the gold patch does not apply: {e}");
    }
    if harness == ReproHarness::Crate {
        install_reproducer(&bench.workspace, test_file)?;
    }
    let binaries = match bench.build(&[target]).await? {
        Ok(b) => b,
        Err(f) => return Ok(Err((f.timed_out, f.stderr))),
    };
    let Some(bin) = binaries.into_iter().find(|b| b.target == "faultline_repro") else {
        anyhow::bail!("cargo built no faultline_repro test executable");
    };
    Ok(Ok((bench, bin)))
}
