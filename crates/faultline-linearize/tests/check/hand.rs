//! Hand-made histories whose answers are known.

use std::time::{Duration, Instant};

use faultline_linearize::models::{
    KvInput, KvModel, KvOutput, RegisterInput, RegisterModel, RegisterOutput,
};
use faultline_linearize::{
    CheckOptions, CheckResult, History, Operation, PartitionOutcome, Verdict, check, describe,
};

use crate::brute::{kv_linearizable, register_linearizable};

type Kv = Operation<KvInput, KvOutput>;

fn put(client: u64, call: u64, ret: u64, key: &str, value: &str) -> Kv {
    let input = KvInput::Put {
        key: key.into(),
        value: value.into(),
    };
    Operation::returned(client, call, input, ret, KvOutput::Put)
}

fn append(client: u64, call: u64, ret: u64, key: &str, value: &str) -> Kv {
    let input = KvInput::Append {
        key: key.into(),
        value: value.into(),
    };
    Operation::returned(client, call, input, ret, KvOutput::Append)
}

fn get(client: u64, call: u64, ret: u64, key: &str, value: &str) -> Kv {
    let input = KvInput::Get { key: key.into() };
    Operation::returned(
        client,
        call,
        input,
        ret,
        KvOutput::Get {
            value: value.into(),
        },
    )
}

fn pending_put(client: u64, call: u64, key: &str, value: &str) -> Kv {
    let input = KvInput::Put {
        key: key.into(),
        value: value.into(),
    };
    Operation::pending(client, call, input)
}

/// Checks with the default options, and asserts the brute force agrees.
fn kv(ops: Vec<Kv>) -> CheckResult<String> {
    let history = History::new(ops).unwrap();
    let result = check(&KvModel, &history, &CheckOptions::default());
    let expected = if kv_linearizable(&history) {
        Verdict::Linearizable
    } else {
        Verdict::Illegal
    };
    assert_eq!(result.verdict, expected, "the brute force disagrees");
    result
}

/// The counterexample's operations and context, asserting it is 1-minimal.
fn counterexample(result: &CheckResult<String>) -> (Vec<usize>, Vec<usize>) {
    let c = result
        .counterexample
        .as_ref()
        .expect("an illegal history has a counterexample");
    assert!(c.one_minimal);
    (c.operations.clone(), c.context.clone())
}

#[test]
fn concurrent_appends_land_in_either_order_but_both_land() {
    let appends = || vec![append(1, 0, 10, "x", "a"), append(2, 0, 10, "x", "b")];
    for seen in ["ab", "ba"] {
        let mut ops = appends();
        ops.push(get(3, 20, 30, "x", seen));
        assert_eq!(kv(ops).verdict, Verdict::Linearizable, "{seen}");
    }
    let mut ops = appends();
    ops.push(get(3, 20, 30, "x", "a"));
    let result = kv(ops);
    assert_eq!(result.verdict, Verdict::Illegal);
    // b landed and the read missed it; a explains the value read.
    assert_eq!(counterexample(&result), (vec![1, 2], vec![0]));
}

#[test]
fn two_reads_must_agree_on_the_order_of_concurrent_appends() {
    let ops = |last: &str| {
        vec![
            append(1, 0, 10, "x", "a"),
            append(2, 0, 10, "x", "b"),
            get(3, 5, 15, "x", "b"),
            get(3, 20, 30, "x", last),
        ]
    };
    assert_eq!(kv(ops("ba")).verdict, Verdict::Linearizable);
    let result = kv(ops("ab"));
    assert_eq!(result.verdict, Verdict::Illegal);
    let (operations, _) = counterexample(&result);
    assert!(
        operations.contains(&2) && operations.contains(&3),
        "{operations:?}"
    );
}

#[test]
fn a_stale_read_after_a_completed_write_is_illegal() {
    let result = kv(vec![put(1, 0, 10, "x", "1"), get(2, 20, 30, "x", "")]);
    assert_eq!(result.verdict, Verdict::Illegal);
    assert_eq!(counterexample(&result), (vec![0, 1], vec![]));
    assert_eq!(
        kv(vec![put(1, 0, 10, "x", "1"), get(2, 10, 30, "x", "")]).verdict,
        Verdict::Linearizable,
        "a read called as the write returns is concurrent with it"
    );
}

