//! Case bootstrap: exact reproducibility for a recorded seed, agreement with
//! the analytic standard error, and coverage in simulation.

use faultline_stats::{
    BootstrapOptions, CaseScores, Condition, ResultSet, StatsError, SweepSpec, bootstrap_mean,
    paired_bootstrap, simulate_sweep,
};

fn scores(f: impl Fn(usize) -> f64, n: usize) -> CaseScores {
    CaseScores::new((0..n).map(|i| (format!("case-{i:02}"), f(i)))).unwrap()
}

fn first() -> CaseScores {
    scores(|i| ((i * 37) % 11) as f64 / 10.0, 30)
}

fn second() -> CaseScores {
    scores(|i| ((i * 13) % 7) as f64 / 6.0, 30)
}

/// Recorded once with seed 2026 and 10,000 resamples (the first run of this
/// code); a change here means published intervals would no longer reproduce.
#[test]
fn fixed_seed_reproduces_recorded_numbers() {
    let options = BootstrapOptions::new(2026);
    let ci = bootstrap_mean(&first(), &options).unwrap();
    assert_eq!(ci.estimate, 0.4833333333333333);
    assert_eq!(ci.n_cases, 30);
    assert_eq!(
        (ci.ci.lower, ci.ci.upper),
        (0.37333333333333324, 0.5966666666666666)
    );
    assert_eq!(ci.std_error, 0.057088200722308184);

    let paired = paired_bootstrap(&first(), &second(), &options).unwrap();
    assert_eq!(paired.mean_diff, -0.016666666666666653);
    assert_eq!(
        (paired.ci.lower, paired.ci.upper),
        (-0.17555555555555552, 0.14222222222222225)
    );
    assert_eq!(paired.std_error, 0.08075198667174714);
    assert_eq!(
        (paired.share_positive, paired.share_negative),
        (0.4201, 0.5794)
    );
    assert_eq!(paired.p_one_sided, 0.5799);

    // Same seed twice: identical; another seed: different draws.
    assert_eq!(
        paired,
        paired_bootstrap(&first(), &second(), &options).unwrap()
    );
    let other = paired_bootstrap(&first(), &second(), &BootstrapOptions::new(2027)).unwrap();
    assert_ne!(paired.distribution(), other.distribution());
}

#[test]
fn bootstrap_standard_error_matches_the_analytic_one() {
    // The bootstrap SE of a mean estimates the plug-in SE sd_n / sqrt(n);
    // with 10,000 resamples its relative error is about 1/sqrt(2 * 10,000).
    let data = first();
    let n = data.len() as f64;
    let mean = data.mean();
    let plug_in = (data
        .scores()
        .iter()
        .map(|x| (x - mean).powi(2))
        .sum::<f64>()
        / n)
        .sqrt();
    let analytic = plug_in / n.sqrt();
    let ci = bootstrap_mean(&data, &BootstrapOptions::new(1)).unwrap();
    assert!(
        (ci.std_error / analytic - 1.0).abs() < 0.03,
        "{} vs {analytic}",
        ci.std_error
    );
    // And the percentile interval is close to mean +- 1.96 SE.
    assert!((ci.ci.lower - (mean - 1.96 * analytic)).abs() < 0.2 * analytic);
    assert!((ci.ci.upper - (mean + 1.96 * analytic)).abs() < 0.2 * analytic);
}

#[test]
fn paired_distribution_summaries_are_consistent() {
    let paired = paired_bootstrap(&first(), &second(), &BootstrapOptions::new(9)).unwrap();
    let dist = paired.distribution();
    assert_eq!(dist.len(), 10_000);
    assert!(dist.windows(2).all(|w| w[0] <= w[1]));
    let mean = dist.iter().sum::<f64>() / dist.len() as f64;
    assert!((mean - paired.mean_diff).abs() < 3.0 * paired.std_error / 100.0);
    let positive = dist.iter().filter(|&&d| d > 0.0).count() as f64 / 1e4;
    assert_eq!(paired.share_positive, positive);
    // The resampled means lie on a grid: at most 25 bins of whole grid points, whose edges
    // enclose every value.
    let histogram = paired.histogram(25).unwrap();
    let bins = histogram.counts.len();
    assert!((13..=25).contains(&bins), "{bins} bins");
    assert_eq!(histogram.edges.len(), bins + 1);
    assert_eq!(histogram.counts.iter().sum::<usize>(), 10_000);
    assert!(histogram.edges[0] < dist[0] && dist[9_999] < histogram.edges[bins]);
}

/// Share of `reps` simulated studies whose 95 % interval covers `truth`.
fn coverage(reps: u64, covers: impl Fn(u64) -> bool) -> f64 {
    (0..reps).filter(|&rep| covers(rep)).count() as f64 / reps as f64
}

