//! Aggregation, breakdowns and pass@k / pass^k against hand-computed values.

use std::collections::BTreeMap;

use faultline_stats::{
    Attribute, CaseInfo, CaseScores, Condition, Observation, ResultSet, StatsError, pass_at_k,
    pass_hat_k,
};

fn obs(config: &str, case: &str, condition: Condition, attempt: u32, value: f64) -> Observation {
    Observation {
        config: config.to_owned(),
        case: case.to_owned(),
        condition,
        attempt,
        value,
    }
}

fn assert_close(ours: f64, expected: f64) {
    assert!(
        (ours - expected).abs() < 1e-12,
        "got {ours}, expected {expected}"
    );
}

/// Config A: case x passes 2 of 3, case y fails its single attempt.
/// Config B: case x passes 3 of 3, case y passes 1 of 1.
fn small_set() -> ResultSet {
    ResultSet::new([
        obs("A", "x", Condition::symptom(), 1, 1.0),
        obs("A", "x", Condition::symptom(), 2, 0.0),
        obs("A", "x", Condition::symptom(), 3, 1.0),
        obs("A", "y", Condition::symptom(), 1, 0.0),
        obs("B", "x", Condition::symptom(), 1, 1.0),
        obs("B", "x", Condition::symptom(), 2, 1.0),
        obs("B", "x", Condition::symptom(), 3, 1.0),
        obs("B", "y", Condition::symptom(), 1, 1.0),
        obs("A", "x", Condition::context(), 1, 0.25),
    ])
    .unwrap()
}

#[test]
fn cases_are_weighted_equally_not_attempts() {
    let set = small_set();
    let a = set.case_means("A", &Condition::symptom()).unwrap();
    assert_eq!(a.cases(), ["x", "y"]);
    assert_close(a.scores()[0], 2.0 / 3.0);
    assert_close(a.scores()[1], 0.0);
    // Pooling attempts would give 2/4 = 0.5; equal case weights give 1/3.
    assert_close(a.mean(), 1.0 / 3.0);
    let pooled = set.pooled_case_means(&Condition::symptom()).unwrap();
    assert_close(pooled.scores()[0], (2.0 / 3.0 + 1.0) / 2.0);
    assert_close(pooled.scores()[1], 0.5);
    assert_eq!(set.len(), 9);
    assert_eq!(set.configs().collect::<Vec<_>>(), ["A", "B"]);
    assert_eq!(
        set.conditions(),
        [Condition::symptom(), Condition::context()]
    );
}

#[test]
fn fractional_scores_average_and_pass_counts_reject_them() {
    let set = small_set();
    assert_close(
        set.case_means("A", &Condition::context()).unwrap().mean(),
        0.25,
    );
    assert!(matches!(
        set.case_pass_at_k("A", &Condition::context(), 1),
        Err(StatsError::NotBinary { value, .. }) if value == 0.25
    ));
}

#[test]
fn pass_at_k_and_pass_hat_k_known_values() {
    // n = 5 attempts, c = 2 passes: pass@k = 1 - C(3,k)/C(5,k), pass^k = C(2,k)/C(5,k).
    let at = [0.4, 0.7, 0.9, 1.0, 1.0];
    let hat = [0.4, 0.1, 0.0, 0.0, 0.0];
    for k in 1..=5 {
        assert_close(pass_at_k(5, 2, k).unwrap(), at[k as usize - 1]);
        assert_close(pass_hat_k(5, 2, k).unwrap(), hat[k as usize - 1]);
    }
    // n = 10, c = 3, k = 3: 1 - 35/120 and 1/120.
    assert_close(pass_at_k(10, 3, 3).unwrap(), 1.0 - 35.0 / 120.0);
    assert_close(pass_hat_k(10, 3, 3).unwrap(), 1.0 / 120.0);
    // Edge counts.
    assert_close(pass_at_k(4, 0, 2).unwrap(), 0.0);
    assert_close(pass_hat_k(4, 4, 4).unwrap(), 1.0);
    // k = 1 is the plain pass rate.
    assert_close(pass_at_k(7, 3, 1).unwrap(), 3.0 / 7.0);
}

