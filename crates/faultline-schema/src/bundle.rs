//! `bundle.json`: what a context provider gave one case in one condition, format version 1.
//! A run keeps one beside the bundle's files (`bundles/<case>/<condition>/` in the run
//! directory), so a report can show exactly what every agent of that condition saw, and the
//! data directory's provider cache keeps the same record.

use crate::condition::Condition;
use crate::validation::LeakFinding;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Format version of [`BundleRecord`].
pub const BUNDLE_SCHEMA_VERSION: u32 = 1;

/// Most files a provider may write; more is refused.
pub const MAX_BUNDLE_FILES: usize = 3;

/// One provider's bundle for one case.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BundleRecord {
    /// Format version; 1.
    pub schema_version: u32,
    /// The case.
    pub case_id: String,
    /// The condition the bundle is shown in.
    pub condition: Condition,
    /// Which provider, at which version: the cache key beside the case's hash.
    pub provider_version: String,
    /// The case whose curated bundle the `irrelevant` control shows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_case: Option<String>,
    /// Shown to agents, or refused for this case (and then no trial of the case runs in this
    /// condition).
    pub status: BundleStatus,
    /// Why it was refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refusal: Option<String>,
    /// The Markdown files, in the order the agent gets them.
    pub files: Vec<String>,
    /// Tokens of all files (o200k), against the bundle budget.
    pub tokens: usize,
    /// What the leak check found (any finding refuses the bundle).
    pub leaks: Vec<LeakFinding>,
    /// What the provider cost (model providers), reported apart from the agents' cost.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
    /// Seconds the provider ran.
    pub seconds: f64,
    /// The end of the provider's own log (an external or model provider), for refusals.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log_tail: Option<String>,
}

/// Whether a bundle was shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum BundleStatus {
    /// Within budget, no leak: agents see it.
    Ready,
    /// Over budget, leaking, empty, or the provider failed: agents never see it.
    Refused,
}

/// The record's file name in a bundle directory.
pub const BUNDLE_RECORD_FILE: &str = "bundle.json";

/// A directory holding one bundle: its files and, written last as the commit point,
/// [`BUNDLE_RECORD_FILE`]. The run directory keeps one per case and condition
/// ([`crate::RunDir::bundle`]); the provider cache keeps one per case and provider version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BundleDir {
    root: std::path::PathBuf,
}

/// One file of a bundle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BundleFile {
    /// File name (`*.md`, no directory).
    pub name: String,
    /// The Markdown text.
    pub text: String,
}

impl BundleDir {
    /// The bundle directory at `root` (nothing is created).
    pub fn at(root: impl Into<std::path::PathBuf>) -> BundleDir {
        BundleDir { root: root.into() }
    }

    /// The directory itself.
    pub fn path(&self) -> &std::path::Path {
        &self.root
    }

    /// Reads the record and the files it lists; `None` when no record was committed.
    pub fn read(&self) -> Result<Option<(BundleRecord, Vec<BundleFile>)>, crate::io::ReadError> {
        let record_path = self.root.join(BUNDLE_RECORD_FILE);
        if !record_path.exists() {
            return Ok(None);
        }
        let record: BundleRecord = crate::io::read_json(&record_path, "bundle record")?;
        let mut files = Vec::new();
        for name in &record.files {
            let path = self.root.join(name);
            let text = std::fs::read_to_string(&path)
                .map_err(|cause| crate::io::ReadError::Io { path, cause })?;
            files.push(BundleFile {
                name: name.clone(),
                text,
            });
        }
        Ok(Some((record, files)))
    }

    /// Replaces the bundle: the files atomically, then the record.
    pub fn write(
        &self,
        record: &BundleRecord,
        files: &[BundleFile],
    ) -> Result<(), crate::io::WriteError> {
        let io_error = |path: &std::path::Path| {
            let path = path.to_path_buf();
            move |source| crate::io::WriteError { path, source }
        };
        if self.root.exists() {
            std::fs::remove_dir_all(&self.root).map_err(io_error(&self.root))?;
        }
        std::fs::create_dir_all(&self.root).map_err(io_error(&self.root))?;
        for f in files {
            let path = self.root.join(&f.name);
            crate::io::write_atomic(&path, f.text.as_bytes()).map_err(io_error(&path))?;
        }
        let path = self.root.join(BUNDLE_RECORD_FILE);
        crate::io::write_json_atomic(&path, record).map_err(io_error(&path))
    }
}
