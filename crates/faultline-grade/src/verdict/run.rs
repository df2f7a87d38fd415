//! Running the oracle as the plan says: every wrapper in its own process, in an order drawn for
//! the seed, as many at once as libtest would have run, judged together.

use super::judge::{Judged, judge_wrapper};
use super::names::{shuffle, stream};
use super::plan::VerdictPlan;
use super::wrappers::{Role, Wrapper};
use crate::libtest::{RunVerdict, TestResult};
use crate::workbench::{TestBinary, Workbench};
use anyhow::Result;
use faultline_corpus::workspace::layout::{GUEST_ORACLE, GUEST_WORKSPACE};
use faultline_sandbox::LimitHit;
use futures_util::future::join_all;
use std::time::Duration;

/// The oracle's verdict for one seed, over all its wrappers.
#[derive(Debug, Clone)]
pub struct OracleVerdict {
    /// The verdict: the first real wrapper's non-pass, or `tampered` with [`Self::reason`].
    pub verdict: RunVerdict,
    /// Why, for verdicts other than a pass.
    pub reason: Option<String>,
    /// Wall-clock seconds of all the processes.
    pub wall_secs: f64,
    /// Seconds libtest measured, summed (absent when a run did not finish).
    pub test_secs: Option<f64>,
    /// The sandbox's resource limit a process ran into, if one did.
    pub limit: Option<LimitHit>,
}

/// Runs every wrapper of the plan in its own process, in an order drawn for this seed, and judges
/// them together. As many processes run at once as libtest would have run the oracle's tests at
/// once (one per test, up to the number of processors), so the machine is no busier than before.
/// Stops at the first forgery and at the first hang.
pub async fn run_oracle(
    bench: &Workbench,
    binaries: &[TestBinary],
    plan: &VerdictPlan,
    seed: u64,
    timeout: Duration,
) -> Result<OracleVerdict> {
    let mut order: Vec<&Wrapper> = plan.wrappers.iter().collect();
    shuffle(&mut stream(plan.seed, &format!("order {seed}")), &mut order);
    let package_root = match plan.oracle_module {
        Some(_) => GUEST_WORKSPACE,
        None => GUEST_ORACLE,
    };
    let tests = plan
        .wrappers
        .iter()
        .filter(|w| w.role == Role::Oracle)
        .count();
    let processors = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut out = OracleVerdict {
        verdict: RunVerdict::Pass,
        reason: None,
        wall_secs: 0.0,
        test_secs: Some(0.0),
        limit: None,
    };
    for batch in order.chunks(tests.min(processors).max(1)) {
        let mut runnable = Vec::new();
        for w in batch {
            match binaries
                .iter()
                .find(|b| b.target == w.target && b.cwd == package_root)
            {
                Some(bin) => runnable.push((*w, bin)),
                None if w.role == Role::Oracle && out.verdict == RunVerdict::Pass => {
                    out.verdict = RunVerdict::NoTests;
                    out.reason = Some(format!("no test executable for `{}`", w.target));
                }
                None => {}
            }
        }
        let runs = join_all(
            runnable
                .iter()
                .map(|(w, bin)| bench.run_exact(bin, &w.name, seed, timeout)),
        )
        .await;
        let mut hung = false;
        for ((w, _), run) in runnable.into_iter().zip(runs) {
            let run = run?;
            out.wall_secs += run.wall_secs;
            out.limit = out.limit.or(run.limit);
            out.test_secs = match (out.test_secs, run.report.suite.and_then(|s| s.exec_time)) {
                (Some(a), Some(b)) => Some(a + b),
                _ => None,
            };
            let judged = judge_wrapper(&run.report, run.exit_code, run.timed_out, &w.name, w.role);
            let verdict = match judged {
                Judged::Forged(why) => {
                    out.verdict = RunVerdict::Tampered;
                    out.reason = Some(why);
                    return Ok(out);
                }
                Judged::Verdict(v) => v,
            };
            let first_failure = out.verdict == RunVerdict::Pass;
            match (w.role, verdict) {
                (Role::Oracle, v) if v != RunVerdict::Pass && first_failure => {
                    out.verdict = v;
                    out.reason = Some(format!("in `{}`", w.calls));
                }
                (Role::Canary, RunVerdict::NoTests) if first_failure => {
                    out.verdict = RunVerdict::NoTests;
                    out.reason = Some(format!(
                        "a canary of `{}` is not in the test executable",
                        w.calls
                    ));
                }
                _ => {}
            }
            // A hang ends the run: the oracle is deterministic, so the real wrapper of a test
            // whose canary hangs would hang too. A process that claimed a pass and then hung
            // does not, so that the canaries can speak.
            if run.timed_out && run.report.tests.get(&w.name) != Some(&TestResult::Ok) {
                hung = true;
                if out.verdict == RunVerdict::Pass {
                    out.verdict = RunVerdict::Timeout;
                    out.reason = Some(format!("`{}` ran out of time", w.calls));
                }
            }
        }
        if hung {
            return Ok(out);
        }
    }
    Ok(out)
}
