//! What a preparation leaves behind and how it is trusted again: the stamp (the inputs'
//! hash and the templates' paths), the manifest of every template file, and the handle callers
//! get. A template is only used after its metadata matches the manifest, and an earlier
//! preparation is only reused after its content does.

use super::build::toolchain_version;
use super::copy::{copy_preserving, copy_sharing_outputs};
use super::layout::{SHARED_DIR, Template, TemplateKind};
use crate::case::Case;
use crate::manifest::{Damage, Depth, Entry, Manifest, describe};
use crate::store::CaseSources;
use anyhow::{Context, Result};
use faultline_sandbox::Toolchain;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Bumped whenever the preparation procedure changes, so old workspaces are rebuilt.
const PREPARE_VERSION: u32 = 5;

/// Files up to this size get a content hash in the manifest wherever they are.
const SMALL_FILE: u64 = 64 * 1024;

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

    /// Copies a template's workspace to `to` for one use (a trial, a grade, a generator's
    /// build): its shared build outputs become links to their read-only mount (see
    /// [`copy_sharing_outputs`]) and every other file is the copy's own and writable. A plain
    /// `cp -a` would keep identical stored files (such as cargo's empty timestamps) hard-linked
    /// to each other and read-only, so a rebuild in the sandbox could not write them.
    pub fn copy_workspace(&self, kind: TemplateKind, to: &Path) -> Result<()> {
        let template = self.template(kind);
        if template.shared.is_some() {
            copy_sharing_outputs(&template.workspace, to, &self.shared_outputs(kind))
        } else {
            copy_preserving(&template.workspace, to)
        }
        .with_context(|| format!("copying the {} template", kind.name()))
    }

    /// A template's shared build outputs, as paths relative to its workspace.
    pub fn shared_outputs(&self, kind: TemplateKind) -> BTreeSet<String> {
        let Some(dir) = &self.template(kind).shared else {
            return BTreeSet::new();
        };
        let name = dir
            .strip_prefix(&self.root)
            .unwrap_or(dir)
            .to_string_lossy()
            .into_owned();
        self.manifest
            .dirs
            .get(&name)
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

/// The hash of everything a preparation depends on: the procedure's version, the toolchain,
/// `case.toml` and the oracle's files (lockfiles aside, see [`committed_locks_match`]).
pub(super) fn hash_inputs(case: &Case, toolchain: &Toolchain) -> Result<String> {
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
pub(super) fn committed_locks_match(case: &Case, stamp: &Stamp) -> bool {
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

/// Every directory of both templates, each once (an in-crate case's templates share most).
pub(super) fn all_dirs(stamp: &Stamp) -> Vec<&Path> {
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
pub(super) fn worth_hashing(dir: &str, path: &str, entry: &Entry) -> bool {
    entry.size <= SMALL_FILE
        || dir == SHARED_DIR
        || (!dir.ends_with("/vendor") && !path.starts_with("target/"))
}

/// The manifest `stamp.json` records, read without walking the templates: every use of a
/// template checks it against this before trusting it ([`PreparedCase::check`]).
pub(super) fn recorded_manifest(
    root: &Path,
    stamp: &Stamp,
) -> std::result::Result<Manifest, String> {
    let manifest: Manifest =
        faultline_schema::io::read_json(&root.join("manifest.json"), "template manifest")
            .map_err(|e| format!("its manifest is unreadable ({e})"))?;
    if manifest.sha256() != stamp.manifest_sha256 {
        return Err("its manifest.json is not the one stamp.json records".into());
    }
    Ok(manifest)
}

/// The manifest of a prepared case, if it belongs to the stamp and every template still matches
/// it to `depth` (the content where `prepare` may repair, the metadata where a process only
/// reads the data directory); otherwise what is wrong.
pub(super) fn intact_manifest(
    root: &Path,
    stamp: &Stamp,
    depth: Depth,
) -> std::result::Result<Manifest, String> {
    let manifest = recorded_manifest(root, stamp)?;
    let damage = manifest
        .check(root, &all_dirs(stamp), depth)
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
