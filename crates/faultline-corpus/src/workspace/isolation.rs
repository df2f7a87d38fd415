//! The agent never sees the answer: the checks that hold preparation to it.
//!
//! A workspace is what an agent may read, so nothing in it may tell the fixed version apart from
//! the buggy one except the bug itself. Preparation therefore
//!
//! - copies the buggy tree without the files that name upstream history (the upstream commit in
//!   `.cargo_vcs_info.json`, `Cargo.toml.orig`, the package's `Cargo.lock`, changelogs and
//!   release notes), which would date the release and point at its fix;
//! - refuses a lockfile that resolves any copy of the subject crate other than the workspace's
//!   own, since a dependency that depends back on the crate could pull in the fixed release
//!   (copies of older incompatible lines excepted: they cannot be the fixing release);
//! - refuses a vendor directory that holds another copy of the subject crate (same exception);
//! - refuses any file, in the workspace or among vendored sources, whose content only the fixed
//!   version has.
//!
//! A failed check stops preparation: a case that cannot be prepared without leaking its answer
//! is not run at all. What is never mounted (the corpus, the oracle, the fixed sources) is kept
//! out by the sandbox's layout, not here.

use crate::cargo::read_lock;
use crate::gold::diff_trees;
use crate::store::copy_tree;
use anyhow::{Context, Result, bail};
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::Path;

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

/// Copies the buggy tree to `to` without the files that name upstream history (see
/// [`is_history_file`]); returns the top-level files left out, sorted, for the stamp.
pub(super) fn copy_anonymized(buggy: &Path, to: &Path) -> Result<Vec<String>> {
    let mut removed = Vec::new();
    copy_tree(buggy, to, &|rel| !is_history_file(rel))?;
    for entry in walkdir::WalkDir::new(buggy).min_depth(1) {
        let entry = entry?;
        let rel = entry.path().strip_prefix(buggy).expect("under root");
        if is_history_file(rel) && rel.components().count() == 1 {
            removed.push(rel.to_string_lossy().into_owned());
        }
    }
    removed.sort();
    Ok(removed)
}

/// The lockfile holds the subject once as the local path package, plus at most copies of older,
/// semver-incompatible lines (openraft 0.9 declares an optional dependency on openraft 0.7, and a
/// lockfile lists optional dependencies). An older line cannot be the release that fixed the
/// buggy one; a backport into it is still caught by the fixed-file check on vendored sources.
/// Returns the versions of those older copies, which the vendor directory may then hold.
pub(super) fn check_single_subject(lock: &Path, name: &str) -> Result<Vec<String>> {
    let copies: Vec<_> = read_lock(lock)?
        .into_iter()
        .filter(|p| p.name == name)
        .collect();
    let local: Vec<_> = copies.iter().filter(|p| p.source.is_none()).collect();
    let older: Option<Vec<String>> = match local.as_slice() {
        [own] => copies
            .iter()
            .filter(|p| p.source.is_some())
            .map(|p| older_line(&p.version, &own.version).then(|| p.version.clone()))
            .collect(),
        _ => None,
    };
    match older {
        Some(older) => {
            for version in &older {
                tracing::info!(
                    "{} also resolves `{name}` {version}, an older incompatible line; allowed",
                    lock.display()
                );
            }
            Ok(older)
        }
        None => bail!(
            "{} resolves {} of `{name}` ({}); only the workspace's own copy (and copies of \
             older incompatible lines) may be reachable, or a dependency could bring in the fixed code",
            lock.display(),
            match copies.len() {
                1 => "1 copy".to_string(),
                n => format!("{n} copies"),
            },
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

/// Whether `other` belongs to a release line older than `own`'s and incompatible with it (for
/// 0.x versions the minor number is the line, as cargo counts compatibility).
fn older_line(other: &str, own: &str) -> bool {
    let line = |v: &semver::Version| match (v.major, v.minor) {
        (0, 0) => (0, 0, v.patch),
        (0, minor) => (0, minor, 0),
        (major, _) => (major, 0, 0),
    };
    match (semver::Version::parse(other), semver::Version::parse(own)) {
        (Ok(other), Ok(own)) => line(&other) < line(&own),
        _ => false,
    }
}

/// No vendored package is a copy of the subject crate, except the older lines
/// [`check_single_subject`] allowed.
pub(super) fn check_vendor(vendor: &Path, name: &str, older_allowed: &[String]) -> Result<()> {
    let prefix = format!("{name}-");
    let entries = fs::read_dir(vendor).with_context(|| format!("reading {}", vendor.display()))?;
    for entry in entries {
        let dir = entry?.file_name().to_string_lossy().into_owned();
        let version = dir.strip_prefix(&prefix);
        let is_copy = dir == name
            || version.is_some_and(|v| v.chars().next().is_some_and(|c| c.is_ascii_digit()));
        let allowed = version.is_some_and(|v| older_allowed.iter().any(|a| a == v));
        if is_copy && !allowed {
            bail!(
                "vendored dependencies contain `{dir}`, another copy of the subject crate; refusing to prepare"
            );
        }
    }
    Ok(())
}

/// Hashes of the fixed tree's files whose content the buggy tree does not have (path -> hash).
pub(super) fn fixed_only_hashes(buggy: &Path, fixed: &Path) -> Result<BTreeMap<String, String>> {
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
pub(super) fn check_no_fixed_files(dir: &Path, fixed: &BTreeMap<String, String>) -> Result<()> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workspace::resolve::depends_back_on;

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
        check_vendor(vendor.path(), "openraft", &[]).unwrap();
        fs::create_dir(vendor.path().join("openraft-0.7.6")).unwrap();
        check_vendor(vendor.path(), "openraft", &["0.7.6".into()]).unwrap();
        fs::create_dir(vendor.path().join("openraft-0.9.25")).unwrap();
        let err = check_vendor(vendor.path(), "openraft", &["0.7.6".into()])
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

    fn lock_with_copies(dir: &Path, own: &str, others: &[&str]) -> std::path::PathBuf {
        let mut text = format!("version = 4\n\n[[package]]\nname = \"kv\"\nversion = \"{own}\"\n");
        for v in others {
            text += &format!(
                "\n[[package]]\nname = \"kv\"\nversion = \"{v}\"\nsource = \"registry+x\"\n"
            );
        }
        let lock = dir.join("Cargo.lock");
        fs::write(&lock, text).unwrap();
        lock
    }

    #[test]
    fn only_an_older_incompatible_line_of_the_subject_may_share_the_lockfile() {
        let dir = tempfile::tempdir().unwrap();
        let ok = |own: &str, others: &[&str]| {
            check_single_subject(&lock_with_copies(dir.path(), own, others), "kv")
        };
        assert_eq!(ok("0.9.7", &["0.7.6"]).unwrap(), vec!["0.7.6".to_string()]);
        assert_eq!(ok("2.1.0", &["1.9.9"]).unwrap(), vec!["1.9.9".to_string()]);
        assert_eq!(ok("0.9.7", &[]).unwrap(), Vec::<String>::new());
        for (own, other) in [
            ("0.9.7", "0.9.8"),
            ("0.9.7", "0.9.1"),
            ("0.9.7", "0.10.0"),
            ("1.2.0", "1.0.0"),
            ("0.0.3", "0.0.3"),
        ] {
            let err = ok(own, &[other]).unwrap_err().to_string();
            assert!(err.contains("2 copies"), "{own} with {other}: {err}");
        }
        let err = ok("0.9.7", &["0.7.6", "0.9.8"]).unwrap_err().to_string();
        assert!(err.contains("3 copies"), "{err}");
    }
}
