//! Merging the directories of a sharded run into one.

use anyhow::{Context, Result, bail};
use faultline_schema::RunDir;
use faultline_schema::rundir::LOCK_FILE;
use std::collections::BTreeMap;
use std::path::Path;

/// Merges shard directories into `out`: their locks must agree on everything but the shard,
/// every trial must come from exactly one shard, and the shards must cover the same run.
pub fn merge(shards: &[&Path], out: &Path) -> Result<usize> {
    if shards.is_empty() {
        bail!("name the shard directories to merge");
    }
    let mut lock = None;
    let mut records = BTreeMap::new();
    for dir in shards {
        let shard = RunDir::new(*dir);
        let mut l = shard.read_lock()?.with_context(|| {
            format!(
                "{} has no {LOCK_FILE}; it is not a run directory",
                dir.display()
            )
        })?;
        l.shard = None;
        match &lock {
            None => lock = Some(l),
            Some(first) if *first != l => bail!(
                "{} belongs to a differently configured run than {}",
                dir.display(),
                shards[0].display()
            ),
            Some(_) => {}
        }
        for r in shard.read_results()? {
            if let Some(prev) = records.insert(r.trial_id.clone(), (r.clone(), dir.to_path_buf()))
                && prev.1 != *dir
            {
                bail!(
                    "trial {} appears in both {} and {}",
                    r.trial_id,
                    prev.1.display(),
                    dir.display()
                );
            }
        }
    }
    let merged_dir = RunDir::new(out);
    let _writer = merged_dir.hold_writer()?;
    let lock = lock.expect("at least one shard");
    merged_dir.write_lock(&lock)?;
    for (id, (_, dir)) in &records {
        let from = RunDir::new(dir).trial(id).path().to_path_buf();
        let to = merged_dir.trial(id).path().to_path_buf();
        if from.is_dir() && from != to {
            if to.exists() {
                std::fs::remove_dir_all(&to)?;
            }
            faultline_corpus::workspace::copy_preserving(&from, &to)
                .with_context(|| format!("copying trial {id}"))?;
        }
    }
    let merged: Vec<_> = records.into_values().map(|(r, _)| r).collect();
    merged_dir.results()?.rewrite(&merged)?;
    Ok(merged.len())
}
