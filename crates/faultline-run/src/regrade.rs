//! Re-grading a run from its stored submissions (no agent runs again), and importing patches
//! from other harnesses in the SWE-bench predictions format.

use crate::plan::{PlannedTrial, trial_seed};
use crate::records::{locked_cases, record};
use anyhow::{Context, Result, bail};
use faultline_agent::record::Recorder;
use faultline_corpus::checks::static_checks;
use faultline_corpus::{Corpus, DataDir, PrepareOptions, PreparedCase, prepare};
use faultline_grade::{GradeContext, grade_submission};
use faultline_sandbox::Toolchain;
use faultline_schema::results::latest;
use faultline_schema::run::RUN_SCHEMA_VERSION;
use faultline_schema::task::TASK_SCHEMA_VERSION;
use faultline_schema::trajectory::{AgentInfo, AgentKind};
use faultline_schema::{
    Condition, ExitStatus, GradingSettings, Limits, RunDir, RunLock, Submission, Task, Track,
    Trajectory,
};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::Path;

struct Prepared {
    prepared: BTreeMap<String, PreparedCase>,
    names_function: BTreeMap<String, bool>,
}

async fn prepare_cases(
    corpus: &Corpus,
    ids: impl IntoIterator<Item = String>,
    data: &DataDir,
    toolchain: &Toolchain,
) -> Result<Prepared> {
    let mut out = Prepared {
        prepared: BTreeMap::new(),
        names_function: BTreeMap::new(),
    };
    for id in ids {
        if out.prepared.contains_key(&id) {
            continue;
        }
        let case = corpus
            .get(&id)
            .with_context(|| format!("case `{id}` is not in the corpus"))?;
        let p = prepare(case, data, toolchain, &PrepareOptions::default()).await?;
        let (report, _) = static_checks(case, &p.sources)?;
        out.names_function
            .insert(id.clone(), !report.symptom_names.is_empty());
        out.prepared.insert(id, p);
    }
    Ok(out)
}

/// Grades every trial of a run again from its stored submission and rewrites its grades and
/// results. Returns the number of trials graded.
pub async fn regrade(
    run_dir: &Path,
    corpus: &Corpus,
    data: &DataDir,
    toolchain: &Toolchain,
    opts: &GradingSettings,
    use_cache: bool,
) -> Result<usize> {
    let run = RunDir::new(run_dir);
    let log = run.results()?;
    let records = latest(log.read()?);
    if records.is_empty() {
        bail!("{} holds no results to re-grade", run_dir.display());
    }
    let cases = prepare_cases(
        corpus,
        records.values().map(|r| r.case_id.clone()),
        data,
        toolchain,
    )
    .await?;
    let mut out = Vec::new();
    for (id, mut r) in records {
        let dir = run.trial(&id);
        let case = corpus.get(&r.case_id).expect("prepared above");
        let submission = dir.read_submission(r.track);
        let ctx = GradeContext {
            case,
            prepared: &cases.prepared[&r.case_id],
            data,
            toolchain,
        };
        let mut grade = grade_submission(&ctx, &id, r.track, &submission, opts, use_cache).await?;
        // What the agent ran under is not the grader's to change: an agent that ran outside the
        // sandbox keeps that record.
        if let Ok(Some(old)) = dir.read_grade() {
            grade.protections.extend(
                old.protections
                    .into_iter()
                    .filter(|p| p.name == crate::runner::AGENT_SANDBOX),
            );
        }
        dir.write_grade(&grade)?;
        r.outcome = grade.outcome;
        r.score = grade.score;
        r.block_coverage = grade.diagnosis.as_ref().map(|d| d.block_coverage);
        r.block_precision = grade.diagnosis.as_ref().map(|d| d.block_precision);
        r.file_coverage = grade.diagnosis.as_ref().map(|d| d.file_coverage);
        out.push(r);
    }
    log.rewrite(&out)?;
    Ok(out.len())
}

