//! What a template shares, with later copies of it and with other cases: its vendored files and
//! the build outputs no patch can change (those of crates that do not depend on the subject) go
//! into the object store ([`super::objects`]) and are hard links to it; the outputs are also
//! linked into the template's `shared/` directory, which sandboxes over a copy of the template
//! mount read-only, the copy holding symbolic links to them (see
//! [`super::copy::copy_sharing_outputs`]).
//!
//! Vendored files and the outputs of registry dependencies get one fixed modification time
//! ([`SHARED_MTIME_SECS`](super::objects::SHARED_MTIME_SECS)) before they are stored, so that the
//! same dependency built for two cases is one object and cargo finds it fresh in both. Outputs of
//! path dependencies keep their time (their sources are the case's own, compared by time).

use super::layout::Template;
use super::objects::{ObjectStore, set_shared_mtime};
use crate::cargo::read_lock;
use anyhow::{Context, Result};
use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// The files of a prepared case that are links into the object store, as the manifest names
/// them (`dir/path`, relative to the prepared case's root), with their content's SHA-256.
pub(super) type Interned = BTreeMap<String, String>;

/// Stores the vendored files and shared build outputs of `template` (under `root`) as objects,
/// and links the outputs into `store`. The subject crate is `name`.
pub(super) fn share_template(
    objects: &ObjectStore,
    root: &Path,
    template: &Template,
    name: &str,
    store: &Path,
    interned: &mut Interned,
) -> Result<()> {
    intern_vendor(objects, root, &template.vendor, interned)?;
    let locks: Vec<PathBuf> = std::iter::once(template.workspace.join("Cargo.lock"))
        .chain(template.oracle.iter().map(|o| o.join("Cargo.lock")))
        .filter(|l| l.is_file())
        .collect();
    let crates = independent_crates(name, &locks)?;
    let dir_name = relative(root, &template.workspace);
    let store_name = relative(root, store);
    fs::create_dir_all(store)?;
    let outputs = shared_outputs(&template.workspace, &crates.all)?;
    let linked: BTreeSet<String> = outputs.iter().map(|(_, r)| r.clone()).collect();
    intern_own_outputs(objects, &template.workspace, &dir_name, &linked, interned)?;
    for (file, relative) in outputs {
        if crate_of_output(Path::new(&relative)).is_some_and(|c| crates.registry.contains(&c)) {
            set_shared_mtime(&file)?;
        }
        let sha = objects
            .intern(&file)
            .with_context(|| format!("storing {}", file.display()))?;
        let link = store.join(&relative);
        fs::create_dir_all(link.parent().expect("below the store"))?;
        fs::hard_link(&file, &link)
            .with_context(|| format!("linking {relative} into the shared outputs"))?;
        interned.insert(format!("{dir_name}/{relative}"), sha.clone());
        interned.insert(format!("{store_name}/{relative}"), sha);
    }
    Ok(())
}

/// Stores every other file of the template's build cache (the subject's and its dependents'
/// outputs, incremental caches) as an object too, keeping its own modification time: nothing
/// shares them through `shared/` (a copy of the template gets copies of its own, which a rebuild
/// may rewrite in place), but the grading template of an external-oracle case starts as a copy of
/// the agent template, so most of their build caches are the same files, stored once.
/// Incremental caches get the shared time first: rustc finds its sessions by directory name and
/// checks their contents by hash, never by time, and cases of one crate version build much the
/// same cache (two openraft 0.9.24 cases: 118 of 177 MB the same bytes, differing only in time).
fn intern_own_outputs(
    objects: &ObjectStore,
    workspace: &Path,
    dir_name: &str,
    linked: &BTreeSet<String>,
    interned: &mut Interned,
) -> Result<()> {
    let target = workspace.join("target");
    if !target.is_dir() {
        return Ok(());
    }
    for entry in walkdir::WalkDir::new(&target) {
        let entry = entry.with_context(|| format!("reading {}", target.display()))?;
        if !entry.file_type().is_file() {
            continue;
        }
        let below = relative(workspace, entry.path());
        if linked.contains(&below) {
            continue;
        }
        if is_incremental_cache(Path::new(&below)) {
            set_shared_mtime(entry.path())?;
        }
        let sha = objects
            .intern(entry.path())
            .with_context(|| format!("storing {}", entry.path().display()))?;
        interned.insert(format!("{dir_name}/{below}"), sha);
    }
    Ok(())
}

