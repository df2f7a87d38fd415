//! The layout of a run directory, in one place: every file name a run writes or reads, and the
//! typed reads and atomic writes of its records, so that the runner, re-grading, merging,
//! packing and reporting agree on it by construction. (The submission files' names are
//! [`crate::submission`]'s, since an agent's output directory uses them too.)
//!
//! ```text
//! lock.json  results.jsonl  leaderboard.md  report.html  report.json  (pack.json  regrade.json)
//! .writer                      (held by the one process writing the run; see RunDir::hold_writer)
//! bundles/<case>/<condition>/   bundle.json  *.md   (what a context provider gave the case)
//! trials/<agent>/<case>/<track>/<condition>/<attempt>/
//!     task.json  trajectory.json  diagnosis.json | patch.diff | reproducer.rs  grade.json
//!     task/  agent-output/  agent.log  agent-trajectory.json      (external agents)
//! ```

use crate::bundle::BundleDir;
use crate::condition::Condition;
use crate::grade::Grade;
use crate::io::{ReadError, read_json, write_atomic, write_json_atomic};
use crate::report::RegradeCheck;
use crate::results::{ResultsLog, read_records};
use crate::run::{ResultRecord, RunLock};
use crate::submission::{DIAGNOSIS_FILE, PATCH_FILE, REPRODUCER_FILE, Submission, submission_file};
use crate::task::{Task, Track};
use crate::trajectory::Trajectory;
use serde::Serialize;
use std::io;
use std::path::{Path, PathBuf};

/// The run's configuration ([`RunLock`]).
pub const LOCK_FILE: &str = "lock.json";
/// One line per finished trial ([`crate::ResultRecord`]).
pub const RESULTS_FILE: &str = "results.jsonl";
/// The bundles shown to agents, one directory per case and condition ([`BundleDir`]).
pub const BUNDLES_DIR: &str = "bundles";
/// The directory holding one directory per trial.
pub const TRIALS_DIR: &str = "trials";
/// An archive's manifest ([`crate::PackManifest`]), inside the archive and an unpacked run.
pub const PACK_MANIFEST_FILE: &str = "pack.json";
/// How the re-grading of an unpacked archive compares with its grades ([`RegradeCheck`]).
pub const REGRADE_FILE: &str = "regrade.json";
/// The self-contained HTML report.
pub const REPORT_HTML_FILE: &str = "report.html";
/// The report's numbers ([`crate::Report`]).
pub const REPORT_JSON_FILE: &str = "report.json";
/// The leaderboard printed at the end of a run.
pub const LEADERBOARD_FILE: &str = "leaderboard.md";
/// Locked by the process writing the run ([`RunDir::hold_writer`]); holds its pid.
pub const WRITER_FILE: &str = ".writer";

/// What a trial asked of the agent ([`Task`]); also in an external agent's task directory.
pub const TASK_FILE: &str = "task.json";
/// What the agent did ([`Trajectory`]); an external agent may write its own under this name.
pub const TRAJECTORY_FILE: &str = "trajectory.json";
/// The verdict on the submission ([`Grade`]).
pub const GRADE_FILE: &str = "grade.json";
/// The files of a trial directory that an archive keeps.
pub const ARCHIVED_TRIAL_FILES: [&str; 6] = [
    TASK_FILE,
    TRAJECTORY_FILE,
    DIAGNOSIS_FILE,
    PATCH_FILE,
    REPRODUCER_FILE,
    GRADE_FILE,
];

pub use crate::io::WriteError;

fn write_json<T: Serialize>(path: PathBuf, value: &T) -> Result<(), WriteError> {
    write_json_atomic(&path, value).map_err(|source| WriteError { path, source })
}

/// Why a process may not write a run directory.
#[derive(Debug, thiserror::Error)]
pub enum WriterError {
    /// Another process holds the directory's writer lock.
    #[error(
        "{dir} is being written by another process{}; wait for it to finish, or write to another \
         directory (shards of one run each get their own and are merged afterwards)",
        holder.map(|pid| format!(" (pid {pid})")).unwrap_or_default()
    )]
    Busy {
        /// The run directory.
        dir: PathBuf,
        /// The holder's pid, when it has written it yet.
        holder: Option<u32>,
    },
    /// The lock file could not be made or locked.
    #[error("cannot lock {path}")]
    Io {
        /// The lock file.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
}

/// The right to write a run directory, held until dropped. It is an OS file lock, so it ends
/// with its process however that ends (`kill -9` included) and never needs cleaning up.
#[derive(Debug)]
pub struct WriterLock {
    _file: std::fs::File,
}

/// Reads a JSON file that may be absent: `None` when it does not exist.
fn read_optional<T: serde::de::DeserializeOwned>(
    path: &Path,
    what: &'static str,
) -> Result<Option<T>, ReadError> {
    if path.exists() {
        read_json(path, what).map(Some)
    } else {
        Ok(None)
    }
}

/// A run directory: where a run keeps its lock, its results and its trials.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunDir {
    root: PathBuf,
}

