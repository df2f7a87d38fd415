//! The leaderboard: one row per agent, track and condition, with the DistDebug aggregation (the
//! mean of attempts within a case, cases weighted equally) and a 95% case-bootstrap interval. A
//! diagnosis row ranks by its budgeted coverage and shows DistDebug's block coverage beside it,
//! so a reader sees both what the agent localized and what it merely named.

use crate::Table;
use faultline_schema::Track;
use faultline_schema::diagnosis::DIAGNOSIS_LINE_BUDGET;
use faultline_schema::report::{GroupStats, Report};
use std::collections::BTreeMap;

/// What the scores are, the opening of every rendering: a diagnosis score is no longer
/// DistDebug's block coverage, so each table says which number ranks and where the other is.
pub fn scores_note() -> String {
    format!(
        "Scores in percent: repair and reproduction are pass rates, diagnosis is block coverage \
         within the first {DIAGNOSIS_LINE_BUDGET} lines a diagnosis names (DistDebug's block \
         coverage, which has no such budget, is the \"block cov.\" column)."
    )
}

/// A fraction as a percentage with one decimal.
pub fn pct(x: f64) -> String {
    format!("{:.1}", 100.0 * x)
}

/// A difference of fractions in signed percentage points, one decimal.
pub fn signed_pct(x: f64) -> String {
    format!("{:+.1}", 100.0 * x)
}

/// The groups in leaderboard order: by track and condition, then agents by their mean score
/// over the track's conditions, best first, so that every condition of a track lists the agents
/// in the same order and its tables line up side by side.
pub fn ordered(report: &Report) -> Vec<&GroupStats> {
    let score = |g: &GroupStats| g.score.as_ref().map_or(-1.0, |s| s.value);
    let mut rank: BTreeMap<(&str, Track), (f64, usize)> = BTreeMap::new();
    for g in &report.groups {
        let e = rank.entry((g.agent.as_str(), g.track)).or_default();
        e.0 += score(g);
        e.1 += 1;
    }
    let mean = |g: &GroupStats| {
        let (sum, n) = rank[&(g.agent.as_str(), g.track)];
        sum / n as f64
    };
    let mut rows: Vec<&GroupStats> = report.groups.iter().collect();
    rows.sort_by(|a, b| {
        (a.track, &a.condition)
            .cmp(&(b.track, &b.condition))
            .then(mean(b).total_cmp(&mean(a)))
            .then(a.agent.cmp(&b.agent))
    });
    rows
}

/// `[lo, hi]` in percent, or `-` without an interval.
pub fn interval(lower: Option<f64>, upper: Option<f64>) -> String {
    match (lower, upper) {
        (Some(lo), Some(hi)) => format!("[{}, {}]", pct(lo), pct(hi)),
        _ => "-".into(),
    }
}

/// pass@k / pass^k at the largest k, with the cases that had that many attempts when not all
/// did, or `-`.
pub fn pass_k(g: &GroupStats) -> String {
    let all = g.pass_k.first().map_or(0, |p| p.cases);
    g.pass_k.last().map_or("-".into(), |p| {
        let over = if p.cases < all {
            format!(", {} of {all} cases", p.cases)
        } else {
            String::new()
        };
        format!(
            "{} / {} (k={}{over})",
            pct(p.pass_at_k),
            pct(p.pass_hat_k),
            p.k
        )
    })
}

/// The leaderboard as a table.
pub fn table(report: &Report) -> Table {
    table_where(report, |_| true)
}

/// The leaderboard rows that `keep` accepts.
pub fn table_where(report: &Report, keep: impl Fn(&GroupStats) -> bool) -> Table {
    let mut t = Table::new([
        "track",
        "condition",
        "agent",
        "score",
        "95% CI",
        "pass@k / pass^k",
        "block cov.",
        "precision",
        "cases",
        "trials",
        "infra",
        "$/trial",
        "tokens",
        "steps",
        "1st edit",
        "secs",
    ]);
    for g in ordered(report).into_iter().filter(|g| keep(g)) {
        t.push([
            g.track.to_string(),
            g.condition.to_string(),
            g.agent.clone(),
            g.score.as_ref().map_or("-".into(), |s| pct(s.value)),
            g.score
                .as_ref()
                .map_or("-".into(), |s| interval(s.lower, s.upper)),
            pass_k(g),
            g.block_coverage.map_or("-".into(), pct),
            g.precision.map_or("-".into(), pct),
            g.cases.to_string(),
            g.trials.to_string(),
            g.infra_errors.to_string(),
            g.cost_usd.map_or("?".into(), |c| format!("{c:.3}")),
            format!("{:.0}", g.tokens),
            format!("{:.1}", g.steps),
            g.steps_to_first_edit
                .map_or("-".into(), |s| format!("{s:.1}")),
            format!("{:.0}", g.wall_secs),
        ]);
    }
    t
}
