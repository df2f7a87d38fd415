//! Running cargo on the host, for the steps that need the package registry (resolving a
//! lockfile, downloading and vendoring). Builds never run here; they run in the sandbox.

use anyhow::{Context, Result, bail};
use std::path::Path;
use std::process::Command;

/// Runs `cargo <args>` in `dir` and returns its standard output.
///
/// Old releases declare no `rust-version`, so the resolver is told to prefer dependency versions
/// that build on the toolchain at hand rather than the newest ones.
pub fn host_cargo(dir: &Path, args: &[&str]) -> Result<String> {
    let out = Command::new("cargo")
        .args(args)
        .current_dir(dir)
        .env("CARGO_RESOLVER_INCOMPATIBLE_RUST_VERSIONS", "fallback")
        .env("CARGO_TERM_COLOR", "never")
        .output()
        .context("running cargo")?;
    if !out.status.success() {
        bail!(
            "`cargo {}` in {} failed:\n{}",
            args.join(" "),
            dir.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// A package entry of a `Cargo.lock`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
pub struct LockedPackage {
    /// Package name.
    pub name: String,
    /// Exact version.
    pub version: String,
    /// Where it comes from; absent for path packages.
    pub source: Option<String>,
    /// What it depends on: `name`, `name version` or `name version (source)`.
    #[serde(default)]
    pub dependencies: Vec<String>,
}

/// Reads the package list of a `Cargo.lock`.
pub fn read_lock(path: &Path) -> Result<Vec<LockedPackage>> {
    #[derive(serde::Deserialize)]
    struct Lock {
        #[serde(default)]
        package: Vec<LockedPackage>,
    }
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let lock: Lock =
        toml::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
    Ok(lock.package)
}
