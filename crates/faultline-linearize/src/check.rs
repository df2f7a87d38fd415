//! Checking a whole history: partition it, search each partition, shrink the first illegal one.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::budget::Budget;
use crate::history::History;
use crate::model::Model;
use crate::search::{Op, Search, Searcher};
use crate::shrink::shrink;

/// Limits and choices of one check.
#[derive(Debug, Clone)]
pub struct CheckOptions {
    /// Search steps the verdict may take over all partitions (one step is one event visited);
    /// past it the verdict is [`Verdict::Unknown`]. `None`: no limit.
    pub max_steps: Option<u64>,
    /// Wall-clock time the whole check may take, minimization included; past it the verdict
    /// is [`Verdict::Unknown`] (or the counterexample is left as found). `None`: no limit.
    pub timeout: Option<Duration>,
    /// Whether to shrink an illegal partition to a 1-minimal counterexample.
    pub minimize: bool,
    /// Search steps the shrinking may take on top of the verdict's; past it the counterexample
    /// is reported as found so far, not 1-minimal. `None`: no limit.
    pub minimize_max_steps: Option<u64>,
}

impl Default for CheckOptions {
    /// No limit on the verdict; minimization on, within 20 million steps (seconds).
    fn default() -> Self {
        CheckOptions {
            max_steps: None,
            timeout: None,
            minimize: true,
            minimize_max_steps: Some(20_000_000),
        }
    }
}

/// The answer about a history.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Every partition has a linearization.
    Linearizable,
    /// Some partition has none.
    Illegal,
    /// The budget ran out before either was shown.
    Unknown,
}

/// What happened to one partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PartitionOutcome {
    /// A linearization: every completed operation and the pending ones that took effect, as
    /// history indices in the order they took effect.
    Linearizable {
        /// The order.
        order: Vec<usize>,
    },
    /// No linearization exists.
    Illegal {
        /// The longest prefix of a linearization the search built before it had to give up,
        /// as history indices: evidence of where it got stuck.
        longest_prefix: Vec<usize>,
    },
    /// Not decided: the budget ran out, or another partition was found illegal first.
    Unknown,
}

/// One partition of the history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionReport<K> {
    /// Its key.
    pub key: K,
    /// Its operations, as history indices in history order.
    pub operations: Vec<usize>,
    /// What the search found.
    pub outcome: PartitionOutcome,
    /// Search steps spent on it.
    pub steps: u64,
}

/// A small illegal sub-history of the first illegal partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Counterexample<K> {
    /// The partition it comes from.
    pub key: K,
    /// Its operations, as history indices in call order. Alone they are not linearizable,
    /// nor with the context.
    pub operations: Vec<usize>,
    /// Operations of the partition that explain why each of `operations` is needed, as
    /// history indices in call order, read as *relaxed*: each may have taken effect at some
    /// instant of its interval (after its call, for one that never returned) with any output,
    /// or not at all. Typically the write a stale read saw, or a never-returned write a read
    /// saw. Without one of them some operation of the counterexample would be illegal for
    /// another reason.
    pub context: Vec<usize>,
    /// Whether it is 1-minimal: relaxing any one of its operations too makes it, with the
    /// context, linearizable. `false` when minimization was off or an attempt ran out of
    /// budget.
    pub one_minimal: bool,
}

/// The result of [`check`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckResult<K> {
    /// The answer.
    pub verdict: Verdict,
    /// Every partition, in key order.
    pub partitions: Vec<PartitionReport<K>>,
    /// Evidence when the verdict is [`Verdict::Illegal`].
    pub counterexample: Option<Counterexample<K>>,
    /// Search steps spent on the verdict.
    pub steps: u64,
    /// Search steps spent shrinking the counterexample.
    pub minimize_steps: u64,
}

/// The operations of a history borrowed as the search needs them.
fn ops_of<'h, M: Model>(
    history: &'h History<M::Input, M::Output>,
    indices: &[usize],
) -> Vec<Op<'h, M::Input, M::Output>> {
    let all = history.operations();
    indices
        .iter()
        .map(|&i| Op {
            call: all[i].call,
            ret: all[i].return_time(),
            input: &all[i].input,
            output: all[i].output(),
            may_skip: all[i].ret.is_none(),
        })
        .collect()
}

/// Steps a partition searches before the next one takes its turn.
const TURN: u64 = 4096;

