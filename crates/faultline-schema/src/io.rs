//! Reading and atomically writing the files that record results.
//!
//! A write goes to a temporary file in the same directory, is flushed to disk, and is then
//! renamed over the target, so a reader (or a resumed run) sees either the old file or the new
//! one, never a torn one.

use serde::Serialize;
use serde::de::DeserializeOwned;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// Why a file of a run or bundle directory could not be written. The message names the file;
/// the cause is the error's `source`.
#[derive(Debug, thiserror::Error)]
#[error("cannot write {path}")]
pub struct WriteError {
    /// The file.
    pub path: PathBuf,
    /// The underlying error.
    #[source]
    pub source: io::Error,
}

/// Why a recorded file could not be read. The message names the file and the cause, so the
/// cause is not also the error's `source`: a chain printed whole (`{:#}`) shows it once.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// The file could not be opened or read.
    #[error("cannot read {path}: {cause}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        cause: io::Error,
    },
    /// The file is not valid JSON of the expected shape.
    #[error("{path} is not a valid {what}: {cause}")]
    Json {
        /// The file.
        path: PathBuf,
        /// The format that was expected.
        what: &'static str,
        /// The underlying error, with line and column.
        cause: serde_json::Error,
    },
}

/// Writes `bytes` to `path` atomically: temporary file, fsync, rename, fsync of the directory.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    fs::create_dir_all(dir)?;
    let mut tmp = tempfile_in(dir, path)?;
    tmp.1.write_all(bytes)?;
    tmp.1.sync_all()?;
    drop(tmp.1);
    fs::rename(&tmp.0, path).inspect_err(|_| {
        let _ = fs::remove_file(&tmp.0);
    })?;
    if let Ok(d) = File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

/// Serializes `value` as pretty JSON (with a final newline) and writes it atomically.
pub fn write_json_atomic<T: Serialize>(path: &Path, value: &T) -> io::Result<()> {
    let mut bytes = serde_json::to_vec_pretty(value).map_err(io::Error::other)?;
    bytes.push(b'\n');
    write_atomic(path, &bytes)
}

/// Reads a JSON file into `T`, naming the file and the format on error.
pub fn read_json<T: DeserializeOwned>(path: &Path, what: &'static str) -> Result<T, ReadError> {
    let bytes = fs::read(path).map_err(|cause| ReadError::Io {
        path: path.to_owned(),
        cause,
    })?;
    serde_json::from_slice(&bytes).map_err(|cause| ReadError::Json {
        path: path.to_owned(),
        what,
        cause,
    })
}

/// Appends one line to a JSONL file and fsyncs it, so a finished record survives a kill.
pub fn append_jsonl<T: Serialize>(path: &Path, value: &T) -> io::Result<()> {
    let mut line = serde_json::to_vec(value).map_err(io::Error::other)?;
    line.push(b'\n');
    let mut file = OpenOptions::new().create(true).append(true).open(path)?;
    file.write_all(&line)?;
    file.sync_data()
}

fn tempfile_in(dir: &Path, target: &Path) -> io::Result<(PathBuf, File)> {
    let stem = target
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    for attempt in 0..1000u32 {
        let candidate = dir.join(format!(".{stem}.{}.{attempt}.tmp", std::process::id()));
        match OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&candidate)
        {
            Ok(f) => return Ok((candidate, f)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
    Err(io::Error::other("could not create a temporary file"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn atomic_write_replaces_and_leaves_no_temporaries() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("grade.json");
        write_json_atomic(&path, &serde_json::json!({"a": 1})).unwrap();
        write_json_atomic(&path, &serde_json::json!({"a": 2})).unwrap();
        let back: serde_json::Value = read_json(&path, "grade").unwrap();
        assert_eq!(back["a"], 2);
        let names: Vec<_> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names.len(), 1, "temporary files left behind: {names:?}");
    }

    #[test]
    fn read_json_names_the_file_on_bad_input() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.json");
        fs::write(&path, "{ not json").unwrap();
        let err = read_json::<serde_json::Value>(&path, "diagnosis").unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("x.json") && msg.contains("diagnosis"), "{msg}");
    }

    #[test]
    fn a_missing_file_names_its_cause_once_in_the_whole_chain() {
        let dir = tempfile::tempdir().unwrap();
        let err =
            read_json::<serde_json::Value>(&dir.path().join("lock.json"), "run lock").unwrap_err();
        let mut chain = err.to_string();
        let mut cause = std::error::Error::source(&err);
        while let Some(c) = cause {
            chain.push_str(&format!(": {c}"));
            cause = c.source();
        }
        assert!(chain.contains("lock.json"), "{chain}");
        assert_eq!(chain.matches("(os error 2)").count(), 1, "{chain}");
    }
}