#[test]
fn a_stale_read_keeps_the_overwrite_with_the_write_it_saw_as_context() {
    let result = kv(vec![
        put(1, 0, 5, "x", "1"),
        put(1, 10, 15, "x", "2"),
        get(2, 20, 25, "x", "1"),
    ]);
    assert_eq!(result.verdict, Verdict::Illegal);
    assert_eq!(counterexample(&result), (vec![1, 2], vec![0]));
}

#[test]
fn two_reads_that_disagree_on_whether_a_write_happened_are_the_counterexample() {
    // Even if the writes may not have happened, the first read says the second write did
    // not happen by 20 and the second read says it did, after its return at 15.
    let result = kv(vec![
        put(1, 0, 5, "x", "1"),
        put(1, 10, 15, "x", "2"),
        get(2, 20, 25, "x", "1"),
        get(2, 30, 35, "x", "2"),
    ]);
    assert_eq!(result.verdict, Verdict::Illegal);
    assert_eq!(counterexample(&result), (vec![2, 3], vec![0, 1]));
}

#[test]
fn a_read_of_a_value_before_its_write_was_called_is_illegal() {
    let result = kv(vec![get(1, 0, 5, "x", "1"), put(2, 6, 10, "x", "1")]);
    assert_eq!(result.verdict, Verdict::Illegal);
    assert_eq!(counterexample(&result), (vec![0], vec![]));
    assert_eq!(
        kv(vec![get(1, 0, 5, "x", "1"), put(2, 5, 10, "x", "1")]).verdict,
        Verdict::Linearizable
    );
}

#[test]
fn an_operation_that_never_returned_may_take_effect_later_or_never() {
    let later = kv(vec![pending_put(1, 0, "x", "1"), get(2, 10, 20, "x", "1")]);
    assert_eq!(later.verdict, Verdict::Linearizable);
    let never = kv(vec![
        pending_put(1, 0, "x", "1"),
        get(2, 10, 20, "x", ""),
        get(2, 30, 40, "x", ""),
    ]);
    assert_eq!(never.verdict, Verdict::Linearizable);
    let before_call = kv(vec![pending_put(1, 50, "x", "1"), get(2, 10, 20, "x", "1")]);
    assert_eq!(before_call.verdict, Verdict::Illegal);
}

#[test]
fn an_operation_that_never_returned_cannot_be_undone() {
    let result = kv(vec![
        pending_put(1, 0, "x", "1"),
        get(2, 10, 20, "x", "1"),
        get(2, 30, 40, "x", ""),
    ]);
    assert_eq!(result.verdict, Verdict::Illegal);
    assert_eq!(
        counterexample(&result),
        (vec![1, 2], vec![0]),
        "the write the first read saw is the context"
    );
}

#[test]
fn partitions_are_judged_apart_and_the_illegal_key_is_named() {
    let result = kv(vec![
        put(1, 0, 10, "x", "1"),
        put(2, 0, 10, "y", "1"),
        get(1, 20, 30, "x", "1"),
        get(2, 20, 30, "y", ""),
    ]);
    assert_eq!(result.verdict, Verdict::Illegal);
    assert_eq!(result.partitions.len(), 2);
    assert_eq!(result.partitions[0].key, "x");
    assert_eq!(result.partitions[0].operations, vec![0, 2]);
    let c = result.counterexample.as_ref().unwrap();
    assert_eq!(c.key, "y");
    assert_eq!(counterexample(&result), (vec![1, 3], vec![]));
    assert!(matches!(
        result.partitions[1].outcome,
        PartitionOutcome::Illegal { .. }
    ));
}

#[test]
fn a_linearizable_partition_reports_its_order() {
    let result = kv(vec![
        get(1, 0, 30, "x", "12"),
        append(2, 5, 6, "x", "1"),
        append(3, 7, 8, "x", "2"),
    ]);
    assert_eq!(
        result.partitions[0].outcome,
        PartitionOutcome::Linearizable {
            order: vec![1, 2, 0]
        }
    );
}

