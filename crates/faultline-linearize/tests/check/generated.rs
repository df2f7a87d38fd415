//! Seeded random histories: linearizable by construction, and mutated copies whose verdict the
//! brute force decides. The search must agree with the brute force on every one, its witness
//! orders must replay, and its counterexamples must be illegal and 1-minimal.

use std::collections::HashMap;

use faultline_linearize::generate::{KvWorkload, kv_history};
use faultline_linearize::models::{
    KvInput, KvModel, KvOutput, RegisterInput, RegisterModel, RegisterOutput,
};
use faultline_linearize::{
    CheckOptions, CheckResult, History, Operation, PartitionOutcome, Verdict, check,
};
use rand::RngExt;
use rand::rngs::ChaCha8Rng;

use crate::brute::{
    Spec, brute_force, exact, kv_apply, kv_linearizable, mutate, register_apply,
    register_linearizable, relaxed, rng,
};

type KvHistory = History<KvInput, KvOutput>;

/// A small workload: few enough operations for the brute force.
fn small_workload(rng: &mut ChaCha8Rng) -> KvWorkload {
    KvWorkload {
        clients: rng.random_range(1..=3),
        operations: rng.random_range(2..=8),
        keys: rng.random_range(1..=2),
        crash_chance: 0.15,
        max_latency: rng.random_range(1..=4),
    }
}

/// A witness order must hold every completed operation of its partition once, respect real
/// time, and replay on the sequential store.
fn assert_order_replays(history: &KvHistory, partition: &[usize], order: &[usize]) {
    let ops = history.operations();
    for &i in partition {
        if ops[i].ret.is_some() {
            assert_eq!(
                order.iter().filter(|&&o| o == i).count(),
                1,
                "{i} not once in {order:?}"
            );
        }
    }
    assert!(
        order.iter().all(|o| partition.contains(o)),
        "{order:?} leaves {partition:?}"
    );
    for (a, &x) in order.iter().enumerate() {
        for &y in &order[a + 1..] {
            let y_before_x = ops[y].return_time().is_some_and(|r| r < ops[x].call);
            assert!(
                !y_before_x,
                "{y} returned before {x} was called but comes after it"
            );
        }
    }
    let mut state = HashMap::new();
    for &i in order {
        state = kv_apply(&state, &ops[i].input, ops[i].output())
            .unwrap_or_else(|| panic!("operation {i} does not replay in {order:?}"));
    }
}

/// The operations at `exact` as recorded and those at `relax` relaxed.
fn specs(
    history: &KvHistory,
    exact_ops: &[usize],
    relax: &[usize],
) -> Vec<Spec<KvInput, KvOutput>> {
    let ops = history.operations();
    exact_ops
        .iter()
        .map(|&i| exact(&ops[i]))
        .chain(relax.iter().map(|&i| relaxed(&ops[i])))
        .collect()
}

fn brute_kv(specs: &[Spec<KvInput, KvOutput>]) -> bool {
    brute_force(specs, HashMap::new(), &kv_apply)
}

/// Checks `history`, asserts the verdict is the brute force's and that the evidence holds.
/// `minimality` also checks that a counterexample was shrunk to the end and is 1-minimal by
/// the brute force.
fn check_against_brute_force(history: &KvHistory, minimality: bool) -> CheckResult<String> {
    let result = check(&KvModel, history, &CheckOptions::default());
    let linearizable = kv_linearizable(history);
    let expected = if linearizable {
        Verdict::Linearizable
    } else {
        Verdict::Illegal
    };
    assert_eq!(result.verdict, expected, "{history:#?}");
    assert_evidence(history, &result, minimality);
    result
}

