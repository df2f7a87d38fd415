//! A run's lock: the configuration a run directory was made with, written on its first
//! invocation and compared on every later one, so trials before and after a change are never
//! mixed silently.

use crate::agents::{AgentSpec, agents_on_host};
use crate::build::BuildTask;
use crate::config::RunConfig;
use crate::records::locked_cases;
use anyhow::{Result, bail};
use faultline_schema::run::RUN_SCHEMA_VERSION;
use faultline_schema::{RunDir, RunLock};
use std::collections::BTreeMap;

pub(crate) fn lock_of(cfg: &RunConfig, templates: &BTreeMap<String, String>) -> Result<RunLock> {
    Ok(RunLock {
        schema_version: RUN_SCHEMA_VERSION,
        faultline_version: env!("CARGO_PKG_VERSION").into(),
        agents: cfg
            .agents
            .iter()
            .map(|a| a.info(templates.get(&a.name()).cloned()))
            .collect(),
        limits: cfg.limits.clone(),
        seed: cfg.seed,
        attempts: cfg.attempts,
        baseline_attempts: cfg.baseline_attempts,
        tracks: cfg.tracks.clone(),
        conditions: cfg.conditions.clone(),
        providers: cfg
            .conditions
            .iter()
            .filter(|c| c.has_bundle())
            .map(|c| Ok((c.to_string(), cfg.providers.version(c)?)))
            .collect::<Result<_>>()?,
        cases: locked_cases(&cfg.cases)?,
        build_tasks: cfg
            .build_tasks
            .iter()
            .map(BuildTask::locked)
            .collect::<Result<_>>()?,
        build_schedules: cfg.build_schedules,
        pricing: Some(cfg.pricing.table_version.clone()),
        grading: cfg.grading,
        shard: cfg.shard.map(|s| s.to_string()),
        protections: {
            let mut records = faultline_grade::protections::in_force();
            if cfg.agents.iter().any(AgentSpec::on_host) {
                records.push(agents_on_host());
            }
            records
        },
    })
}

/// Writes the lock, or checks an existing one; a difference is refused unless `force`.
pub(crate) fn check_lock(run: &RunDir, lock: &RunLock, force: bool) -> Result<()> {
    let path = run.lock_path();
    // A lock that cannot be read is replaced, as one that is missing.
    if let Ok(Some(existing)) = run.read_lock() {
        if &existing != lock {
            let a = serde_json::to_value(&existing)?;
            let b = serde_json::to_value(lock)?;
            let changed: Vec<String> = b
                .as_object()
                .into_iter()
                .flatten()
                .filter(|(k, v)| a.get(k.as_str()) != Some(*v))
                .map(|(k, _)| k.clone())
                .collect();
            let changed_cases: Vec<&str> = lock
                .cases
                .iter()
                .filter(|c| {
                    existing
                        .cases
                        .iter()
                        .any(|e| e.id == c.id && e.sha256 != c.sha256)
                })
                .map(|c| c.id.as_str())
                .collect();
            let cases_note = if changed_cases.is_empty() {
                String::new()
            } else {
                format!(
                    "; the files of {} hash differently than when the run started (a changed \
                     symptom, context bundle, oracle, labels or case.toml, or a run made before \
                     the hash covered them all), so trials before and after would not compare",
                    changed_cases.join(", ")
                )
            };
            if !force {
                bail!(
                    "{} was made with a different configuration (changed: {}){cases_note}; \
                     use another --out directory, or --force to continue with the new one",
                    path.display(),
                    changed.join(", ")
                );
            }
            tracing::warn!(
                "continuing {} under a changed configuration: {}{cases_note}",
                run.root().display(),
                changed.join(", ")
            );
        } else {
            return Ok(());
        }
    }
    run.write_lock(lock)?;
    Ok(())
}