/// Cases with true pass probability spread by a random case effect; attempts
/// Bernoulli. The population mean of a case's attempt mean is
/// E[logistic(N(0, 1.5²))] = 0.5 by symmetry.
#[test]
fn interval_covers_the_true_mean_in_simulation() {
    let spec = SweepSpec {
        configs: 1,
        cases: 40,
        attempts: 3,
        intercept: 0.0,
        effects: vec![(Condition::context(), 0.0)],
        sd_config: 0.0,
        sd_case: 1.5,
    };
    let options = |seed| BootstrapOptions {
        resamples: 1_000,
        level: 0.95,
        seed,
    };
    let rate = coverage(200, |rep| {
        let set = ResultSet::new(simulate_sweep(&spec, 1_000 + rep).unwrap()).unwrap();
        let means = set.case_means("config-000", &Condition::symptom()).unwrap();
        let ci = bootstrap_mean(&means, &options(rep)).unwrap();
        ci.ci.contains(0.5)
    });
    // Binomial SD of the rate over 200 studies is about 0.015.
    eprintln!("coverage {rate}");
    assert!((0.90..=0.99).contains(&rate), "coverage {rate}");

    // Paired: context shifts the logit by 1, so the true mean difference is
    // E[logistic(Z + 1) - logistic(Z)], Z ~ N(0, 1.5²), computed by quadrature.
    let truth = {
        let steps = 20_000;
        let (lo, hi) = (-12.0_f64, 12.0_f64);
        let h = (hi - lo) / steps as f64;
        let logistic = |x: f64| 1.0 / (1.0 + (-x).exp());
        (0..=steps)
            .map(|i| {
                let z = lo + i as f64 * h;
                let weight = if i == 0 || i == steps { 0.5 } else { 1.0 };
                let density = (-z * z / (2.0 * 1.5 * 1.5)).exp()
                    / (1.5 * (2.0 * std::f64::consts::PI).sqrt());
                weight * h * density * (logistic(z + 1.0) - logistic(z))
            })
            .sum::<f64>()
    };
    let shifted = SweepSpec {
        effects: vec![(Condition::context(), 1.0)],
        ..spec.clone()
    };
    let paired_rate = coverage(200, |rep| {
        let set = ResultSet::new(simulate_sweep(&shifted, 5_000 + rep).unwrap()).unwrap();
        let context = set.case_means("config-000", &Condition::context()).unwrap();
        let symptom = set.case_means("config-000", &Condition::symptom()).unwrap();
        let paired = paired_bootstrap(&context, &symptom, &options(rep)).unwrap();
        paired.ci.contains(truth)
    });
    eprintln!("paired coverage {paired_rate}, truth {truth}");
    assert!(
        (0.90..=0.99).contains(&paired_rate),
        "paired coverage {paired_rate} for truth {truth}"
    );
}

#[test]
fn bad_bootstrap_input_is_rejected() {
    let options = BootstrapOptions::new(0);
    let one = scores(|_| 1.0, 1);
    assert_eq!(
        bootstrap_mean(&one, &options),
        Err(StatsError::TooFewCases {
            needed: 2,
            found: 1
        })
    );
    let short = scores(|i| i as f64, 29);
    assert_eq!(
        paired_bootstrap(&first(), &short, &options),
        Err(StatsError::UnpairedCase {
            case: "case-29".to_owned(),
            present_in: "first"
        })
    );
    assert!(matches!(
        paired_bootstrap(&short, &first(), &options),
        Err(StatsError::UnpairedCase {
            present_in: "second",
            ..
        })
    ));
    for bad in [
        BootstrapOptions {
            resamples: 1,
            ..options
        },
        BootstrapOptions {
            level: 1.0,
            ..options
        },
        BootstrapOptions {
            level: f64::NAN,
            ..options
        },
    ] {
        assert!(matches!(
            bootstrap_mean(&first(), &bad),
            Err(StatsError::InvalidOption(_))
        ));
    }
    let paired = paired_bootstrap(&first(), &second(), &options).unwrap();
    assert!(matches!(
        paired.histogram(0),
        Err(StatsError::InvalidOption(_))
    ));
}

/// Quantiles of the paired distribution: the interval's bounds are its 2.5% and 97.5%
/// quantiles, and a two-case sample has a known distribution of resampled means.
#[test]
fn paired_quantiles_describe_the_distribution() {
    let options = BootstrapOptions::new(2026);
    let paired = paired_bootstrap(&first(), &second(), &options).unwrap();
    assert_eq!(paired.quantile(0.025).unwrap(), paired.ci.lower);
    assert_eq!(paired.quantile(0.975).unwrap(), paired.ci.upper);
    assert_eq!(paired.quantile(0.0).unwrap(), paired.distribution()[0]);
    assert_eq!(paired.quantile(1.0).unwrap(), paired.distribution()[9_999]);
    assert!(paired.quantile(1.5).is_err());
    assert!(paired.quantile(f64::NAN).is_err());

    // Differences 0 and 1: resampled means are 0, 1/2, 1 with chances 1/4, 1/2, 1/4.
    let a = CaseScores::new([("a".to_owned(), 1.0), ("b".to_owned(), 1.0)]).unwrap();
    let b = CaseScores::new([("a".to_owned(), 1.0), ("b".to_owned(), 0.0)]).unwrap();
    let two = paired_bootstrap(&a, &b, &options).unwrap();
    assert_eq!(two.mean_diff, 0.5);
    assert_eq!(two.quantile(0.0).unwrap(), 0.0);
    assert_eq!(two.quantile(0.5).unwrap(), 0.5);
    assert_eq!(two.quantile(1.0).unwrap(), 1.0);
    assert_eq!((two.ci.lower, two.ci.upper), (0.0, 1.0));
    assert!(
        (two.share_positive - 0.75).abs() < 0.02,
        "{}",
        two.share_positive
    );
    // On the grid of 1/2 with room for three bins, each bin holds one grid point.
    let histogram = two.histogram(3).unwrap();
    assert_eq!(histogram.edges, vec![-0.25, 0.25, 0.75, 1.25]);
    assert!((histogram.counts[0] as f64 / 10_000.0 - 0.25).abs() < 0.02);
    assert!((histogram.counts[1] as f64 / 10_000.0 - 0.5).abs() < 0.02);
}