impl RunDir {
    /// The run directory at `root` (nothing is created).
    pub fn new(root: impl Into<PathBuf>) -> RunDir {
        RunDir { root: root.into() }
    }

    /// The directory itself.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Makes the directory if needed and takes its writer lock, or says which process has it.
    /// Every command that writes a run (`run`, `grade`, `import`, `merge`) holds it throughout:
    /// two writers would run every trial twice and interleave their records.
    pub fn hold_writer(&self) -> Result<WriterLock, WriterError> {
        use std::io::{Read, Seek, Write};
        let path = self.root.join(WRITER_FILE);
        let io_error = |source| WriterError::Io {
            path: path.clone(),
            source,
        };
        std::fs::create_dir_all(&self.root).map_err(io_error)?;
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(&path)
            .map_err(io_error)?;
        match file.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                let mut pid = String::new();
                let _ = file.read_to_string(&mut pid);
                return Err(WriterError::Busy {
                    dir: self.root.clone(),
                    holder: pid.trim().parse().ok(),
                });
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(io_error(e)),
        }
        file.set_len(0)
            .and_then(|()| file.rewind())
            .and_then(|()| write!(file, "{}", std::process::id()))
            .map_err(io_error)?;
        Ok(WriterLock { _file: file })
    }

    /// `lock.json`.
    pub fn lock_path(&self) -> PathBuf {
        self.root.join(LOCK_FILE)
    }

    /// `results.jsonl`.
    pub fn results_path(&self) -> PathBuf {
        self.root.join(RESULTS_FILE)
    }

    /// `pack.json`, present in an unpacked archive.
    pub fn pack_manifest_path(&self) -> PathBuf {
        self.root.join(PACK_MANIFEST_FILE)
    }

    /// `regrade.json`, present once an unpacked archive was graded again.
    pub fn regrade_path(&self) -> PathBuf {
        self.root.join(REGRADE_FILE)
    }

    /// `report.html`.
    pub fn report_html_path(&self) -> PathBuf {
        self.root.join(REPORT_HTML_FILE)
    }

    /// `report.json`.
    pub fn report_json_path(&self) -> PathBuf {
        self.root.join(REPORT_JSON_FILE)
    }

    /// `leaderboard.md`.
    pub fn leaderboard_path(&self) -> PathBuf {
        self.root.join(LEADERBOARD_FILE)
    }

    /// The lock, or `None` when the directory has none (a run imported by an older faultline).
    pub fn read_lock(&self) -> Result<Option<RunLock>, ReadError> {
        read_optional(&self.lock_path(), "run lock")
    }

    /// Writes the lock atomically.
    pub fn write_lock(&self, lock: &RunLock) -> Result<(), WriteError> {
        write_json(self.lock_path(), lock)
    }

    /// The results log; a torn last line is cut off so appends stay line-aligned.
    pub fn results(&self) -> io::Result<ResultsLog> {
        ResultsLog::open(self.results_path())
    }

    /// Every complete record of `results.jsonl`, in file order, without touching the file (a
    /// missing file is empty).
    pub fn read_results(&self) -> Result<Vec<ResultRecord>, ReadError> {
        read_records(&self.results_path())
    }

    /// The re-grading check of an unpacked archive, when there is one.
    pub fn read_regrade(&self) -> Result<Option<RegradeCheck>, ReadError> {
        read_optional(&self.regrade_path(), "re-grading check")
    }

    /// Records the re-grading check of an unpacked archive.
    pub fn write_regrade(&self, check: &RegradeCheck) -> Result<(), WriteError> {
        write_json(self.regrade_path(), check)
    }

    /// The bundle one case was shown in one condition, and its record.
    pub fn bundle(&self, case: &str, condition: &Condition) -> BundleDir {
        BundleDir::at(
            self.root
                .join(BUNDLES_DIR)
                .join(case)
                .join(condition.as_str()),
        )
    }

    /// Every bundle record of the run (what each provider gave each case), by case and
    /// condition; an unreadable record is an error naming its file.
    pub fn read_bundles(&self) -> Result<Vec<crate::BundleRecord>, ReadError> {
        let mut out = Vec::new();
        let root = self.root.join(BUNDLES_DIR);
        let Ok(cases) = std::fs::read_dir(&root) else {
            return Ok(out);
        };
        let mut dirs: Vec<PathBuf> = Vec::new();
        for case in cases.flatten() {
            if let Ok(conditions) = std::fs::read_dir(case.path()) {
                dirs.extend(conditions.flatten().map(|c| c.path()));
            }
        }
        dirs.sort();
        for dir in dirs {
            if let Some((record, _)) = BundleDir::at(dir).read()? {
                out.push(record);
            }
        }
        Ok(out)
    }

    /// The directory of one trial.
    pub fn trial(&self, trial_id: &str) -> TrialDir {
        TrialDir {
            root: self.root.join(TRIALS_DIR).join(trial_id),
        }
    }
}

/// One trial's directory: its task, trajectory, submission and grade.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrialDir {
    root: PathBuf,
}

impl TrialDir {
    /// The directory itself.
    pub fn path(&self) -> &Path {
        &self.root
    }

