//! What each context provider gave a run and what it cost: bundles shown and refused, and
//! dollars per solved case with and without the provider (seed 000's economics: a provider is
//! worth its price only if it lowers the cost of a solved case).

use faultline_schema::report::{CostPerSolved, ProviderSummary, Refusal};
use faultline_schema::{BundleRecord, BundleStatus, Condition, Outcome, ResultRecord, Track};
use std::collections::BTreeMap;

/// One summary per condition with a bundle, in condition order.
pub fn summarize(records: &[ResultRecord], bundles: &[BundleRecord]) -> Vec<ProviderSummary> {
    let mut by_condition: BTreeMap<&Condition, Vec<&BundleRecord>> = BTreeMap::new();
    for b in bundles {
        by_condition.entry(&b.condition).or_default().push(b);
    }
    by_condition
        .into_iter()
        .map(|(condition, bundles)| {
            let ready: Vec<&&BundleRecord> = bundles
                .iter()
                .filter(|b| b.status == BundleStatus::Ready)
                .collect();
            let provider_cost: BTreeMap<&str, f64> = bundles
                .iter()
                .filter_map(|b| Some((b.case_id.as_str(), b.cost_usd?)))
                .collect();
            let cost_usd = (!provider_cost.is_empty()).then(|| provider_cost.values().sum());
            ProviderSummary {
                condition: condition.clone(),
                provider_version: bundles[0].provider_version.clone(),
                ready: ready.len(),
                refused: bundles
                    .iter()
                    .filter(|b| b.status == BundleStatus::Refused)
                    .map(|b| Refusal {
                        case: b.case_id.clone(),
                        reason: b.refusal.clone().unwrap_or_default(),
                    })
                    .collect(),
                mean_tokens: if ready.is_empty() {
                    0.0
                } else {
                    ready.iter().map(|b| b.tokens as f64).sum::<f64>() / ready.len() as f64
                },
                cost_usd,
                cost_per_solved: cost_per_solved(records, condition, &provider_cost),
            }
        })
        .collect()
}

/// Dollars per passing trial of every agent and pass-or-fail track that ran `condition`: its
/// trials' cost plus, once per case it ran, the bundle's cost; against the same agent's
/// symptom-alone trials.
fn cost_per_solved(
    records: &[ResultRecord],
    condition: &Condition,
    provider_cost: &BTreeMap<&str, f64>,
) -> Vec<CostPerSolved> {
    let per_solved = |agent: &str, track: Track, c: &Condition, with_provider: bool| {
        let trials: Vec<&ResultRecord> = records
            .iter()
            .filter(|r| r.agent == agent && r.track == track && &r.condition == c)
            .filter(|r| r.outcome != Outcome::InfraError)
            .collect();
        let mut dollars = trials.iter().map(|r| r.cost_usd).sum::<Option<f64>>()?;
        if with_provider {
            let mut cases: Vec<&str> = trials.iter().map(|r| r.case_id.as_str()).collect();
            cases.sort_unstable();
            cases.dedup();
            dollars += cases
                .iter()
                .filter_map(|c| provider_cost.get(c))
                .sum::<f64>();
        }
        let solved = trials.iter().filter(|r| r.outcome.is_success()).count();
        (solved > 0).then(|| dollars / solved as f64)
    };
    let mut pairs: Vec<(&str, Track)> = records
        .iter()
        .filter(|r| &r.condition == condition && r.track != Track::Diagnose)
        .map(|r| (r.agent.as_str(), r.track))
        .collect();
    pairs.sort();
    pairs.dedup();
    pairs
        .into_iter()
        .map(|(agent, track)| CostPerSolved {
            agent: agent.to_string(),
            track,
            with_provider: per_solved(agent, track, condition, true),
            symptom_only: per_solved(agent, track, &Condition::symptom(), false),
        })
        .collect()
}

/// One row per provider: what it gave the run's cases.
pub fn table(report: &faultline_schema::Report) -> crate::Table {
    let mut t = crate::Table::new([
        "condition",
        "provider",
        "bundles shown",
        "refused",
        "mean tokens",
        "provider cost",
    ]);
    for p in &report.providers {
        t.push([
            p.condition.to_string(),
            p.provider_version.clone(),
            p.ready.to_string(),
            p.refused.len().to_string(),
            format!("{:.0}", p.mean_tokens),
            p.cost_usd.map_or("-".into(), |c| format!("${c:.2}")),
        ]);
    }
    t
}

/// Every refused bundle with its reason.
pub fn refusals(report: &faultline_schema::Report) -> crate::Table {
    let mut t = crate::Table::new(["condition", "case", "why it was refused"]);
    for p in &report.providers {
        for r in &p.refused {
            t.push([p.condition.to_string(), r.case.clone(), r.reason.clone()]);
        }
    }
    t
}

/// Dollars per solved case with each provider (its cost included) and with the symptom alone.
pub fn economics(report: &faultline_schema::Report) -> crate::Table {
    let mut t = crate::Table::new([
        "condition",
        "agent",
        "track",
        "$ per solved, with the bundle",
        "$ per solved, symptom alone",
    ]);
    let dollars = |d: Option<f64>| d.map_or("-".into(), |d| format!("${d:.3}"));
    for p in &report.providers {
        for c in &p.cost_per_solved {
            t.push([
                p.condition.to_string(),
                c.agent.clone(),
                c.track.to_string(),
                dollars(c.with_provider),
                dollars(c.symptom_only),
            ]);
        }
    }
    t
}
