//! Where a prepared case lives: the data directory on the host, the directories of a case's two
//! templates, and the fixed paths a sandbox mounts them at.
//!
//! Layout of a prepared case under `<data>/workspaces/<case-id>/`:
//!
//! ```text
//! stamp.json          what was prepared from which inputs (re-preparing checks it)
//! manifest.json       every file of the templates below (see `manifest`), checked before use
//! agent/workspace/    the buggy crate, anonymized, with Cargo.lock and a warm target/  -> /workspace
//! agent/vendor/       every dependency, vendored                            (read-only) -> /vendor
//! agent/cargo/        cargo's configuration: vendored sources, offline        (read-only) -> /cargo
//! agent/shared/       the agent template's shared build outputs (external oracles) -> /shared
//! grade/...           the same plus the hidden oracle package (external oracles) -> /oracle
//! shared/target/...   the grading template's build outputs that no patch can change,
//!                     hard links to its files                              (read-only) -> /shared
//! ```
//!
//! Vendored files and shared build outputs are hard links into `<data>/objects/`, the object
//! store every case of the data directory shares (see [`super::objects`]).
//!
//! Paths inside the sandbox are fixed, so the build cache made here stays valid in every later
//! sandbox, whatever machine directory the data lives in.

use super::objects::ObjectStore;
use crate::store::SourceStore;
use anyhow::{Context, Result, bail};
use faultline_sandbox::{Mount, SandboxSpec, Toolchain};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::fs;
use std::path::{Path, PathBuf};

/// The crate inside the sandbox.
pub const GUEST_WORKSPACE: &str = "/workspace";

/// Vendored dependencies inside the sandbox.
pub const GUEST_VENDOR: &str = "/vendor";

/// Cargo's home inside the sandbox.
pub const GUEST_CARGO_HOME: &str = "/cargo";

/// The external oracle package inside the grading sandbox.
pub const GUEST_ORACLE: &str = "/oracle";

/// The shared build outputs inside the grading sandbox (read-only).
pub const GUEST_SHARED: &str = "/shared";

/// The shared store's directory under a prepared case, and its name in the manifest.
pub(super) const SHARED_DIR: &str = "shared";

/// Where faultline keeps its store, workspaces and scratch files.
///
/// A data directory can be shared read-only by many processes (the shards of a cluster run):
/// with a scratch directory of their own ([`DataDir::with_scratch`]) they write nothing into it,
/// reuse the cases prepared there and refuse to prepare any.
#[derive(Debug, Clone)]
pub struct DataDir {
    /// The root directory.
    pub root: PathBuf,
    /// Where scratch copies and the grade cache go instead, making the root read-only.
    scratch: Option<PathBuf>,
}

impl DataDir {
    /// The data directory at `root`, written as needed.
    pub fn new(root: PathBuf) -> DataDir {
        DataDir {
            root,
            scratch: None,
        }
    }

    /// This data directory used read-only, with scratch copies and the grade cache in
    /// `scratch` (which must not be inside it).
    pub fn with_scratch(self, scratch: PathBuf) -> DataDir {
        DataDir {
            scratch: Some(scratch),
            ..self
        }
    }

    /// Whether this process writes nothing into the root ([`DataDir::with_scratch`]).
    pub fn is_read_only(&self) -> bool {
        self.scratch.is_some()
    }

    /// Where this process writes: the scratch directory of a read-only data directory, else
    /// the root.
    fn writable(&self) -> &Path {
        self.scratch.as_deref().unwrap_or(&self.root)
    }

    /// Where the grade cache lives.
    pub fn grade_cache(&self) -> PathBuf {
        self.writable().join("grade-cache")
    }

    /// Where the context providers' bundles are cached, per case and provider version.
    pub fn bundle_cache(&self) -> PathBuf {
        self.writable().join("bundle-cache")
    }

    /// `$FAULTLINE_DATA`, else `$XDG_CACHE_HOME/faultline`, else `~/.cache/faultline`.
    pub fn from_env() -> Result<DataDir> {
        if let Some(d) = std::env::var_os("FAULTLINE_DATA") {
            return Ok(DataDir::new(d.into()));
        }
        if let Some(d) = std::env::var_os("XDG_CACHE_HOME") {
            return Ok(DataDir::new(PathBuf::from(d).join("faultline")));
        }
        let home = std::env::var_os("HOME").context("neither FAULTLINE_DATA nor HOME is set")?;
        Ok(DataDir::new(
            PathBuf::from(home).join(".cache").join("faultline"),
        ))
    }

    /// The object store that prepared cases share their vendored files and dependency build
    /// outputs through.
    pub fn objects(&self) -> ObjectStore {
        ObjectStore::new(self.root.join("objects"))
    }

    /// The source store.
    pub fn store(&self) -> SourceStore {
        SourceStore::new(self.root.join("store"))
    }

