//! The build track's cells and table: per agent, task and aid, the share of hidden schedules passed and
//! the catalogued bugs the submissions failed like, which is how a report says which kinds of
//! bug each aid let through.

use crate::table::Table;
use faultline_schema::report::BuildCell;
use faultline_schema::{Condition, Report, ResultRecord, Track};
use std::collections::BTreeMap;

/// What the table shows, for the report's readers.
pub const BUILD_NOTE: &str = "Each row is one agent's builds of one task under one aid. \
    `share` is the mean share of hidden fault schedules passed; `lin.` counts schedules whose \
    history was not linearizable. `failed like` lists the catalogued buggy variants whose every \
    signature schedule a submission also failed, the same way, with how many trials did: the \
    kinds of bug that survived the aid (consistent with that bug, not proof of it).";

/// The table; empty (no rows) without the build track.
pub fn table(report: &Report) -> Table {
    let mut t = Table::new([
        "agent",
        "task",
        "aid",
        "trials",
        "share",
        "lin.",
        "failed like",
    ]);
    for c in &report.build {
        let survived: Vec<String> = c
            .survived
            .iter()
            .map(|(variant, n)| format!("{variant} ×{n}"))
            .collect();
        t.push([
            c.agent.clone(),
            c.task.clone(),
            c.aid.to_string(),
            c.trials.to_string(),
            c.mean_share
                .map_or("-".into(), |s| format!("{:.1}%", 100.0 * s)),
            c.linearizability_violations.to_string(),
            if survived.is_empty() {
                "-".into()
            } else {
                survived.join(", ")
            },
        ]);
    }
    t
}

/// The build track's cells: per agent, task and aid, the share passed and the bugs that
/// survived.
pub fn cells(records: &[ResultRecord]) -> Vec<BuildCell> {
    let mut cells: BTreeMap<(&str, &str, Condition), BuildCell> = BTreeMap::new();
    for r in records.iter().filter(|r| r.track == Track::Build) {
        let cell = cells
            .entry((&r.agent, &r.case_id, r.condition.clone()))
            .or_insert_with(|| BuildCell {
                agent: r.agent.clone(),
                task: r.case_id.clone(),
                aid: r.condition.clone(),
                trials: 0,
                mean_share: None,
                linearizability_violations: 0,
                survived: BTreeMap::new(),
            });
        let (Some(score), Some(build)) = (r.score, &r.build) else {
            continue;
        };
        let sum = cell.mean_share.unwrap_or(0.0) * cell.trials as f64 + score;
        cell.trials += 1;
        cell.mean_share = Some(sum / cell.trials as f64);
        cell.linearizability_violations += build.linearizability_violations;
        for variant in &build.resembles {
            *cell.survived.entry(variant.clone()).or_insert(0) += 1;
        }
    }
    cells.into_values().collect()
}
