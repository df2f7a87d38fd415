//! Grading submissions: repairs against the hidden oracle, regression tests and fresh seeds;
//! diagnoses against the labeled blocks; reproducers against the buggy and the fixed code.
//! Every grade is built in a fresh workbench, never in the agent's workspace.

use crate::diagnosis;
use crate::legality::{Legality, check_reproducer};
use crate::libtest::RunVerdict;
use crate::patch::{check_tests_kept, filter_patch, restore_tests, split_patch};
use crate::validate::{run_regression, verdict_name};
use crate::verdict::{OracleVerdict, VerdictPlan, fresh_seed, run_oracle};
use crate::workbench::{BuildTarget, TestBinary, Workbench};
use anyhow::{Context, Result};
use faultline_corpus::confined::is_refusal;
use faultline_corpus::gold::diff_trees;
use faultline_corpus::workspace::{REPRODUCER_PATH, install_reproducer};
use faultline_corpus::{Case, DataDir, PreparedCase, TemplateKind};
use faultline_sandbox::Toolchain;
use faultline_schema::diagnosis::DIAGNOSIS_LINE_BUDGET;
use faultline_schema::grade::{
    GRADE_SCHEMA_VERSION, GradeInputs, RepairDetails, ReproductionDetails,
};
use faultline_schema::{Diagnosis, Grade, OracleKind, Outcome, Track};
use sha2::{Digest, Sha256};
use std::path::Path;
use std::time::{Duration, Instant, SystemTime};

/// Version of the grading rules; part of every grade-cache key, so a change of the rules never
/// serves a grade made under the old ones. Bump it with every change to what a grade decides.
pub const GRADER_VERSION: u32 = 5;

/// The seed of the oracle run that decides a repair (the agent never sees any seed).
pub const PRIMARY_SEED: u64 = 1;

/// Robustness seeds start here, well away from the validation seeds.
pub const ROBUSTNESS_SEED_BASE: u64 = 1_000;

/// Grading settings.
#[derive(Debug, Clone)]
pub struct GradeOptions {
    /// Further seeds a seeded oracle is run under after it passes (robustness).
    pub robustness_seeds: u32,
    /// Runs per version for reproducers.
    pub reproduction_k: u32,
}

impl Default for GradeOptions {
    fn default() -> Self {
        GradeOptions {
            robustness_seeds: 5,
            reproduction_k: 3,
        }
    }
}

/// What the grader needs to know about a case.
#[derive(Debug, Clone, Copy)]
pub struct GradeContext<'a> {
    /// The case.
    pub case: &'a Case,
    /// Its prepared workspace.
    pub prepared: &'a PreparedCase,
    /// Where scratch copies go.
    pub data: &'a DataDir,
    /// The toolchain.
    pub toolchain: &'a Toolchain,
}

/// SHA-256 of the case files a grade depends on (`case.toml`, the oracle, lockfiles).
pub fn case_hash(case: &Case) -> Result<String> {
    let mut h = Sha256::new();
    let mut files: Vec<_> = walkdir_files(&case.oracle_dir());
    files.push(case.dir.join("case.toml"));
    files.push(case.dir.join("Cargo.lock"));
    files.sort();
    for f in files {
        if let Ok(bytes) = std::fs::read(&f) {
            h.update(
                f.strip_prefix(&case.dir)
                    .unwrap_or(&f)
                    .to_string_lossy()
                    .as_bytes(),
            );
            h.update(bytes);
        }
    }
    Ok(hex::encode(h.finalize()))
}

fn walkdir_files(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.file_name().is_some_and(|n| n == "target") {
                continue;
            }
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push(p);
            }
        }
    }
    out
}

fn new_grade(ctx: &GradeContext, trial_id: &str, track: Track, submission: &str) -> Result<Grade> {
    Ok(Grade {
        schema_version: GRADE_SCHEMA_VERSION,
        trial_id: trial_id.into(),
        case_id: ctx.case.id().into(),
        track,
        outcome: Outcome::InfraError,
        reason: String::new(),
        score: None,
        diagnosis: None,
        repair: None,
        reproduction: None,
        inputs: GradeInputs {
            submission_sha256: hex::encode(Sha256::digest(submission.as_bytes())),
            case_sha256: case_hash(ctx.case)?,
            faultline_version: env!("CARGO_PKG_VERSION").into(),
        },
        graded_at: String::new(),
        wall_secs: 0.0,
        protections: crate::protections::records(&crate::protections::for_grading(
            ctx.prepared,
            ctx.toolchain,
        )),
    })
}

fn conclude(mut g: Grade, outcome: Outcome, reason: impl Into<String>, started: Instant) -> Grade {
    g.outcome = outcome;
    g.reason = reason.into();
    g.score = match outcome {
        Outcome::InfraError => None,
        Outcome::Scored => g.diagnosis.as_ref().map(|d| d.budgeted_coverage),
        o if o.is_success() => Some(1.0),
        _ => Some(0.0),
    };
    g.graded_at = humantime::format_rfc3339_seconds(SystemTime::now()).to_string();
    g.wall_secs = started.elapsed().as_secs_f64();
    g
}

fn cap(s: &str, n: usize) -> String {
    let chars: Vec<char> = s.chars().collect();
    if chars.len() <= n {
        s.to_string()
    } else {
        chars[chars.len() - n..].iter().collect()
    }
}

