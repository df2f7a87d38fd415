//! What the integration tests share: a brute-force linearizability checker written apart from
//! the crate's search, sequential specifications of its own, and seeded mutations.

use std::collections::HashMap;

use faultline_linearize::models::{KvInput, KvOutput, RegisterInput, RegisterOutput};
use faultline_linearize::{History, Operation};
use rand::rngs::ChaCha8Rng;
use rand::{RngExt, SeedableRng};

/// An operation as the brute force sees it.
#[derive(Debug, Clone)]
pub struct Spec<I, O> {
    pub call: u64,
    pub ret: Option<u64>,
    pub input: I,
    /// `None`: any output.
    pub output: Option<O>,
    /// Whether it may also have had no effect at all.
    pub may_skip: bool,
}

/// `op` as recorded: it took effect inside its interval with its output, or, if it never
/// returned, at any instant after its call or not at all.
pub fn exact<I: Clone, O: Clone>(op: &Operation<I, O>) -> Spec<I, O> {
    Spec {
        call: op.call,
        ret: op.return_time(),
        input: op.input.clone(),
        output: op.output().cloned(),
        may_skip: op.ret.is_none(),
    }
}

/// `op` relaxed: it took effect inside its interval with any output, or not at all.
pub fn relaxed<I: Clone, O: Clone>(op: &Operation<I, O>) -> Spec<I, O> {
    Spec {
        output: None,
        may_skip: true,
        ..exact(op)
    }
}

/// Whether some order of the operations exists that respects real time (an operation that
/// returned before another was called comes first; intervals are closed), leaves out only
/// operations that may be skipped, and that `apply` accepts from `init`. Tries every such
/// order, with no memo.
pub fn brute_force<I, O, S: Clone>(
    ops: &[Spec<I, O>],
    init: S,
    apply: &impl Fn(&S, &I, Option<&O>) -> Option<S>,
) -> bool {
    fn go<I, O, S: Clone>(
        ops: &[Spec<I, O>],
        placed: &mut Vec<bool>,
        state: &S,
        apply: &impl Fn(&S, &I, Option<&O>) -> Option<S>,
    ) -> bool {
        let unplaced: Vec<usize> = (0..ops.len()).filter(|&i| !placed[i]).collect();
        if unplaced.iter().all(|&i| ops[i].may_skip) {
            return true;
        }
        for &i in &unplaced {
            // Skipping an operation is allowed at any moment.
            if ops[i].may_skip && ops[i].ret.is_some() {
                placed[i] = true;
                if go(ops, placed, state, apply) {
                    return true;
                }
                placed[i] = false;
            }
            // No operation still unplaced may have returned before this one's call.
            let blocked = unplaced
                .iter()
                .any(|&j| j != i && ops[j].ret.is_some_and(|r| r < ops[i].call));
            if blocked {
                continue;
            }
            if let Some(next) = apply(state, &ops[i].input, ops[i].output.as_ref()) {
                placed[i] = true;
                if go(ops, placed, &next, apply) {
                    return true;
                }
                placed[i] = false;
            }
        }
        false
    }
    go(ops, &mut vec![false; ops.len()], &init, apply)
}

/// A key-value store as one map of every key, with a missing key read as empty.
pub fn kv_apply(
    state: &HashMap<String, String>,
    input: &KvInput,
    output: Option<&KvOutput>,
) -> Option<HashMap<String, String>> {
    let current = state.get(input.key()).cloned().unwrap_or_default();
    let mut next = state.clone();
    match (input, output) {
        (KvInput::Get { .. }, None) => {}
        (KvInput::Get { .. }, Some(KvOutput::Get { value })) if *value == current => {}
        (KvInput::Put { key, value }, None | Some(KvOutput::Put)) => {
            next.insert(key.clone(), value.clone());
        }
        (KvInput::Append { key, value }, None | Some(KvOutput::Append)) => {
            next.insert(key.clone(), current + value);
        }
        _ => return None,
    }
    Some(next)
}

