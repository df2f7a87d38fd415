//! Sharing a run: `faultline pack` writes its records, lock, tasks, trajectories, submissions and
//! grades as one `.tar.gz` with a manifest of hashes (`pack.json`); unpacking checks every file
//! against it, and `faultline report` on an unpacked archive grades the submissions again.

use crate::records::read_run;
use anyhow::{Context, Result, bail};
use faultline_schema::report::{
    PACK_SCHEMA_VERSION, PackManifest, PackedFile, RegradeCheck, RegradeDifference,
};
use faultline_schema::rundir::{
    ARCHIVED_TRIAL_FILES, LOCK_FILE, PACK_MANIFEST_FILE, REGRADE_FILE, RESULTS_FILE, TRIALS_DIR,
};
use faultline_schema::{ResultRecord, RunDir};
use flate2::Compression;
use flate2::read::GzDecoder;
use flate2::write::GzEncoder;
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::io::{BufWriter, Read};
use std::path::{Component, Path, PathBuf};
use std::time::SystemTime;

/// Largest file accepted when unpacking (a trajectory is far smaller).
const MAX_FILE_BYTES: u64 = 1 << 30;

fn sha256(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// Writes `run_dir` as a gzipped tar at `out` (atomically) and returns its manifest.
pub fn pack(run_dir: &Path, out: &Path) -> Result<PackManifest> {
    let run = RunDir::new(run_dir);
    let (lock, records) = read_run(&run)?;
    if lock.is_none() {
        bail!(
            "{} has no {LOCK_FILE}; only a run directory made by faultline can be packed",
            run_dir.display()
        );
    }
    let mut paths = vec![LOCK_FILE.to_string(), RESULTS_FILE.to_string()];
    for r in &records {
        for f in ARCHIVED_TRIAL_FILES {
            if run.trial(&r.trial_id).path().join(f).is_file() {
                paths.push(format!("{TRIALS_DIR}/{}/{f}", r.trial_id));
            }
        }
    }
    let partial = out.with_extension("partial");
    let file = File::create(&partial).with_context(|| format!("creating {}", partial.display()))?;
    let mut tar = tar::Builder::new(GzEncoder::new(BufWriter::new(file), Compression::default()));
    let mut files = Vec::new();
    let append = |tar: &mut tar::Builder<_>, path: &str, bytes: &[u8]| -> Result<()> {
        let mut header = tar::Header::new_gnu();
        header.set_size(bytes.len() as u64);
        header.set_mode(0o644);
        header.set_mtime(0);
        header.set_entry_type(tar::EntryType::Regular);
        tar.append_data(&mut header, path, bytes)
            .with_context(|| format!("adding {path} to the archive"))
    };
    for path in &paths {
        let bytes = std::fs::read(run_dir.join(path))
            .with_context(|| format!("reading {}", run_dir.join(path).display()))?;
        append(&mut tar, path, &bytes)?;
        files.push(PackedFile {
            path: path.clone(),
            sha256: sha256(&bytes),
            bytes: bytes.len() as u64,
        });
    }
    let manifest = PackManifest {
        schema_version: PACK_SCHEMA_VERSION,
        faultline_version: env!("CARGO_PKG_VERSION").into(),
        packed_at: humantime::format_rfc3339_seconds(SystemTime::now()).to_string(),
        files,
    };
    let mut text = serde_json::to_vec_pretty(&manifest)?;
    text.push(b'\n');
    append(&mut tar, PACK_MANIFEST_FILE, &text)?;
    let writer = tar.into_inner()?.finish()?;
    writer
        .into_inner()
        .map_err(|e| e.into_error())?
        .sync_all()?;
    std::fs::rename(&partial, out).with_context(|| format!("writing {}", out.display()))?;
    Ok(manifest)
}

/// A path inside an archive as a relative path of plain components, or `None`.
fn safe_path(path: &Path) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::Normal(part) => out.push(part),
            Component::CurDir => {}
            _ => return None,
        }
    }
    (!out.as_os_str().is_empty()).then_some(out)
}

/// Unpacks an archive made by [`pack`] into `into` (which must not exist) and checks every file
/// against the manifest.
pub fn unpack(archive: &Path, into: &Path) -> Result<PackManifest> {
    if into.exists() {
        bail!(
            "{} already exists; choose another directory",
            into.display()
        );
    }
    let file = File::open(archive).with_context(|| format!("opening {}", archive.display()))?;
    let staging = into.with_extension("partial");
    if staging.exists() {
        std::fs::remove_dir_all(&staging)?;
    }
    std::fs::create_dir_all(&staging)?;
    let result = (|| -> Result<PackManifest> {
        let mut tar = tar::Archive::new(GzDecoder::new(file));
        let bad = |why: String| {
            anyhow::anyhow!("{} is not a faultline archive: {why}", archive.display())
        };
        for entry in tar.entries().map_err(|e| bad(e.to_string()))? {
            let mut entry = entry.map_err(|e| bad(e.to_string()))?;
            let raw = entry.path().map_err(|e| bad(e.to_string()))?.into_owned();
            let kind = entry.header().entry_type();
            if kind.is_dir() {
                continue;
            }
            if !kind.is_file() {
                bail!(bad(format!("{} is not a regular file", raw.display())));
            }
            let rel = safe_path(&raw)
                .ok_or_else(|| bad(format!("{} leaves the archive's directory", raw.display())))?;
            if entry.size() > MAX_FILE_BYTES {
                bail!(bad(format!("{} is larger than 1 GiB", raw.display())));
            }
            let dest = staging.join(&rel);
            if let Some(parent) = dest.parent() {
                std::fs::create_dir_all(parent)?;
            }
            let mut bytes = Vec::new();
            entry
                .read_to_end(&mut bytes)
                .map_err(|e| bad(e.to_string()))?;
            std::fs::write(&dest, &bytes)?;
        }
        verify(&staging)
    })();
    match result {
        Ok(manifest) => {
            std::fs::rename(&staging, into)
                .with_context(|| format!("moving the unpacked run to {}", into.display()))?;
            Ok(manifest)
        }
        Err(e) => {
            let _ = std::fs::remove_dir_all(&staging);
            Err(e)
        }
    }
}

