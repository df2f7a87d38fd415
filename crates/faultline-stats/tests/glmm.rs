//! GLMM input validation and a symmetry check of the solver.

use faultline_stats::{
    Condition, InvalidConditionName, Observation, ResultSet, StatsError, SweepSpec, fit_glmm,
    simulate_sweep,
};

fn spec(configs: usize, cases: usize) -> SweepSpec {
    SweepSpec {
        configs,
        cases,
        attempts: 2,
        intercept: 0.0,
        effects: vec![(Condition::context(), 1.0)],
        sd_config: 0.0,
        sd_case: 1.0,
    }
}

#[test]
fn single_levels_separation_and_scores_are_rejected() {
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
        .filter(|o| o.condition.is_baseline());
    assert!(matches!(
        fit_glmm(&ResultSet::new(symptom_only).unwrap()),
        Err(StatsError::SingleLevel {
            factor: "condition",
            levels: 1
        })
    ));
    let all_context_pass = simulate_sweep(&spec(3, 5), 1)
        .unwrap()
        .into_iter()
        .map(|o| {
            let value = if o.condition == Condition::context() {
                1.0
            } else {
                o.value
            };
            Observation { value, ..o }
        });
    assert_eq!(
        fit_glmm(&ResultSet::new(all_context_pass).unwrap()).unwrap_err(),
        StatsError::Separation {
            condition: Condition::context(),
            outcome: "passed"
        }
    );
    let mut scores = simulate_sweep(&spec(3, 5), 1).unwrap();
    scores[4].value = 0.5;
    assert!(matches!(
        fit_glmm(&ResultSet::new(scores).unwrap()),
        Err(StatsError::NotBinary { value, .. }) if value == 0.5
    ));
}

fn levels(names: &[&str]) -> Vec<(Condition, f64)> {
    names
        .iter()
        .map(|n| (Condition::new(*n).unwrap(), 0.5))
        .collect()
}

#[test]
fn data_without_the_baseline_is_rejected() {
    let spec = SweepSpec {
        effects: levels(&["context", "static"]),
        ..spec(3, 5)
    };
    let no_baseline = simulate_sweep(&spec, 1)
        .unwrap()
        .into_iter()
        .filter(|o| !o.condition.is_baseline());
    let err = fit_glmm(&ResultSet::new(no_baseline).unwrap()).unwrap_err();
    assert_eq!(
        err,
        StatsError::MissingBaseline {
            found: "context, static".to_owned()
        }
    );
    assert!(
        err.to_string().contains("baseline condition symptom"),
        "{err}"
    );
}

/// Separation is checked per level, and the error names the level, not just "some condition".
#[test]
fn an_all_pass_level_is_named() {
    let spec = SweepSpec {
        effects: levels(&["context", "model:small", "static"]),
        ..spec(3, 5)
    };
    let small = Condition::new("model:small").unwrap();
    let all_pass = simulate_sweep(&spec, 2).unwrap().into_iter().map(|o| {
        let value = if o.condition == small { 1.0 } else { o.value };
        Observation { value, ..o }
    });
    let err = fit_glmm(&ResultSet::new(all_pass).unwrap()).unwrap_err();
    assert_eq!(
        err,
        StatsError::Separation {
            condition: small,
            outcome: "passed"
        }
    );
    assert!(
        err.to_string().contains("condition model:small passed"),
        "{err}"
    );
}

#[test]
fn bad_condition_names_are_errors() {
    for bad in ["", "Static", "model small", "ctx,1"] {
        let err = StatsError::from(Condition::new(bad).unwrap_err());
        assert_eq!(
            err,
            StatsError::InvalidCondition(InvalidConditionName {
                name: bad.to_owned()
            })
        );
        assert!(err.to_string().contains("invalid condition name"), "{err}");
    }
    let twice = SweepSpec {
        effects: levels(&["static", "static"]),
        ..spec(2, 2)
    };
    assert!(matches!(
        simulate_sweep(&twice, 1),
        Err(StatsError::InvalidOption(_))
    ));
}

/// Swapping the roles of configurations and cases must swap the two SDs and
/// leave everything else unchanged; with more configs than cases this also
/// exercises the solver path that eliminates the config factor.
#[test]
fn fit_is_symmetric_in_the_two_factors() {
    let spec = SweepSpec {
        sd_config: 0.8,
        ..spec(9, 6)
    };
    let data = simulate_sweep(&spec, 3).unwrap();
    let swapped = data.iter().map(|o| Observation {
        config: o.case.clone(),
        case: o.config.clone(),
        ..o.clone()
    });
    let fit = fit_glmm(&ResultSet::new(data.clone()).unwrap()).unwrap();
    let mirror = fit_glmm(&ResultSet::new(swapped).unwrap()).unwrap();
    assert_eq!((fit.n_configs, mirror.n_configs), (9, 6));
    let close = |a: f64, b: f64| (a - b).abs() < 1e-4;
    assert!(close(fit.sd_config, mirror.sd_case), "{fit:?}\n{mirror:?}");
    assert!(close(fit.sd_case, mirror.sd_config));
    assert!(close(fit.log_likelihood, mirror.log_likelihood));
    for (a, b) in fit.fixed.iter().zip(&mirror.fixed) {
        assert!(close(a.estimate, b.estimate) && close(a.std_error, b.std_error));
    }
}
