//! The tables of a report beyond the leaderboard, and the whole report as Markdown and as terminal
//! text: both render the same [`Table`]s.

use crate::Table;
use crate::leaderboard::{self, interval, pct, signed_pct};
use faultline_schema::Condition;
use faultline_schema::report::{PairedDifference, Report};
use faultline_schema::{ActionKind, Track};
use std::collections::BTreeMap;

fn difference_cells(d: &PairedDifference) -> [String; 5] {
    let q = |p: f64| {
        d.quantiles
            .iter()
            .find(|q| (q.p - p).abs() < 1e-9)
            .map_or("-".into(), |q| signed_pct(q.value))
    };
    [
        signed_pct(d.mean),
        format!("[{}, {}]", signed_pct(d.lower), signed_pct(d.upper)),
        format!("{} / {} / {}", q(0.25), q(0.5), q(0.75)),
        format!("{:.3}", d.share_positive),
        d.cases.to_string(),
    ]
}

/// Each condition with a bundle minus symptom, per agent and track (percentage points).
pub fn condition_effects(report: &Report) -> Table {
    let mut t = Table::new([
        "track",
        "condition",
        "agent",
        "minus symptom",
        "95% CI",
        "quartiles",
        "P(diff > 0)",
        "cases",
    ]);
    for e in &report.condition_effects {
        let agent = e.agent.clone().unwrap_or_else(|| "(all models)".into());
        match &e.difference {
            Some(d) => {
                let mut row = vec![e.track.to_string(), e.condition.to_string(), agent];
                row.extend(difference_cells(d));
                t.push(row);
            }
            None => t.push([
                e.track.to_string(),
                e.condition.to_string(),
                agent,
                e.error.clone().unwrap_or_default(),
                "-".into(),
                "-".into(),
                "-".into(),
                "-".into(),
            ]),
        }
    }
    t
}

/// Configuration against configuration, per track and condition (percentage points).
pub fn comparisons(report: &Report) -> Table {
    let mut t = Table::new([
        "track",
        "condition",
        "first - second",
        "difference",
        "95% CI",
        "quartiles",
        "P(diff > 0)",
        "cases",
    ]);
    for c in &report.comparisons {
        let mut row = vec![
            c.track.to_string(),
            c.condition.to_string(),
            format!("{} - {}", c.first, c.second),
        ];
        row.extend(difference_cells(&c.difference));
        t.push(row);
    }
    t
}

/// One sentence per track and condition with a bundle that states its effect, before any
/// table or plot: the pooled paired difference on the probability scale with its interval and
/// the symptom-alone rate it is read against, and the GLMM's odds ratio with its Wald interval
/// and p-value. Empty when the run did not compare conditions.
pub fn headline(report: &Report, track: Track) -> Vec<String> {
    if report.run.conditions.len() < 2 {
        return Vec::new();
    }
    let measure = if track == Track::Diagnose {
        "mean score"
    } else {
        "success rate"
    };
    let glmm = report.glmm.iter().find(|g| g.track == track);
    let mut lines = Vec::new();
    for condition in report.run.conditions.iter().filter(|c| c.has_bundle()) {
        let pooled = report
            .condition_effects
            .iter()
            .find(|e| e.track == track && e.agent.is_none() && &e.condition == condition);
        let Some(d) = pooled.and_then(|e| e.difference.as_ref()) else {
            let why = pooled.and_then(|e| e.error.clone()).unwrap_or_else(|| {
                "no model or external agent ran it with this bundle and without".into()
            });
            lines.push(format!(
                "{track}, {condition}: no effect is estimated ({why})."
            ));
            continue;
        };
        let mut line = format!(
            "{track}, {condition}: with the {condition} bundle, the model agents' {measure} went \
             from {}% to {}%, {} pp (95% CI {} to {} pp; paired case bootstrap over {} cases)",
            pct(d.second_mean),
            pct(d.second_mean + d.mean),
            signed_pct(d.mean),
            signed_pct(d.lower),
            signed_pct(d.upper),
            d.cases
        );
        let effect = glmm
            .and_then(|g| g.fit.as_ref())
            .and_then(|f| f.effects.iter().find(|e| &e.condition == condition));
        match effect {
            Some(e) => line.push_str(&format!(
                "; odds ratio {:.2} (95% CI {:.2} to {:.2}; Wald test of the mixed model's \
                 {condition} term, p = {:.4}).",
                e.odds_ratio, e.odds_ratio_lower, e.odds_ratio_upper, e.coefficient.p_value
            )),
            None => {
                let why = glmm
                    .and_then(|g| g.error.clone())
                    .unwrap_or_else(|| "not fitted".into());
                line.push_str(&format!("; no odds ratio ({why})."));
            }
        }
        lines.push(line);
    }
    lines
}