/// One line of a SWE-bench predictions file, with faultline's optional extras.
#[derive(Debug, Deserialize)]
pub struct Prediction {
    /// The case id.
    pub instance_id: String,
    /// The model or system that produced the patch (the agent name in results).
    pub model_name_or_path: String,
    /// The unified diff.
    pub model_patch: Option<String>,
    /// faultline extra: `symptom` (default) or `context`.
    #[serde(default)]
    pub condition: Option<Condition>,
    /// faultline extra: attempt number (default 1).
    #[serde(default)]
    pub attempt: Option<u32>,
    /// faultline extra: `repair` (default, `model_patch` is graded) or `reproduce` (`test_file`
    /// is graded as the reproducer).
    #[serde(default)]
    pub track: Option<Track>,
    /// faultline extra: the reproducer's test file, for the reproduce track.
    #[serde(default)]
    pub test_file: Option<String>,
}

impl Prediction {
    /// The track this line is graded on, and its submission; an error says what the line lacks.
    fn submission(&self) -> Result<(Track, Submission), String> {
        match (self.track.unwrap_or(Track::Repair), &self.test_file) {
            (Track::Repair, None) => Ok((
                Track::Repair,
                self.model_patch
                    .clone()
                    .map_or(Submission::None, Submission::Patch),
            )),
            (Track::Repair, Some(_)) => Err(
                "`test_file` belongs to the reproduce track; add \"track\": \"reproduce\"".into(),
            ),
            (Track::Reproduce, Some(test)) => {
                Ok((Track::Reproduce, Submission::Reproducer(test.clone())))
            }
            (Track::Reproduce, None) => {
                Err("a reproduce-track line needs `test_file`, the reproducer's text".into())
            }
            (Track::Diagnose, _) => {
                Err("diagnoses cannot be imported; only repair and reproduce".into())
            }
        }
    }
}