fn assert_evidence(history: &KvHistory, result: &CheckResult<String>, minimality: bool) {
    for p in &result.partitions {
        if let PartitionOutcome::Linearizable { order } = &p.outcome {
            assert_order_replays(history, &p.operations, order);
        }
    }
    let Some(c) = &result.counterexample else {
        return;
    };
    let partition = &result
        .partitions
        .iter()
        .find(|p| p.key == c.key)
        .expect("the counterexample's partition is reported")
        .operations;
    assert!(c.operations.iter().all(|i| partition.contains(i)));
    assert!(
        c.context
            .iter()
            .all(|i| partition.contains(i) && !c.operations.contains(i))
    );
    let alone = history.subset(&c.operations);
    assert!(
        !kv_linearizable(&alone),
        "counterexample {:?} is linearizable alone",
        c.operations
    );
    if minimality {
        assert!(
            c.one_minimal,
            "counterexample {:?} not shrunk to the end",
            c.operations
        );
        assert!(!brute_kv(&specs(history, &c.operations, &c.context)));
        let without = |o: usize, from: &[usize]| -> Vec<usize> {
            from.iter().copied().filter(|&i| i != o).collect()
        };
        for &o in &c.operations {
            let mut relax = c.context.clone();
            relax.push(o);
            assert!(
                brute_kv(&specs(history, &without(o, &c.operations), &relax)),
                "relaxing {o} of {:?} (context {:?}) leaves it illegal",
                c.operations,
                c.context
            );
        }
        for &k in &c.context {
            let needed = c.operations.iter().any(|&o| {
                let mut relax = without(k, &c.context);
                relax.push(o);
                !brute_kv(&specs(history, &without(o, &c.operations), &relax))
            });
            assert!(needed, "context {k} of {:?} is not needed", c.context);
        }
    }
}

#[test]
fn generated_histories_are_linearizable_for_both_checkers() {
    let mut pending = 0;
    for seed in 0..1500 {
        let workload = small_workload(&mut rng(seed));
        let history = kv_history(&workload, seed);
        pending += history
            .operations()
            .iter()
            .filter(|o| o.ret.is_none())
            .count();
        let result = check_against_brute_force(&history, false);
        assert_eq!(result.verdict, Verdict::Linearizable, "seed {seed}");
    }
    assert!(pending > 100, "crashes leave operations pending: {pending}");
}

#[test]
fn mutated_histories_get_the_brute_force_verdict() {
    let mut illegal = 0;
    let total = 3000;
    for seed in 0..total {
        let mut rng = rng(1_000_000 + seed);
        let workload = small_workload(&mut rng);
        let mut history = kv_history(&workload, seed);
        for _ in 0..rng.random_range(1..=2) {
            history = mutate(&history, &mut rng);
        }
        if check_against_brute_force(&history, true).verdict == Verdict::Illegal {
            illegal += 1;
        }
    }
    assert!(
        illegal > total / 8,
        "only {illegal} of {total} mutants are illegal"
    );
    assert!(
        illegal < total * 4 / 5,
        "{illegal} of {total} mutants are illegal"
    );
}

#[test]
fn medium_mutated_histories_have_replaying_witnesses_and_illegal_counterexamples() {
    let mut illegal = 0;
    for seed in 0..300 {
        let mut rng = rng(2_000_000 + seed);
        let workload = KvWorkload {
            clients: 3,
            operations: rng.random_range(20..=40),
            keys: 2,
            crash_chance: 0.05,
            max_latency: 4,
        };
        let history = mutate(&kv_history(&workload, seed), &mut rng);
        let result = check(&KvModel, &history, &CheckOptions::default());
        assert_ne!(result.verdict, Verdict::Unknown);
        if result.verdict == Verdict::Illegal {
            illegal += 1;
            let c = result.counterexample.as_ref().unwrap();
            assert!(c.operations.len() <= 10, "{:?}", c.operations);
        }
        assert_evidence(&history, &result, false);
    }
    assert!(illegal > 30, "{illegal}");
}

#[test]
fn large_generated_histories_with_crashes_are_linearizable() {
    for seed in 0..60 {
        let workload = KvWorkload {
            clients: 5,
            operations: 400,
            keys: 4,
            crash_chance: 0.03,
            max_latency: 10,
        };
        let history = kv_history(&workload, seed);
        let result = check(&KvModel, &history, &CheckOptions::default());
        assert_eq!(result.verdict, Verdict::Linearizable, "seed {seed}");
        assert_evidence(&history, &result, false);
    }
}

