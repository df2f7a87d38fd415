//! Workspace preparation: from a case to an anonymized, offline, pre-built copy of the buggy
//! crate that an agent can work in, and a second template the grader copies for each grade.
//!
//! Layout of a prepared case under `<data>/workspaces/<case-id>/`:
//!
//! ```text
//! stamp.json          what was prepared from which inputs (re-preparing checks it)
//! manifest.json       every file of the templates below (see `manifest`), checked before use
//! agent/workspace/    the buggy crate, anonymized, with Cargo.lock and a warm target/  -> /workspace
//! agent/vendor/       every dependency, vendored                            (read-only) -> /vendor
//! agent/cargo/        cargo's configuration: vendored sources, offline        (read-only) -> /cargo
//! grade/...           the same plus the hidden oracle package (external oracles) -> /oracle
//! shared/target/...   the grading template's build outputs that no patch can change,
//!                     hard links to its files                    (read-only, grading) -> /shared
//! ```
//!
//! Paths inside the sandbox are fixed, so the build cache made here stays valid in every later
//! sandbox, whatever machine directory the data lives in.

use crate::cargo::{host_cargo, read_lock};
use crate::case::Case;
use crate::confined::Confined;
use crate::gold::diff_trees;
use crate::manifest::{Damage, Depth, Entry, Manifest, describe};
use crate::store::{CaseSources, SourceStore, copy_tree};
use anyhow::{Context, Result, bail};
use faultline_sandbox::{ExecRequest, Identity, Mount, Sandbox, SandboxSpec, Toolchain};
use faultline_schema::OracleKind;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Bumped whenever the preparation procedure changes, so old workspaces are rebuilt.
const PREPARE_VERSION: u32 = 4;

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
const SHARED_DIR: &str = "shared";

/// Files up to this size get a content hash in the manifest wherever they are.
const SMALL_FILE: u64 = 64 * 1024;

/// How long a warm-up build may take.
const BUILD_TIMEOUT: Duration = Duration::from_secs(45 * 60);

/// Files of a published crate that name upstream history and so never reach a workspace.
fn is_history_file(rel: &Path) -> bool {
    let name = rel.to_string_lossy().to_ascii_lowercase();
    if matches!(
        name.as_str(),
        ".cargo_vcs_info.json" | "cargo.toml.orig" | ".cargo-ok" | "cargo.lock"
    ) {
        return true;
    }
    if rel
        .components()
        .any(|c| c.as_os_str() == ".git" || c.as_os_str() == "target")
    {
        return true;
    }
    let top_level = rel.components().count() == 1;
    top_level
        && [
            "changelog",
            "changes",
            "releases",
            "release-notes",
            "release_notes",
            "news",
            "history",
        ]
        .iter()
        .any(|p| name.starts_with(p))
}

/// Where faultline keeps its store, workspaces and scratch files.
#[derive(Debug, Clone)]
pub struct DataDir {
    /// The root directory.
    pub root: PathBuf,
}

impl DataDir {
    /// `$FAULTLINE_DATA`, else `$XDG_CACHE_HOME/faultline`, else `~/.cache/faultline`.
    pub fn from_env() -> Result<DataDir> {
        if let Some(d) = std::env::var_os("FAULTLINE_DATA") {
            return Ok(DataDir { root: d.into() });
        }
        if let Some(d) = std::env::var_os("XDG_CACHE_HOME") {
            return Ok(DataDir {
                root: PathBuf::from(d).join("faultline"),
            });
        }
        let home = std::env::var_os("HOME").context("neither FAULTLINE_DATA nor HOME is set")?;
        Ok(DataDir {
            root: PathBuf::from(home).join(".cache").join("faultline"),
        })
    }

    /// The source store.
    pub fn store(&self) -> SourceStore {
        SourceStore::new(self.root.join("store"))
    }

    /// The directory of a case's prepared workspace. Its name is an opaque digest of the case id
    /// and a per-installation salt: host paths of mounts are visible inside a sandbox (in
    /// `/proc/self/mountinfo`), and a case id describes the bug.
    pub fn workspace_dir(&self, case_id: &str) -> Result<PathBuf> {
        let salt = self.salt()?;
        let digest = Sha256::digest(format!("{salt}:{case_id}").as_bytes());
        Ok(self
            .root
            .join("workspaces")
            .join(&hex::encode(digest)[..16]))
    }

    /// A random value created once per data directory.
    fn salt(&self) -> Result<String> {
        let path = self.root.join("salt");
        if let Ok(s) = fs::read_to_string(&path) {
            return Ok(s.trim().to_string());
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

    /// Scratch space on the same file system (for copies that are renamed into place).
    pub fn scratch(&self) -> Result<PathBuf> {
        let p = self.root.join("tmp");
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
    /// The store of build outputs that grading workbenches share instead of copying them
    /// (grading templates only): mounted read-only, so no build or test can change them.
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
    /// The grader's: the agent's plus the oracle (external oracles) and the shared store.
    Grading,
}

impl TemplateKind {
    fn name(self) -> &'static str {
        match self {
            TemplateKind::Agent => "agent",
            TemplateKind::Grading => "grading",
        }
    }
}

/// A template that differs from the manifest recorded when it was prepared. Nothing built on it
/// can be trusted, so a grade that meets one is an infrastructure error, never a verdict.
#[derive(Debug, thiserror::Error)]
#[error(
    "the {} template differs from what was prepared (damaged or changed since), so nothing is graded on it; `faultline prepare` rebuilds it. {}",
    .kind.name(),
    describe(.damage, 10)
)]
pub struct TemplateDamaged {
    /// The template.
    pub kind: TemplateKind,
    /// What differs.
    pub damage: Vec<Damage>,
}

