//! Copies of templates. An agent's workspace and a grading workbench are copies of their
//! template in which the build outputs no patch can change (those of crates that do not depend on
//! the subject, see [`super::share`]) are symbolic links to the template's shared outputs,
//! mounted read-only, so that a copy is cheap to make and no code run in one can change what the
//! next one builds with.

use super::layout::GUEST_SHARED;
use anyhow::{Context, Result, bail};
use std::collections::BTreeSet;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

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

/// Copies a template's workspace like [`copy_preserving`], except that the compiled files at the
/// `shared` paths (relative to the workspace; the template's shared outputs hold them) become
/// symbolic links to their read-only mount at [`GUEST_SHARED`] (see [`replaced_whole`]). They
/// are most of a warm build cache; a rebuild in the copy replaces a link rather than writing
/// through it, and code that tries to write through one meets the read-only mount: no copy can
/// change what the next one builds with. The other shared files are copied, writable by their
/// owner (the stored objects they come from are read-only).
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
        } else if shared.contains(relative.to_string_lossy().as_ref()) && replaced_whole(relative) {
            std::os::unix::fs::symlink(Path::new(GUEST_SHARED).join(relative), &target)?;
        } else {
            let meta = entry.metadata()?;
            fs::copy(entry.path(), &target)
                .with_context(|| format!("copying {}", entry.path().display()))?;
            if meta.permissions().mode() & 0o200 == 0 {
                let mode = meta.permissions().mode() | 0o200;
                fs::set_permissions(&target, fs::Permissions::from_mode(mode))?;
            }
            filetime::set_file_times(
                &target,
                filetime::FileTime::from_last_access_time(&meta),
                filetime::FileTime::from_last_modification_time(&meta),
            )?;
        }
    }
    Ok(())
}

/// Whether a rebuild replaces the file at `relative` as a whole (rustc writes a compiled library
/// or executable beside it and renames it into place, cargo removes a build script's executable
/// before linking it anew) rather than writing through it: only those are links in a copy.
/// Cargo rewrites fingerprints, dep-info and a build script's output in place, and a build
/// script writes its `out/` directory, so a copy holds its own copies of them, and a rebuild of
/// a shared crate in a copy (such as after an environment variable its build script watches
/// changed) writes new files there instead of failing on the read-only mount.
fn replaced_whole(relative: &Path) -> bool {
    let parts: Vec<&str> = relative.iter().filter_map(|c| c.to_str()).collect();
    match parts.as_slice() {
        ["target", _, "deps", file] => [".rlib", ".rmeta", ".so"]
            .iter()
            .any(|ext| file.ends_with(ext)),
        ["target", _, "build", _, file] => {
            *file == "build-script-build"
                || (file.starts_with("build_script_build-") && !file.ends_with(".d"))
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_outputs_are_copied_as_links_to_the_mount() {
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

        fs::write(deps.join("serde-00ff.d"), "deps").unwrap();

        let to = dir.path().join("copy");
        let shared = BTreeSet::from([
            "target/debug/deps/libserde-00ff.rlib".to_string(),
            "target/debug/deps/serde-00ff.d".to_string(),
        ]);
        copy_sharing_outputs(&from, &to, &shared).unwrap();
        assert!(
            !to.join("target/debug/deps/serde-00ff.d").is_symlink(),
            "cargo rewrites dep-info in place: a copy holds its own"
        );
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