/// Every track's [`headline`], in the run's track order.
pub fn headlines(report: &Report) -> Vec<String> {
    report
        .run
        .tracks
        .iter()
        .flat_map(|&t| headline(report, t))
        .collect()
}

/// What the providers table says, for every rendering's caption.
pub const PROVIDERS_NOTE: &str = "Every bundle passed the same gate before an agent saw it: one to \
     three Markdown files, within the token budget, and clean under the case's leak check. A \
     refused bundle is never cut to fit: no trial of that case ran in that condition.";

/// What [`misled`] lists, for every rendering's caption.
pub const MISLED_NOTE: &str = "Cases where an agent passed at least half its attempts with the \
                               symptom alone and fewer than half with the bundle of a condition.";

/// The cases where a condition's bundle turned an agent from passing to failing (a pass rate of
/// at least one half with the symptom alone, below one half with the bundle), per condition:
/// faithful context can mislead, and these are the cases to read. Repair and reproduction only,
/// whose scores are pass or fail.
pub fn misled(report: &Report) -> Table {
    let mut t = Table::new([
        "track",
        "condition",
        "agent",
        "case",
        "symptom",
        "with bundle",
    ]);
    let alone: BTreeMap<(&str, Track, &str), f64> = report
        .cells
        .iter()
        .filter(|c| c.track != Track::Diagnose && c.condition == Condition::symptom())
        .filter_map(|c| Some(((c.agent.as_str(), c.track, c.case.as_str()), c.mean?)))
        .collect();
    let mut given: Vec<_> = report
        .cells
        .iter()
        .filter(|c| c.condition.has_bundle())
        .collect();
    given.sort_by(|a, b| (&a.condition, a.track).cmp(&(&b.condition, b.track)));
    for c in given {
        let key = (c.agent.as_str(), c.track, c.case.as_str());
        if let (Some(with), Some(&symptom)) = (c.mean, alone.get(&key))
            && symptom >= 0.5
            && with < 0.5
        {
            t.push([
                c.track.to_string(),
                c.condition.to_string(),
                c.agent.clone(),
                c.case.clone(),
                format!("{}%", pct(symptom)),
                format!("{}%", pct(with)),
            ]);
        }
    }
    t
}

/// A random-intercept SD, flagged where the fit is singular because this SD is the one at zero.
fn sd_cell(sd: f64, singular: bool) -> String {
    let at_zero = singular && sd < faultline_stats::SINGULAR_TOL;
    format!("{sd:.3}{}", if at_zero { " (singular)" } else { "" })
}

/// The GLMM per track, one row per condition with a bundle.
pub fn glmm(report: &Report) -> Table {
    let mut t = Table::new([
        "track",
        "condition",
        "agents",
        "cases",
        "effect (logit)",
        "SE",
        "p",
        "odds ratio [95% CI]",
        "sd agent",
        "sd case",
        "trials",
    ]);
    for g in &report.glmm {
        match &g.fit {
            Some(f) => {
                for e in &f.effects {
                    t.push([
                        g.track.to_string(),
                        e.condition.to_string(),
                        g.agents.len().to_string(),
                        g.cases.to_string(),
                        format!("{:+.3}", e.coefficient.estimate),
                        format!("{:.3}", e.coefficient.std_error),
                        format!("{:.4}", e.coefficient.p_value),
                        format!(
                            "{:.2} [{:.2}, {:.2}]",
                            e.odds_ratio, e.odds_ratio_lower, e.odds_ratio_upper
                        ),
                        sd_cell(f.sd_agent, f.singular),
                        sd_cell(f.sd_case, f.singular),
                        f.observations.to_string(),
                    ]);
                }
            }
            None => t.push([
                g.track.to_string(),
                "-".into(),
                g.agents.len().to_string(),
                g.cases.to_string(),
                format!("not fitted: {}", g.error.clone().unwrap_or_default()),
                "-".into(),
                "-".into(),
                "-".into(),
                "-".into(),
                "-".into(),
                "-".into(),
            ]),
        }
    }
    t
}

/// Scores by system, category, tier and whether the symptom names the causal function.
pub fn breakdowns(report: &Report) -> Table {
    let mut t = Table::new([
        "track",
        "condition",
        "agent",
        "attribute",
        "level",
        "cases",
        "score",
        "95% CI",
    ]);
    for g in leaderboard::ordered(report) {
        for b in &g.breakdowns {
            t.push([
                g.track.to_string(),
                g.condition.to_string(),
                g.agent.clone(),
                b.attribute.clone(),
                b.level.clone(),
                b.cases.to_string(),
                pct(b.score.value),
                interval(b.score.lower, b.score.upper),
            ]);
        }
    }
    t
}