/// Whether a workspace-relative path lies in rustc's incremental cache (`target/<profile>/incremental/`).
fn is_incremental_cache(relative: &Path) -> bool {
    let mut parts = relative.components().map(|c| c.as_os_str());
    parts.next().is_some_and(|c| c == "target") && parts.nth(1).is_some_and(|c| c == "incremental")
}

/// Stores every vendored file as an object, after giving it, and every directory of the vendor
/// tree, the shared modification time (cargo compares a build script's `rerun-if-changed` paths
/// with its output's time).
fn intern_vendor(
    objects: &ObjectStore,
    root: &Path,
    vendor: &Path,
    interned: &mut Interned,
) -> Result<()> {
    let dir_name = relative(root, vendor);
    if interned
        .keys()
        .any(|k| k.starts_with(&format!("{dir_name}/")))
    {
        return Ok(());
    }
    let mut dirs = Vec::new();
    for entry in walkdir::WalkDir::new(vendor) {
        let entry = entry.with_context(|| format!("reading {}", vendor.display()))?;
        if entry.file_type().is_dir() {
            dirs.push(entry.into_path());
        } else if entry.file_type().is_file() {
            set_shared_mtime(entry.path())?;
            let sha = objects
                .intern(entry.path())
                .with_context(|| format!("storing {}", entry.path().display()))?;
            let below = relative(vendor, entry.path());
            interned.insert(format!("{dir_name}/{below}"), sha);
        }
    }
    // Deepest first: setting a directory's time after its entries are done.
    for dir in dirs.iter().rev() {
        set_shared_mtime(dir)?;
    }
    Ok(())
}

fn relative(root: &Path, path: &Path) -> String {
    path.strip_prefix(root)
        .unwrap_or(path)
        .to_string_lossy()
        .into_owned()
}

/// The crates whose build outputs are shared, underscored: all of them, and those that come
/// from a registry (rather than a path).
struct SharedCrates {
    all: BTreeSet<String>,
    registry: BTreeSet<String>,
}

/// Crate names (underscored) of the locked packages that are neither `subject` nor depend on it,
/// directly or not, in any of the lock files: a build after a change to the subject's sources
/// never rebuilds them. A name that also stands for a dependent package is left out, and a name
/// that also stands for a path package is not counted as a registry one.
fn independent_crates(subject: &str, locks: &[PathBuf]) -> Result<SharedCrates> {
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
    let all: BTreeSet<String> = packages
        .iter()
        .map(|p| p.name.replace('-', "_"))
        .filter(|c| !dependent.contains(c))
        .collect();
    let local: BTreeSet<String> = packages
        .iter()
        .filter(|p| p.source.is_none())
        .map(|p| p.name.replace('-', "_"))
        .collect();
    let registry = all.difference(&local).cloned().collect();
    Ok(SharedCrates { all, registry })
}

/// The crate (underscored) a file of a warm build cache is an output of, if it is one of the
/// outputs sharing considers: a compiled library or dep-info in `target/<profile>/deps/`
/// (`lib<name>-<hash>.rlib`, `.rmeta`, `.so`, `<name>-<hash>.d`), a fingerprint in
/// `target/<profile>/.fingerprint/<package>-<hash>/`, or a build script's file under
/// `target/<profile>/build/<package>-<hash>/`.
fn crate_of_output(relative: &Path) -> Option<String> {
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
}

