//! Shrinking an illegal partition to a small illegal sub-history.
//!
//! Dropping operations outright is not monotone: drop the write a stale read saw and the read
//! becomes illegal for a new reason (it saw a value nothing wrote), and the shrinking then
//! keeps that lone read, which says nothing about the real fault. So operations are never
//! dropped outright: they are *relaxed*, made to look as if they never returned (they may take
//! effect at any instant after their call, with any output, or not at all). A relaxed operation
//! can do everything the original could and everything its absence could, so a history that
//! stays illegal with some operations relaxed was illegal before, and the operations still
//! exact are illegal on their own (let every relaxed one never take effect). Relaxations
//! accumulate: each attempt keeps every operation relaxed so far.
//!
//! Two passes over the exact operations, in call order:
//! 1. relax runs of consecutive operations (latest runs first, the run length halving from
//!    half the partition down to two) and keep each relaxation that leaves the history
//!    illegal;
//! 2. relax single operations, latest first, keeping each relaxation that leaves the history
//!    illegal, and repeat until a whole pass keeps none.
//!
//! Proving a history with many relaxed operations illegal can take far longer than the
//! verdict did, so each attempt has a cap (a multiple of the verdict's steps, with a floor);
//! an attempt that reaches it is undone and its operations stay exact.
//!
//! The operations left exact are the counterexample. They are illegal on their own, and, when
//! every attempt of the last pass was decided within its cap and the budget, *1-minimal*:
//! relaxing any one of them too makes the history linearizable, that is, each of
//! them is needed even when every other operation of the partition may happen at any time
//! after its call. A smaller illegal set may exist (two operations are never relaxed together
//! in the last pass). Note that removing one of them may leave the rest illegal for another
//! reason: without the write a stale read saw, the read alone is illegal too.

use crate::budget::Budget;
use crate::model::Model;
use crate::search::{Op, Search, search};

/// An illegal subset of a partition, in positions of the partition's slice.
pub(crate) struct Shrunk {
    /// Positions in call order.
    pub(crate) positions: Vec<usize>,
    /// Whether the last pass finished, which makes the set 1-minimal; `false` when the budget
    /// ran out first (the set is still illegal).
    pub(crate) one_minimal: bool,
}

/// Steps a run attempt may take beyond a multiple of the verdict's.
const RUN_ATTEMPT_FLOOR: u64 = 10_000;
/// Steps a single attempt may take at least.
const SINGLE_ATTEMPT_FLOOR: u64 = 250_000;

struct Shrinker<'a, 'h, M: Model> {
    model: &'a M,
    ops: &'a [Op<'h, M::Input, M::Output>],
    budget: &'a mut Budget,
    /// Positions still exact, in call order.
    kept: Vec<usize>,
    /// Whether each position is relaxed.
    relaxed: Vec<bool>,
}

/// What one attempt found.
enum Attempt {
    /// Still illegal with the operations relaxed: they stay relaxed.
    Illegal,
    /// Linearizable with them relaxed: undone.
    Linearizable,
    /// The attempt's cap ran out: undone, undecided.
    GaveUp,
    /// The whole budget is spent.
    OutOfBudget,
}

impl<M: Model> Shrinker<'_, '_, M> {
    /// Checks the partition with `kept[relax]` relaxed too, within `cap` steps.
    fn attempt(&mut self, relax: std::ops::Range<usize>, cap: u64) -> Attempt {
        let trying: Vec<usize> = self.kept[relax].to_vec();
        let exact = |p: &usize| !self.relaxed[*p] && !trying.contains(p);
        // Every exact operation has taken effect by the last exact return; an operation
        // relaxed and called after it can only come after all of them, so it cannot matter.
        let horizon = self
            .kept
            .iter()
            .filter(|p| exact(p))
            .map(|&p| self.ops[p].ret.unwrap_or(u64::MAX))
            .max()
            .unwrap_or(0);
        let sub: Vec<_> = self
            .ops
            .iter()
            .enumerate()
            .filter_map(|(p, &op)| {
                if exact(&p) {
                    Some(op)
                } else {
                    (op.call <= horizon).then_some(Op {
                        ret: None,
                        output: None,
                        ..op
                    })
                }
            })
            .collect();
        let found = self.budget.capped(cap, |b| search(self.model, &sub, b));
        match found {
            Search::Illegal(_) => {
                for p in trying {
                    self.relaxed[p] = true;
                }
                self.kept.retain(|&p| !self.relaxed[p]);
                Attempt::Illegal
            }
            Search::Linearizable(_) => Attempt::Linearizable,
            Search::Exhausted if self.budget.exhausted() => Attempt::OutOfBudget,
            Search::Exhausted => Attempt::GaveUp,
        }
    }

