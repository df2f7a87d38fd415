//! `results.jsonl`: one line per finished trial, appended and fsynced. A crash can only tear the
//! last line; reading drops it and the next append starts on a clean line.

use anyhow::{Context, Result};
use faultline_schema::ResultRecord;
use std::collections::BTreeMap;
use std::fs::{self, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

/// The results file of a run directory.
#[derive(Debug)]
pub struct ResultsLog {
    path: PathBuf,
}

impl ResultsLog {
    /// The log in `run_dir`; a torn last line is cut off so appends stay line-aligned.
    pub fn open(run_dir: &Path) -> Result<ResultsLog> {
        let path = run_dir.join("results.jsonl");
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
    pub fn read(&self) -> Result<Vec<ResultRecord>> {
        read_records(&self.path)
    }

    /// Appends one record and fsyncs it: the commit point of a trial.
    pub fn append(&self, record: &ResultRecord) -> Result<()> {
        let mut line = serde_json::to_vec(record)?;
        line.push(b'\n');
        let mut f = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.path)
            .with_context(|| format!("opening {}", self.path.display()))?;
        f.write_all(&line)?;
        f.sync_data()?;
        Ok(())
    }

    /// Replaces the whole file atomically (after re-grading or merging).
    pub fn rewrite(&self, records: &[ResultRecord]) -> Result<()> {
        let mut text = Vec::new();
        for r in records {
            text.extend(serde_json::to_vec(r)?);
            text.push(b'\n');
        }
        faultline_schema::io::write_atomic(&self.path, &text)?;
        Ok(())
    }
}

/// Reads a results file; a missing file is empty.
pub fn read_records(path: &Path) -> Result<Vec<ResultRecord>> {
    let text = match fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
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
