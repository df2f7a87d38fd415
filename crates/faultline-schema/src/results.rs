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
        Err(source) => {
            return Err(ReadError::Io {
                path: path.to_owned(),
                source,
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