    /// Pass 1: relaxes runs of `len / 2`, `len / 4`, ... down to 2 operations.
    fn runs(&mut self, cap: u64) -> Option<()> {
        let mut run = self.kept.len() / 2;
        while run > 1 {
            let mut end = self.kept.len();
            while end > 0 {
                let start = end.saturating_sub(run);
                if let Attempt::OutOfBudget = self.attempt(start..end, cap) {
                    return None;
                }
                end = start;
            }
            run /= 2;
        }
        Some(())
    }

    /// Pass 2: relaxes single operations, latest first, until a pass keeps none; `Some(true)`
    /// when every attempt of that last pass was decided.
    fn singles(&mut self, cap: u64) -> Option<bool> {
        loop {
            let mut relaxed_any = false;
            let mut decided = true;
            for i in (0..self.kept.len()).rev() {
                match self.attempt(i..i + 1, cap) {
                    Attempt::Illegal => relaxed_any = true,
                    Attempt::Linearizable => {}
                    Attempt::GaveUp => decided = false,
                    Attempt::OutOfBudget => return None,
                }
            }
            if !relaxed_any {
                return Some(decided);
            }
        }
    }
}

/// Shrinks `ops`, an illegal partition whose verdict took `verdict_steps`, within `budget`.
pub(crate) fn shrink<M: Model>(
    model: &M,
    ops: &[Op<'_, M::Input, M::Output>],
    verdict_steps: u64,
    budget: &mut Budget,
) -> Shrunk {
    let mut kept: Vec<usize> = (0..ops.len()).collect();
    kept.sort_by_key(|&p| (ops[p].call, p));
    let run_cap = verdict_steps
        .saturating_mul(4)
        .saturating_add(RUN_ATTEMPT_FLOOR);
    let single_cap = verdict_steps.saturating_mul(16).max(SINGLE_ATTEMPT_FLOOR);
    let mut shrinker = Shrinker {
        model,
        ops,
        budget,
        kept,
        relaxed: vec![false; ops.len()],
    };
    let one_minimal = shrinker
        .runs(run_cap)
        .and_then(|()| shrinker.singles(single_cap));
    Shrunk {
        positions: shrinker.kept,
        one_minimal: one_minimal == Some(true),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::models::{RegisterInput as In, RegisterModel, RegisterOutput as Out};

    /// Sequential writes of 1..=6, ten ticks apart, then a read at 100 that returns `read`.
    fn writes_then_read<'h>(inputs: &'h [In], read: &'h Out) -> Vec<Op<'h, In, Out>> {
        inputs
            .iter()
            .enumerate()
            .map(|(i, input)| Op {
                call: 10 * i as u64,
                ret: Some(10 * i as u64 + 5),
                input,
                output: Some(if i < 6 { &Out::Write } else { read }),
            })
            .collect()
    }

    fn inputs() -> Vec<In> {
        (1..=6)
            .map(|v| In::Write { value: v })
            .chain([In::Read])
            .collect()
    }

    #[test]
    fn a_stale_read_keeps_the_write_it_saw_and_the_one_that_overwrote_it() {
        let inputs = inputs();
        let read = Out::Read { value: Some(2) };
        let ops = writes_then_read(&inputs, &read);
        let shrunk = shrink(&RegisterModel, &ops, 0, &mut Budget::new(None, None));
        assert!(shrunk.one_minimal);
        assert_eq!(shrunk.positions.len(), 3, "{:?}", shrunk.positions);
        assert_eq!(shrunk.positions[0], 1);
        assert_eq!(shrunk.positions[2], 6);
    }

    #[test]
    fn a_read_of_a_value_never_written_shrinks_to_the_read() {
        let inputs = inputs();
        let read = Out::Read { value: Some(9) };
        let ops = writes_then_read(&inputs, &read);
        let shrunk = shrink(&RegisterModel, &ops, 0, &mut Budget::new(None, None));
        assert_eq!(shrunk.positions, vec![6]);
    }

    #[test]
    fn an_exhausted_budget_keeps_an_illegal_set_and_says_so() {
        let inputs = inputs();
        let read = Out::Read { value: Some(2) };
        let ops = writes_then_read(&inputs, &read);
        let shrunk = shrink(&RegisterModel, &ops, 0, &mut Budget::new(Some(0), None));
        assert!(!shrunk.one_minimal);
        assert_eq!(shrunk.positions, (0..7).collect::<Vec<_>>());
    }
}