/// The action kinds in a fixed order.
pub const ACTION_KINDS: [ActionKind; 8] = [
    ActionKind::Read,
    ActionKind::Search,
    ActionKind::Edit,
    ActionKind::Build,
    ActionKind::Test,
    ActionKind::Run,
    ActionKind::Submit,
    ActionKind::Other,
];

/// The name of an action kind.
pub fn action_name(k: ActionKind) -> &'static str {
    match k {
        ActionKind::Read => "read",
        ActionKind::Search => "search",
        ActionKind::Edit => "edit",
        ActionKind::Build => "build",
        ActionKind::Test => "test",
        ActionKind::Run => "run",
        ActionKind::Submit => "submit",
        ActionKind::Other => "other",
    }
}

/// Actions per trial by kind.
pub fn actions(report: &Report) -> Table {
    let mut header = vec!["track".to_string(), "condition".into(), "agent".into()];
    header.extend(ACTION_KINDS.iter().map(|k| action_name(*k).to_string()));
    let mut t = Table::new(header);
    for g in leaderboard::ordered(report) {
        let mut row = vec![
            g.track.to_string(),
            g.condition.to_string(),
            g.agent.clone(),
        ];
        row.extend(
            ACTION_KINDS
                .iter()
                .map(|k| format!("{:.1}", g.actions.get(k).copied().unwrap_or(0.0))),
        );
        t.push(row);
    }
    t
}

/// Mean score per configuration (rows) and case (columns) of one track.
pub fn heat_map(report: &Report, track: Track) -> Table {
    let cases: Vec<&str> = report.cases.iter().map(|c| c.id.as_str()).collect();
    let mut header = vec!["agent / condition".to_string()];
    header.extend(cases.iter().map(|c| c.to_string()));
    let mut t = Table::new(header);
    let rows: std::collections::BTreeSet<(&str, faultline_schema::Condition)> = report
        .cells
        .iter()
        .filter(|c| c.track == track)
        .map(|c| (c.agent.as_str(), c.condition.clone()))
        .collect();
    for (agent, condition) in rows {
        let mut row = vec![format!("{agent} / {condition}")];
        for case in &cases {
            row.push(
                report
                    .cells
                    .iter()
                    .find(|c| {
                        c.track == track
                            && c.agent == agent
                            && c.condition == condition
                            && c.case == *case
                    })
                    .map_or(String::new(), |c| c.mean.map_or("infra".into(), pct)),
            );
        }
        t.push(row);
    }
    t
}

/// The regrade check of an unpacked archive, in one line.
pub fn regrade_line(report: &Report) -> Option<String> {
    report.regrade.as_ref().map(|r| {
        format!(
            "Re-graded {} trials from the archive's submissions: {} identical, {} differ{}.",
            r.trials,
            r.identical,
            r.differences.len(),
            if r.differences.is_empty() {
                String::new()
            } else {
                format!(
                    " ({})",
                    r.differences
                        .iter()
                        .map(|d| format!(
                            "{}: {} -> {}",
                            d.trial_id,
                            d.archived_outcome.as_str(),
                            d.outcome.as_str()
                        ))
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            }
        )
    })
}

/// A warning for reports of runs made without every sandbox protection, or without a record of
/// them; `None` when all held.
pub fn protection_notice(report: &Report) -> Option<String> {
    let records = &report.run.protections;
    if records.is_empty() {
        return Some(
            "Unverified sandbox: this run records no sandbox protections (made without a lock or \
             by an older faultline), so its scores are not comparable with protected runs."
                .into(),
        );
    }
    let lacking = faultline_schema::protection::lacking(records);
    (!lacking.is_empty()).then(|| {
        format!(
            "Not comparable: this run was made without these sandbox protections: {}.",
            lacking.join("; ")
        )
    })
}

/// The protections the run's lock records, one line each.
pub fn protections_list(report: &Report) -> String {
    report
        .run
        .protections
        .iter()
        .map(|p| format!("- {}: {} ({})\n", p.name, state_name(p.state), p.detail))
        .collect()
}

fn state_name(s: faultline_schema::ProtectionState) -> &'static str {
    match s {
        faultline_schema::ProtectionState::Active => "active",
        faultline_schema::ProtectionState::Off => "off",
        faultline_schema::ProtectionState::Unavailable => "unavailable",
    }
}

