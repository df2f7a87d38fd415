//! A build task's `task.toml`: which crate a submission is, which type in it is the server,
//! and the hidden schedules as seeds of the generator.

use std::path::Path;

use serde::{Deserialize, Serialize};

use faultline_sim::generate::{Profile, QuorumChoice, generate};
use faultline_sim::plan::Schedule;

/// The file in a task directory this module reads.
pub const TASK_FILE: &str = "task.toml";

/// A build task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TaskSpec {
    /// The task's name, such as `raft-kv`; schedules are named after it.
    pub id: String,
    /// The package name a submission's `Cargo.toml` must have.
    pub package: String,
    /// The type in the submission's library that implements `faultline_sim::Server`.
    pub server: String,
    /// The bug category a run's records file the task under (`replication-consistency`...),
    /// so the build track's results sit in the same tables as the cases'.
    pub category: String,
    /// The tier a run's records give the task (1: its faults span servers).
    pub tier: u8,
    /// The hidden schedules.
    pub schedules: ScheduleSpec,
}

/// The hidden schedules: one per seed, all under one profile.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScheduleSpec {
    /// Operations of each schedule.
    pub operations: u32,
    /// Storage limit of each schedule.
    pub storage_bytes: u64,
    /// Simulated time after the last fault before a run is stopped, besides each client's
    /// share of operations at one request timeout each.
    pub recovery_ms: u64,
    /// The generator's seeds, in order.
    pub seeds: Vec<u64>,
    /// Quorum sizes the schedules draw from, per cluster size (`{ nodes = 5, election = 4,
    /// replication = 2 }`); absent for a task whose servers use majorities.
    #[serde(default)]
    pub quorums: Vec<QuorumChoice>,
    /// Whether calm schedules shrink the cluster to one replication quorum around the serving
    /// server for most of the run ([`crate::plan::Island`]); off when absent.
    #[serde(default)]
    pub islands: bool,
}

/// Why a task cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TaskError {
    /// The file cannot be read.
    #[error("cannot read {path}: {message}")]
    Read {
        /// The file.
        path: String,
        /// What went wrong.
        message: String,
    },
    /// The file is not a task.
    #[error("{path}: {message}")]
    Invalid {
        /// The file.
        path: String,
        /// What is wrong.
        message: String,
    },
}

/// Whether `name` is a Rust path of identifiers (`KvServer`, `server::KvServer`), which is all
/// the grader writes into the program it builds.
fn is_rust_path(name: &str) -> bool {
    !name.is_empty()
        && name.split("::").all(|part| {
            let mut chars = part.chars();
            chars
                .next()
                .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        })
}

impl TaskSpec {
    /// Reads `dir/task.toml`.
    pub fn load(dir: &Path) -> Result<Self, TaskError> {
        let path = dir.join(TASK_FILE);
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(&path).map_err(|e| TaskError::Read {
            path: shown.clone(),
            message: e.to_string(),
        })?;
        let spec: TaskSpec = toml::from_str(&text).map_err(|e| TaskError::Invalid {
            path: shown.clone(),
            message: e.to_string(),
        })?;
        let invalid = |message: String| TaskError::Invalid {
            path: shown.clone(),
            message,
        };
        if !is_rust_path(&spec.server) {
            return Err(invalid(format!(
                "server `{}` is not a Rust path",
                spec.server
            )));
        }
        let package_ok = !spec.package.is_empty()
            && spec
                .package
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
        if !package_ok {
            return Err(invalid(format!(
                "package `{}` is not a crate name",
                spec.package
            )));
        }
        if spec.schedules.seeds.is_empty() {
            return Err(invalid("no schedule seeds".into()));
        }
        spec.profile()
            .check()
            .map_err(|e| invalid(format!("schedules.quorums: {e}")))?;
        for s in spec.hidden_schedules() {
            s.plan
                .validate()
                .map_err(|e| invalid(format!("schedule {}: {e}", s.name)))?;
        }
        Ok(spec)
    }

    /// The profile every hidden schedule is drawn under.
    pub fn profile(&self) -> Profile {
        Profile {
            operations: self.schedules.operations,
            storage_bytes: self.schedules.storage_bytes,
            recovery_ms: self.schedules.recovery_ms,
            quorums: self.schedules.quorums.clone(),
            islands: self.schedules.islands,
        }
    }

    /// The hidden schedules, named `<id>-000`, `<id>-001`...
    pub fn hidden_schedules(&self) -> Vec<Schedule> {
        let profile = self.profile();
        self.schedules
            .seeds
            .iter()
            .enumerate()
            .map(|(i, &seed)| generate(&format!("{}-{i:03}", self.id), seed, &profile))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_rust_paths_name_the_server() {
        assert!(is_rust_path("KvServer"));
        assert!(is_rust_path("server::Kv_2"));
        assert!(!is_rust_path("Kv; std::process::exit(0)"));
        assert!(!is_rust_path("2Kv"));
        assert!(!is_rust_path(""));
        assert!(!is_rust_path("a::"));
    }

    #[test]
    fn a_task_file_loads_and_a_bad_one_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let good = "id = \"t\"\npackage = \"p\"\nserver = \"S\"\ncategory = \"c\"\ntier = 1\n[schedules]\noperations = 10\n\
                    storage_bytes = 100\nrecovery_ms = 1000\nseeds = [1, 2]\n";
        std::fs::write(dir.path().join(TASK_FILE), good).unwrap();
        let spec = TaskSpec::load(dir.path()).unwrap();
        let names: Vec<String> = spec
            .hidden_schedules()
            .into_iter()
            .map(|s| s.name)
            .collect();
        assert_eq!(names, vec!["t-000", "t-001"]);
        std::fs::write(dir.path().join(TASK_FILE), good.replace("\"S\"", "\"S()\"")).unwrap();
        let err = TaskSpec::load(dir.path()).unwrap_err().to_string();
        assert!(err.contains("not a Rust path"), "{err}");
        let flex = format!(
            "{good}islands = true\nquorums = [{{ nodes = 3, election = 3, replication = 1 }}, \
             {{ nodes = 5, election = 4, replication = 2 }}]\n"
        );
        std::fs::write(dir.path().join(TASK_FILE), &flex).unwrap();
        let spec = TaskSpec::load(dir.path()).unwrap();
        assert!(spec.profile().islands);
        assert!(
            spec.hidden_schedules()
                .iter()
                .all(|s| s.plan.quorums.is_some())
        );
        let unsafe_quorums = flex.replace("election = 4", "election = 3");
        std::fs::write(dir.path().join(TASK_FILE), unsafe_quorums).unwrap();
        let err = TaskSpec::load(dir.path()).unwrap_err().to_string();
        assert!(err.contains("schedules.quorums"), "{err}");
        std::fs::write(dir.path().join(TASK_FILE), "id = 3").unwrap();
        assert!(TaskSpec::load(dir.path()).is_err());
    }
}
