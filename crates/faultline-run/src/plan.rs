//! Which trials a run holds: cases x agents x tracks x conditions x attempts, in a fixed order,
//! optionally cut into shards for a cluster.

use faultline_agent::Baseline;
use faultline_schema::{Condition, OracleKind, Track};
use sha2::{Digest, Sha256};
use std::fmt;

/// One shard of a run, `index` of `count` (0-based).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    /// This shard's index, from 0.
    pub index: u32,
    /// The number of shards.
    pub count: u32,
}

impl fmt::Display for Shard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

impl std::str::FromStr for Shard {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (i, n) = s
            .split_once('/')
            .ok_or_else(|| format!("shard `{s}` must look like INDEX/COUNT, e.g. 0/3"))?;
        let index: u32 = i
            .trim()
            .parse()
            .map_err(|_| format!("bad shard index `{i}`"))?;
        let count: u32 = n
            .trim()
            .parse()
            .map_err(|_| format!("bad shard count `{n}`"))?;
        if count == 0 || index >= count {
            return Err(format!(
                "shard {index}/{count}: the index must be below the count"
            ));
        }
        Ok(Shard { index, count })
    }
}

impl Shard {
    /// The shard from a cluster scheduler's environment: a Kubernetes Indexed Job
    /// (`JOB_COMPLETION_INDEX`, with the count in `FAULTLINE_SHARD_COUNT`) or a Slurm array
    /// (`SLURM_ARRAY_TASK_ID` and `SLURM_ARRAY_TASK_COUNT`, offset by `SLURM_ARRAY_TASK_MIN`).
    pub fn from_env(get: impl Fn(&str) -> Option<String>) -> Result<Option<Shard>, String> {
        let num = |k: &str| -> Result<Option<u32>, String> {
            get(k)
                .map(|v| {
                    v.trim()
                        .parse::<u32>()
                        .map_err(|_| format!("{k}={v} is not a number"))
                })
                .transpose()
        };
        if let Some(index) = num("JOB_COMPLETION_INDEX")? {
            let count = num("FAULTLINE_SHARD_COUNT")?.ok_or(
                "JOB_COMPLETION_INDEX is set; also set FAULTLINE_SHARD_COUNT to the Job's completions",
            )?;
            return format!("{index}/{count}").parse().map(Some);
        }
        if let Some(id) = num("SLURM_ARRAY_TASK_ID")? {
            let count = num("SLURM_ARRAY_TASK_COUNT")?
                .ok_or("SLURM_ARRAY_TASK_ID is set without SLURM_ARRAY_TASK_COUNT")?;
            let min = num("SLURM_ARRAY_TASK_MIN")?.unwrap_or(0);
            return format!("{}/{count}", id.saturating_sub(min))
                .parse()
                .map(Some);
        }
        Ok(None)
    }
}

/// One planned trial.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedTrial {
    /// Index into the run's agents.
    pub agent: usize,
    /// Index into the run's cases.
    pub case: usize,
    /// The track.
    pub track: Track,
    /// The condition.
    pub condition: Condition,
    /// Attempt, from 1.
    pub attempt: u32,
    /// `<agent>/<case>/<track>/<condition>/<attempt>`.
    pub trial_id: String,
    /// The trial's seed, derived from the run's seed and the trial id.
    pub seed: u64,
}

/// What the planner needs to know about an agent.
#[derive(Debug, Clone)]
pub struct AgentPlan {
    /// Its name (no `/`).
    pub name: String,
    /// Set for baselines (which skip tracks they cannot do, and run fewer attempts).
    pub baseline: Option<Baseline>,
}

/// Whether `agent` has something to do on `track` for a case with this oracle kind.
pub fn applies(agent: &AgentPlan, track: Track, oracle: OracleKind) -> bool {
    match agent.baseline {
        None => true,
        // An in-crate oracle reaches private items, so it is no integration test to submit.
        Some(Baseline::Gold) if track == Track::Reproduce => oracle == OracleKind::External,
        Some(b) => b.supports(track),
    }
}

/// The seed of one trial.
pub fn trial_seed(run_seed: u64, trial_id: &str) -> u64 {
    let h = Sha256::digest(format!("{run_seed}:{trial_id}").as_bytes());
    u64::from_le_bytes(h[..8].try_into().expect("a SHA-256 has 32 bytes"))
}

