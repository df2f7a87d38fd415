//! Merging the directories of a sharded run into one.

use crate::results::{ResultsLog, read_records};
use anyhow::{Context, Result, bail};
use faultline_schema::RunLock;
use std::collections::BTreeMap;
use std::path::Path;

/// Merges shard directories into `out`: their locks must agree on everything but the shard,
/// every trial must come from exactly one shard, and the shards must cover the same run.
pub fn merge(shards: &[&Path], out: &Path) -> Result<usize> {
    if shards.is_empty() {
        bail!("name the shard directories to merge");
    }
    let mut lock: Option<RunLock> = None;
    let mut records = BTreeMap::new();
    for dir in shards {
        let mut l: RunLock = faultline_schema::io::read_json(&dir.join("lock.json"), "run lock")?;
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
        for r in read_records(&dir.join("results.jsonl"))? {
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
    std::fs::create_dir_all(out)?;
    let lock = lock.expect("at least one shard");
    faultline_schema::io::write_json_atomic(&out.join("lock.json"), &lock)?;
    for (id, (_, dir)) in &records {
        let from = dir.join("trials").join(id);
        let to = out.join("trials").join(id);
        if from.is_dir() && from != to {
            if to.exists() {
                std::fs::remove_dir_all(&to)?;
            }
            faultline_corpus::workspace::copy_preserving(&from, &to)
                .with_context(|| format!("copying trial {id}"))?;
        }
    }
    let merged: Vec<_> = records.into_values().map(|(r, _)| r).collect();
    ResultsLog::open(out)?.rewrite(&merged)?;
    Ok(merged.len())
}
