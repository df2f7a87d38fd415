//! The source store: pristine copies of each case's buggy and fixed trees, keyed by where they
//! come from, so nothing is downloaded twice.
//!
//! Registry crates are fetched by cargo itself (a scratch manifest that depends on the exact
//! version, then `cargo metadata` to find where cargo unpacked it), so faultline never names a
//! registry host and honours the user's cargo configuration (mirrors, proxies, offline mode).

use crate::cargo::host_cargo;
use anyhow::{Context, Result, bail};
use faultline_schema::case::{GitSource, Pin};
use faultline_schema::{CaseManifest, Source};
use semver::Version;
use sha2::{Digest, Sha256};
use std::fs;
use std::path::{Path, PathBuf};

/// The buggy and fixed trees of one case.
#[derive(Debug, Clone)]
pub struct CaseSources {
    /// Root of the buggy crate (its `Cargo.toml` is here).
    pub buggy: PathBuf,
    /// Root of the fixed crate.
    pub fixed: PathBuf,
}

/// A directory of pristine source trees.
#[derive(Debug, Clone)]
pub struct SourceStore {
    root: PathBuf,
}

impl SourceStore {
    /// A store rooted at `root` (created on first use).
    pub fn new(root: impl Into<PathBuf>) -> Self {
        SourceStore { root: root.into() }
    }

    /// Where the tree for a registry crate version lives.
    pub fn registry_path(&self, name: &str, version: &Version) -> PathBuf {
        self.root.join("registry").join(format!("{name}-{version}"))
    }

    /// Both trees of a case, fetching what is missing.
    pub fn case_sources(&self, case: &CaseManifest, case_dir: &Path) -> Result<CaseSources> {
        match &case.source {
            Source::Registry(r) => Ok(CaseSources {
                buggy: self.registry_crate(&r.crate_name, &r.buggy, &r.pins)?,
                fixed: self.registry_crate(&r.crate_name, &r.fixed, &r.pins)?,
            }),
            Source::Path(p) => {
                let buggy = case_dir.join(&p.buggy);
                let fixed = case_dir.join(&p.fixed);
                for dir in [&buggy, &fixed] {
                    if !dir.join("Cargo.toml").is_file() {
                        bail!("path source {} has no Cargo.toml", dir.display());
                    }
                }
                Ok(CaseSources { buggy, fixed })
            }
            Source::Git(g) => Ok(CaseSources {
                buggy: self.git_tree(g, &g.buggy_commit)?,
                fixed: self.git_tree(g, &g.fixed_commit)?,
            }),
        }
    }

    /// The unpacked source of `name` at exactly `version`, fetched through cargo if missing.
    pub fn registry_crate(&self, name: &str, version: &Version, pins: &[Pin]) -> Result<PathBuf> {
        let dest = self.registry_path(name, version);
        if dest.join("Cargo.toml").is_file() {
            return Ok(dest);
        }
        tracing::info!("fetching {name} {version} through cargo");
        fs::create_dir_all(self.root.join("tmp"))?;
        let scratch = tempfile::Builder::new()
            .prefix("fetch-")
            .tempdir_in(self.root.join("tmp"))?;
        fs::create_dir_all(scratch.path().join("src"))?;
        fs::write(scratch.path().join("src/lib.rs"), "")?;
        fs::write(
            scratch.path().join("Cargo.toml"),
            format!(
                "[package]\nname = \"faultline-fetch\"\nversion = \"0.0.0\"\nedition = \"2021\"\n\n\
                 [dependencies]\n{name} = \"={version}\"\n\n[workspace]\n"
            ),
        )?;
        host_cargo(scratch.path(), &["generate-lockfile"])?;
        for pin in pins {
            // A pin for a crate this dependency graph lacks is not an error here.
            let _ = host_cargo(
                scratch.path(),
                &[
                    "update",
                    "-p",
                    &pin.crate_name,
                    "--precise",
                    &pin.version.to_string(),
                ],
            );
        }
        let metadata = host_cargo(
            scratch.path(),
            &["metadata", "--format-version", "1", "--locked"],
        )?;
        let meta: serde_json::Value =
            serde_json::from_str(&metadata).context("parsing cargo metadata output")?;
        let manifest = meta["packages"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|p| p["name"] == name && p["version"] == version.to_string())
            .and_then(|p| p["manifest_path"].as_str())
            .with_context(|| format!("cargo did not resolve {name} {version}"))?;
        let unpacked = Path::new(manifest)
            .parent()
            .context("manifest path has no parent")?;
        let staging = self
            .root
            .join("tmp")
            .join(format!("{name}-{version}.{}", std::process::id()));
        if staging.exists() {
            fs::remove_dir_all(&staging)?;
        }
        copy_tree(unpacked, &staging, &|rel| rel != Path::new(".cargo-ok"))?;
        fs::create_dir_all(dest.parent().expect("store paths have parents"))?;
        fs::rename(&staging, &dest).or_else(|e| {
            // Another process may have stored the same version meanwhile.
            if dest.join("Cargo.toml").is_file() {
                let _ = fs::remove_dir_all(&staging);
                Ok(())
            } else {
                Err(e)
            }
        })?;
        Ok(dest)
    }

