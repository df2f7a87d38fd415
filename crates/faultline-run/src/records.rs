//! What a run records, shared by running, re-grading, importing, reporting and packing: the
//! results line of a trial, the cases as the lock records them, and a run's lock and latest
//! records read back. It imports no other module of the crate but the plan, so the modules
//! that use it form no circle.

use crate::plan::PlannedTrial;
use anyhow::{Context, Result, bail};
use faultline_corpus::Case;
use faultline_schema::results::latest;
use faultline_schema::run::{LockedCase, RUN_SCHEMA_VERSION};
use faultline_schema::rundir::RESULTS_FILE;
use faultline_schema::{Grade, ResultRecord, RunDir, RunLock, Trajectory};
use std::time::SystemTime;

/// The results line of a trial.
pub fn record(
    case: &Case,
    t: &PlannedTrial,
    agent: &str,
    traj: &Trajectory,
    grade: &Grade,
    symptom_names_function: bool,
) -> ResultRecord {
    ResultRecord {
        schema_version: RUN_SCHEMA_VERSION,
        trial_id: t.trial_id.clone(),
        case_id: case.id().into(),
        system: case.manifest.system.clone(),
        category: case.manifest.category,
        tier: case.manifest.tier,
        symptom_names_function,
        track: t.track,
        condition: t.condition.clone(),
        attempt: t.attempt,
        agent: agent.to_string(),
        exit_status: traj.exit_status,
        outcome: grade.outcome,
        score: grade.score,
        build: None,
        block_coverage: grade.diagnosis.as_ref().map(|d| d.block_coverage),
        block_precision: grade.diagnosis.as_ref().map(|d| d.block_precision),
        file_coverage: grade.diagnosis.as_ref().map(|d| d.file_coverage),
        tokens: traj.totals.tokens,
        cost_usd: traj.totals.cost_usd,
        steps: traj.totals.steps,
        steps_to_first_edit: traj.totals.steps_to_first_edit,
        wall_secs: traj.totals.wall_secs,
        working_secs: traj.totals.working_secs,
        actions: traj.totals.actions.clone(),
        finished_at: humantime::format_rfc3339_seconds(SystemTime::now()).to_string(),
    }
}

/// The cases as a lock records them: each with the hash of everything an agent sees and the
/// grader uses ([`Case::content_sha256`]), so a run is not resumed over a changed case.
pub fn locked_cases<'a>(cases: impl IntoIterator<Item = &'a Case>) -> Result<Vec<LockedCase>> {
    cases
        .into_iter()
        .map(|c| {
            Ok(LockedCase {
                id: c.id().into(),
                sha256: c
                    .content_sha256()
                    .with_context(|| format!("hashing the files of case {}", c.id()))?,
            })
        })
        .collect()
}

/// A run directory's lock (when it has one) and the latest record of each trial.
pub fn read_run(run: &RunDir) -> Result<(Option<RunLock>, Vec<ResultRecord>)> {
    if !run.root().is_dir() {
        bail!("{} is not a directory", run.root().display());
    }
    let results = run.results_path();
    if !results.is_file() {
        bail!(
            "{} is not a run directory: it has no {RESULTS_FILE}",
            run.root().display()
        );
    }
    let lock = run.read_lock()?;
    let records: Vec<ResultRecord> = latest(run.read_results()?).into_values().collect();
    if records.is_empty() {
        bail!("{} holds no results", results.display());
    }
    Ok((lock, records))
}