/// Every trial, sorted by id, then the shard's share (every `count`-th trial from `index`). A
/// track runs only the conditions of its kind ([`Condition::applies_to`]).
#[allow(clippy::too_many_arguments)]
pub fn plan(
    agents: &[AgentPlan],
    cases: &[(String, OracleKind)],
    tracks: &[Track],
    conditions: &[Condition],
    attempts: u32,
    baseline_attempts: u32,
    run_seed: u64,
    shard: Option<Shard>,
) -> Vec<PlannedTrial> {
    let mut out = Vec::new();
    for (ai, agent) in agents.iter().enumerate() {
        for (ci, (case, oracle)) in cases.iter().enumerate() {
            for &track in tracks {
                if !applies(agent, track, *oracle) {
                    continue;
                }
                for condition in conditions.iter().filter(|c| c.applies_to(track)) {
                    let n = if agent.baseline.is_some() {
                        baseline_attempts
                    } else {
                        attempts
                    };
                    for attempt in 1..=n {
                        let trial_id =
                            format!("{}/{case}/{track}/{condition}/{attempt}", agent.name);
                        out.push(PlannedTrial {
                            agent: ai,
                            case: ci,
                            track,
                            condition: condition.clone(),
                            attempt,
                            seed: trial_seed(run_seed, &trial_id),
                            trial_id,
                        });
                    }
                }
            }
        }
    }
    out.sort_by(|a, b| a.trial_id.cmp(&b.trial_id));
    match shard {
        Some(s) => out
            .into_iter()
            .enumerate()
            .filter(|(i, _)| *i as u32 % s.count == s.index)
            .map(|(_, t)| t)
            .collect(),
        None => out,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use faultline_schema::Aid;

    fn agents() -> Vec<AgentPlan> {
        vec![
            AgentPlan {
                name: "gold".into(),
                baseline: Some(Baseline::Gold),
            },
            AgentPlan {
                name: "bm25".into(),
                baseline: Some(Baseline::Bm25),
            },
            AgentPlan {
                name: "model".into(),
                baseline: None,
            },
        ]
    }

    #[test]
    fn baselines_skip_tracks_they_cannot_do() {
        let cases = vec![
            ("a".to_string(), OracleKind::External),
            ("b".to_string(), OracleKind::InCrate),
        ];
        let p = plan(
            &agents(),
            &cases,
            &Track::ALL,
            &Condition::classic(),
            3,
            1,
            7,
            None,
        );
        let count = |prefix: &str| p.iter().filter(|t| t.trial_id.starts_with(prefix)).count();
        assert_eq!(count("gold/a/"), 6);
        assert_eq!(count("gold/b/"), 4, "no reproducer from an in-crate oracle");
        assert_eq!(count("bm25/"), 4);
        assert_eq!(count("model/"), 2 * 3 * 2 * 3);
        assert!(p.windows(2).all(|w| w[0].trial_id < w[1].trial_id));
    }

    #[test]
    fn the_build_track_runs_its_aids_and_only_the_null_and_gold_baselines() {
        let tasks = vec![("raft-kv".to_string(), OracleKind::External)];
        let mut conditions = Condition::classic();
        conditions.extend([Aid::Task.condition(), Aid::Simulator.condition()]);
        let p = plan(
            &agents(),
            &tasks,
            &[Track::Build],
            &conditions,
            2,
            1,
            7,
            None,
        );
        let ids: Vec<&str> = p.iter().map(|t| t.trial_id.as_str()).collect();
        assert!(ids.contains(&"gold/raft-kv/build/simulator/1"), "{ids:?}");
        assert!(ids.iter().all(|i| !i.starts_with("bm25/")), "{ids:?}");
        assert!(p.iter().all(|t| t.condition.aid().is_some()), "{ids:?}");
        assert_eq!(
            p.len(),
            2 + 2 * 2,
            "gold under 2 aids, the model 2 aids x 2 attempts"
        );
    }

    #[test]
    fn shards_partition_the_plan() {
        let cases = vec![
            ("a".to_string(), OracleKind::External),
            ("b".to_string(), OracleKind::External),
        ];
        let all = plan(
            &agents(),
            &cases,
            &Track::ALL,
            &Condition::classic(),
            2,
            1,
            7,
            None,
        );
        let mut union: Vec<String> = (0..3)
            .flat_map(|i| {
                plan(
                    &agents(),
                    &cases,
                    &Track::ALL,
                    &Condition::classic(),
                    2,
                    1,
                    7,
                    Some(Shard { index: i, count: 3 }),
                )
            })
            .map(|t| t.trial_id)
            .collect();
        union.sort();
        assert_eq!(
            union,
            all.iter().map(|t| t.trial_id.clone()).collect::<Vec<_>>()
        );
    }

    #[test]
    fn shards_come_from_scheduler_environments() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| {
                pairs
                    .iter()
                    .find(|(a, _)| *a == k)
                    .map(|(_, v)| v.to_string())
            }
        };
        assert_eq!(Shard::from_env(env(&[])).unwrap(), None);
        assert_eq!(
            Shard::from_env(env(&[
                ("JOB_COMPLETION_INDEX", "2"),
                ("FAULTLINE_SHARD_COUNT", "4")
            ]))
            .unwrap(),
            Some(Shard { index: 2, count: 4 })
        );
        assert!(Shard::from_env(env(&[("JOB_COMPLETION_INDEX", "2")])).is_err());
        assert_eq!(
            Shard::from_env(env(&[
                ("SLURM_ARRAY_TASK_ID", "5"),
                ("SLURM_ARRAY_TASK_COUNT", "3"),
                ("SLURM_ARRAY_TASK_MIN", "3")
            ]))
            .unwrap(),
            Some(Shard { index: 2, count: 3 })
        );
        assert!("3/3".parse::<Shard>().is_err());
        assert!("x".parse::<Shard>().is_err());
    }

    #[test]
    fn seeds_are_stable_and_distinct() {
        assert_eq!(trial_seed(1, "a"), trial_seed(1, "a"));
        assert_ne!(trial_seed(1, "a"), trial_seed(2, "a"));
        assert_ne!(trial_seed(1, "a"), trial_seed(1, "b"));
    }
}