#[test]
fn compare_and_set_must_agree_with_the_register() {
    let write = |call, value| {
        Operation::returned(
            0,
            call,
            RegisterInput::Write { value },
            call + 1,
            RegisterOutput::Write,
        )
    };
    let cas = |call, ok| {
        let input = RegisterInput::Cas { from: 1, to: 2 };
        Operation::returned(1, call, input, call + 1, RegisterOutput::Cas { ok })
    };
    let read = |call, value| {
        Operation::returned(
            2,
            call,
            RegisterInput::Read,
            call + 1,
            RegisterOutput::Read { value },
        )
    };
    let run = |ops| {
        let history = History::new(ops).unwrap();
        let result = check(&RegisterModel, &history, &CheckOptions::default());
        assert_eq!(
            result.verdict == Verdict::Linearizable,
            register_linearizable(&history)
        );
        result.verdict
    };
    assert_eq!(
        run(vec![write(0, 1), cas(2, true), read(4, Some(2))]),
        Verdict::Linearizable
    );
    assert_eq!(run(vec![write(0, 1), cas(2, false)]), Verdict::Illegal);
    assert_eq!(
        run(vec![read(0, None), cas(2, false), read(4, None)]),
        Verdict::Linearizable
    );
}

/// Twenty appends all concurrent with a read of a value none of their orders gives.
fn hard_history() -> History<KvInput, KvOutput> {
    let mut ops: Vec<Kv> = (0..20)
        .map(|c| append(c, 0, 100, "x", &format!("{c},")))
        .collect();
    ops.push(get(99, 0, 100, "x", "never"));
    History::new(ops).unwrap()
}

#[test]
fn a_step_budget_gives_unknown() {
    let options = CheckOptions {
        max_steps: Some(10_000),
        ..CheckOptions::default()
    };
    let result = check(&KvModel, &hard_history(), &options);
    assert_eq!(result.verdict, Verdict::Unknown);
    assert!(result.counterexample.is_none());
    assert_eq!(result.partitions[0].outcome, PartitionOutcome::Unknown);
    assert!(result.steps <= 10_001, "{}", result.steps);
}

#[test]
fn a_timeout_gives_unknown_promptly() {
    let options = CheckOptions {
        timeout: Some(Duration::from_millis(50)),
        ..CheckOptions::default()
    };
    let start = Instant::now();
    let result = check(&KvModel, &hard_history(), &options);
    assert_eq!(result.verdict, Verdict::Unknown);
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "{:?}",
        start.elapsed()
    );
}

#[test]
fn a_history_read_back_from_json_lines_gets_the_same_verdict() {
    let history = History::new(vec![
        put(1, 0, 10, "x", "1"),
        pending_put(3, 2, "x", "2"),
        get(2, 20, 30, "x", ""),
    ])
    .unwrap();
    let mut bytes = Vec::new();
    history.write_jsonl(&mut bytes).unwrap();
    let text = String::from_utf8(bytes).unwrap();
    assert!(text.starts_with(
        r#"{"client":1,"call":0,"input":{"op":"put","key":"x","value":"1"},"return":{"time":10,"output":{"op":"put"}}}"#
    ));
    let back: History<KvInput, KvOutput> = History::read_jsonl(text.as_bytes()).unwrap();
    assert_eq!(back, history);
    let result = check(&KvModel, &back, &CheckOptions::default());
    assert_eq!(result.verdict, Verdict::Illegal);
    assert_eq!(
        describe(&KvModel, &back, &result.counterexample.unwrap().operations),
        "#0 client 1 [0, 10] put(\"x\", \"1\") -> ok\n#2 client 2 [20, 30] get(\"x\") -> \"\"\n"
    );
    assert_eq!(
        describe(&KvModel, &back, &[1]),
        "#1 client 3 [2, ...) put(\"x\", \"2\") -> ?\n"
    );
}

#[test]
fn an_empty_history_is_linearizable() {
    let result = kv(vec![]);
    assert_eq!(result.verdict, Verdict::Linearizable);
    assert!(result.partitions.is_empty());
}
