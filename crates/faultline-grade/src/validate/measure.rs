//! How often a case's oracle fails on the buggy version, over seeds `1..=runs`: the rate a
//! curator records as `buggy_failure_rate` for a seeded or looped oracle, measured by the same
//! workbench, wrappers and judging that validation and grading use.

use super::{Variant, build_with_fallback};
use crate::verdict::{VerdictPlan, fresh_seed, run_oracle};
use crate::workbench::{BuildTarget, Workbench};
use anyhow::{Result, bail};
use faultline_corpus::{Case, DataDir, PreparedCase, TreeDiff};
use faultline_sandbox::Toolchain;
use faultline_schema::OracleKind;
use faultline_schema::grade::RunVerdict;
use faultline_schema::rate::FailureRate;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// A measurement of the buggy version's failure rate.
#[derive(Debug, Clone)]
pub struct Measured {
    /// Runs that failed, of all runs.
    pub rate: FailureRate,
    /// How many runs ended in each verdict (`pass`, `fail`, `timeout`...).
    pub verdicts: BTreeMap<&'static str, u32>,
    /// Seeds whose run did not fail: where to look when the rate is below `runs`.
    pub passing_seeds: Vec<u64>,
    /// Wall-clock seconds building the oracle.
    pub build_secs: f64,
    /// Wall-clock seconds running it.
    pub run_secs: f64,
}

/// Builds the buggy version's oracle in a fresh workbench and runs it with seeds `1..=runs`,
/// calling `progress` after each run. A run that checked nothing or whose output was forged
/// makes the measurement an error: it is no evidence either way.
pub async fn measure_buggy_failure_rate(
    case: &Case,
    prepared: &PreparedCase,
    data: &DataDir,
    toolchain: &Toolchain,
    runs: u32,
    mut progress: impl FnMut(u64, RunVerdict),
) -> Result<Measured> {
    if runs == 0 {
        bail!("a rate needs at least one run");
    }
    let bench = Workbench::new(prepared, data, toolchain)?;
    let plan = VerdictPlan::new(fresh_seed()?, case, &bench)?;
    plan.inject(&bench)?;
    let target = match case.manifest.oracle.kind {
        OracleKind::External => BuildTarget::Oracle,
        OracleKind::InCrate => BuildTarget::Lib,
    };
    let started = Instant::now();
    let no_patch = TreeDiff::default();
    let binaries = match build_with_fallback(
        &bench,
        &plan,
        &no_patch,
        prepared,
        Variant::Buggy,
        std::slice::from_ref(&target),
    )
    .await?
    {
        Ok(binaries) => binaries,
        Err(stderr) => bail!("the oracle does not build on the buggy version:\n{stderr}"),
    };
    let build_secs = started.elapsed().as_secs_f64();
    bench.hide(&plan.hidden_sources(&bench))?;
    let timeout = Duration::from_secs(case.manifest.oracle.timeout_secs);
    let started = Instant::now();
    let mut verdicts = BTreeMap::new();
    let mut passing_seeds = Vec::new();
    let mut failed = 0;
    for seed in 1..=u64::from(runs) {
        let verdict = run_oracle(&bench, &binaries, &plan, seed, timeout)
            .await?
            .verdict;
        if matches!(verdict, RunVerdict::NoTests | RunVerdict::Tampered) {
            bail!(
                "seed {seed}: the oracle's run was `{}`, which says nothing about the bug",
                verdict.as_str()
            );
        }
        *verdicts.entry(verdict.as_str()).or_insert(0) += 1;
        if verdict.is_failure() {
            failed += 1;
        } else {
            passing_seeds.push(seed);
        }
        progress(seed, verdict);
    }
    Ok(Measured {
        rate: FailureRate { failed, runs },
        verdicts,
        passing_seeds,
        build_secs,
        run_secs: started.elapsed().as_secs_f64(),
    })
}