/// The whole report as a Markdown document.
pub fn markdown(report: &Report) -> String {
    let mut out = String::from("# faultline report\n\n");
    let notice = protection_notice(report);
    if let Some(n) = &notice {
        out.push_str(&format!("> **{n}**\n\n"));
    }
    out.push_str(&format!(
        "{} Attempts are averaged within a case and cases weighted equally; intervals are 95% \
         case bootstraps. {} resamples, seed {}. {} trials, {} cases, agents: {}.\n\n",
        leaderboard::scores_note(),
        report.bootstrap.resamples,
        report.bootstrap.seed,
        report.run.trials,
        report.cases.len(),
        report
            .run
            .agents
            .iter()
            .map(|a| a.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    ));
    if let Some(line) = regrade_line(report) {
        out.push_str(&format!("{line}\n\n"));
    }
    let headlines = headlines(report);
    if !headlines.is_empty() {
        out.push_str("## Result\n\n");
        for h in &headlines {
            out.push_str(&format!("- {h}\n"));
        }
        out.push('\n');
    }
    out.push_str("## Leaderboard\n\n");
    out.push_str(&leaderboard::table(report).to_markdown());
    if !report.providers.is_empty() {
        out.push_str(&format!(
            "\n## Context providers\n\n{PROVIDERS_NOTE}\n\n{}",
            crate::providers::table(report).to_markdown()
        ));
        let refused = crate::providers::refusals(report);
        if !refused.rows.is_empty() {
            out.push_str(&format!("\n{}", refused.to_markdown()));
        }
        let economics = crate::providers::economics(report);
        if !economics.rows.is_empty() {
            out.push_str(&format!("\n{}", economics.to_markdown()));
        }
    }
    if !report.condition_effects.is_empty() {
        out.push_str(
            "\n## Context versus symptom\n\nPaired case bootstrap of each condition minus symptom \
             over the cases with both (percentage points); quartiles of the resampled \
             differences.\n\n",
        );
        out.push_str(&condition_effects(report).to_markdown());
    }
    let misled = misled(report);
    if !misled.rows.is_empty() {
        out.push_str(&format!("\n## Context that misled\n\n{MISLED_NOTE}\n\n"));
        out.push_str(&misled.to_markdown());
    }
    if !report.glmm.is_empty() {
        out.push_str(
            "\n## Mixed-effects model\n\n`success ~ condition + (1|agent) + (1|case)`, Laplace \
             approximation (as lme4's `glmer`), model and external agents only.\n\n",
        );
        out.push_str(&glmm(report).to_markdown());
    }
    if !report.comparisons.is_empty() {
        out.push_str("\n## Configurations compared\n\n");
        out.push_str(&comparisons(report).to_markdown());
    }
    if !report.build.is_empty() {
        out.push_str(&format!(
            "\n## Build track: what survived each aid\n\n{}\n\n{}",
            crate::build::BUILD_NOTE,
            crate::build::table(report).to_markdown()
        ));
    }
    out.push_str("\n## Breakdowns\n\n");
    out.push_str(&breakdowns(report).to_markdown());
    out.push_str("\n## Actions per trial\n\n");
    out.push_str(&actions(report).to_markdown());
    for track in &report.run.tracks {
        out.push_str(&format!("\n## Per case: {track}\n\n"));
        out.push_str(&heat_map(report, *track).to_markdown());
    }
    if !report.run.protections.is_empty() {
        out.push_str("\n## Sandbox protections\n\n");
        out.push_str(&protections_list(report));
    }
    if let Some(n) = &notice {
        out.push_str(&format!("\n> **{n}**\n"));
    }
    out
}

/// The report for a terminal: the leaderboard, the condition effects and the GLMM.
pub fn terminal(report: &Report) -> String {
    let mut out = String::new();
    if let Some(n) = protection_notice(report) {
        out.push_str(&format!("WARNING: {n}\n"));
    }
    out.push_str(&leaderboard::table(report).to_terminal());
    out.push('\n');
    if !report.condition_effects.is_empty() {
        out.push_str("\ncondition - symptom (paired case bootstrap, percentage points)\n");
        out.push_str(&condition_effects(report).to_terminal());
        out.push('\n');
    }
    if !report.glmm.is_empty() {
        out.push_str("\nGLMM success ~ condition + (1|agent) + (1|case)\n");
        out.push_str(&glmm(report).to_terminal());
        out.push('\n');
    }
    if let Some(line) = regrade_line(report) {
        out.push_str(&format!("\n{line}\n"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_singular_flag_marks_the_standard_deviation_at_zero() {
        assert_eq!(sd_cell(0.0, true), "0.000 (singular)");
        assert_eq!(sd_cell(0.812, true), "0.812");
        assert_eq!(sd_cell(0.0, false), "0.000");
    }
}
