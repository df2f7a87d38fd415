//! The report as one self-contained HTML file: no server, no network, inline CSS and script,
//! plots as inline SVG. The page is a minijinja template with HTML auto-escaping; the data of
//! the trajectory viewer is embedded as JSON (`tojson` escapes it for HTML) and the script only
//! ever sets text, never markup.

use crate::Table;
use crate::leaderboard;
use crate::markdown;
use crate::plots::{self, Spend};
use crate::viewer::{CaseView, TrialView};
use faultline_schema::Condition;
use faultline_schema::report::Report;
use minijinja::value::Serde;
use minijinja::{Environment, Value, context};
use serde::Serialize;

const TEMPLATE: &str = include_str!("../templates/report.html");

/// What the HTML report shows beyond the statistics.
#[derive(Debug, Clone, Copy)]
pub struct HtmlInputs<'a> {
    /// The page title.
    pub title: &'a str,
    /// The statistics.
    pub report: &'a Report,
    /// Every trial, for the viewer.
    pub trials: &'a [TrialView],
    /// Labeled blocks and source excerpts per case.
    pub cases: &'a [CaseView],
}

#[derive(Serialize)]
struct ConditionSection {
    condition: String,
    table: Table,
    forest: Value,
}

#[derive(Serialize)]
struct TrackSection {
    track: String,
    conditions: Vec<ConditionSection>,
    paired: Vec<Value>,
    pareto: Vec<Value>,
    actions: Value,
    heatmap: Value,
}

/// Renders the page.
pub fn render(inputs: &HtmlInputs) -> Result<String, minijinja::Error> {
    let report = inputs.report;
    let svg = Value::from_safe_string;
    let sections: Vec<TrackSection> = report
        .run
        .tracks
        .iter()
        .map(|&track| {
            let conditions: Vec<Condition> = report
                .run
                .conditions
                .iter()
                .filter(|c| {
                    report
                        .groups
                        .iter()
                        .any(|g| g.track == track && &g.condition == *c)
                })
                .cloned()
                .collect();
            let agents: Vec<&str> = report.run.agents.iter().map(|a| a.name.as_str()).collect();
            TrackSection {
                track: track.to_string(),
                conditions: conditions
                    .iter()
                    .map(|condition| ConditionSection {
                        condition: condition.to_string(),
                        table: leaderboard::table_where(report, |g| {
                            g.track == track && &g.condition == condition
                        }),
                        forest: svg(plots::forest(report, track, condition)),
                    })
                    .collect(),
                paired: conditions
                    .iter()
                    .filter(|c| c.has_bundle())
                    .flat_map(|c| {
                        agents
                            .iter()
                            .enumerate()
                            .filter(move |(_, a)| {
                                report.condition_effects.iter().any(|e| {
                                    e.track == track
                                        && &e.condition == c
                                        && e.agent.as_deref() == Some(**a)
                                })
                            })
                            .map(move |(i, a)| svg(plots::paired(report, track, c, a, i)))
                    })
                    .collect(),
                pareto: conditions
                    .iter()
                    .flat_map(|c| {
                        [Spend::Cost, Spend::Tokens]
                            .map(|s| svg(plots::pareto(report, track, c, s)))
                    })
                    .collect(),
                actions: svg(plots::actions(report, track)),
                heatmap: svg(plots::heatmap(report, track)),
            }
        })
        .collect();
    let mut env = Environment::new();
    env.add_template("report.html", TEMPLATE)?;
    env.get_template("report.html")?.render(context! {
        title => inputs.title,
        report => Value::from(Serde(report)),
        regrade => markdown::regrade_line(report),
        protection_notice => markdown::protection_notice(report),
        sections => Value::from(Serde(&sections)),
        effects => Value::from(Serde(markdown::condition_effects(report))),
        glmm => Value::from(Serde(markdown::glmm(report))),
        misled => Value::from(Serde(markdown::misled(report))),
        providers => Value::from(Serde(crate::providers::table(report))),
        refusals => Value::from(Serde(crate::providers::refusals(report))),
        economics => Value::from(Serde(crate::providers::economics(report))),
        providers_note => markdown::PROVIDERS_NOTE,
        comparisons => Value::from(Serde(markdown::comparisons(report))),
        breakdowns => Value::from(Serde(markdown::breakdowns(report))),
        build => Value::from(Serde(crate::build::table(report))),
        build_note => crate::build::BUILD_NOTE,
        trials => Value::from(Serde(inputs.trials)),
        cases => Value::from(Serde(inputs.cases)),
        omitted => inputs.trials.iter().filter(|t| !t.embedded).count(),
        scores_note => leaderboard::scores_note(),
        headlines => markdown::headlines(report),
        misled_note => markdown::MISLED_NOTE,
    })
}
