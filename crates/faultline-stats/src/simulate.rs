//! Synthetic sweeps with known ground truth.
//!
//! Validation needs data whose true parameters are known (bootstrap coverage,
//! GLMM recovery, the lme4 fixture) and the benchmark needs a sweep of
//! realistic size; both come from this seeded generator.

use crate::data::{Condition, Observation};
use crate::error::{Result, StatsError};
use crate::rng;

/// Parameters of a simulated sweep under the GLMM
/// `logit P(pass) = intercept + effect[condition] + b_config + b_case`.
#[derive(Debug, Clone, PartialEq)]
pub struct SweepSpec {
    /// Number of configurations.
    pub configs: usize,
    /// Number of cases.
    pub cases: usize,
    /// Attempts per (config, case, condition).
    pub attempts: u32,
    /// Logit of the pass probability of an average config on an average case, symptom-only.
    pub intercept: f64,
    /// The conditions drawn besides the baseline, in draw order, each with its
    /// logit shift against the baseline (whose shift is 0).
    pub effects: Vec<(Condition, f64)>,
    /// SD of configuration random intercepts.
    pub sd_config: f64,
    /// SD of case random intercepts.
    pub sd_case: f64,
}

/// Draws a full sweep: all configs x cases x conditions x attempts, pass/fail.
///
/// Draw order (fixed, so a seed pins the data): config effects, case effects,
/// then outcomes with config outermost, then case, condition (the baseline
/// first, then as listed in [`SweepSpec::effects`]) and attempt. Names are
/// `config-NNN` and `case-NNN`; attempts count from 1.
pub fn simulate_sweep(spec: &SweepSpec, seed: u64) -> Result<Vec<Observation>> {
    if spec.configs == 0 || spec.cases == 0 || spec.attempts == 0 {
        return Err(StatsError::InvalidOption(
            "a sweep needs at least one config, case and attempt".to_owned(),
        ));
    }
    let params = [spec.intercept, spec.sd_config, spec.sd_case];
    let effects = spec.effects.iter().map(|(_, e)| e);
    if params.iter().chain(effects).any(|p| !p.is_finite())
        || spec.sd_config < 0.0
        || spec.sd_case < 0.0
    {
        return Err(StatsError::InvalidOption(
            "sweep parameters must be finite and SDs non-negative".to_owned(),
        ));
    }
    let conditions: Vec<(Condition, f64)> = std::iter::once((Condition::symptom(), 0.0))
        .chain(spec.effects.iter().cloned())
        .collect();
    for (i, (condition, _)) in conditions.iter().enumerate() {
        if conditions[..i].iter().any(|(c, _)| c == condition) {
            return Err(StatsError::InvalidOption(format!(
                "condition {condition} drawn twice (the baseline is always drawn)"
            )));
        }
    }
    let mut rng = rng::seeded(seed);
    let config_effects: Vec<f64> = (0..spec.configs)
        .map(|_| spec.sd_config * rng::normal(&mut rng))
        .collect();
    let case_effects: Vec<f64> = (0..spec.cases)
        .map(|_| spec.sd_case * rng::normal(&mut rng))
        .collect();
    let mut observations =
        Vec::with_capacity(spec.configs * spec.cases * conditions.len() * spec.attempts as usize);
    for (i, b_config) in config_effects.iter().enumerate() {
        for (j, b_case) in case_effects.iter().enumerate() {
            for (condition, shift) in &conditions {
                let p = 1.0 / (1.0 + (-(spec.intercept + shift + b_config + b_case)).exp());
                for attempt in 1..=spec.attempts {
                    observations.push(Observation {
                        config: format!("config-{i:03}"),
                        case: format!("case-{j:03}"),
                        condition: condition.clone(),
                        attempt,
                        value: if rng::unit(&mut rng) < p { 1.0 } else { 0.0 },
                    });
                }
            }
        }
    }
    Ok(observations)
}

/// Renders observations as CSV (`config,case,condition,attempt,value`), the
/// format the reference R script reads; fields are quoted when needed.
pub fn to_csv(observations: &[Observation]) -> String {
    let mut out = String::from("config,case,condition,attempt,value\n");
    for o in observations {
        out.push_str(&format!(
            "{},{},{},{},{}\n",
            csv_field(&o.config),
            csv_field(&o.case),
            o.condition,
            o.attempt,
            o.value
        ));
    }
    out
}

fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_quotes_awkward_names() {
        let o = Observation {
            config: "a,\"b\"".to_owned(),
            case: "c".to_owned(),
            condition: Condition::context(),
            attempt: 2,
            value: 0.5,
        };
        assert_eq!(
            to_csv(&[o]),
            "config,case,condition,attempt,value\n\"a,\"\"b\"\"\",c,context,2,0.5\n"
        );
    }
}
