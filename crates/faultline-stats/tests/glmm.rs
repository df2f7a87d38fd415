//! GLMM input validation.

use faultline_stats::{Condition, ResultSet, StatsError, SweepSpec, fit_glmm, simulate_sweep};

fn spec(configs: usize, cases: usize) -> SweepSpec {
    SweepSpec {
        configs,
        cases,
        attempts: 2,
        intercept: 0.0,
        context_effect: 1.0,
        sd_config: 0.0,
        sd_case: 1.0,
    }
}

#[test]
fn single_levels_and_scores_are_rejected() {
    let one_config = ResultSet::new(simulate_sweep(&spec(1, 5), 1).unwrap()).unwrap();
    assert_eq!(
        fit_glmm(&one_config).unwrap_err(),
        StatsError::SingleLevel {
            factor: "config",
            levels: 1
        }
    );
    let one_case = ResultSet::new(simulate_sweep(&spec(3, 1), 1).unwrap()).unwrap();
    assert!(matches!(
        fit_glmm(&one_case),
        Err(StatsError::SingleLevel { factor: "case", .. })
    ));
    let symptom_only = simulate_sweep(&spec(3, 5), 1)
        .unwrap()
        .into_iter()
        .filter(|o| o.condition == Condition::Symptom);
    assert!(matches!(
        fit_glmm(&ResultSet::new(symptom_only).unwrap()),
        Err(StatsError::SingleLevel {
            factor: "condition",
            levels: 1
        })
    ));
    let mut scores = simulate_sweep(&spec(3, 5), 1).unwrap();
    scores[4].value = 0.5;
    assert!(matches!(
        fit_glmm(&ResultSet::new(scores).unwrap()),
        Err(StatsError::NotBinary { value, .. }) if value == 0.5
    ));
}
