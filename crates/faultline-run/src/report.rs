//! Reading a run directory for its report: the lock, the latest record of each trial, every
//! trial's files for the trajectory viewer, and the source excerpts around the labeled and
//! diagnosed blocks (from the source store).

use crate::records::read_run;
use anyhow::{Context, Result};
use faultline_corpus::{Corpus, DataDir};
use faultline_report::viewer::{BlockView, CaseView, TrialView, crate_path};
use faultline_schema::io::ReadError;
use faultline_schema::{Diagnosis, ResultRecord, RunDir, Track};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Characters of trajectory text embedded in an HTML report; later trials are listed without
/// their steps.
pub const TRAJECTORY_BUDGET: usize = 40_000_000;

/// A file of a trial for the viewer: `None` when it is absent, and when it cannot be read (said
/// in a warning; the report shows the rest).
fn read_optional<T>(read: Result<Option<T>, ReadError>) -> Option<T> {
    read.unwrap_or_else(|e| {
        tracing::warn!("{e}");
        None
    })
}

/// The viewer's view of every trial, in trial order; once `budget` characters of steps are
/// embedded, later trials keep only their summary.
pub fn trial_views(run: &RunDir, records: &[ResultRecord], budget: usize) -> Vec<TrialView> {
    let mut used = 0;
    let mut views = Vec::with_capacity(records.len());
    for r in records {
        let dir = run.trial(&r.trial_id);
        let trajectory = read_optional(dir.read_trajectory());
        let grade = read_optional(dir.read_grade());
        let submitted = dir.read_submission(r.track);
        let diagnosis = match r.track {
            Track::Diagnose => submitted.text().and_then(|t| Diagnosis::from_json(t).ok()),
            _ => None,
        };
        let submission = match r.track {
            Track::Diagnose => None,
            Track::Repair | Track::Reproduce | Track::Build => submitted.text(),
        };
        let view = TrialView::new(
            r,
            trajectory.as_ref(),
            grade.as_ref(),
            diagnosis.as_ref(),
            submission,
        );
        used += view.size();
        views.push(if used > budget {
            view.without_steps()
        } else {
            view
        });
    }
    views
}

/// Per case of `trials`, its labeled blocks and the buggy source around them and around every
/// diagnosed block; cases the corpus lacks, or whose sources cannot be had, get what is known.
pub fn case_views(corpus: &Corpus, data: &DataDir, trials: &[TrialView]) -> Vec<CaseView> {
    let mut diagnosed: BTreeMap<&str, Vec<&BlockView>> = BTreeMap::new();
    for t in trials {
        diagnosed
            .entry(t.case_id.as_str())
            .or_default()
            .extend(&t.diagnosis);
    }
    let store = data.store();
    diagnosed
        .into_iter()
        .filter_map(|(id, blocks)| {
            let case = corpus.get(id)?;
            let labeled = case
                .manifest
                .blocks
                .iter()
                .map(|b| BlockView {
                    file: b.file.clone(),
                    start: b.start,
                    end: b.end,
                    symbol: b.symbol.clone(),
                    explanation: None,
                })
                .collect();
            let root = match store.case_sources(&case.manifest, &case.dir) {
                Ok(s) => Some(s.buggy),
                Err(e) => {
                    tracing::warn!("no source excerpts for {id}: {e:#}");
                    None
                }
            };
            Some(CaseView::new(id, labeled, blocks, |file| {
                let file = crate_path(file)?;
                std::fs::read_to_string(root.as_ref()?.join(file)).ok()
            }))
        })
        .collect()
}

/// Where to write the renderings of a report.
#[derive(Debug, Clone, Default)]
pub struct Outputs {
    /// The self-contained HTML page.
    pub html: Option<PathBuf>,
    /// The Markdown document.
    pub markdown: Option<PathBuf>,
    /// `report.json`.
    pub json: Option<PathBuf>,
}

/// Computes the report of a run directory (with the re-grading check of an unpacked archive,
/// when there is one) and writes the requested renderings.
pub fn write_report(
    run_dir: &Path,
    corpus: &Corpus,
    data: &DataDir,
    outputs: &Outputs,
) -> Result<faultline_schema::Report> {
    let run = RunDir::new(run_dir);
    let (lock, records) = read_run(&run)?;
    let mut report = faultline_report::summary::build(
        &records,
        lock.as_ref(),
        &faultline_report::summary::Options::default(),
    );
    report.regrade = run.read_regrade()?;
    report.providers = faultline_report::providers::summarize(&records, &run.read_bundles()?);
    if let Some(path) = &outputs.json {
        faultline_schema::io::write_json_atomic(path, &report)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    if let Some(path) = &outputs.markdown {
        faultline_schema::io::write_atomic(
            path,
            faultline_report::markdown::markdown(&report).as_bytes(),
        )
        .with_context(|| format!("writing {}", path.display()))?;
    }
    if let Some(path) = &outputs.html {
        let trials = trial_views(&run, &records, TRAJECTORY_BUDGET);
        let cases = case_views(corpus, data, &trials);
        let name = run_dir
            .canonicalize()
            .ok()
            .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
            .unwrap_or_else(|| "run".into());
        let html = faultline_report::html::render(&faultline_report::html::HtmlInputs {
            title: &format!("faultline report: {name}"),
            report: &report,
            trials: &trials,
            cases: &cases,
        })
        .map_err(|e| anyhow::anyhow!("rendering the HTML report: {e:#}"))?;
        faultline_schema::io::write_atomic(path, html.as_bytes())
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(report)
}
