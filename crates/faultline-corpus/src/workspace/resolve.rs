//! Dependency resolution and vendoring: the lockfiles a case builds with, the vendored sources
//! that let every build run offline, and cargo's configuration that points at them.
//!
//! Old releases need old dependencies, so a case's committed lockfile wins; without one, today's
//! resolution is taken with the case's pins applied. When a dependency depends back on the
//! subject crate, cargo's configuration patches the subject to the workspace, so the only copy
//! of it any build sees is the one the agent works on (`isolation` checks that it is).

use super::layout::{GUEST_VENDOR, GUEST_WORKSPACE};
use super::prepared::PreparedCase;
use crate::cargo::host_cargo;
use crate::case::Case;
use anyhow::{Context, Result};
use serde::Deserialize;
use std::fs;
use std::path::{Path, PathBuf};

/// The `--config` value that patches the subject crate `name` to the crate at `ws`.
pub(super) fn patch_to(name: &str, ws: &Path) -> String {
    format!("patch.crates-io.{name}.path={:?}", ws.to_string_lossy())
}

/// Gives the crate at `ws` its lockfile: the curator's, or today's resolution honouring the
/// pins (with the subject patched to the workspace when a dependency depends back on it).
/// Returns whether cargo's configuration must patch the subject to the workspace.
pub(super) fn lock_workspace(case: &Case, ws: &Path, name: &str) -> Result<bool> {
    let lock_path = ws.join("Cargo.lock");
    let pins = case.manifest.source.pins();
    if let Some(lock) = case.lockfile() {
        fs::copy(lock, &lock_path)?;
    } else {
        tracing::warn!(
            "{}: no committed Cargo.lock; resolving today's versions",
            case.id()
        );
        resolve_lock(ws, name, pins, false)?;
        if depends_back_on(&lock_path, name)? {
            resolve_lock(ws, name, pins, true)?;
        }
    }
    depends_back_on(&lock_path, name)
}

fn resolve_lock(
    ws: &Path,
    name: &str,
    pins: &[faultline_schema::Pin],
    self_patch: bool,
) -> Result<()> {
    let patch = patch_to(name, ws);
    let mut args = vec!["generate-lockfile"];
    if self_patch {
        args.extend(["--config", &patch]);
    }
    host_cargo(ws, &args)?;
    apply_pins(ws, pins, self_patch.then_some(patch.as_str()));
    Ok(())
}

/// Gives the oracle package at `oracle` its lockfile: the curator's, or the workspace's
/// (`agent_ws`) extended by today's resolution of what the oracle adds, honouring the pins.
/// `patch` points the subject at the grading workspace (see [`patch_to`]).
pub(super) fn lock_oracle(case: &Case, agent_ws: &Path, oracle: &Path, patch: &str) -> Result<()> {
    if !oracle.join("Cargo.lock").is_file() {
        tracing::warn!(
            "{}: no committed oracle/Cargo.lock; resolving today's versions",
            case.id()
        );
        fs::copy(agent_ws.join("Cargo.lock"), oracle.join("Cargo.lock"))?;
        host_cargo(
            oracle,
            &["metadata", "--format-version", "1", "--config", patch],
        )?;
        apply_pins(oracle, case.manifest.source.pins(), Some(patch));
    }
    Ok(())
}

fn apply_pins(dir: &Path, pins: &[faultline_schema::Pin], patch: Option<&str>) {
    for pin in pins {
        let version = pin.version.to_string();
        let mut args = vec!["update", "-p", &pin.crate_name, "--precise", &version];
        if let Some(p) = patch {
            args.extend(["--config", p]);
        }
        match host_cargo(dir, &args) {
            Ok(_) => {}
            // A pin for a crate this lockfile does not hold (a crate's pin, seen from its
            // oracle's lockfile, say) has nothing to do.
            Err(e) if format!("{e:#}").contains("did not match any packages") => {
                tracing::info!("pin {} {} not applied: {e:#}", pin.crate_name, pin.version);
            }
            Err(e) => tracing::warn!(
                "pin {} {} not applied (pins apply in the order case.toml lists them; one that \
                 needs another crate pinned first fails until that pin comes before it): {e:#}",
                pin.crate_name,
                pin.version
            ),
        }
    }
}

/// Whether some locked package other than the crate itself depends on the crate (so a registry
/// copy, possibly a fixed version, would otherwise be pulled in).
pub(super) fn depends_back_on(lock: &Path, name: &str) -> Result<bool> {
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

/// Vendors every locked dependency of the crate at `ws` into `vendor`, with the subject patched
/// to the workspace when `self_patch`.
pub(super) fn vendor(ws: &Path, vendor: &Path, name: &str, self_patch: bool) -> Result<()> {
    let patch = self_patch.then(|| patch_to(name, ws));
    vendor_package(ws, vendor, patch.as_deref()).context("vendoring the crate's dependencies")
}

/// Vendors every locked dependency of the package at `dir` into `vendor`, with `patch` (see
/// [`patch_to`]) applied when given.
pub(super) fn vendor_package(dir: &Path, vendor: &Path, patch: Option<&str>) -> Result<()> {
    let vendor_arg = vendor.to_string_lossy();
    let mut args = vec!["vendor", "--locked", "--versioned-dirs"];
    if let Some(p) = patch {
        args.extend(["--config", p]);
    }
    args.push(&vendor_arg);
    host_cargo(dir, &args)?;
    // cargo creates no directory when there is nothing to vendor.
    fs::create_dir_all(vendor)?;
    Ok(())
}

/// Points the committed lockfile of the package at `dir` at the workspace's copy of the subject
/// (`patch`, see [`patch_to`]): a lockfile resolved against the registry names the registry's
/// copy, and cargo rewrites that one entry, keeping every other locked version.
pub(super) fn repoint_lock(dir: &Path, patch: &str) -> Result<()> {
    host_cargo(
        dir,
        &["metadata", "--format-version", "1", "--config", patch],
    )?;
    Ok(())
}

/// Vendors the dependencies of both the crate at `ws` and the oracle package into `vendor`, with
/// the subject patched to the workspace (`patch`, see [`patch_to`]).
pub(super) fn vendor_with_oracle(
    ws: &Path,
    oracle: &Path,
    vendor: &Path,
    patch: &str,
) -> Result<()> {
    host_cargo(
        ws,
        &[
            "vendor",
            "--locked",
            "--versioned-dirs",
            "--config",
            patch,
            "--sync",
            &oracle.join("Cargo.toml").to_string_lossy(),
            &vendor.to_string_lossy(),
        ],
    )
    .context("vendoring the oracle's dependencies")?;
    fs::create_dir_all(vendor)?;
    Ok(())
}

/// Writes cargo's configuration for a template into `dir`: crates from the vendored sources at
/// [`GUEST_VENDOR`], offline, and the subject patched to [`GUEST_WORKSPACE`] when `self_patch`.
pub(super) fn write_cargo_config(dir: &Path, name: &str, self_patch: bool) -> Result<()> {
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
