//! Checking a whole history: partition it, search each partition, shrink the first illegal one.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::budget::Budget;
use crate::history::History;
use crate::model::Model;
use crate::search::{Op, Search, search};
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
    /// The budget ran out during this partition.
    Unknown,
    /// Not searched: an earlier partition was illegal, or the budget was already spent.
    Unchecked,
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
    /// Its operations, as history indices in call order. Alone they are not linearizable.
    pub operations: Vec<usize>,
    /// Whether it is 1-minimal: relaxing any one of its operations to "never returned", and
    /// so also removing it, makes it linearizable. `false` when minimization was off or ran
    /// out of budget.
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
        })
        .collect()
}

/// Checks `history` against `model`: linearizable, illegal (with a counterexample when asked),
/// or unknown when the options' budget runs out. Partitions are searched in key order and the
/// check stops at the first illegal one.
pub fn check<M: Model>(
    model: &M,
    history: &History<M::Input, M::Output>,
    options: &CheckOptions,
) -> CheckResult<M::Key> {
    let deadline = options.timeout.map(|t| Instant::now() + t);
    let mut budget = Budget::new(options.max_steps, deadline);
    let mut groups: BTreeMap<M::Key, Vec<usize>> = BTreeMap::new();
    for (i, op) in history.operations().iter().enumerate() {
        groups.entry(model.partition(&op.input)).or_default().push(i);
    }
    let mut verdict = Verdict::Linearizable;
    let mut partitions = Vec::with_capacity(groups.len());
    let mut counterexample = None;
    let mut minimize_steps = 0;
    for (key, indices) in groups {
        if verdict == Verdict::Illegal || budget.exhausted() {
            if verdict == Verdict::Linearizable {
                verdict = Verdict::Unknown;
            }
            partitions.push(PartitionReport {
                key,
                operations: indices,
                outcome: PartitionOutcome::Unchecked,
                steps: 0,
            });
            continue;
        }
        let ops = ops_of::<M>(history, &indices);
        let before = budget.steps();
        let found = search(model, &ops, &mut budget);
        let steps = budget.steps() - before;
        let to_history = |positions: Vec<usize>| positions.into_iter().map(|p| indices[p]).collect();
        let outcome = match found {
            Search::Linearizable(order) => PartitionOutcome::Linearizable {
                order: to_history(order),
            },
            Search::Exhausted => {
                verdict = Verdict::Unknown;
                PartitionOutcome::Unknown
            }
            Search::Illegal(longest) => {
                verdict = Verdict::Illegal;
                let (operations, one_minimal) = if options.minimize {
                    let mut shrink_budget = Budget::new(options.minimize_max_steps, deadline);
                    let shrunk = shrink(model, &ops, steps, &mut shrink_budget);
                    minimize_steps = shrink_budget.steps();
                    (to_history(shrunk.positions), shrunk.one_minimal)
                } else {
                    let mut all = indices.clone();
                    all.sort_by_key(|&i| (history.operations()[i].call, i));
                    (all, false)
                };
                counterexample = Some(Counterexample {
                    key: key.clone(),
                    operations,
                    one_minimal,
                });
                PartitionOutcome::Illegal {
                    longest_prefix: to_history(longest),
                }
            }
        };
        partitions.push(PartitionReport {
            key,
            operations: indices,
            outcome,
            steps,
        });
    }
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
pub fn describe<M: Model>(model: &M, history: &History<M::Input, M::Output>, indices: &[usize]) -> String {
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
