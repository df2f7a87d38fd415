//! `results.jsonl`: one line per finished trial, appended and fsynced. A crash can only tear the
//! last line; reading drops it and the next append starts on a clean line.

use crate::io::{ReadError, append_jsonl, write_atomic};
use crate::run::ResultRecord;
use std::collections::BTreeMap;
use std::fs::{self, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};

/// The results file of a run directory (see [`crate::rundir::RunDir::results`]).
#[derive(Debug)]
pub struct ResultsLog {
    path: PathBuf,
}

impl ResultsLog {
    /// The log at `path`; a torn last line is cut off so appends stay line-aligned.
    pub(crate) fn open(path: PathBuf) -> io::Result<ResultsLog> {
        if let Ok(bytes) = fs::read(&path)
            && !bytes.is_empty()
            && !bytes.ends_with(b"\n")
        {
            let keep = bytes.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
            let file = OpenOptions::new().write(true).open(&path)?;
            file.set_len(keep as u64)?;
            file.sync_all()?;
            tracing::warn!("dropped a torn last line from {}", path.display());
        }
        Ok(ResultsLog { path })
    }

    /// Every complete record, in file order. Lines that do not parse are reported, not fatal.
    pub fn read(&self) -> Result<Vec<ResultRecord>, ReadError> {
        read_records(&self.path)
    }

    /// Appends one record and fsyncs it: the commit point of a trial.
    pub fn append(&self, record: &ResultRecord) -> io::Result<()> {
        append_jsonl(&self.path, record)
    }

    /// Replaces the whole file atomically (after re-grading or merging).
    pub fn rewrite(&self, records: &[ResultRecord]) -> io::Result<()> {
        let mut text = Vec::new();
        for r in records {
            text.extend(serde_json::to_vec(r).map_err(io::Error::other)?);
            text.push(b'\n');
        }
        write_atomic(&self.path, &text)
    }
}

/// Reads a results file; a missing file is empty.
pub(crate) fn read_records(path: &Path) -> Result<Vec<ResultRecord>, ReadError> {
    let text = match fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(cause) => {
            return Err(ReadError::Io {
                path: path.to_owned(),
                cause,
            });
        }
    };
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str(line) {
            Ok(r) => out.push(r),
            Err(e) => tracing::warn!(
                "{}:{}: skipping a malformed record: {e}",
                path.display(),
                i + 1
            ),
        }
    }
    Ok(out)
}

/// The latest record of each trial.
pub fn latest(records: Vec<ResultRecord>) -> BTreeMap<String, ResultRecord> {
    let mut by_id = BTreeMap::new();
    for r in records {
        by_id.insert(r.trial_id.clone(), r);
    }
    by_id
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rundir::RunDir;
    use crate::task::{Condition, Track};
    use crate::{Category, ExitStatus, Outcome};

    fn record(trial_id: &str) -> ResultRecord {
        ResultRecord {
            build: None,
            schema_version: crate::run::RUN_SCHEMA_VERSION,
            trial_id: trial_id.into(),
            case_id: "c".into(),
            system: "s".into(),
            category: Category::InputCrash,
            tier: 1,
            symptom_names_function: false,
            track: Track::Repair,
            condition: Condition::symptom(),
            attempt: 1,
            agent: "a".into(),
            exit_status: ExitStatus::Submitted,
            outcome: Outcome::Pass,
            score: Some(1.0),
            block_coverage: None,
            block_precision: None,
            file_coverage: None,
            tokens: Default::default(),
            cost_usd: None,
            steps: 0,
            steps_to_first_edit: None,
            wall_secs: 0.0,
            working_secs: 0.0,
            actions: BTreeMap::new(),
            finished_at: String::new(),
        }
    }

    #[test]
    fn a_torn_last_line_is_dropped_and_appends_stay_aligned() {
        let dir = tempfile::tempdir().unwrap();
        let run = RunDir::new(dir.path());
        assert!(
            run.read_results().unwrap().is_empty(),
            "no file reads as empty"
        );
        let log = run.results().unwrap();
        log.append(&record("a")).unwrap();
        log.append(&record("b")).unwrap();
        let bytes = fs::read(run.results_path()).unwrap();
        fs::write(run.results_path(), &bytes[..bytes.len() - 10]).unwrap();
        let log = run.results().unwrap();
        assert_eq!(log.read().unwrap(), vec![record("a")]);
        log.append(&record("c")).unwrap();
        let ids: Vec<_> = latest(run.read_results().unwrap()).into_keys().collect();
        assert_eq!(ids, ["a", "c"]);
    }
}