/// Turns a predictions file into a graded run in `out`. Returns the number of trials.
pub async fn import_predictions(
    predictions: &Path,
    out: &Path,
    corpus: &Corpus,
    data: &DataDir,
    toolchain: &Toolchain,
    opts: &GradingSettings,
) -> Result<usize> {
    let text = std::fs::read_to_string(predictions)
        .with_context(|| format!("reading {}", predictions.display()))?;
    let mut preds = Vec::new();
    for (i, line) in text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
    {
        let p: Prediction = serde_json::from_str(line)
            .with_context(|| format!("{}:{}: not a prediction", predictions.display(), i + 1))?;
        if let Err(why) = p.submission() {
            bail!("{}:{}: {why}", predictions.display(), i + 1);
        }
        if corpus.get(&p.instance_id).is_none() {
            bail!(
                "{}:{}: unknown case `{}`",
                predictions.display(),
                i + 1,
                p.instance_id
            );
        }
        preds.push(p);
    }
    let cases = prepare_cases(
        corpus,
        preds.iter().map(|p| p.instance_id.clone()),
        data,
        toolchain,
    )
    .await?;
    let agents: std::collections::BTreeSet<String> = preds
        .iter()
        .map(|p| agent_name(&p.model_name_or_path))
        .collect();
    let lock = RunLock {
        schema_version: RUN_SCHEMA_VERSION,
        faultline_version: env!("CARGO_PKG_VERSION").into(),
        agents: agents
            .iter()
            .map(|a| AgentInfo {
                kind: AgentKind::Imported,
                name: a.clone(),
                model: None,
                protocol: None,
                settings: BTreeMap::new(),
            })
            .collect(),
        limits: Limits::default(),
        seed: 0,
        attempts: preds.iter().filter_map(|p| p.attempt).max().unwrap_or(1),
        baseline_attempts: 1,
        tracks: [Track::Repair, Track::Reproduce]
            .into_iter()
            .filter(|t| {
                preds
                    .iter()
                    .any(|p| p.submission().is_ok_and(|(pt, _)| pt == *t))
            })
            .collect(),
        conditions: Condition::ALL.to_vec(),
        cases: locked_cases(
            cases
                .prepared
                .keys()
                .map(|id| corpus.get(id).expect("known")),
        )?,
        pricing: None,
        grading: *opts,
        shard: None,
        protections: faultline_grade::protections::in_force(),
    };
    std::fs::create_dir_all(out)?;
    let run = RunDir::new(out);
    run.write_lock(&lock)?;
    let log = run.results()?;
    let mut records = Vec::new();
    for p in &preds {
        let case = corpus.get(&p.instance_id).expect("checked above");
        let condition = p.condition.unwrap_or(Condition::Symptom);
        let attempt = p.attempt.unwrap_or(1);
        let agent = agent_name(&p.model_name_or_path);
        let (track, submission) = p.submission().map_err(anyhow::Error::msg)?;
        let trial_id = format!("{agent}/{}/{track}/{condition}/{attempt}", p.instance_id);
        let planned = PlannedTrial {
            agent: 0,
            case: 0,
            track,
            condition,
            attempt,
            seed: trial_seed(0, &trial_id),
            trial_id: trial_id.clone(),
        };
        let dir = run.trial(&trial_id);
        std::fs::create_dir_all(dir.path())?;
        let task = Task {
            schema_version: TASK_SCHEMA_VERSION,
            trial_id: trial_id.clone(),
            case_id: p.instance_id.clone(),
            track,
            condition,
            attempt,
            seed: planned.seed,
            crate_name: case.manifest.source.crate_name().into(),
            bundle_files: Vec::new(),
            limits: Limits::default(),
        };
        dir.write_task(&task)?;
        dir.write_submission(&submission)?;
        let info = AgentInfo {
            kind: AgentKind::Imported,
            name: agent.clone(),
            model: None,
            protocol: None,
            settings: BTreeMap::new(),
        };
        let mut rec = Recorder::new(&task, info, Some(dir.trajectory_path()));
        rec.finish(ExitStatus::Submitted, None, None)?;
        let traj: Trajectory = rec.trajectory;
        let ctx = GradeContext {
            case,
            prepared: &cases.prepared[&p.instance_id],
            data,
            toolchain,
        };
        let grade = grade_submission(&ctx, &trial_id, track, &submission, opts, true).await?;
        dir.write_grade(&grade)?;
        records.push(record(
            case,
            &planned,
            &agent,
            &traj,
            &grade,
            cases.names_function[&p.instance_id],
        ));
    }
    log.rewrite(&records)?;
    Ok(records.len())
}

fn agent_name(model: &str) -> String {
    model
        .chars()
        .map(|c| {
            if c == '/' || c.is_whitespace() {
                '-'
            } else {
                c
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(json: &str) -> Result<(Track, Submission), String> {
        serde_json::from_str::<Prediction>(json)
            .unwrap()
            .submission()
    }

    #[test]
    fn a_prediction_is_graded_on_the_track_its_fields_name() {
        let (track, s) =
            line(r#"{"instance_id":"c","model_name_or_path":"m","model_patch":"diff"}"#).unwrap();
        assert_eq!(
            (track, s),
            (Track::Repair, Submission::Patch("diff".into()))
        );
        let (track, s) = line(
            r#"{"instance_id":"c","model_name_or_path":"m","track":"reproduce","test_file":"t"}"#,
        )
        .unwrap();
        assert_eq!(
            (track, s),
            (Track::Reproduce, Submission::Reproducer("t".into()))
        );
        let err = line(r#"{"instance_id":"c","model_name_or_path":"m","track":"reproduce"}"#)
            .unwrap_err();
        assert!(err.contains("needs `test_file`"), "{err}");
        let err =
            line(r#"{"instance_id":"c","model_name_or_path":"m","test_file":"t"}"#).unwrap_err();
        assert!(err.contains("reproduce track"), "{err}");
        let err =
            line(r#"{"instance_id":"c","model_name_or_path":"m","track":"diagnose"}"#).unwrap_err();
        assert!(err.contains("cannot be imported"), "{err}");
    }
}