/// Checks `history` against `model`: linearizable, illegal (with a counterexample when asked),
/// or unknown when the options' budget runs out.
///
/// Partitions take turns of a few thousand search steps each, so an illegal partition is found
/// about as soon as it would be alone even when another partition is slow to search, and the
/// check stops there; the partitions not finished by then are reported
/// [`PartitionOutcome::Unknown`].
pub fn check<M: Model>(
    model: &M,
    history: &History<M::Input, M::Output>,
    options: &CheckOptions,
) -> CheckResult<M::Key> {
    let deadline = options.timeout.map(|t| Instant::now() + t);
    let mut budget = Budget::new(options.max_steps, deadline);
    let mut groups: BTreeMap<M::Key, Vec<usize>> = BTreeMap::new();
    for (i, op) in history.operations().iter().enumerate() {
        groups
            .entry(model.partition(&op.input))
            .or_default()
            .push(i);
    }
    let groups: Vec<(M::Key, Vec<usize>)> = groups.into_iter().collect();
    let mut outcomes = vec![PartitionOutcome::Unknown; groups.len()];
    let mut steps = vec![0; groups.len()];
    let mut active: Vec<(usize, Searcher<'_, '_, M>)> = groups
        .iter()
        .enumerate()
        .map(|(k, (_, indices))| (k, Searcher::new(model, ops_of::<M>(history, indices))))
        .collect();
    let to_history = |k: usize, positions: Vec<usize>| -> Vec<usize> {
        positions.into_iter().map(|p| groups[k].1[p]).collect()
    };
    let mut illegal = None;
    'turns: while !active.is_empty() {
        let mut a = 0;
        while a < active.len() {
            let (k, searcher) = &mut active[a];
            let k = *k;
            let before = budget.steps();
            let found = budget.capped(TURN, |b| searcher.run(b));
            steps[k] += budget.steps() - before;
            match found {
                Search::Exhausted if budget.exhausted() => break 'turns,
                Search::Exhausted => a += 1,
                Search::Linearizable(order) => {
                    outcomes[k] = PartitionOutcome::Linearizable {
                        order: to_history(k, order),
                    };
                    active.remove(a);
                }
                Search::Illegal(longest) => {
                    outcomes[k] = PartitionOutcome::Illegal {
                        longest_prefix: to_history(k, longest),
                    };
                    illegal = Some(k);
                    break 'turns;
                }
            }
        }
    }
    drop(active);
    let mut minimize_steps = 0;
    let counterexample = illegal.map(|k| {
        let (key, indices) = &groups[k];
        let by_call = |mut positions: Vec<usize>| {
            positions.sort_by_key(|&p| (history.operations()[indices[p]].call, p));
            to_history(k, positions)
        };
        if !options.minimize {
            return Counterexample {
                key: key.clone(),
                operations: by_call((0..indices.len()).collect()),
                context: Vec::new(),
                one_minimal: false,
            };
        }
        let ops = ops_of::<M>(history, indices);
        let mut shrink_budget = Budget::new(options.minimize_max_steps, deadline);
        let shrunk = shrink(model, &ops, steps[k], &mut shrink_budget);
        minimize_steps = shrink_budget.steps();
        Counterexample {
            key: key.clone(),
            operations: by_call(shrunk.positions),
            context: by_call(shrunk.context),
            one_minimal: shrunk.one_minimal,
        }
    });
    let verdict = if counterexample.is_some() {
        Verdict::Illegal
    } else if outcomes
        .iter()
        .all(|o| matches!(o, PartitionOutcome::Linearizable { .. }))
    {
        Verdict::Linearizable
    } else {
        Verdict::Unknown
    };
    let partitions = groups
        .into_iter()
        .zip(outcomes)
        .zip(steps)
        .map(|(((key, operations), outcome), steps)| PartitionReport {
            key,
            operations,
            outcome,
            steps,
        })
        .collect();
    CheckResult {
        verdict,
        partitions,
        counterexample,
        steps: budget.steps(),
        minimize_steps,
    }
}

/// One line per operation at `indices` (history order kept): index, client, interval and the
/// model's description, e.g. `#12 client 3 [120, 140] put("x", "1") -> ok`. A pending
/// operation's interval reads `[120, ...)`.
pub fn describe<M: Model>(
    model: &M,
    history: &History<M::Input, M::Output>,
    indices: &[usize],
) -> String {
    let mut out = String::new();
    for &i in indices {
        let Some(op) = history.operations().get(i) else {
            continue;
        };
        let interval = match op.return_time() {
            Some(ret) => format!("[{}, {ret}]", op.call),
            None => format!("[{}, ...)", op.call),
        };
        let _ = writeln!(
            out,
            "#{i} client {} {interval} {}",
            op.client,
            model.describe_operation(&op.input, op.output())
        );
    }
    out
}
