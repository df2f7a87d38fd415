//! Programs a case's build needs beyond the Rust toolchain (a dependency's build script that
//! runs `cmake`, say): declared under `[[requires]]` in `case.toml`, checked before a case is
//! built so that a missing one is named with its package instead of buried in a build log, and
//! found undeclared from the dependencies a preparation built that are known to need one.

use crate::Case;
use anyhow::{Result, bail};
use faultline_schema::case::Requirement;
use std::path::Path;

/// Crates that fail a build when their program is missing: (crate, command, Debian package).
/// (`pkg-config` is not one: build scripts that ask it fall back to bundled sources.)
const BUILD_TOOLS: [(&str, &str, &str); 1] = [("cmake", "cmake", "cmake")];

/// Fails, naming each program and its package, when a declared requirement is not on `PATH`.
pub fn check_installed(case: &Case) -> Result<()> {
    missing(case.id(), &case.manifest.requires)
}

fn missing(case_id: &str, requires: &[Requirement]) -> Result<()> {
    let missing: Vec<String> = requires
        .iter()
        .filter(|r| !on_path(&r.command))
        .map(|r| format!("`{}` (Debian: apt-get install -y {})", r.command, r.debian))
        .collect();
    if !missing.is_empty() {
        bail!(
            "{case_id} needs programs that are not installed here: {}",
            missing.join(", ")
        );
    }
    Ok(())
}

/// The build tools that crates built in the `target` directories need and `case.toml` does
/// not declare, each as a problem saying what to add.
pub fn undeclared(case: &Case, targets: &[&Path]) -> Vec<String> {
    undeclared_in(&case.manifest.requires, targets)
}

fn undeclared_in(requires: &[Requirement], targets: &[&Path]) -> Vec<String> {
    let built: std::collections::BTreeSet<String> = targets
        .iter()
        .filter_map(|t| std::fs::read_dir(t.join("debug/.fingerprint")).ok())
        .flat_map(|entries| entries.flatten())
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            // `<package>-<hash>`
            name.rsplit_once('-')
                .map(|(package, _)| package.to_string())
        })
        .collect();
    BUILD_TOOLS
        .iter()
        .filter(|(krate, command, _)| {
            built.contains(*krate) && !requires.iter().any(|r| r.command == *command)
        })
        .map(|(krate, command, debian)| {
            format!(
                "the dependency `{krate}` runs `{command}` at build time; declare it in \
                 case.toml:\n[[requires]]\ncommand = \"{command}\"\ndebian = \"{debian}\""
            )
        })
        .collect()
}

fn on_path(command: &str) -> bool {
    use std::os::unix::fs::PermissionsExt;
    let Some(path) = std::env::var_os("PATH") else {
        return false;
    };
    std::env::split_paths(&path).any(|dir| {
        std::fs::metadata(dir.join(command))
            .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn requirement(command: &str, debian: &str) -> Requirement {
        Requirement {
            command: command.into(),
            debian: debian.into(),
        }
    }

    #[test]
    fn a_built_build_tool_crate_must_be_declared() {
        let target = tempfile::tempdir().unwrap();
        let other = tempfile::tempdir().unwrap();
        for (t, name) in [
            (&other, "cmake-00ff00ff00ff00ff"),
            (&target, "pkg-config-6c0bff68ccc33160"),
        ] {
            std::fs::create_dir_all(t.path().join("debug/.fingerprint").join(name)).unwrap();
        }
        let targets = [target.path(), other.path()];
        let problems = undeclared_in(&[], &targets);
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(problems[0].contains("command = \"cmake\""), "{problems:?}");
        assert!(undeclared_in(&[requirement("cmake", "cmake")], &targets).is_empty());
        assert!(undeclared_in(&[], &targets[..1]).is_empty());
    }

    #[test]
    fn a_missing_program_is_named_with_its_package() {
        let requires = [
            requirement("faultline-no-such-tool", "no-such-package"),
            requirement("sh", "dash"),
        ];
        let err = missing("kv-req", &requires).unwrap_err().to_string();
        assert!(
            err.contains("`faultline-no-such-tool` (Debian: apt-get install -y no-such-package)"),
            "{err}"
        );
        assert!(!err.contains("`sh`"), "{err}");
        assert!(missing("kv-req", &requires[1..]).is_ok());
    }
}