/// What `stamp.json` records about a prepared case.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Stamp {
    /// Format version of this file.
    pub schema_version: u32,
    /// Hash of everything the preparation depends on.
    pub inputs: String,
    /// The case id.
    pub case_id: String,
    /// The subject crate's name.
    pub crate_name: String,
    /// Whether cargo's configuration patches the subject crate to the workspace (needed when a
    /// dependency of the crate depends back on it).
    pub self_patch: bool,
    /// Files of the published crate left out of the workspace.
    pub removed: Vec<String>,
    /// Number of vendored packages for the agent.
    pub vendored_packages: usize,
    /// The agent's template.
    pub agent: Template,
    /// The grader's template.
    pub grade: Template,
    /// SHA-256 of `manifest.json` ([`Manifest::sha256`]), tying the manifest to this stamp.
    pub manifest_sha256: String,
    /// Seconds the first preparation took.
    pub prepare_secs: f64,
}

/// A case ready for agents and graders.
#[derive(Debug, Clone)]
pub struct PreparedCase {
    /// The recorded preparation.
    pub stamp: Stamp,
    /// The buggy and fixed trees in the store (for the gold patch; never mounted for agents).
    pub sources: CaseSources,
    /// Whether this call found everything in place and only checked the build cache.
    pub reused: bool,
    /// What this call found wrong with an earlier preparation of the case, which it rebuilt.
    pub repaired: Option<String>,
    /// The prepared case's directory.
    pub root: PathBuf,
    /// Every file of both templates as preparation left them.
    pub manifest: Arc<Manifest>,
}

impl PreparedCase {
    /// One of the two templates.
    pub fn template(&self, kind: TemplateKind) -> &Template {
        match kind {
            TemplateKind::Agent => &self.stamp.agent,
            TemplateKind::Grading => &self.stamp.grade,
        }
    }

    /// Checks a template's metadata against the manifest (a directory walk, cheap enough for
    /// every grade): `Err` is a [`TemplateDamaged`] naming what differs, or an I/O error.
    pub fn check(&self, kind: TemplateKind) -> Result<()> {
        let damage = self
            .manifest
            .check(&self.root, &self.template(kind).dirs(), Depth::Metadata)
            .with_context(|| format!("checking the {} template", kind.name()))?;
        if damage.is_empty() {
            Ok(())
        } else {
            Err(TemplateDamaged { kind, damage }.into())
        }
    }