#[test]
fn pass_hat_k_stays_accurate_where_binomials_overflow() {
    // C(1000, 500) ~ 2.7e299: 1/C(1000, 500) via log-gamma as the reference.
    use statrs::function::gamma::ln_gamma;
    let ln_binom = ln_gamma(1001.0) - 2.0 * ln_gamma(501.0);
    let ours = pass_hat_k(1000, 500, 500).unwrap();
    assert!(ours > 0.0 && ((ours.ln() + ln_binom) / ln_binom).abs() < 1e-10);
    // pass@k with a huge n stays in [0, 1] and matches 1 - C(900,10)/C(1000,10).
    let expected =
        1.0 - (ln_gamma(901.0) - ln_gamma(891.0) - ln_gamma(1001.0) + ln_gamma(991.0)).exp();
    assert!((pass_at_k(1000, 100, 10).unwrap() - expected).abs() < 1e-12);
}

#[test]
fn pass_at_k_per_case_aggregates_and_checks_k() {
    let set = small_set();
    let b = set.case_pass_hat_k("B", &Condition::symptom(), 1).unwrap();
    assert_close(b.mean(), 1.0);
    let a = set.case_pass_at_k("A", &Condition::symptom(), 1).unwrap();
    assert_close(a.mean(), 1.0 / 3.0);
    // Case y has a single attempt, so k = 2 is impossible there.
    assert_eq!(
        set.case_pass_at_k("A", &Condition::symptom(), 2),
        Err(StatsError::InvalidK {
            case: Some("y".to_owned()),
            n: 1,
            k: 2
        })
    );
    assert!(matches!(
        pass_at_k(3, 1, 0),
        Err(StatsError::InvalidK { k: 0, .. })
    ));
    assert!(matches!(
        pass_at_k(3, 4, 1),
        Err(StatsError::InvalidCounts { .. })
    ));
    assert!(matches!(
        pass_hat_k(3, 1, 4),
        Err(StatsError::InvalidK { n: 3, k: 4, .. })
    ));
}

#[test]
fn breakdown_splits_by_attribute() {
    let scores =
        CaseScores::new([("a".into(), 1.0), ("b".into(), 0.0), ("c".into(), 0.5)]).unwrap();
    let info: BTreeMap<String, CaseInfo> = [
        ("a", "etcd", 1, true),
        ("b", "etcd", 2, false),
        ("c", "raft", 1, false),
    ]
    .into_iter()
    .map(|(case, system, tier, names)| {
        let info = CaseInfo {
            system: Some(system.to_owned()),
            category: None,
            tier: Some(tier),
            symptom_names_function: Some(names),
        };
        (case.to_owned(), info)
    })
    .collect();
    let by_system = scores.breakdown(Attribute::System, &info).unwrap();
    assert_eq!(by_system.keys().collect::<Vec<_>>(), ["etcd", "raft"]);
    assert_close(by_system["etcd"].mean(), 0.5);
    assert_eq!(by_system["raft"].cases(), ["c"]);
    let by_tier = scores.breakdown(Attribute::Tier, &info).unwrap();
    assert_close(by_tier["1"].mean(), 0.75);
    let by_clue = scores
        .breakdown(Attribute::SymptomNamesFunction, &info)
        .unwrap();
    assert_close(by_clue["false"].mean(), 0.25);
    assert_eq!(
        scores.breakdown(Attribute::Category, &info),
        Err(StatsError::MissingAttribute {
            case: "a".to_owned(),
            attribute: "category"
        })
    );
}

