//! Results records of a simulated sweep, for tests, benches and trying the reports without
//! running agents: outcomes from `faultline-stats`' GLMM simulator, everything else (tokens,
//! cost, steps, actions, case attributes) a deterministic function of the trial.

use faultline_schema::run::RUN_SCHEMA_VERSION;
use faultline_schema::trajectory::Tokens;
use faultline_schema::{ActionKind, Category, Condition, ExitStatus, Outcome, ResultRecord, Track};
use faultline_stats::{StatsError, SweepSpec, simulate_sweep};
use std::collections::BTreeMap;

const SYSTEMS: [&str; 4] = ["openraft", "foca", "chitchat", "yrs"];
const CATEGORIES: [Category; 3] = [
    Category::ProtocolRecovery,
    Category::ReplicationConsistency,
    Category::ConcurrencyOrdering,
];

/// The repair-track records of a sweep drawn from `spec` with `seed`; errors on a condition
/// the schema cannot record (it knows `symptom` and `context` only).
pub fn records(spec: &SweepSpec, seed: u64) -> Result<Vec<ResultRecord>, StatsError> {
    let observations = simulate_sweep(spec, seed)?;
    observations
        .into_iter()
        .map(|o| {
            let config: u64 = o.config.trim_start_matches("config-").parse().unwrap_or(0);
            let case: u64 = o.case.trim_start_matches("case-").parse().unwrap_or(0);
            let condition: Condition = o
                .condition
                .as_str()
                .parse()
                .map_err(StatsError::InvalidOption)?;
            let pass = o.value >= 1.0;
            let mix = config * 7 + case * 13 + u64::from(o.attempt) * 3;
            let steps = 10 + (mix % 40) as u32 + 5 * config as u32;
            let input = 20_000 * (1 + config) + 500 * (mix % 17);
            let mut actions = BTreeMap::new();
            actions.insert(ActionKind::Read, steps / 3);
            actions.insert(ActionKind::Search, steps / 4);
            actions.insert(ActionKind::Edit, (mix % 4) as u32);
            actions.insert(ActionKind::Test, steps / 6);
            actions.insert(ActionKind::Submit, 1);
            let trial_id = format!("{}/{}/repair/{condition}/{}", o.config, o.case, o.attempt);
            Ok(ResultRecord {
                schema_version: RUN_SCHEMA_VERSION,
                trial_id,
                system: SYSTEMS[(case % 4) as usize].into(),
                category: CATEGORIES[(case % 3) as usize],
                tier: 1 + (case % 3) as u8,
                symptom_names_function: case.is_multiple_of(5),
                case_id: o.case,
                build: None,
                track: Track::Repair,
                condition,
                attempt: o.attempt,
                agent: o.config,
                exit_status: ExitStatus::Submitted,
                outcome: if pass {
                    Outcome::Pass
                } else {
                    Outcome::FailOracle
                },
                score: Some(o.value),
                block_coverage: None,
                block_precision: None,
                file_coverage: None,
                tokens: Tokens {
                    input,
                    output: input / 20,
                    ..Tokens::default()
                },
                cost_usd: Some(input as f64 * (1.0 + config as f64) * 1e-6),
                steps,
                steps_to_first_edit: (!mix.is_multiple_of(4)).then_some(steps / 2),
                wall_secs: 30.0 + steps as f64 * 4.0,
                working_secs: 30.0 + steps as f64 * 4.0,
                actions,
                finished_at: "2026-01-01T00:00:00Z".into(),
            })
        })
        .collect()
}
