//! The case's own tests as a regression check: run once the way grading runs them, or several
//! times, partly two at once, to tell tests that fail from tests that fail only sometimes.

use crate::libtest::RunVerdict;
use crate::verdict::{Judged, VerdictPlan, judge_regression};
use crate::workbench::{TestBinary, Workbench};
use anyhow::Result;
use faultline_corpus::Case;
use faultline_sandbox::LimitHit;
use faultline_schema::RegressionTarget;
use faultline_schema::validation::RegressionRun;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

/// Runs the regression set once alone, then `rounds - 1` times two copies at once (load of the
/// kind a grading machine sees), and sorts the failures: tests that failed every time, and
/// flaky ones that failed only sometimes, which validation reports for the case's skip list.
pub(super) async fn regression_under_load(
    bench: &Workbench,
    binaries: &[TestBinary],
    case: &Case,
    plan: &VerdictPlan,
    rounds: u32,
) -> Result<RegressionRun> {
    let mut all = vec![run_regression(bench, binaries, case, plan).await?];
    for _ in 1..rounds.max(1) {
        let (a, b) = tokio::join!(
            run_regression(bench, binaries, case, plan),
            run_regression(bench, binaries, case, plan)
        );
        all.extend([a?, b?]);
    }
    let mut failed_in: BTreeMap<String, usize> = BTreeMap::new();
    for r in &all {
        for name in r.run.failures.iter().collect::<BTreeSet<_>>() {
            *failed_in.entry(name.clone()).or_default() += 1;
        }
    }
    let runs = all.len();
    let (failures, flaky): (Vec<_>, Vec<_>) = failed_in.into_iter().partition(|(_, n)| *n == runs);
    let mut failures: Vec<String> = failures.into_iter().map(|(name, _)| name).collect();
    let flaky: Vec<String> = flaky
        .into_iter()
        .map(|(name, n)| format!("{name} (failed {n} of {runs} runs)"))
        .collect();
    if let Some(why) = all.iter().find_map(|r| r.forged.clone()) {
        failures.push(format!("forged output: {why}"));
    }
    Ok(RegressionRun {
        passed: failures.is_empty() && flaky.is_empty(),
        tests_passed: all[0].run.tests_passed,
        failures,
        wall_secs: all.iter().map(|r| r.run.wall_secs).sum(),
        flaky,
        runs: Some(runs as u32),
    })
}

/// A regression run and, if its output was forged, how we know.
#[derive(Debug, Clone)]
pub struct Regression {
    /// The counts and failures, as reported.
    pub run: RegressionRun,
    /// Evidence of forged output, if any.
    pub forged: Option<String>,
    /// The sandbox's resource limit a test executable ran into, if one did.
    pub limit: Option<LimitHit>,
}

/// Runs the regression targets once, skipping the in-crate oracle's module and the case's skip
/// list, with the seed of the primary oracle run (so the seed does not tell the runs apart). Each
/// executable's canaries must fail (see [`judge_regression`]).
pub async fn run_regression(
    bench: &Workbench,
    binaries: &[TestBinary],
    case: &Case,
    plan: &VerdictPlan,
) -> Result<Regression> {
    let m = &case.manifest;
    let mut skip = m.regression.skip.clone();
    skip.extend(plan.regression_skip());
    let mut wall = 0.0;
    let mut passed = true;
    let mut tests_passed = 0;
    let mut failures = Vec::new();
    let mut forged = None;
    let mut limit = None;
    let lib_name = lib_target_name(binaries, case);
    for target in m.regression.declared() {
        let wanted = match target {
            RegressionTarget::Test(name) => name.to_string(),
            RegressionTarget::Lib => lib_name.clone(),
        };
        let canaries = plan.canaries_of(&wanted);
        for bin in binaries
            .iter()
            .filter(|b| b.target == wanted && b.cwd == "/workspace")
        {
            let run = bench
                .run(
                    bin,
                    None,
                    &skip,
                    crate::seeds::PRIMARY_SEED,
                    Duration::from_secs(30 * 60),
                )
                .await?;
            wall += run.wall_secs;
            limit = limit.or(run.limit);
            let own = |name: &String| !canaries.contains(name);
            tests_passed += run
                .report
                .tests
                .iter()
                .filter(|(n, r)| own(n) && **r == crate::libtest::TestResult::Ok)
                .count() as u32;
            let before = failures.len();
            for (name, r) in &run.report.tests {
                if own(name) && matches!(r, crate::libtest::TestResult::Failed { .. }) {
                    failures.push(name.clone());
                }
            }
            failures.extend(run.report.unfinished.iter().filter(|n| own(n)).cloned());
            match judge_regression(&run.report, run.exit_code, run.timed_out, &canaries) {
                Judged::Forged(why) => {
                    passed = false;
                    forged.get_or_insert(format!("{}: {why}", bin.target));
                }
                Judged::Verdict(RunVerdict::Pass | RunVerdict::NoTests) => {}
                Judged::Verdict(other) => {
                    passed = false;
                    if failures.len() == before {
                        failures.push(format!("{} ({other})", bin.target));
                    }
                }
            }
        }
    }
    Ok(Regression {
        run: RegressionRun {
            passed,
            tests_passed,
            failures,
            wall_secs: wall,
            flaky: Vec::new(),
            runs: None,
        },
        forged,
        limit,
    })
}

/// The cargo target name of the crate's library (the crate name with `-` as `_`).
fn lib_target_name(binaries: &[TestBinary], case: &Case) -> String {
    let crate_name = case.manifest.source.crate_name().replace('-', "_");
    binaries
        .iter()
        .find(|b| b.target == crate_name)
        .map(|b| b.target.clone())
        .unwrap_or(crate_name)
}