    /// The directory of a case's prepared workspace. Its name is an opaque digest of the case id
    /// and a per-installation salt: host paths of mounts are visible inside a sandbox (in
    /// `/proc/self/mountinfo`), and a case id describes the bug.
    pub fn workspace_dir(&self, case_id: &str) -> Result<PathBuf> {
        Ok(self
            .root
            .join("workspaces")
            .join(self.opaque_name(case_id)?))
    }

    /// The directory where validation keeps what a case's bundle generator builds with (see
    /// [`super::generator`]), named like the workspace's and kept apart from it: no template
    /// holds it, and preparing a case never waits for it. A validation that reads a shared
    /// data directory keeps it in its scratch directory.
    pub fn generator_dir(&self, case_id: &str) -> Result<PathBuf> {
        Ok(self
            .writable()
            .join("generators")
            .join(self.opaque_name(case_id)?))
    }

    fn opaque_name(&self, case_id: &str) -> Result<String> {
        let salt = self.salt()?;
        let digest = Sha256::digest(format!("{salt}:{case_id}").as_bytes());
        Ok(hex::encode(digest)[..16].to_string())
    }

    /// A random value created once per data directory.
    fn salt(&self) -> Result<String> {
        let path = self.root.join("salt");
        if let Ok(s) = fs::read_to_string(&path) {
            return Ok(s.trim().to_string());
        }
        if self.is_read_only() {
            bail!(
                "{} holds no prepared cases (it has no salt file); prepare them there first \
                 with `faultline prepare --all`",
                self.root.display()
            );
        }
        let mut bytes = [0u8; 16];
        use std::io::Read;
        fs::File::open("/dev/urandom")
            .and_then(|mut f| f.read_exact(&mut bytes))
            .context("reading /dev/urandom")?;
        let salt = hex::encode(bytes);
        fs::create_dir_all(&self.root)?;
        // Two processes may race here; the first rename wins and both then read the same salt.
        let tmp = self.root.join(format!("salt.{}", std::process::id()));
        fs::write(&tmp, &salt)?;
        if fs::hard_link(&tmp, &path).is_err() && !path.exists() {
            fs::rename(&tmp, &path)?;
        }
        let _ = fs::remove_file(&tmp);
        Ok(fs::read_to_string(&path)?.trim().to_string())
    }

    /// Scratch space: in the root (on its file system, for copies that are renamed into
    /// place), or in the scratch directory of a read-only data directory.
    pub fn scratch(&self) -> Result<PathBuf> {
        let p = self.writable().join("tmp");
        fs::create_dir_all(&p)?;
        Ok(p)
    }
}

/// One set of directories that a sandbox mounts: crate, vendored dependencies, cargo home.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Template {
    /// The crate with its lockfile and warm `target/`.
    pub workspace: PathBuf,
    /// Vendored dependencies.
    pub vendor: PathBuf,
    /// Directory holding cargo's `config.toml`.
    pub cargo: PathBuf,
    /// The external oracle package (grading templates of external-oracle cases only).
    pub oracle: Option<PathBuf>,
    /// The build outputs that copies of this template share instead of copying them: mounted
    /// read-only, so no build or test can change them.
    #[serde(default)]
    pub shared: Option<PathBuf>,
}

impl Template {
    /// The directories the template consists of, each recorded in the manifest.
    pub fn dirs(&self) -> Vec<&Path> {
        let mut dirs = vec![
            self.workspace.as_path(),
            self.vendor.as_path(),
            self.cargo.as_path(),
        ];
        dirs.extend(self.oracle.as_deref());
        dirs.extend(self.shared.as_deref());
        dirs
    }

    /// The sandbox layout over this template, with `workspace` (a copy, or the template itself)
    /// mounted read-write at `/workspace`.
    pub fn sandbox_spec(
        &self,
        toolchain: &Toolchain,
        workspace: &Path,
        oracle: Option<&Path>,
    ) -> SandboxSpec {
        let mut spec = SandboxSpec::new(Some(toolchain.clone()), GUEST_WORKSPACE)
            .mount(Mount::rw(workspace, GUEST_WORKSPACE))
            .mount(Mount::ro(&self.vendor, GUEST_VENDOR))
            .mount(Mount::ro(
                self.cargo.join("config.toml"),
                format!("{GUEST_CARGO_HOME}/config.toml"),
            ))
            .env("CARGO_HOME", GUEST_CARGO_HOME);
        spec.tmpfs.push(GUEST_CARGO_HOME.to_string());
        if let Some(o) = oracle {
            spec = spec.mount(Mount::rw(o, GUEST_ORACLE));
        }
        if let Some(s) = &self.shared {
            spec = spec.mount(Mount::ro(s, GUEST_SHARED));
        }
        spec
    }
}

/// Which of a prepared case's two templates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TemplateKind {
    /// The agent's: the buggy crate with a warm build cache, never an oracle.
    Agent,
    /// The grader's: the agent's plus the oracle (external oracles).
    Grading,
}

impl TemplateKind {
    pub(super) fn name(self) -> &'static str {
        match self {
            TemplateKind::Agent => "agent",
            TemplateKind::Grading => "grading",
        }
    }
}
