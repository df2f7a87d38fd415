//! Copies of templates. An agent's workspace is a full copy of the agent template; a grading
//! workbench is a copy of the grading template in which the build outputs no patch can change
//! (those of crates that do not depend on the subject) are links into the case's store of
//! shared outputs, mounted read-only, so that a workbench is cheap to make and no code run in
//! one can change what the next one builds with.

use super::layout::{GUEST_SHARED, Template};
use crate::cargo::read_lock;
use anyhow::{Context, Result, bail};
use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

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

/// Fills `store` with the grading template's build outputs that no change to the subject crate
/// `name` rebuilds (see [`link_shared_outputs`]), judged by the lockfiles of its workspace and
/// oracle.
pub(super) fn share_outputs(grade: &Template, name: &str, store: &Path) -> Result<()> {
    let locks: Vec<PathBuf> = std::iter::once(grade.workspace.join("Cargo.lock"))
        .chain(grade.oracle.iter().map(|o| o.join("Cargo.lock")))
        .filter(|l| l.is_file())
        .collect();
    link_shared_outputs(
        &grade.workspace,
        store,
        &crates_independent_of(name, &locks)?,
    )
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