/// Grades a diagnosis (no build; the scores are pure).
pub fn grade_diagnosis(ctx: &GradeContext, trial_id: &str, text: &str) -> Result<Grade> {
    let started = Instant::now();
    let mut g = new_grade(ctx, trial_id, Track::Diagnose, text)?;
    let parsed = match Diagnosis::from_json(text) {
        Ok(d) => d,
        Err(e) => {
            g.diagnosis = Some(Default::default());
            return Ok(conclude(
                g,
                Outcome::InvalidSubmission,
                e.to_string(),
                started,
            ));
        }
    };
    // Blocks are checked against the agent template's files: only an intact one will do.
    if let Err(e) = ctx.prepared.check(TemplateKind::Agent) {
        return Ok(conclude(g, Outcome::InfraError, format!("{e:#}"), started));
    }
    let scores = diagnosis::score(
        &parsed,
        &ctx.case.manifest.blocks,
        &ctx.prepared.stamp.agent.workspace,
    );
    let reason = format!(
        "budgeted coverage {:.2} ({} of {} blocks read within {DIAGNOSIS_LINE_BUDGET} lines), \
         block coverage {:.2}, block precision {:.2}, {} blocks rejected",
        scores.budgeted_coverage,
        scores.blocks_read,
        scores.blocks_named,
        scores.block_coverage,
        scores.block_precision,
        scores.rejected_blocks.len(),
    );
    g.diagnosis = Some(scores);
    Ok(conclude(g, Outcome::Scored, reason, started))
}

/// Grades a repair patch. Failures of the grader itself become `infra_error`, never a fail.
pub async fn grade_repair(
    ctx: &GradeContext<'_>,
    trial_id: &str,
    patch: &str,
    opts: &GradeOptions,
) -> Result<Grade> {
    let started = Instant::now();
    let g = new_grade(ctx, trial_id, Track::Repair, patch)?;
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
    opts: &GradeOptions,
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
    details.oracle = Some(verdict_name(oracle.verdict).into());
    if let Some(stop) = limit_stop(&oracle.limit, oracle.verdict, "the oracle") {
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
                format!("the hidden oracle's verdict: {}{which}", verdict_name(v)),
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
    if let Some(stop) = limit_stop(
        &regression.limit,
        regression_verdict,
        "the regression tests",
    ) {
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
        for i in 0..opts.robustness_seeds {
            let v = run_oracle(
                &bench,
                &oracle_binaries,
                &plan,
                ROBUSTNESS_SEED_BASE + u64::from(i),
                timeout,
            )
            .await?;
            if v.verdict == RunVerdict::Tampered {
                return Ok(forged(&v, details));
            }
            if let Some(stop) = limit_stop(&v.limit, v.verdict, "the oracle under a further seed") {
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
    Ok((
        Outcome::Pass,
        "the oracle, the regression tests and the robustness seeds pass".into(),
        details,
    ))
}

/// Whether the templates a grade copied still match their manifest after it: a verdict stands
/// only then (the check before the copy is in [`Workbench::new`]), so no change made during the
/// grade, by whatever process, can hide behind one.
fn still_intact(ctx: &GradeContext<'_>, kinds: &[TemplateKind]) -> Result<()> {
    for kind in kinds {
        ctx.prepared
            .check(*kind)
            .context("after grading, the templates no longer matched their manifest")?;
    }
    Ok(())
}

/// The reason to stop at a resource limit: a run that did not pass and ran into one is decided
/// by the limit, not by the code (a pass despite a limit stands).
fn limit_stop(limit: &Option<String>, verdict: RunVerdict, what: &str) -> Option<String> {
    let limit = limit.as_deref()?;
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

/// The crate's own test targets that the regression run needs.
fn regression_targets(case: &Case) -> Vec<BuildTarget> {
    let mut targets = vec![BuildTarget::Lib];
    for t in &case.manifest.regression.targets {
        if let Some(name) = t.strip_prefix("test:") {
            targets.push(BuildTarget::Test(name.into()));
        }
    }
    targets
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
    let targets = regression_targets(ctx.case);
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
                limit.as_str(),
                f.stderr
            ),
        ),
        None if f.timed_out => (Outcome::Timeout, f.stderr),
        None => (Outcome::BuildError, f.stderr),
    }))
}

/// Grades a reproducer: one integration-test file, built against the crate's public API, which
/// must fail on the buggy version and pass with the gold patch, k times each. It must keep the
/// track's rules ([`crate::legality`]), or it is `illegal` without being built. It is built in a
/// copy of the agent's template, where neither the oracle nor its build products exist, and run
/// in a sandbox that holds only its executable.
pub async fn grade_reproduction(
    ctx: &GradeContext<'_>,
    trial_id: &str,
    test_file: &str,
    opts: &GradeOptions,
) -> Result<Grade> {
    let started = Instant::now();
    let mut g = new_grade(ctx, trial_id, Track::Reproduce, test_file)?;
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
    opts: &GradeOptions,
    mut details: ReproductionDetails,
    unreadable: Option<String>,
) -> Result<(Outcome, String, ReproductionDetails)> {
    let k = opts.reproduction_k;
    let gold = diff_trees(&ctx.prepared.sources.buggy, &ctx.prepared.sources.fixed)?;
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