    /// The tree of a git repository at `commit` (and subdirectory), cloned once per URL.
    fn git_tree(&self, g: &GitSource, commit: &str) -> Result<PathBuf> {
        let dest = self.root.join("git-trees").join(commit);
        let crate_dir = match &g.subdir {
            Some(sub) => dest.join(sub),
            None => dest.clone(),
        };
        if crate_dir.join("Cargo.toml").is_file() {
            return Ok(crate_dir);
        }
        let url_key = hex::encode(&Sha256::digest(g.repository.as_bytes())[..8]);
        let clone = self.root.join("git").join(url_key);
        if !clone.join("HEAD").exists() {
            fs::create_dir_all(clone.parent().expect("has parent"))?;
            run_git(
                None,
                &[
                    "clone",
                    "--bare",
                    "--quiet",
                    &g.repository,
                    &path_str(&clone)?,
                ],
            )?;
        }
        if run_git(
            Some(&clone),
            &["cat-file", "-e", &format!("{commit}^{{commit}}")],
        )
        .is_err()
        {
            run_git(Some(&clone), &["fetch", "--quiet", "origin", commit])?;
        }
        let staging = self
            .root
            .join("tmp")
            .join(format!("git-{commit}.{}", std::process::id()));
        fs::create_dir_all(&staging)?;
        let archive = std::process::Command::new("git")
            .args(["archive", "--format=tar", commit])
            .current_dir(&clone)
            .output()
            .context("running git archive")?;
        if !archive.status.success() {
            bail!(
                "git archive {commit} failed: {}",
                String::from_utf8_lossy(&archive.stderr)
            );
        }
        let mut tar = std::process::Command::new("tar")
            .args(["-x", "-C", &path_str(&staging)?])
            .stdin(std::process::Stdio::piped())
            .spawn()
            .context("running tar")?;
        use std::io::Write;
        tar.stdin
            .take()
            .expect("stdin is piped")
            .write_all(&archive.stdout)?;
        if !tar.wait()?.success() {
            bail!("unpacking git archive of {commit} failed");
        }
        fs::create_dir_all(dest.parent().expect("has parent"))?;
        fs::rename(&staging, &dest)?;
        if !crate_dir.join("Cargo.toml").is_file() {
            bail!(
                "commit {commit} has no Cargo.toml at {}",
                g.subdir.as_deref().unwrap_or("the root")
            );
        }
        Ok(crate_dir)
    }
}

fn path_str(p: &Path) -> Result<String> {
    p.to_str()
        .map(str::to_string)
        .with_context(|| format!("path {} is not UTF-8", p.display()))
}

fn run_git(dir: Option<&Path>, args: &[&str]) -> Result<String> {
    let mut cmd = std::process::Command::new("git");
    cmd.args(args);
    if let Some(d) = dir {
        cmd.current_dir(d);
    }
    let out = cmd.output().context("running git")?;
    if !out.status.success() {
        bail!(
            "git {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Copies a directory tree, keeping only the relative paths `keep` accepts. Symlinks are copied
/// as links; permissions are kept.
pub fn copy_tree(from: &Path, to: &Path, keep: &dyn Fn(&Path) -> bool) -> Result<()> {
    fs::create_dir_all(to)?;
    for entry in walkdir::WalkDir::new(from).min_depth(1) {
        let entry = entry?;
        let rel = entry.path().strip_prefix(from).expect("under root");
        if !keep(rel) {
            continue;
        }
        let target = to.join(rel);
        let ft = entry.file_type();
        if ft.is_dir() {
            fs::create_dir_all(&target)?;
        } else if ft.is_symlink() {
            let link = fs::read_link(entry.path())?;
            std::os::unix::fs::symlink(link, &target)?;
        } else {
            fs::copy(entry.path(), &target)
                .with_context(|| format!("copying {}", entry.path().display()))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn git_sources_come_from_the_named_commits() {
        let repo = tempfile::tempdir().unwrap();
        let git = |args: &[&str]| {
            let out = std::process::Command::new("git")
                .args([
                    "-c",
                    "user.name=t",
                    "-c",
                    "user.email=t@t",
                    "-c",
                    "init.defaultBranch=main",
                ])
                .args(args)
                .current_dir(repo.path())
                .output()
                .unwrap();
            assert!(out.status.success(), "{out:?}");
            String::from_utf8(out.stdout).unwrap().trim().to_string()
        };
        git(&["init", "-q"]);
        fs::create_dir_all(repo.path().join("kv/src")).unwrap();
        fs::write(
            repo.path().join("kv/Cargo.toml"),
            "[package]\nname = \"kv\"\n",
        )
        .unwrap();
        fs::write(repo.path().join("kv/src/lib.rs"), "// buggy\n").unwrap();
        git(&["add", "."]);
        git(&["commit", "-qm", "buggy"]);
        let buggy = git(&["rev-parse", "HEAD"]);
        fs::write(repo.path().join("kv/src/lib.rs"), "// fixed\n").unwrap();
        git(&["commit", "-qam", "fixed"]);
        let fixed = git(&["rev-parse", "HEAD"]);

        let store_dir = tempfile::tempdir().unwrap();
        let store = SourceStore::new(store_dir.path());
        let source = GitSource {
            crate_name: "kv".into(),
            repository: format!("file://{}", repo.path().display()),
            buggy_commit: buggy.clone(),
            fixed_commit: fixed,
            subdir: Some("kv".into()),
            pins: vec![],
        };
        let tree = store.git_tree(&source, &buggy).unwrap();
        assert_eq!(
            fs::read_to_string(tree.join("src/lib.rs")).unwrap(),
            "// buggy\n"
        );
        let fixed_tree = store.git_tree(&source, &source.fixed_commit).unwrap();
        assert_eq!(
            fs::read_to_string(fixed_tree.join("src/lib.rs")).unwrap(),
            "// fixed\n"
        );
        assert!(!tree.join(".git").exists());
    }
}
