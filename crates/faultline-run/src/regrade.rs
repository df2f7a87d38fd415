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
    let _writer = run.hold_writer()?;
    let log = run.results()?;
    let records = latest(log.read()?);
    if records.is_empty() {
        bail!("{} holds no results to re-grade", run_dir.display());
    }
    let cases = prepare_cases(
        corpus,
        records
            .values()
            .filter(|r| r.track != Track::Build)
            .map(|r| r.case_id.clone()),
        data,
        toolchain,
    )
    .await?;
    let mut out = Vec::new();
    for (id, mut r) in records {
        if r.track == Track::Build {
            // A build is graded on its task's hidden schedules by faultline-build; its grade
            // stays as the run made it.
            tracing::warn!("{id}: build trials are kept as graded, not re-graded");
            out.push(r);
            continue;
        }
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
                    .filter(|p| p.name == crate::agents::AGENT_SANDBOX),
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
            (Track::Build, _) => Err(
                "builds cannot be imported: they are graded on a task, not on a case; only \
                 repair and reproduce"
                    .into(),
            ),
        }
    }
}

/// The predictions in a file, each with where it is (`3` for a line, `item 3`, `key "id"`), in
/// the shapes SWE-bench's own loader accepts: JSON lines, a JSON list, or a JSON object keyed by
/// instance id (mini-swe-agent's `preds.json`), whose entries may leave out their `instance_id`.
/// A prediction that does not parse is returned as its error, so the caller can say where.
pub fn parse_predictions(
    text: &str,
) -> Result<Vec<(String, serde_json::Result<Prediction>)>, serde_json::Error> {
    let whole: Option<serde_json::Value> = serde_json::from_str(text).ok();
    Ok(match whole {
        Some(serde_json::Value::Array(items)) => items
            .into_iter()
            .enumerate()
            .map(|(i, v)| (format!("item {}", i + 1), serde_json::from_value(v)))
            .collect(),
        Some(serde_json::Value::Object(map)) if !map.contains_key("instance_id") => map
            .into_iter()
            .map(|(key, mut v)| {
                if let Some(entry) = v.as_object_mut() {
                    entry
                        .entry("instance_id")
                        .or_insert_with(|| key.clone().into());
                }
                let parsed = serde_json::from_value::<Prediction>(v).and_then(|p| {
                    if p.instance_id == key {
                        Ok(p)
                    } else {
                        Err(serde::de::Error::custom(format!(
                            "keyed by `{key}` but its instance_id is `{}`",
                            p.instance_id
                        )))
                    }
                });
                (format!("key {key:?}"), parsed)
            })
            .collect(),
        _ => {
            let trimmed = text.trim_start();
            if trimmed.starts_with('[') {
                // A list that did not parse whole: say so rather than read it as lines.
                serde_json::from_str::<Vec<serde_json::Value>>(text)?;
            }
            text.lines()
                .enumerate()
                .filter(|(_, l)| !l.trim().is_empty())
                .map(|(i, line)| ((i + 1).to_string(), serde_json::from_str(line)))
                .collect()
        }
    })
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
    for (at, p) in parse_predictions(&text)
        .with_context(|| format!("{}: not a predictions file", predictions.display()))?
    {
        let p = p.with_context(|| format!("{}:{at}: not a prediction", predictions.display()))?;
        if let Err(why) = p.submission() {
            bail!("{}:{at}: {why}", predictions.display());
        }
        if corpus.get(&p.instance_id).is_none() {
            bail!(
                "{}:{at}: unknown case `{}`",
                predictions.display(),
                p.instance_id
            );
        }
        preds.push(p);
    }
    let run = RunDir::new(out);
    let _writer = run.hold_writer()?;
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
        build_tasks: Vec::new(),
        build_schedules: None,
        tracks: [Track::Repair, Track::Reproduce]
            .into_iter()
            .filter(|t| {
                preds
                    .iter()
                    .any(|p| p.submission().is_ok_and(|(pt, _)| pt == *t))
            })
            .collect(),
        conditions: Condition::classic(),
        providers: BTreeMap::new(),
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
    run.write_lock(&lock)?;
    let log = run.results()?;
    let mut records = Vec::new();
    for p in &preds {
        let case = corpus.get(&p.instance_id).expect("checked above");
        let condition = p.condition.clone().unwrap_or_else(Condition::symptom);
        let attempt = p.attempt.unwrap_or(1);
        let agent = agent_name(&p.model_name_or_path);
        let (track, submission) = p.submission().map_err(anyhow::Error::msg)?;
        let trial_id = format!("{agent}/{}/{track}/{condition}/{attempt}", p.instance_id);
        let planned = PlannedTrial {
            agent: 0,
            case: 0,
            track,
            condition: condition.clone(),
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

    fn ids(text: &str) -> Vec<(String, String)> {
        parse_predictions(text)
            .unwrap()
            .into_iter()
            .map(|(at, p)| (at, p.unwrap().instance_id))
            .collect()
    }

    #[test]
    fn predictions_come_as_lines_a_list_or_an_object_keyed_by_instance() {
        let a = r#"{"instance_id":"a","model_name_or_path":"m","model_patch":"x"}"#;
        let b = r#"{"instance_id":"b","model_name_or_path":"m","model_patch":null}"#;
        assert_eq!(
            ids(&format!("{a}\n\n{b}\n")),
            [("1".into(), "a".into()), ("3".into(), "b".into())]
        );
        assert_eq!(ids(a), [("1".into(), "a".into())]);
        assert_eq!(
            ids(&format!("[{a}, {b}]")),
            [("item 1".into(), "a".into()), ("item 2".into(), "b".into())]
        );
        let keyed = r#"{"a": {"model_name_or_path":"m","model_patch":"x"},
                        "b": {"instance_id":"b","model_name_or_path":"m","model_patch":"y"}}"#;
        assert_eq!(
            ids(keyed),
            [
                ("key \"a\"".into(), "a".into()),
                ("key \"b\"".into(), "b".into())
            ]
        );
    }

    #[test]
    fn malformed_predictions_say_where() {
        let mismatch = r#"{"a": {"instance_id":"b","model_name_or_path":"m"}}"#;
        let (at, p) = parse_predictions(mismatch).unwrap().remove(0);
        assert_eq!(at, "key \"a\"");
        assert!(p.unwrap_err().to_string().contains("keyed by `a`"));
        let lines = "{\"instance_id\":\"a\",\"model_name_or_path\":\"m\"}\nnot json\n";
        let parsed = parse_predictions(lines).unwrap();
        assert!(parsed[0].1.is_ok());
        assert_eq!(parsed[1].0, "2");
        assert!(parsed[1].1.is_err());
        assert!(parse_predictions("[{\"instance_id\": ").is_err());
        let (_, p) = parse_predictions("[{\"model_patch\": \"x\"}]")
            .unwrap()
            .remove(0);
        assert!(p.unwrap_err().to_string().contains("instance_id"));
    }
}
