//! The leaderboard: one row per agent, track and condition, with the DistDebug aggregation (the
//! mean of attempts within a case, cases weighted equally) and a 95% case-bootstrap interval.

use crate::Table;
use faultline_schema::{Condition, Outcome, ResultRecord, Track};
use faultline_stats::{BootstrapOptions, Observation, ResultSet, bootstrap_mean};
use std::collections::BTreeMap;

/// Seed of the leaderboard's bootstrap, fixed so a table is reproducible.
pub const LEADERBOARD_SEED: u64 = 20_261_129;

/// One row of the leaderboard.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    /// The agent configuration.
    pub agent: String,
    /// The track.
    pub track: Track,
    /// The condition.
    pub condition: Condition,
    /// Distinct cases with a score.
    pub cases: usize,
    /// Trials recorded (infrastructure errors included).
    pub trials: usize,
    /// Trials lost to infrastructure errors (not counted as failures).
    pub infra_errors: usize,
    /// Case-weighted mean score.
    pub score: Option<f64>,
    /// 95% case-bootstrap interval of the score.
    pub ci: Option<(f64, f64)>,
    /// Mean block precision (diagnosis).
    pub precision: Option<f64>,
    /// Mean dollars per trial, when every cost is known.
    pub cost: Option<f64>,
    /// Mean tokens per trial.
    pub tokens: f64,
    /// Mean steps per trial.
    pub steps: f64,
}

fn stats_condition(c: Condition) -> faultline_stats::Condition {
    match c {
        Condition::Symptom => faultline_stats::Condition::Symptom,
        Condition::Context => faultline_stats::Condition::Context,
    }
}

/// Computes the rows from results.
pub fn rows(records: &[ResultRecord]) -> Vec<Row> {
    let mut groups: BTreeMap<(String, Track, Condition), Vec<&ResultRecord>> = BTreeMap::new();
    for r in records {
        groups
            .entry((r.agent.clone(), r.track, r.condition))
            .or_default()
            .push(r);
    }
    groups
        .into_iter()
        .map(|((agent, track, condition), rs)| {
            let scored: Vec<&&ResultRecord> = rs
                .iter()
                .filter(|r| r.outcome != Outcome::InfraError && r.score.is_some())
                .collect();
            let obs: Vec<Observation> = scored
                .iter()
                .map(|r| Observation {
                    config: agent.clone(),
                    case: r.case_id.clone(),
                    condition: stats_condition(condition),
                    attempt: r.attempt,
                    value: r.score.unwrap_or(0.0).clamp(0.0, 1.0),
                })
                .collect();
            let (score, ci, cases) = match ResultSet::new(obs)
                .and_then(|set| set.case_means(&agent, stats_condition(condition)))
            {
                Ok(means) => {
                    let ci = bootstrap_mean(&means, &BootstrapOptions::new(LEADERBOARD_SEED))
                        .ok()
                        .map(|b| (b.ci.lower, b.ci.upper));
                    (Some(means.mean()), ci, means.len())
                }
                Err(_) => (None, None, 0),
            };
            let n = rs.len() as f64;
            let precisions: Vec<f64> = scored.iter().filter_map(|r| r.block_precision).collect();
            let cost = rs
                .iter()
                .map(|r| r.cost_usd)
                .collect::<Option<Vec<f64>>>()
                .map(|c| c.iter().sum::<f64>() / n);
            Row {
                trials: rs.len(),
                infra_errors: rs
                    .iter()
                    .filter(|r| r.outcome == Outcome::InfraError)
                    .count(),
                cases,
                score,
                ci,
                precision: (!precisions.is_empty())
                    .then(|| precisions.iter().sum::<f64>() / precisions.len() as f64),
                cost,
                tokens: rs.iter().map(|r| r.tokens.total() as f64).sum::<f64>() / n,
                steps: rs.iter().map(|r| r.steps as f64).sum::<f64>() / n,
                agent,
                track,
                condition,
            }
        })
        .collect()
}

/// The leaderboard as a table, best score first within each track and condition.
pub fn table(records: &[ResultRecord]) -> Table {
    let mut rows = rows(records);
    rows.sort_by(|a, b| {
        (a.track, a.condition)
            .cmp(&(b.track, b.condition))
            .then(b.score.unwrap_or(-1.0).total_cmp(&a.score.unwrap_or(-1.0)))
            .then(a.agent.cmp(&b.agent))
    });
    let mut t = Table::new([
        "track",
        "condition",
        "agent",
        "score",
        "95% CI",
        "precision",
        "cases",
        "trials",
        "infra",
        "$/trial",
        "tokens",
        "steps",
    ]);
    let pct = |x: f64| format!("{:.1}", 100.0 * x);
    for r in rows {
        t.push([
            r.track.to_string(),
            r.condition.to_string(),
            r.agent,
            r.score.map_or("-".into(), pct),
            r.ci.map_or("-".into(), |(lo, hi)| format!("[{}, {}]", pct(lo), pct(hi))),
            r.precision.map_or("-".into(), pct),
            r.cases.to_string(),
            r.trials.to_string(),
            r.infra_errors.to_string(),
            r.cost.map_or("?".into(), |c| format!("{c:.3}")),
            format!("{:.0}", r.tokens),
            format!("{:.1}", r.steps),
        ]);
    }
    t
}
