//! What a case's bundle generator (`context/generator/`) builds with, for validation only: its
//! lockfile pointed at the workspace's copy of the subject, its dependencies vendored and
//! checked as the oracle's are ([`resolve`], [`isolation`]), and cargo's configuration. Trials
//! never build a generator, so none of this is part of a template or slows preparation; it is
//! kept in the data directory ([`DataDir::generator_dir`]) and made again when its inputs change.
//!
//! [`stage`] lays out the generator and the oracle at the places they have in the case
//! directory, so a generator's `#[path = "../../../oracle/tests/x.rs"]` finds the oracle's
//! scenario wherever the copy lives.

use super::copy::copy_preserving;
use super::isolation::{check_single_subject, check_vendor};
use super::layout::DataDir;
use super::prepared::PreparedCase;
use super::resolve::{patch_to, repoint_lock, vendor_package, write_cargo_config};
use crate::case::Case;
use crate::checks::BUNDLE_GENERATOR_DIR;
use crate::store::copy_tree;
use anyhow::{Context, Result};
use sha2::{Digest, Sha256};
use std::fs;
use std::path::{Path, PathBuf};

/// A generator's dependencies, ready to mount: the vendored sources and cargo's configuration
/// (offline, the subject patched to the sandbox's workspace), with the lockfile they match.
#[derive(Debug, Clone)]
pub struct GeneratorDeps {
    /// Vendored dependencies (mounted like a template's).
    pub vendor: PathBuf,
    /// Directory holding cargo's `config.toml`.
    pub cargo: PathBuf,
    /// The generator's lockfile, its subject entry pointing at the workspace.
    pub lock: PathBuf,
}

/// Why a case's generator cannot be built: something about the case, not the machine.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct GeneratorUnusable(pub String);

/// The generator package of a case.
pub fn generator_dir(case: &Case) -> PathBuf {
    case.dir.join("context").join(BUNDLE_GENERATOR_DIR)
}

/// Makes (or finds, when its inputs are unchanged) the vendored dependencies of the case's
/// generator. A generator that is no cargo package, has no lockfile, or whose dependencies
/// cannot be resolved or bring another copy of the subject is a [`GeneratorUnusable`] error.
pub fn generator_deps(
    case: &Case,
    prepared: &PreparedCase,
    data: &DataDir,
) -> Result<GeneratorDeps> {
    let package = generator_dir(case);
    let manifest = fs::read_to_string(package.join("Cargo.toml")).map_err(|_| {
        GeneratorUnusable(format!(
            "context/{BUNDLE_GENERATOR_DIR}/ holds no cargo package (no Cargo.toml)"
        ))
    })?;
    if !manifest.contains("[workspace]") {
        return Err(GeneratorUnusable(format!(
            "context/{BUNDLE_GENERATOR_DIR}/Cargo.toml must contain an empty [workspace] table so it builds on its own"
        ))
        .into());
    }
    let committed_lock = fs::read(package.join("Cargo.lock")).map_err(|_| {
        GeneratorUnusable(format!(
            "context/{BUNDLE_GENERATOR_DIR}/Cargo.lock is missing; commit the lockfile the bundle was generated with"
        ))
    })?;
    let dir = data.generator_dir(case.id())?;
    fs::create_dir_all(dir.parent().expect("has parent"))?;
    let lock_file = fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(dir.with_extension("lock"))?;
    lock_file
        .lock()
        .context("locking the generator's directory")?;

    let mut h = Sha256::new();
    h.update(prepared.stamp.manifest_sha256.as_bytes());
    h.update(manifest.as_bytes());
    h.update(&committed_lock);
    let key = hex::encode(h.finalize());
    let deps = GeneratorDeps {
        vendor: dir.join("vendor"),
        cargo: dir.join("cargo"),
        lock: dir.join("Cargo.lock"),
    };
    if fs::read_to_string(dir.join("key")).is_ok_and(|k| k == key) {
        return Ok(deps);
    }
    let staging = dir.with_extension("partial");
    if staging.exists() {
        fs::remove_dir_all(&staging)?;
    }
    vendor_generator(prepared, &package, &staging)?;
    fs::write(staging.join("key"), &key)?;
    if dir.exists() {
        fs::remove_dir_all(&dir)?;
    }
    fs::rename(&staging, &dir)?;
    Ok(deps)
}

/// Resolves and vendors the generator's dependencies into `staging`, as preparation does for
/// an external oracle, against a copy of the buggy crate's sources (cargo runs nowhere in a
/// template).
fn vendor_generator(prepared: &PreparedCase, package: &Path, staging: &Path) -> Result<()> {
    let name = &prepared.stamp.crate_name;
    let ws = staging.join("crate");
    copy_tree(&prepared.stamp.agent.workspace, &ws, &|rel| {
        !rel.starts_with("target")
    })?;
    let generator = staging.join("generator");
    copy_tree(package, &generator, &|rel| !rel.starts_with("target"))?;
    let patch = patch_to(name, &ws);
    let unusable = |what: &str, e: anyhow::Error| GeneratorUnusable(format!("{what}: {e:#}"));
    repoint_lock(&generator, &patch)
        .map_err(|e| unusable("its dependencies cannot be resolved", e))?;
    let older_lines = check_single_subject(&generator.join("Cargo.lock"), name)
        .map_err(|e| unusable("its lockfile", e))?;
    let vendor = staging.join("vendor");
    vendor_package(&generator, &vendor, Some(&patch))
        .map_err(|e| unusable("its dependencies cannot be vendored", e))?;
    check_vendor(&vendor, name, &older_lines).map_err(|e| unusable("its dependencies", e))?;
    keep_template_times(&vendor, &prepared.stamp.agent.vendor)?;
    write_cargo_config(&staging.join("cargo"), name, true)?;
    fs::rename(generator.join("Cargo.lock"), staging.join("Cargo.lock"))?;
    fs::remove_dir_all(&generator)?;
    fs::remove_dir_all(&ws)?;
    Ok(())
}

/// Copies the case's generator and oracle into `dest` at their places in the case directory
/// (`context/generator/`, `oracle/`), the generator with the lockfile of `deps`; returns the
/// generator's copy.
pub fn stage(case: &Case, deps: &GeneratorDeps, dest: &Path) -> Result<PathBuf> {
    let not_built = |rel: &Path| !rel.starts_with("target");
    let generator = dest.join("context").join(BUNDLE_GENERATOR_DIR);
    copy_tree(&generator_dir(case), &generator, &not_built)?;
    copy_tree(&case.oracle_dir(), &dest.join("oracle"), &not_built)?;
    fs::copy(&deps.lock, generator.join("Cargo.lock"))?;
    Ok(generator)
}

/// Replaces each vendored package that the agent template vendored too (the same directory,
/// the same checksums) by a copy of the template's that keeps its modification times. cargo
/// re-runs a build script whose watched files look newer than its last run, so freshly written
/// sources would rebuild, in every check, packages the template's warm build already holds.
fn keep_template_times(vendor: &Path, template_vendor: &Path) -> Result<()> {
    for entry in fs::read_dir(vendor).with_context(|| format!("reading {}", vendor.display()))? {
        let ours = entry?.path();
        let theirs = template_vendor.join(ours.file_name().expect("a directory entry"));
        let checksums = |dir: &Path| fs::read(dir.join(".cargo-checksum.json")).ok();
        if theirs.is_dir() && checksums(&ours).is_some() && checksums(&ours) == checksums(&theirs) {
            fs::remove_dir_all(&ours)?;
            copy_preserving(&theirs, &ours)?;
        }
    }
    Ok(())
}