/// A random register history: operations take effect at a random instant of their interval
/// (or, for one that never returns, maybe not at all), and half the time one output is then
/// corrupted.
fn register_history(rng: &mut ChaCha8Rng) -> History<RegisterInput, RegisterOutput> {
    struct Planned {
        call: u64,
        ret: Option<u64>,
        effect: Option<u64>,
        input: RegisterInput,
    }
    let n = rng.random_range(2..=7);
    let planned: Vec<Planned> = (0..n)
        .map(|_| {
            let call = rng.random_range(0..20);
            let effect = call + rng.random_range(0..4);
            let ret = effect + rng.random_range(0..4);
            let input = match rng.random_range(0..3) {
                0 => RegisterInput::Read,
                1 => RegisterInput::Write {
                    value: rng.random_range(0..3),
                },
                _ => RegisterInput::Cas {
                    from: rng.random_range(0..3),
                    to: rng.random_range(0..3),
                },
            };
            let pending = rng.random_bool(0.1);
            Planned {
                call,
                ret: (!pending).then_some(ret),
                effect: (!pending || rng.random_bool(0.5)).then_some(effect),
                input,
            }
        })
        .collect();
    let mut order: Vec<usize> = (0..n).filter(|&i| planned[i].effect.is_some()).collect();
    order.sort_by_key(|&i| (planned[i].effect, i));
    let mut state = None;
    let mut outputs = vec![None; n];
    for i in order {
        outputs[i] = Some(match planned[i].input {
            RegisterInput::Read => RegisterOutput::Read { value: state },
            RegisterInput::Write { value } => {
                state = Some(value);
                RegisterOutput::Write
            }
            RegisterInput::Cas { from, to } => {
                let ok = state == Some(from);
                if ok {
                    state = Some(to);
                }
                RegisterOutput::Cas { ok }
            }
        });
    }
    if rng.random_bool(0.5) {
        let i = rng.random_range(0..n);
        outputs[i] = match outputs[i].take() {
            Some(RegisterOutput::Read { value }) => Some(RegisterOutput::Read {
                value: if value.is_some() && rng.random_bool(0.3) {
                    None
                } else {
                    Some(rng.random_range(0..3))
                },
            }),
            Some(RegisterOutput::Cas { ok }) => Some(RegisterOutput::Cas { ok: !ok }),
            other => other,
        };
    }
    let ops = planned
        .into_iter()
        .zip(outputs)
        .enumerate()
        .map(|(c, (p, output))| match (p.ret, output) {
            (Some(ret), Some(output)) => {
                Operation::returned(c as u64, p.call, p.input, ret, output)
            }
            _ => Operation::pending(c as u64, p.call, p.input),
        })
        .collect();
    History::new(ops).unwrap()
}

#[test]
fn register_histories_get_the_brute_force_verdict() {
    let (mut legal, mut illegal) = (0, 0);
    for seed in 0..2000 {
        let history = register_history(&mut rng(3_000_000 + seed));
        let result = check(&RegisterModel, &history, &CheckOptions::default());
        let linearizable = register_linearizable(&history);
        let expected = if linearizable {
            Verdict::Linearizable
        } else {
            Verdict::Illegal
        };
        assert_eq!(result.verdict, expected, "seed {seed}: {history:#?}");
        if let Some(c) = result.counterexample {
            illegal += 1;
            let alone: Vec<_> = c
                .operations
                .iter()
                .map(|&i| exact(&history.operations()[i]))
                .collect();
            assert!(!brute_force(&alone, None, &register_apply));
            assert!(c.one_minimal);
        } else {
            legal += 1;
        }
    }
    assert!(
        legal > 500 && illegal > 300,
        "{legal} legal, {illegal} illegal"
    );
}