    /// The grading template's shared build outputs, as paths relative to its workspace.
    pub fn shared_outputs(&self) -> BTreeSet<String> {
        self.manifest
            .dirs
            .get(SHARED_DIR)
            .map(|entries| {
                entries
                    .iter()
                    .filter(|(_, e)| e.kind == crate::manifest::Kind::File)
                    .map(|(p, _)| p.clone())
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// Options for [`prepare`].
#[derive(Debug, Clone, Default)]
pub struct PrepareOptions {
    /// Rebuild from scratch even when a matching workspace exists.
    pub force: bool,
}

/// The toolchain's `rustc -vV` (its exact version, commit and host), asked once per process.
pub fn toolchain_version(toolchain: &Toolchain) -> Result<String> {
    static SEEN: Mutex<BTreeMap<PathBuf, String>> = Mutex::new(BTreeMap::new());
    let mut seen = SEEN.lock().expect("never poisoned");
    if let Some(v) = seen.get(&toolchain.sysroot) {
        return Ok(v.clone());
    }
    let out = std::process::Command::new(toolchain.sysroot.join("bin/rustc"))
        .arg("-vV")
        .output()
        .context("running the toolchain's rustc -vV")?;
    if !out.status.success() {
        bail!(
            "rustc -vV failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    let version = String::from_utf8_lossy(&out.stdout).into_owned();
    seen.insert(toolchain.sysroot.clone(), version.clone());
    Ok(version)
}

fn hash_inputs(case: &Case, toolchain: &Toolchain) -> Result<String> {
    let mut h = Sha256::new();
    h.update(format!("prepare-v{PREPARE_VERSION}\n"));
    h.update(toolchain.sysroot.to_string_lossy().as_bytes());
    h.update(toolchain_version(toolchain)?);
    h.update(fs::read(case.dir.join("case.toml"))?);
    let mut files: Vec<PathBuf> = walkdir::WalkDir::new(case.oracle_dir())
        .into_iter()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_type().is_file())
        .map(|e| e.into_path())
        .filter(|p| !p.components().any(|c| c.as_os_str() == "target"))
        .filter(|p| p.file_name().is_none_or(|n| n != "Cargo.lock"))
        .collect();
    files.sort();
    for f in files {
        h.update(
            f.strip_prefix(&case.dir)
                .unwrap_or(&f)
                .to_string_lossy()
                .as_bytes(),
        );
        h.update(fs::read(&f)?);
    }
    Ok(hex::encode(h.finalize()))
}

/// Whether the lockfiles committed with the case (if any) are the ones the workspace was built
/// from; lockfiles are compared rather than hashed so that recording them does not force a
/// rebuild.
fn committed_locks_match(case: &Case, stamp: &Stamp) -> bool {
    let same = |committed: PathBuf, prepared: PathBuf| {
        !committed.is_file() || fs::read(&committed).ok() == fs::read(&prepared).ok()
    };
    let oracle_ok = match &stamp.grade.oracle {
        Some(o) => same(case.oracle_dir().join("Cargo.lock"), o.join("Cargo.lock")),
        None => true,
    };
    oracle_ok
        && same(
            case.dir.join("Cargo.lock"),
            stamp.agent.workspace.join("Cargo.lock"),
        )
}

/// Copies the lockfiles a preparation resolved into the case directory, so the case builds with
/// the same dependency versions on every machine from now on. Returns the files written.
pub fn record_locks(case: &Case, prepared: &PreparedCase) -> Result<Vec<PathBuf>> {
    let mut written = Vec::new();
    let mut copy = |from: PathBuf, to: PathBuf| -> Result<()> {
        if fs::read(&from)? != fs::read(&to).unwrap_or_default() {
            faultline_schema::io::write_atomic(&to, &fs::read(&from)?)?;
            written.push(to);
        }
        Ok(())
    };
    copy(
        prepared.stamp.agent.workspace.join("Cargo.lock"),
        case.dir.join("Cargo.lock"),
    )?;
    if let Some(o) = &prepared.stamp.grade.oracle {
        copy(o.join("Cargo.lock"), case.oracle_dir().join("Cargo.lock"))?;
    }
    Ok(written)
}

/// Prepares (or re-checks) the workspace of a case.
pub async fn prepare(
    case: &Case,
    data: &DataDir,
    toolchain: &Toolchain,
    opts: &PrepareOptions,
) -> Result<PreparedCase> {
    let started = Instant::now();
    let root = data.workspace_dir(case.id())?;
    fs::create_dir_all(root.parent().expect("has parent"))?;
    let lock_file = fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(root.with_extension("lock"))?;
    lock_file.lock().context("locking the case's workspace")?;

    let sources = data.store().case_sources(&case.manifest, &case.dir)?;
    let inputs = hash_inputs(case, toolchain)?;
    let stamp_path = root.join("stamp.json");
    let mut repaired = None;
    if !opts.force
        && let Ok(stamp) = faultline_schema::io::read_json::<Stamp>(&stamp_path, "workspace stamp")
        && stamp.inputs == inputs
        && stamp.agent.workspace.join("target").is_dir()
        && committed_locks_match(case, &stamp)
    {
        // A template that matches its manifest is the warm build it was when recorded (the
        // toolchain's version is among the inputs), so it needs no build to re-check it; a
        // build there would itself be a writer the manifest could not tell from damage.
        match intact_manifest(&root, &stamp) {
            Ok(manifest) => {
                return Ok(PreparedCase {
                    stamp,
                    sources,
                    reused: true,
                    repaired: None,
                    root,
                    manifest: Arc::new(manifest),
                });
            }
            Err(found) => {
                tracing::warn!("{}: {found}; rebuilding its workspace", case.id());
                repaired = Some(found);
            }
        }
    }

    let staging = root.with_extension("partial");
    if staging.exists() {
        fs::remove_dir_all(&staging)?;
    }
    let stamp = build_fresh(case, &sources, &staging, &root, toolchain, inputs).await?;
    if root.exists() {
        fs::remove_dir_all(&root)?;
    }
    fs::rename(&staging, &root)?;
    // Recorded where the files now are (renaming the directory moved no file's times).
    let manifest = Manifest::record(&root, &all_dirs(&stamp), worth_hashing)
        .context("recording the prepared templates' manifest")?;
    let manifest_bytes = serde_json::to_vec(&manifest)?;
    faultline_schema::io::write_atomic(&root.join("manifest.json"), &manifest_bytes)?;
    let stamp = Stamp {
        manifest_sha256: manifest.sha256(),
        prepare_secs: started.elapsed().as_secs_f64(),
        ..stamp
    };
    faultline_schema::io::write_json_atomic(&stamp_path, &stamp)?;
    Ok(PreparedCase {
        stamp,
        sources,
        reused: false,
        repaired,
        root,
        manifest: Arc::new(manifest),
    })
}

/// Every directory of both templates, each once (an in-crate case's templates share most).
fn all_dirs(stamp: &Stamp) -> Vec<&Path> {
    let mut dirs = stamp.agent.dirs();
    for d in stamp.grade.dirs() {
        if !dirs.contains(&d) {
            dirs.push(d);
        }
    }
    dirs
}

/// Which files the manifest hashes: every small file (sources, manifests, lockfiles,
/// fingerprints, dep-info), every file outside `target/` but the large vendored ones, and every
/// shared build output, since each grading build reads those in place. Large build outputs that
/// are not shared (the crate's own libraries, test executables, incremental state) are copied
/// into each workbench and rebuilt there once a patch changes the sources; large vendored files
/// are mounted read-only. Both keep their metadata check.
fn worth_hashing(dir: &str, path: &str, entry: &Entry) -> bool {
    entry.size <= SMALL_FILE
        || dir == SHARED_DIR
        || (!dir.ends_with("/vendor") && !path.starts_with("target/"))
}

/// The manifest of a prepared case, if it belongs to the stamp and every template still matches
/// it to the content; otherwise what is wrong.
fn intact_manifest(root: &Path, stamp: &Stamp) -> std::result::Result<Manifest, String> {
    let manifest: Manifest =
        faultline_schema::io::read_json(&root.join("manifest.json"), "template manifest")
            .map_err(|e| format!("its manifest is unreadable ({e})"))?;
    if manifest.sha256() != stamp.manifest_sha256 {
        return Err("its manifest.json is not the one stamp.json records".into());
    }
    let damage = manifest
        .check(root, &all_dirs(stamp), Depth::Content)
        .map_err(|e| format!("its templates cannot be read ({e})"))?;
    if damage.is_empty() {
        Ok(manifest)
    } else {
        Err(format!(
            "found its templates damaged: {}",
            describe(&damage, 10)
        ))
    }
}

/// Builds a case's templates in `staging`, with paths recorded as they will be under `final_root`.
async fn build_fresh(
    case: &Case,
    sources: &CaseSources,
    staging: &Path,
    final_root: &Path,
    toolchain: &Toolchain,
    inputs: String,
) -> Result<Stamp> {
    let name = case.manifest.source.crate_name().to_string();
    let agent_ws = staging.join("agent/workspace");
    let mut removed = Vec::new();
    copy_tree(&sources.buggy, &agent_ws, &|rel| !is_history_file(rel))?;
    for entry in walkdir::WalkDir::new(&sources.buggy).min_depth(1) {
        let entry = entry?;
        let rel = entry
            .path()
            .strip_prefix(&sources.buggy)
            .expect("under root");
        if is_history_file(rel) && rel.components().count() == 1 {
            removed.push(rel.to_string_lossy().into_owned());
        }
    }
    removed.sort();

    // Resolve the lockfile: the curator's, or today's resolution honouring the pins.
    let lock_path = agent_ws.join("Cargo.lock");
    let pins = case.manifest.source.pins();
    if let Some(lock) = case.lockfile() {
        fs::copy(lock, &lock_path)?;
    } else {
        tracing::warn!(
            "{}: no committed Cargo.lock; resolving today's versions",
            case.id()
        );
        resolve_lock(&agent_ws, &name, pins, false)?;
        if depends_back_on(&lock_path, &name)? {
            resolve_lock(&agent_ws, &name, pins, true)?;
        }
    }
    let self_patch = depends_back_on(&lock_path, &name)?;
    check_single_subject(&lock_path, &name)?;

    let patch_config = |ws: &Path| -> Vec<String> {
        if self_patch {
            vec![
                "--config".into(),
                format!("patch.crates-io.{name}.path={:?}", ws.to_string_lossy()),
            ]
        } else {
            Vec::new()
        }
    };

    let agent_vendor = staging.join("agent/vendor");
    let mut args = vec![
        "vendor".to_string(),
        "--locked".into(),
        "--versioned-dirs".into(),
    ];
    args.extend(patch_config(&agent_ws));
    args.push(agent_vendor.to_string_lossy().into_owned());
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    host_cargo(&agent_ws, &argv).context("vendoring the crate's dependencies")?;
    // cargo creates no directory when there is nothing to vendor.
    fs::create_dir_all(&agent_vendor)?;
    check_vendor(&agent_vendor, &name)?;
    let fixed_hashes = fixed_only_hashes(&sources.buggy, &sources.fixed)?;
    check_no_fixed_files(&agent_ws, &fixed_hashes)?;
    check_no_fixed_files(&agent_vendor, &fixed_hashes)?;

    let agent_cargo = staging.join("agent/cargo");
    write_cargo_config(&agent_cargo, &name, self_patch)?;
    let at_final = |p: &Path| final_root.join(p.strip_prefix(staging).expect("under staging"));
    let staged_agent = Template {
        workspace: agent_ws.clone(),
        vendor: agent_vendor.clone(),
        cargo: agent_cargo.clone(),
        oracle: None,
        shared: None,
    };
    warm_build(&staged_agent, toolchain).await?;
    let vendored_packages = fs::read_dir(&agent_vendor)
        .with_context(|| format!("reading {}", agent_vendor.display()))?
        .count();

    let mut grade = match case.manifest.oracle.kind {
        OracleKind::InCrate => staged_agent.clone(),
        OracleKind::External => {
            prepare_external_oracle(
                case,
                &staged_agent,
                staging,
                &name,
                toolchain,
                &fixed_hashes,
            )
            .await?
        }
    };
    let locks: Vec<PathBuf> = std::iter::once(grade.workspace.join("Cargo.lock"))
        .chain(grade.oracle.iter().map(|o| o.join("Cargo.lock")))
        .filter(|l| l.is_file())
        .collect();
    let store = staging.join(SHARED_DIR);
    link_shared_outputs(
        &grade.workspace,
        &store,
        &crates_independent_of(&name, &locks)?,
    )?;
    grade.shared = Some(store);
    let finalize = |t: &Template| Template {
        workspace: at_final(&t.workspace),
        vendor: at_final(&t.vendor),
        cargo: at_final(&t.cargo),
        oracle: t.oracle.as_deref().map(at_final),
        shared: t.shared.as_deref().map(at_final),
    };
    Ok(Stamp {
        schema_version: 1,
        inputs,
        case_id: case.id().to_string(),
        crate_name: name,
        self_patch,
        removed,
        vendored_packages,
        agent: finalize(&staged_agent),
        grade: finalize(&grade),
        manifest_sha256: String::new(),
        prepare_secs: 0.0,
    })
}

/// Builds the grading template of an external-oracle case: the agent's warm workspace plus the
/// oracle package, with a vendor directory that covers both.
async fn prepare_external_oracle(
    case: &Case,
    agent: &Template,
    staging: &Path,
    name: &str,
    toolchain: &Toolchain,
    fixed_hashes: &BTreeMap<String, String>,
) -> Result<Template> {
    let grade_ws = staging.join("grade/workspace");
    copy_preserving(&agent.workspace, &grade_ws)?;
    let oracle = staging.join("grade/oracle");
    copy_tree(&case.oracle_dir(), &oracle, &|rel| {
        !rel.starts_with("target")
    })?;
    let manifest = fs::read_to_string(oracle.join("Cargo.toml"))?;
    if !manifest.contains("[workspace]") {
        bail!(
            "{}: oracle/Cargo.toml must contain an empty [workspace] table so it builds on its own",
            case.id()
        );
    }
    let patch = format!(
        "patch.crates-io.{name}.path={:?}",
        grade_ws.to_string_lossy()
    );
    if !oracle.join("Cargo.lock").is_file() {
        tracing::warn!(
            "{}: no committed oracle/Cargo.lock; resolving today's versions",
            case.id()
        );
        fs::copy(
            agent.workspace.join("Cargo.lock"),
            oracle.join("Cargo.lock"),
        )?;
        host_cargo(
            &oracle,
            &["metadata", "--format-version", "1", "--config", &patch],
        )?;
        apply_pins(&oracle, case.manifest.source.pins(), Some(&patch));
    }
    check_single_subject(&oracle.join("Cargo.lock"), name)?;
    let vendor = staging.join("grade/vendor");
    host_cargo(
        &grade_ws,
        &[
            "vendor",
            "--locked",
            "--versioned-dirs",
            "--config",
            &patch,
            "--sync",
            &oracle.join("Cargo.toml").to_string_lossy(),
            &vendor.to_string_lossy(),
        ],
    )
    .context("vendoring the oracle's dependencies")?;
    fs::create_dir_all(&vendor)?;
    check_vendor(&vendor, name)?;
    check_no_fixed_files(&vendor, fixed_hashes)?;
    let cargo = staging.join("grade/cargo");
    write_cargo_config(&cargo, name, true)?;
    let grade = Template {
        workspace: grade_ws,
        vendor,
        cargo,
        oracle: Some(oracle.clone()),
        shared: None,
    };
    // Templates are built as the harness, so that what they hold is the harness's (and a
    // sandbox's dedicated identity can never change it).
    let sandbox = Sandbox::new(
        grade
            .sandbox_spec(toolchain, &grade.workspace, Some(&oracle))
            .identity(Identity::Harness),
    )?;
    let out = sandbox
        .exec(
            &ExecRequest::argv(
                [
                    "cargo",
                    "test",
                    "--no-run",
                    "--offline",
                    "--locked",
                    "--tests",
                ],
                BUILD_TIMEOUT,
            )
            .workdir(GUEST_ORACLE)
            .env("CARGO_TARGET_DIR", format!("{GUEST_WORKSPACE}/target")),
        )
        .await?;
    if !out.success() {
        bail!(
            "{}: building the oracle failed:\n{}",
            case.id(),
            out.stderr.text
        );
    }
    Ok(grade)
}

fn resolve_lock(
    ws: &Path,
    name: &str,
    pins: &[faultline_schema::Pin],
    self_patch: bool,
) -> Result<()> {
    let patch = format!("patch.crates-io.{name}.path={:?}", ws.to_string_lossy());
    let mut args = vec!["generate-lockfile"];
    if self_patch {
        args.extend(["--config", &patch]);
    }
    host_cargo(ws, &args)?;
    apply_pins(ws, pins, self_patch.then_some(patch.as_str()));
    Ok(())
}

fn apply_pins(dir: &Path, pins: &[faultline_schema::Pin], patch: Option<&str>) {
    for pin in pins {
        let version = pin.version.to_string();
        let mut args = vec!["update", "-p", &pin.crate_name, "--precise", &version];
        if let Some(p) = patch {
            args.extend(["--config", p]);
        }
        if let Err(e) = host_cargo(dir, &args) {
            tracing::info!("pin {} {} not applied: {e:#}", pin.crate_name, pin.version);
        }
    }
}

/// Whether some locked package other than the crate itself depends on the crate (so a registry
/// copy, possibly a fixed version, would otherwise be pulled in).
fn depends_back_on(lock: &Path, name: &str) -> Result<bool> {
    #[derive(Deserialize)]
    struct Lock {
        #[serde(default)]
        package: Vec<Pkg>,
    }
    #[derive(Deserialize)]
    struct Pkg {
        name: String,
        source: Option<String>,
        #[serde(default)]
        dependencies: Vec<String>,
    }
    let lock: Lock = toml::from_str(&fs::read_to_string(lock)?)?;
    Ok(lock.package.iter().any(|p| {
        !(p.name == name && p.source.is_none())
            && p.dependencies
                .iter()
                .any(|d| d.split(' ').next() == Some(name))
    }))
}

/// The lockfile holds the subject exactly once, as the local path package.
fn check_single_subject(lock: &Path, name: &str) -> Result<()> {
    let copies: Vec<_> = read_lock(lock)?
        .into_iter()
        .filter(|p| p.name == name)
        .collect();
    match copies.as_slice() {
        [only] if only.source.is_none() => Ok(()),
        _ => bail!(
            "{} resolves {} copies of `{name}` ({}); only the workspace's own copy may be reachable, \
             or a dependency could bring in the fixed code",
            lock.display(),
            copies.len(),
            copies
                .iter()
                .map(|p| format!(
                    "{} from {}",
                    p.version,
                    p.source.as_deref().unwrap_or("the workspace")
                ))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// No vendored package is a copy of the subject crate.
fn check_vendor(vendor: &Path, name: &str) -> Result<()> {
    let prefix = format!("{name}-");
    let entries = fs::read_dir(vendor).with_context(|| format!("reading {}", vendor.display()))?;
    for entry in entries {
        let dir = entry?.file_name().to_string_lossy().into_owned();
        let is_copy = dir == name
            || dir
                .strip_prefix(&prefix)
                .is_some_and(|v| v.chars().next().is_some_and(|c| c.is_ascii_digit()));
        if is_copy {
            bail!(
                "vendored dependencies contain `{dir}`, another copy of the subject crate; refusing to prepare"
            );
        }
    }
    Ok(())
}

/// Hashes of the fixed tree's files whose content the buggy tree does not have (path -> hash).
fn fixed_only_hashes(buggy: &Path, fixed: &Path) -> Result<BTreeMap<String, String>> {
    let gold = diff_trees(buggy, fixed)?;
    let mut out = BTreeMap::new();
    let mut consider: BTreeSet<String> = gold.files.iter().map(|f| f.path.clone()).collect();
    consider.extend(gold.excluded.iter().cloned());
    for rel in consider {
        let path = fixed.join(&rel);
        if let Ok(bytes) = fs::read(&path) {
            if bytes.len() < 64 {
                continue;
            }
            out.insert(hex::encode(Sha256::digest(&bytes)), rel);
        }
    }
    Ok(out)
}

/// No file under `dir` (outside `target/`) has the content of a file only the fixed version has.
fn check_no_fixed_files(dir: &Path, fixed: &BTreeMap<String, String>) -> Result<()> {
    for entry in walkdir::WalkDir::new(dir)
        .into_iter()
        .filter_entry(|e| e.file_name() != "target")
    {
        let entry = entry?;
        if !entry.file_type().is_file() {
            continue;
        }
        let bytes = fs::read(entry.path())?;
        if let Some(rel) = fixed.get(&hex::encode(Sha256::digest(&bytes))) {
            bail!(
                "{} has the content of the fixed version's {rel}; refusing to prepare",
                entry.path().display()
            );
        }
    }
    Ok(())
}

fn write_cargo_config(dir: &Path, name: &str, self_patch: bool) -> Result<()> {
    fs::create_dir_all(dir)?;
    let mut text = format!(
        "[source.crates-io]\nreplace-with = \"vendored-sources\"\n\n\
         [source.vendored-sources]\ndirectory = \"{GUEST_VENDOR}\"\n\n[net]\noffline = true\n\n\
         # Line tables keep backtraces useful at a fraction of the build cache's size.\n\
         [profile.dev]\ndebug = \"line-tables-only\"\n\n[profile.test]\ndebug = \"line-tables-only\"\n\n\
         # Old crates deny lints that today's rustc raises in code it used to accept (foca's\n\
         # `deny(missing_docs)` now fires on its `cfg(test)` helpers), so their own tests no\n\
         # longer compile. Lints never change behaviour; keep them as warnings.\n\
         [build]\nrustflags = [\"--cap-lints=warn\"]\n"
    );
    if self_patch {
        text.push_str(&format!(
            "\n[patch.crates-io]\n{name} = {{ path = \"{GUEST_WORKSPACE}\" }}\n"
        ));
    }
    fs::write(dir.join("config.toml"), text)?;
    Ok(())
}

/// Builds the crate and its tests inside the sandbox, offline, as the harness (see
/// `prepare_external_oracle`). Published crates sometimes ship integration tests that cannot
/// compile (their path-only dev-dependencies are stripped on publishing); then the library's own
/// tests are warmed alone, and the other test targets stay as broken for the agent as they are
/// for any user.
async fn warm_build(t: &Template, toolchain: &Toolchain) -> Result<()> {
    let sandbox = Sandbox::new(
        t.sandbox_spec(toolchain, &t.workspace, None)
            .identity(Identity::Harness),
    )?;
    let build: &[&str] = &["cargo", "build", "--offline", "--locked"];
    let test: &[&str] = &["cargo", "test", "--no-run", "--offline", "--locked"];
    let lib_tests: &[&str] = &[
        "cargo",
        "test",
        "--no-run",
        "--offline",
        "--locked",
        "--lib",
    ];
    for step in [build, test] {
        let out = sandbox
            .exec(&ExecRequest::argv(step.iter().copied(), BUILD_TIMEOUT))
            .await?;
        if out.success() {
            continue;
        }
        if step == test {
            let lib_only = sandbox
                .exec(&ExecRequest::argv(lib_tests.iter().copied(), BUILD_TIMEOUT))
                .await?;
            if lib_only.success() {
                continue;
            }
        }
        bail!(
            "`{}` failed in the new workspace:\n{}",
            step.join(" "),
            out.stderr.text
        );
    }
    Ok(())
}

/// The integration-test file a reproduction is written to, relative to the crate root.
pub const REPRODUCER_PATH: &str = "tests/faultline_repro.rs";

/// Makes `tests/faultline_repro.rs` a test target of the crate at `dir`: published manifests
/// often turn test auto-discovery off and list their tests, so the file is declared explicitly.
/// Writes `contents` to the file. `dir` may be a workbench a patch has changed, so no link in it
/// is followed (see [`Confined`]).
pub fn install_reproducer(dir: &Path, contents: &str) -> Result<()> {
    let dir = Confined::open(dir)?;
    let mut manifest = dir.read_to_string("Cargo.toml")?;
    let table: toml::Table = manifest.parse().context("parsing the crate's Cargo.toml")?;
    let declared = table
        .get("test")
        .and_then(|t| t.as_array())
        .is_some_and(|tests| {
            tests
                .iter()
                .any(|t| t.get("name").and_then(|n| n.as_str()) == Some("faultline_repro"))
        });
    let auto = table
        .get("package")
        .and_then(|p| p.get("autotests"))
        .and_then(|a| a.as_bool())
        .unwrap_or(true);
    if !declared && !auto {
        manifest.push_str(&format!(
            "\n[[test]]\nname = \"faultline_repro\"\npath = \"{REPRODUCER_PATH}\"\n"
        ));
        dir.write("Cargo.toml", manifest.as_bytes())?;
    }
    dir.write(REPRODUCER_PATH, contents.as_bytes())?;
    Ok(())
}

/// Copies a tree with `cp -a`, keeping modification times so cargo's build cache stays fresh.
pub fn copy_preserving(from: &Path, to: &Path) -> Result<()> {
    if let Some(parent) = to.parent() {
        fs::create_dir_all(parent)?;
    }
    let status = std::process::Command::new("cp")
        .arg("-a")
        .arg(from)
        .arg(to)
        .status()
        .context("running cp")?;
    if !status.success() {
        bail!("copying {} to {} failed", from.display(), to.display());
    }
    Ok(())
}

/// Crate names (underscored) of the locked packages that are neither `subject` nor depend on it,
/// directly or not, in any of the lock files: a build after a change to the subject's sources
/// never rebuilds them. A name that also stands for a dependent package is left out.
fn crates_independent_of(subject: &str, locks: &[PathBuf]) -> Result<BTreeSet<String>> {
    let mut packages = Vec::new();
    for lock in locks {
        packages.extend(read_lock(lock)?);
    }
    let mut dependent = BTreeSet::from([subject.to_string()]);
    loop {
        let before = dependent.len();
        for p in &packages {
            let depends = p.dependencies.iter().any(|d| {
                let name = d.split_whitespace().next().unwrap_or_default();
                dependent.contains(name)
            });
            if depends {
                dependent.insert(p.name.clone());
            }
        }
        if dependent.len() == before {
            break;
        }
    }
    let dependent: BTreeSet<String> = dependent.iter().map(|d| d.replace('-', "_")).collect();
    Ok(packages
        .iter()
        .map(|p| p.name.replace('-', "_"))
        .filter(|c| !dependent.contains(c))
        .collect())
}

/// Whether a file of a warm build cache belongs to one of the `shared` crates, so that a build
/// of a dependent crate never rewrites it: its compiled library or dep-info in
/// `target/<profile>/deps/` (`lib<name>-<hash>.rlib`, `.rmeta`, `.so`, `<name>-<hash>.d`),
/// its fingerprint in `target/<profile>/.fingerprint/<package>-<hash>/`, or its build script's
/// files under `target/<profile>/build/<package>-<hash>/`.
fn is_shared_build_output(relative: &Path, shared: &BTreeSet<String>) -> bool {
    let parts: Vec<&str> = relative.iter().filter_map(|c| c.to_str()).collect();
    let unit = match parts.as_slice() {
        ["target", _, "deps", file] => {
            if let Some(stem) = file.strip_suffix(".d") {
                Some(stem)
            } else {
                [".rlib", ".rmeta", ".so"]
                    .iter()
                    .find_map(|ext| file.strip_suffix(ext))
                    .and_then(|stem| stem.strip_prefix("lib"))
            }
        }
        ["target", _, ".fingerprint" | "build", dir, _, ..] => Some(*dir),
        _ => None,
    };
    unit.and_then(crate_before_hash)
        .is_some_and(|c| shared.contains(&c))
}

/// `name-1a2b3c` as the crate name `name` (underscored), if what follows the last dash is a hash.
fn crate_before_hash(s: &str) -> Option<String> {
    let (name, hash) = s.rsplit_once('-')?;
    hash.chars()
        .all(|c| c.is_ascii_hexdigit())
        .then(|| name.replace('-', "_"))
}

/// Hard-links the build outputs of the `shared` crates in `workspace` (see
/// [`is_shared_build_output`]) into `store`, at the same paths relative to it. Grading
/// workbenches reach them there through a read-only mount instead of copying them.
fn link_shared_outputs(workspace: &Path, store: &Path, shared: &BTreeSet<String>) -> Result<()> {
    fs::create_dir_all(store)?;
    let target = workspace.join("target");
    if !target.is_dir() {
        return Ok(());
    }
    for entry in walkdir::WalkDir::new(&target) {
        let entry = entry.with_context(|| format!("reading {}", target.display()))?;
        let relative = entry.path().strip_prefix(workspace)?;
        if entry.file_type().is_file() && is_shared_build_output(relative, shared) {
            let link = store.join(relative);
            fs::create_dir_all(link.parent().expect("below the store"))?;
            fs::hard_link(entry.path(), &link)
                .with_context(|| format!("linking {} into the store", relative.display()))?;
        }
    }
    Ok(())
}

/// Copies a grading template's workspace like [`copy_preserving`], except that the files at the
/// `shared` paths (relative to the workspace; the case's store holds them) become symbolic links
/// to their read-only mount at [`GUEST_SHARED`]. They are most of a warm build cache; no build in
/// the copy rewrites them (their sources and flags do not change), and should code run there
/// try, the mount refuses it: no workbench can change what the next one builds with.
pub fn copy_sharing_outputs(from: &Path, to: &Path, shared: &BTreeSet<String>) -> Result<()> {
    for entry in walkdir::WalkDir::new(from) {
        let entry = entry.with_context(|| format!("reading {}", from.display()))?;
        let relative = entry.path().strip_prefix(from)?;
        let target = to.join(relative);
        let kind = entry.file_type();
        if kind.is_dir() {
            fs::create_dir_all(&target)?;
        } else if kind.is_symlink() {
            std::os::unix::fs::symlink(fs::read_link(entry.path())?, &target)?;
        } else if shared.contains(relative.to_string_lossy().as_ref()) {
            std::os::unix::fs::symlink(Path::new(GUEST_SHARED).join(relative), &target)?;
        } else {
            let meta = entry.metadata()?;
            fs::copy(entry.path(), &target)
                .with_context(|| format!("copying {}", entry.path().display()))?;
            filetime::set_file_times(
                &target,
                filetime::FileTime::from_last_access_time(&meta),
                filetime::FileTime::from_last_modification_time(&meta),
            )?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn history_files_are_dropped() {
        for p in [
            ".cargo_vcs_info.json",
            "Cargo.toml.orig",
            "CHANGELOG.md",
            "RELEASES.md",
            "Cargo.lock",
            ".git/HEAD",
        ] {
            assert!(is_history_file(Path::new(p)), "{p}");
        }
        for p in ["src/lib.rs", "README.md", "src/changelog.rs", "Cargo.toml"] {
            assert!(!is_history_file(Path::new(p)), "{p}");
        }
    }

    #[test]
    fn a_second_copy_of_the_subject_is_refused() {
        let vendor = tempfile::tempdir().unwrap();
        fs::create_dir(vendor.path().join("openraft-memstore-0.9.24")).unwrap();
        check_vendor(vendor.path(), "openraft").unwrap();
        fs::create_dir(vendor.path().join("openraft-0.9.25")).unwrap();
        let err = check_vendor(vendor.path(), "openraft")
            .unwrap_err()
            .to_string();
        assert!(err.contains("openraft-0.9.25"), "{err}");
    }

    #[test]
    fn a_lockfile_with_a_registry_copy_of_the_subject_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let lock = dir.path().join("Cargo.lock");
        fs::write(&lock, "version = 4\n\n[[package]]\nname = \"kv\"\nversion = \"0.1.0\"\n\n[[package]]\nname = \"kv\"\nversion = \"0.1.1\"\nsource = \"registry+x\"\n\n[[package]]\nname = \"kv-mem\"\nversion = \"0.1.0\"\nsource = \"registry+x\"\ndependencies = [\"kv 0.1.1\"]\n").unwrap();
        assert!(depends_back_on(&lock, "kv").unwrap());
        let err = check_single_subject(&lock, "kv").unwrap_err().to_string();
        assert!(err.contains("2 copies"), "{err}");
    }

    #[test]
    fn only_crates_that_do_not_reach_the_subject_are_independent() {
        let dir = tempfile::tempdir().unwrap();
        let lock = dir.path().join("Cargo.lock");
        fs::write(
            &lock,
            r#"version = 3
[[package]]
name = "kv"
version = "0.2.0"
dependencies = ["serde", "rand-core 0.6.4"]
[[package]]
name = "kv-memstore"
version = "0.2.0"
dependencies = ["kv"]
[[package]]
name = "kv-test-harness"
version = "0.1.0"
dependencies = ["kv-memstore 0.2.0 (registry+https://example.invalid/index)"]
[[package]]
name = "serde"
version = "1.0.0"
[[package]]
name = "rand-core"
version = "0.6.4"
"#,
        )
        .unwrap();
        let independent = crates_independent_of("kv", &[lock]).unwrap();
        assert_eq!(
            independent.into_iter().collect::<Vec<_>>(),
            ["rand_core", "serde"]
        );
    }

    #[test]
    fn build_outputs_are_shared_by_crate_and_kind() {
        let shared = BTreeSet::from(["serde".to_string(), "rand_core".to_string()]);
        let yes = [
            "target/debug/deps/libserde-0123abcd.rlib",
            "target/debug/deps/libserde-0123abcd.rmeta",
            "target/debug/deps/librand_core-99ff.so",
            "target/debug/deps/serde-0123abcd.d",
            "target/debug/.fingerprint/rand-core-77aa/lib-rand_core",
            "target/debug/build/serde-1a2b/build-script-build",
            "target/debug/build/serde-1a2b/out/private.rs",
        ];
        let no = [
            "target/debug/deps/libkv-0123abcd.rlib",
            "target/debug/deps/kv-0123abcd",
            "target/debug/deps/serde-not_a_hash.d",
            "target/debug/incremental/serde-0123/s-1/dep-graph.bin",
            "target/debug/libserde.rlib",
            "src/deps/libserde-0123abcd.rlib",
            "target/debug/.fingerprint/kv-77aa/lib-kv",
        ];
        for p in yes {
            assert!(is_shared_build_output(Path::new(p), &shared), "{p}");
        }
        for p in no {
            assert!(!is_shared_build_output(Path::new(p), &shared), "{p}");
        }
    }

    #[test]
    fn shared_outputs_are_stored_once_and_copied_as_links_to_the_mount() {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().unwrap();
        let from = dir.path().join("template");
        let deps = from.join("target/debug/deps");
        fs::create_dir_all(&deps).unwrap();
        fs::create_dir_all(from.join("src")).unwrap();
        fs::write(deps.join("libserde-00ff.rlib"), "serde").unwrap();
        fs::write(deps.join("libkv-00ff.rlib"), "kv").unwrap();
        fs::write(from.join("src/lib.rs"), "fn main() {}").unwrap();
        std::os::unix::fs::symlink("lib.rs", from.join("src/alias.rs")).unwrap();
        let old = filetime::FileTime::from_unix_time(1_600_000_000, 0);
        filetime::set_file_mtime(deps.join("libkv-00ff.rlib"), old).unwrap();
        let store = dir.path().join("shared");
        link_shared_outputs(&from, &store, &BTreeSet::from(["serde".to_string()])).unwrap();
        let stored = store.join("target/debug/deps/libserde-00ff.rlib");
        assert_eq!(
            fs::metadata(&stored).unwrap().ino(),
            fs::metadata(deps.join("libserde-00ff.rlib")).unwrap().ino()
        );
        assert!(!store.join("target/debug/deps/libkv-00ff.rlib").exists());

        let to = dir.path().join("copy");
        let shared = BTreeSet::from(["target/debug/deps/libserde-00ff.rlib".to_string()]);
        copy_sharing_outputs(&from, &to, &shared).unwrap();
        assert_eq!(
            fs::read_link(to.join("target/debug/deps/libserde-00ff.rlib")).unwrap(),
            Path::new("/shared/target/debug/deps/libserde-00ff.rlib")
        );
        let copied = fs::metadata(to.join("target/debug/deps/libkv-00ff.rlib")).unwrap();
        assert_ne!(
            copied.ino(),
            fs::metadata(deps.join("libkv-00ff.rlib")).unwrap().ino()
        );
        assert_eq!(
            filetime::FileTime::from_last_modification_time(&copied),
            old
        );
        assert_eq!(
            fs::read_link(to.join("src/alias.rs")).unwrap(),
            Path::new("lib.rs")
        );
        assert_eq!(
            fs::read_to_string(to.join("src/lib.rs")).unwrap(),
            "fn main() {}"
        );
    }
}
