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
        let stderr = String::from_utf8_lossy(&out.stderr);
        // Cargo looks for a workspace above the package, so a data directory inside a checkout
        // of a Cargo workspace (this repository's, say) captures every case's crate.
        let hint = if stderr.contains("believes it's in a workspace") {
            "\n\nThe data directory lies inside a Cargo workspace: choose one outside it \
             (`--data` or FAULTLINE_DATA)."
        } else {
            ""
        };
        bail!(
            "`cargo {}` in {} failed:\n{}{hint}",
            args.join(" "),
            dir.display(),
            stderr.trim()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_package_captured_by_an_outer_workspace_gets_a_hint() {
        let root = tempfile::tempdir().unwrap();
        std::fs::write(
            root.path().join("Cargo.toml"),
            "[workspace]\nmembers = []\n",
        )
        .unwrap();
        let package = root.path().join("data/case");
        std::fs::create_dir_all(package.join("src")).unwrap();
        std::fs::write(
            package.join("Cargo.toml"),
            "[package]\nname = \"captured\"\nversion = \"0.1.0\"\nedition = \"2021\"\n",
        )
        .unwrap();
        std::fs::write(package.join("src/lib.rs"), "").unwrap();
        let err = host_cargo(&package, &["generate-lockfile", "--offline"])
            .unwrap_err()
            .to_string();
        assert!(err.contains("choose one outside it"), "{err}");
    }
}