/// A register with no value at first.
pub fn register_apply(
    state: &Option<i64>,
    input: &RegisterInput,
    output: Option<&RegisterOutput>,
) -> Option<Option<i64>> {
    match (input, output) {
        (RegisterInput::Read, None) => Some(*state),
        (RegisterInput::Read, Some(RegisterOutput::Read { value })) => {
            (value == state).then_some(*state)
        }
        (RegisterInput::Write { value }, None | Some(RegisterOutput::Write)) => Some(Some(*value)),
        (RegisterInput::Cas { from, to }, None) => Some(if *state == Some(*from) {
            Some(*to)
        } else {
            *state
        }),
        (RegisterInput::Cas { from, to }, Some(RegisterOutput::Cas { ok })) => {
            match (*state == Some(*from), ok) {
                (true, true) => Some(Some(*to)),
                (false, false) => Some(*state),
                _ => None,
            }
        }
        _ => None,
    }
}

/// Brute-force verdict on a whole key-value history.
pub fn kv_linearizable(history: &History<KvInput, KvOutput>) -> bool {
    let ops: Vec<_> = history.operations().iter().map(exact).collect();
    brute_force(&ops, HashMap::new(), &kv_apply)
}

/// Brute-force verdict on a register history.
pub fn register_linearizable(history: &History<RegisterInput, RegisterOutput>) -> bool {
    let ops: Vec<_> = history.operations().iter().map(exact).collect();
    brute_force(&ops, None, &register_apply)
}

/// A copy of `history` with one random change to outputs or timing, for the tests that compare
/// verdicts; the change may or may not break linearizability.
pub fn mutate(
    history: &History<KvInput, KvOutput>,
    rng: &mut ChaCha8Rng,
) -> History<KvInput, KvOutput> {
    let mut ops = history.operations().to_vec();
    if ops.is_empty() {
        return history.clone();
    }
    let i = rng.random_range(0..ops.len());
    // Values that a read of this key could plausibly show.
    let key = ops[i].input.key().to_string();
    let mut seen: Vec<String> = vec![String::new(), "zz".into()];
    for op in &ops {
        if op.input.key() == key
            && let KvInput::Put { value, .. } | KvInput::Append { value, .. } = &op.input
        {
            seen.push(value.clone());
            let last = seen[seen.len() - 2].clone();
            seen.push(last + value);
        }
        if let Some(KvOutput::Get { value }) = op.output() {
            seen.push(value.clone());
        }
    }
    match rng.random_range(0..5) {
        0 | 1 => {
            // Another value read, if the operation is a completed get.
            let pick = seen[rng.random_range(0..seen.len())].clone();
            if let Some(ret) = ops[i].ret.as_mut()
                && let KvOutput::Get { value } = &mut ret.output
            {
                *value = pick;
            }
        }
        2 => {
            // A narrower interval: a later call or an earlier return.
            if let Some(time) = ops[i].return_time() {
                let t = rng.random_range(ops[i].call..=time);
                if rng.random_bool(0.5) {
                    ops[i].ret.as_mut().expect("it returned").time = t;
                } else {
                    ops[i].call = t;
                }
            }
        }
        3 => {
            // Swap what two completed gets read.
            let j = rng.random_range(0..ops.len());
            let (a, b) = (ops[i].output().cloned(), ops[j].output().cloned());
            if let (Some(a @ KvOutput::Get { .. }), Some(b @ KvOutput::Get { .. })) = (a, b) {
                ops[i].ret.as_mut().expect("it returned").output = b;
                ops[j].ret.as_mut().expect("it returned").output = a;
            }
        }
        _ => {
            // Another value written.
            if let KvInput::Put { value, .. } | KvInput::Append { value, .. } = &mut ops[i].input {
                value.push('!');
            }
        }
    }
    History::new(ops).expect("mutations keep every call before its return")
}

/// A seeded stream for a test.
pub fn rng(seed: u64) -> ChaCha8Rng {
    ChaCha8Rng::seed_from_u64(seed)
}