/// `name-1a2b3c` as the crate name `name` (underscored), if what follows the last dash is a hash.
fn crate_before_hash(s: &str) -> Option<String> {
    let (name, hash) = s.rsplit_once('-')?;
    hash.chars()
        .all(|c| c.is_ascii_hexdigit())
        .then(|| name.replace('-', "_"))
}

/// The regular files of `workspace/target` that are outputs of the `shared` crates, with their
/// paths relative to the workspace.
fn shared_outputs(workspace: &Path, shared: &BTreeSet<String>) -> Result<Vec<(PathBuf, String)>> {
    let target = workspace.join("target");
    let mut found = Vec::new();
    if !target.is_dir() {
        return Ok(found);
    }
    for entry in walkdir::WalkDir::new(&target) {
        let entry = entry.with_context(|| format!("reading {}", target.display()))?;
        let relative = entry.path().strip_prefix(workspace)?;
        if entry.file_type().is_file()
            && crate_of_output(relative).is_some_and(|c| shared.contains(&c))
        {
            let relative = relative.to_string_lossy().into_owned();
            found.push((entry.into_path(), relative));
        }
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

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
dependencies = ["serde", "rand-core 0.6.4", "kv-dep"]
[[package]]
name = "kv-dep"
version = "0.1.0"
[[package]]
name = "kv-memstore"
version = "0.2.0"
source = "registry+https://example.invalid/index"
dependencies = ["kv"]
[[package]]
name = "kv-test-harness"
version = "0.1.0"
source = "registry+https://example.invalid/index"
dependencies = ["kv-memstore 0.2.0 (registry+https://example.invalid/index)"]
[[package]]
name = "serde"
version = "1.0.0"
source = "registry+https://example.invalid/index"
[[package]]
name = "rand-core"
version = "0.6.4"
source = "registry+https://example.invalid/index"
"#,
        )
        .unwrap();
        let crates = independent_crates("kv", &[lock]).unwrap();
        assert_eq!(
            crates.all.into_iter().collect::<Vec<_>>(),
            ["kv_dep", "rand_core", "serde"]
        );
        assert_eq!(
            crates.registry.into_iter().collect::<Vec<_>>(),
            ["rand_core", "serde"]
        );
    }

    #[test]
    fn only_incremental_caches_lose_their_time() {
        for p in [
            "target/debug/incremental/kv-0123/s-1/dep-graph.bin",
            "target/release/incremental/kv-0123/s-1.lock",
        ] {
            assert!(is_incremental_cache(Path::new(p)), "{p}");
        }
        for p in [
            "target/debug/deps/kv-0123abcd",
            "target/debug/.fingerprint/kv-77aa/lib-kv",
            "src/incremental/x.rs",
            "target/incremental",
        ] {
            assert!(!is_incremental_cache(Path::new(p)), "{p}");
        }
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
        let is_shared =
            |p: &str| crate_of_output(Path::new(p)).is_some_and(|c| shared.contains(&c));
        for p in yes {
            assert!(is_shared(p), "{p}");
        }
        for p in no {
            assert!(!is_shared(p), "{p}");
        }
    }

    #[test]
    fn shared_outputs_and_vendored_files_become_objects_linked_from_the_store() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("case");
        let ws = root.join("agent/workspace");
        let deps = ws.join("target/debug/deps");
        fs::create_dir_all(&deps).unwrap();
        fs::write(
            ws.join("Cargo.lock"),
            "version = 3\n[[package]]\nname = \"kv\"\nversion = \"0.1.0\"\ndependencies = [\"serde\", \"local\"]\n\
             [[package]]\nname = \"serde\"\nversion = \"1.0.0\"\nsource = \"registry+https://example.invalid/index\"\n\
             [[package]]\nname = \"local\"\nversion = \"0.1.0\"\n",
        )
        .unwrap();
        fs::write(deps.join("libserde-00ff.rlib"), "serde").unwrap();
        fs::write(deps.join("liblocal-00ff.rlib"), "local").unwrap();
        fs::write(deps.join("libkv-00ff.rlib"), "kv").unwrap();
        let session = ws.join("target/debug/incremental/kv-00ff/s-1");
        fs::create_dir_all(&session).unwrap();
        fs::write(session.join("dep-graph.bin"), "graph").unwrap();
        let vendor = root.join("agent/vendor/serde");
        fs::create_dir_all(&vendor).unwrap();
        fs::write(vendor.join("lib.rs"), "pub fn f() {}").unwrap();
        let template = Template {
            workspace: ws.clone(),
            vendor: root.join("agent/vendor"),
            cargo: root.join("agent/cargo"),
            oracle: None,
            shared: None,
        };
        let objects = ObjectStore::new(dir.path().join("objects"));
        let store = root.join("shared");
        let mut interned = Interned::new();
        share_template(&objects, &root, &template, "kv", &store, &mut interned).unwrap();

        let serde = fs::metadata(deps.join("libserde-00ff.rlib")).unwrap();
        let linked = fs::metadata(store.join("target/debug/deps/libserde-00ff.rlib")).unwrap();
        assert_eq!(serde.ino(), linked.ino());
        assert_eq!(
            serde.nlink(),
            3,
            "the workspace's, the store's and the object's"
        );
        assert_eq!(serde.mtime(), super::super::objects::SHARED_MTIME_SECS);
        assert_eq!(serde.mode() & 0o777, 0o644);
        let local = fs::metadata(deps.join("liblocal-00ff.rlib")).unwrap();
        assert_ne!(
            local.mtime(),
            super::super::objects::SHARED_MTIME_SECS,
            "a path dependency keeps its time"
        );
        assert_eq!(local.nlink(), 3);
        assert_eq!(
            fs::metadata(deps.join("libkv-00ff.rlib")).unwrap().nlink(),
            2,
            "the subject's output is stored, the workspace's and the object's"
        );
        assert!(!store.join("target/debug/deps/libkv-00ff.rlib").exists());
        let graph = fs::metadata(session.join("dep-graph.bin")).unwrap();
        assert_eq!(
            (graph.mtime(), graph.nlink()),
            (super::super::objects::SHARED_MTIME_SECS, 2),
            "an incremental cache is stored with the shared time"
        );
        let names: Vec<&str> = interned.keys().map(String::as_str).collect();
        assert_eq!(
            names,
            [
                "agent/vendor/serde/lib.rs",
                "agent/workspace/target/debug/deps/libkv-00ff.rlib",
                "agent/workspace/target/debug/deps/liblocal-00ff.rlib",
                "agent/workspace/target/debug/deps/libserde-00ff.rlib",
                "agent/workspace/target/debug/incremental/kv-00ff/s-1/dep-graph.bin",
                "shared/target/debug/deps/liblocal-00ff.rlib",
                "shared/target/debug/deps/libserde-00ff.rlib",
            ]
        );
        assert_eq!(
            fs::metadata(vendor.join("lib.rs")).unwrap().mtime(),
            super::super::objects::SHARED_MTIME_SECS
        );

        // A grading template that starts as a copy of the agent's (times kept) holds the
        // subject's outputs as the same stored files; what its own build wrote is its own.
        let grade_ws = root.join("grade/workspace");
        crate::workspace::copy::copy_preserving(&ws, &grade_ws).unwrap();
        fs::write(grade_ws.join("target/debug/deps/liboracle-00ff.rlib"), "o").unwrap();
        let grade = Template {
            workspace: grade_ws.clone(),
            ..template.clone()
        };
        let grade_store = root.join("grade/shared");
        share_template(&objects, &root, &grade, "kv", &grade_store, &mut interned).unwrap();
        let ino = |p: PathBuf| fs::metadata(p).unwrap().ino();
        assert_eq!(
            ino(deps.join("libkv-00ff.rlib")),
            ino(grade_ws.join("target/debug/deps/libkv-00ff.rlib"))
        );
        assert_eq!(
            fs::metadata(grade_ws.join("target/debug/deps/liboracle-00ff.rlib"))
                .unwrap()
                .nlink(),
            2
        );
    }
}