    /// `task.json`.
    pub fn task_path(&self) -> PathBuf {
        self.root.join(TASK_FILE)
    }

    /// `trajectory.json`, written when the trial ends.
    pub fn trajectory_path(&self) -> PathBuf {
        self.root.join(TRAJECTORY_FILE)
    }

    /// `grade.json`.
    pub fn grade_path(&self) -> PathBuf {
        self.root.join(GRADE_FILE)
    }

    /// The submission file of `track`.
    pub fn submission_path(&self, track: Track) -> PathBuf {
        self.root.join(submission_file(track))
    }

    /// The task directory an external agent receives.
    pub fn external_task_dir(&self) -> PathBuf {
        self.root.join("task")
    }

    /// Where an external agent writes its submission.
    pub fn agent_output_dir(&self) -> PathBuf {
        self.root.join("agent-output")
    }

    /// An external agent's standard output and error.
    pub fn agent_log_path(&self) -> PathBuf {
        self.root.join("agent.log")
    }

    /// An external agent's own trajectory, kept beside ours.
    pub fn agent_trajectory_path(&self) -> PathBuf {
        self.root.join("agent-trajectory.json")
    }

    /// Empties the directory (what an interrupted attempt left) and creates it.
    pub fn reset(&self) -> Result<(), WriteError> {
        let io_error = |source| WriteError {
            path: self.root.clone(),
            source,
        };
        if self.root.exists() {
            std::fs::remove_dir_all(&self.root).map_err(io_error)?;
        }
        std::fs::create_dir_all(&self.root).map_err(io_error)
    }

    /// Writes `task.json` atomically.
    pub fn write_task(&self, task: &Task) -> Result<(), WriteError> {
        write_json(self.task_path(), task)
    }

    /// Writes `trajectory.json` atomically.
    pub fn write_trajectory(&self, trajectory: &Trajectory) -> Result<(), WriteError> {
        write_json(self.trajectory_path(), trajectory)
    }

    /// Reads `trajectory.json`, `None` when absent.
    pub fn read_trajectory(&self) -> Result<Option<Trajectory>, ReadError> {
        read_optional(&self.trajectory_path(), "trajectory")
    }

    /// Writes `grade.json` atomically.
    pub fn write_grade(&self, grade: &Grade) -> Result<(), WriteError> {
        write_json(self.grade_path(), grade)
    }

    /// Reads `grade.json`, `None` when absent.
    pub fn read_grade(&self) -> Result<Option<Grade>, ReadError> {
        read_optional(&self.grade_path(), "grade")
    }

    /// Writes the submission's file atomically (nothing for [`Submission::None`]).
    pub fn write_submission(&self, submission: &Submission) -> Result<(), WriteError> {
        if let (Some(name), Some(text)) = (submission.file_name(), submission.text()) {
            let path = self.root.join(name);
            write_atomic(&path, text.as_bytes()).map_err(|source| WriteError { path, source })?;
        }
        Ok(())
    }

    /// The stored submission of `track` ([`Submission::None`] when there is none).
    pub fn read_submission(&self, track: Track) -> Submission {
        Submission::read(&self.root, track).unwrap_or(Submission::None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_writer_is_refused_with_the_holders_pid_until_the_first_lets_go() {
        let dir = tempfile::tempdir().unwrap();
        let run = RunDir::new(dir.path().join("run"));
        let first = run.hold_writer().unwrap();
        let err = run.hold_writer().unwrap_err();
        assert!(
            matches!(err, WriterError::Busy { holder: Some(pid), .. } if pid == std::process::id()),
            "{err:?}"
        );
        assert!(
            err.to_string()
                .contains(&format!("pid {}", std::process::id()))
        );
        drop(first);
        run.hold_writer().unwrap();
    }

    #[test]
    fn the_layout_is_the_documented_one() {
        let run = RunDir::new("/r");
        assert_eq!(run.lock_path(), Path::new("/r/lock.json"));
        assert_eq!(run.results_path(), Path::new("/r/results.jsonl"));
        let trial = run.trial("gold/c/repair/symptom/1");
        assert_eq!(trial.path(), Path::new("/r/trials/gold/c/repair/symptom/1"));
        assert_eq!(
            trial.submission_path(Track::Repair),
            trial.path().join("patch.diff")
        );
        assert_eq!(trial.grade_path(), trial.path().join("grade.json"));
    }

    #[test]
    fn a_trial_s_files_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let run = RunDir::new(dir.path());
        let trial = run.trial("a/b");
        trial.reset().unwrap();
        std::fs::write(trial.path().join("stale"), "x").unwrap();
        trial.reset().unwrap();
        assert_eq!(std::fs::read_dir(trial.path()).unwrap().count(), 0);
        assert_eq!(trial.read_grade().unwrap(), None);
        assert_eq!(trial.read_submission(Track::Repair), Submission::None);
        let patch = Submission::Patch("--- a\n+++ b\n".into());
        trial.write_submission(&patch).unwrap();
        trial.write_submission(&Submission::None).unwrap();
        assert_eq!(trial.read_submission(Track::Repair), patch);
        assert_eq!(run.read_lock().unwrap(), None);
    }
}