/// Checks an unpacked run against its manifest: every listed file present with its hash, and
/// nothing else but the files `faultline report` adds.
pub fn verify(run_dir: &Path) -> Result<PackManifest> {
    let path = RunDir::new(run_dir).pack_manifest_path();
    let manifest: PackManifest = faultline_schema::io::read_json(&path, "pack manifest")?;
    if manifest.schema_version != PACK_SCHEMA_VERSION {
        bail!(
            "{} has schema_version {}; this faultline reads {PACK_SCHEMA_VERSION}",
            path.display(),
            manifest.schema_version
        );
    }
    let mut listed = BTreeSet::new();
    for f in &manifest.files {
        let rel = safe_path(Path::new(&f.path))
            .with_context(|| format!("{} lists an unsafe path {:?}", path.display(), f.path))?;
        let bytes = std::fs::read(run_dir.join(&rel))
            .with_context(|| format!("{} is listed in {PACK_MANIFEST_FILE} but missing", f.path))?;
        if sha256(&bytes) != f.sha256 || bytes.len() as u64 != f.bytes {
            bail!(
                "{} does not match {PACK_MANIFEST_FILE} (changed or corrupted since it was packed)",
                f.path
            );
        }
        listed.insert(rel);
    }
    for entry in walk(run_dir)? {
        let rel = entry.strip_prefix(run_dir).unwrap_or(&entry).to_path_buf();
        let added = [PACK_MANIFEST_FILE, REGRADE_FILE]
            .iter()
            .any(|n| rel == Path::new(n))
            || rel.starts_with("report");
        if !added && !listed.contains(&rel) {
            bail!("{} is not listed in {PACK_MANIFEST_FILE}", rel.display());
        }
    }
    Ok(manifest)
}

fn walk(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).with_context(|| format!("reading {}", d.display()))? {
            let path = entry?.path();
            if path.is_dir() {
                stack.push(path);
            } else {
                out.push(path);
            }
        }
    }
    Ok(out)
}

/// Compares the archived records with the re-graded ones.
pub fn compare(archived: &[ResultRecord], regraded: &[ResultRecord]) -> RegradeCheck {
    let now: BTreeMap<&str, &ResultRecord> =
        regraded.iter().map(|r| (r.trial_id.as_str(), r)).collect();
    let mut differences = Vec::new();
    for a in archived {
        let Some(r) = now.get(a.trial_id.as_str()) else {
            continue;
        };
        let same_score = match (a.score, r.score) {
            (Some(x), Some(y)) => (x - y).abs() < 1e-12,
            (x, y) => x == y,
        };
        if a.outcome != r.outcome || !same_score {
            differences.push(RegradeDifference {
                trial_id: a.trial_id.clone(),
                archived_outcome: a.outcome,
                archived_score: a.score,
                outcome: r.outcome,
                score: r.score,
            });
        }
    }
    RegradeCheck {
        trials: archived.len(),
        identical: archived.len() - differences.len(),
        differences,
    }
}

/// Grades an unpacked archive's submissions again (without the grade cache, with the grading
/// settings of its lock), records how the new grades compare in `regrade.json`, and returns that.
pub async fn regrade_unpacked(
    run_dir: &Path,
    corpus: &faultline_corpus::Corpus,
    data: &faultline_corpus::DataDir,
    toolchain: &faultline_sandbox::Toolchain,
) -> Result<RegradeCheck> {
    verify(run_dir)?;
    let run = RunDir::new(run_dir);
    let (lock, archived) = read_run(&run)?;
    let settings = lock.map(|l| l.grading).unwrap_or_default();
    crate::regrade::regrade(run_dir, corpus, data, toolchain, &settings, false).await?;
    let (_, now) = read_run(&run)?;
    let check = compare(&archived, &now);
    run.write_regrade(&check)?;
    Ok(check)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unsafe_paths_are_refused() {
        assert_eq!(
            safe_path(Path::new("trials/a/grade.json")),
            Some(PathBuf::from("trials/a/grade.json"))
        );
        assert_eq!(safe_path(Path::new("../x")), None);
        assert_eq!(safe_path(Path::new("/etc/passwd")), None);
        assert_eq!(safe_path(Path::new("a/../../x")), None);
        assert_eq!(safe_path(Path::new(".")), None);
    }
}