#[test]
fn bad_input_is_rejected_with_a_clear_error() {
    assert_eq!(
        ResultSet::new([]).unwrap_err(),
        StatsError::Empty {
            what: "observations"
        }
    );
    assert!(matches!(
        ResultSet::new([obs("A", "x", Condition::symptom(), 1, f64::NAN)]),
        Err(StatsError::NonFinite { .. })
    ));
    assert!(matches!(
        ResultSet::new([obs("A", "x", Condition::symptom(), 1, 1.5)]),
        Err(StatsError::OutOfRange { .. })
    ));
    assert!(matches!(
        ResultSet::new([obs("", "x", Condition::symptom(), 1, 1.0)]),
        Err(StatsError::EmptyName { what: "config" })
    ));
    assert!(matches!(
        ResultSet::new([
            obs("A", "x", Condition::symptom(), 1, 1.0),
            obs("A", "x", Condition::symptom(), 1, 0.0)
        ]),
        Err(StatsError::Duplicate { attempt: 1, .. })
    ));
    assert!(matches!(
        small_set().case_means("C", &Condition::symptom()),
        Err(StatsError::UnknownGroup { .. })
    ));
    assert!(matches!(
        small_set().case_means("B", &Condition::context()),
        Err(StatsError::UnknownGroup { .. })
    ));
    assert!(matches!(CaseScores::new([]), Err(StatsError::Empty { .. })));
    assert!(matches!(
        CaseScores::new([("a".into(), f64::INFINITY)]),
        Err(StatsError::NonFiniteScore { .. })
    ));
    assert!(matches!(
        CaseScores::new([("a".into(), 1.0), ("a".into(), 0.0)]),
        Err(StatsError::DuplicateCase { .. })
    ));
}

/// Cases with different attempt counts: every k up to the most attempts is reported, each over
/// the cases that have at least k attempts.
#[test]
fn pass_k_curve_reaches_the_largest_attempt_count() {
    let set = small_set();
    let curve = set.pass_k_curve("A", &Condition::symptom()).unwrap();
    assert_eq!(curve.len(), 3, "{curve:?}");
    // k = 1 over both cases: x passes 2 of 3, y 0 of 1.
    assert_close(curve[0].pass_at_k, (2.0 / 3.0 + 0.0) / 2.0);
    assert_eq!(curve[0].cases, 2);
    // k = 2 and 3 over x alone.
    assert_close(curve[1].pass_at_k, pass_at_k(3, 2, 2).unwrap());
    assert_close(curve[1].pass_hat_k, pass_hat_k(3, 2, 2).unwrap());
    assert_eq!((curve[2].k, curve[2].cases), (3, 1));
    assert_close(curve[2].pass_at_k, 1.0);
    assert_close(curve[2].pass_hat_k, 0.0);
}

/// The pooled paired means use only configuration-and-case cells present in both conditions:
/// a configuration that ran a case one way only does not enter it.
#[test]
fn pooled_paired_means_compare_the_same_cells() {
    let set = ResultSet::new([
        obs("A", "x", Condition::symptom(), 1, 0.0),
        obs("A", "x", Condition::context(), 1, 1.0),
        // B ran x with context only, and y both ways.
        obs("B", "x", Condition::context(), 1, 1.0),
        obs("B", "y", Condition::symptom(), 1, 1.0),
        obs("B", "y", Condition::context(), 1, 0.0),
        // C ran z with symptom only: z has no pair.
        obs("C", "z", Condition::symptom(), 1, 1.0),
    ])
    .unwrap();
    let (context, symptom) = set
        .pooled_paired_case_means(&Condition::context(), &Condition::symptom())
        .unwrap();
    assert_eq!(context.cases(), ["x".to_string(), "y".to_string()]);
    assert_eq!(symptom.cases(), context.cases());
    assert_eq!(context.scores(), [1.0, 0.0]);
    assert_eq!(symptom.scores(), [0.0, 1.0]);
    // Unpaired pooling mixes B's context-only cell into x, and keeps z.
    assert_eq!(
        set.pooled_case_means(&Condition::symptom())
            .unwrap()
            .cases()
            .len(),
        3
    );
}

/// Conditions come back baseline first and then by name, whatever order the data has.
#[test]
fn conditions_are_listed_baseline_first() {
    let level = |name: &str| Condition::new(name).unwrap();
    let set = ResultSet::new([
        obs("A", "x", level("static"), 1, 1.0),
        obs("A", "x", level("model:small"), 1, 0.0),
        obs("A", "x", Condition::symptom(), 1, 1.0),
        obs("B", "x", level("context"), 1, 0.0),
    ])
    .unwrap();
    let names: Vec<String> = set.conditions().iter().map(|c| c.to_string()).collect();
    assert_eq!(names, ["symptom", "context", "model:small", "static"]);
    assert_eq!(set.case_means("A", &level("static")).unwrap().mean(), 1.0);
}
