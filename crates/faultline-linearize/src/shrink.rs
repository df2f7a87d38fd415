//! Shrinking an illegal partition to a small illegal sub-history.
//!
//! Dropping operations is not monotone: dropping a write can make a read that saw it illegal
//! for a new reason (the read of a value nothing in the set wrote), which would turn a stale
//! read into a misleading "read of a value never written". So an operation is dropped only when
//! the set stays illegal with that operation *relaxed*: made to look as if it never returned
//! (it may take effect at any instant after its call, with any output, or not at all). A
//! relaxed operation can do everything the original could, and everything the dropped one
//! could (nothing), so the set without it is illegal too, and for the same reason.
//!
//! Two passes:
//! 1. relax runs of consecutive operations (in call order, latest runs first, halving the run
//!    length from half the partition down to two) and drop each run that keeps the set
//!    illegal. Each attempt may spend only a few times the steps the verdict took, since
//!    relaxing many operations at once can make the search exponential; an attempt that gives
//!    up keeps its run.
//! 2. relax single operations, latest first, dropping each one that keeps the set illegal,
//!    and repeat until a whole pass drops none.
//!
//! The result is *1-minimal*: relaxing any one of its operations, and so also removing it,
//! makes it linearizable. A smaller illegal set may exist (two operations are never dropped
//! together in the last pass).

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

struct Shrinker<'a, 'h, M: Model> {
    model: &'a M,
    ops: &'a [Op<'h, M::Input, M::Output>],
    budget: &'a mut Budget,
}

/// What one attempt found.
enum Attempt {
    /// Still illegal with the operations relaxed: drop them.
    Drop,
    /// Linearizable with them relaxed, or the attempt's cap ran out: keep them.
    Keep,
    /// The whole budget is spent.
    OutOfBudget,
}

impl<M: Model> Shrinker<'_, '_, M> {
    /// Checks the operations at `kept` with those in `kept[relax]` relaxed, within `cap` steps
    /// when given.
    fn attempt(&mut self, kept: &[usize], relax: std::ops::Range<usize>, cap: Option<u64>) -> Attempt {
        let sub: Vec<_> = kept
            .iter()
            .enumerate()
            .map(|(k, &p)| {
                let op = self.ops[p];
                if relax.contains(&k) {
                    Op {
                        ret: None,
                        output: None,
                        ..op
                    }
                } else {
                    op
                }
            })
            .collect();
        let found = match cap {
            Some(cap) => self.budget.capped(cap, |b| search(self.model, &sub, b)),
            None => search(self.model, &sub, self.budget),
        };
        match found {
            Search::Illegal(_) => Attempt::Drop,
            Search::Linearizable(_) => Attempt::Keep,
            Search::Exhausted if self.budget.exhausted() => Attempt::OutOfBudget,
            Search::Exhausted => Attempt::Keep,
        }
    }

    /// Pass 1: drops runs of `len / 2`, `len / 4`, ... down to 2 operations.
    fn runs(&mut self, kept: &mut Vec<usize>, cap: u64) -> Option<()> {
        let mut run = kept.len() / 2;
        while run > 1 {
            let mut end = kept.len();
            while end > 0 {
                let start = end.saturating_sub(run);
                match self.attempt(kept, start..end, Some(cap)) {
                    Attempt::Drop => {
                        kept.drain(start..end);
                    }
                    Attempt::Keep => {}
                    Attempt::OutOfBudget => return None,
                }
                end = start;
            }
            run /= 2;
        }
        Some(())
    }

    /// Pass 2: drops single operations, latest first, until a pass drops none.
    fn singles(&mut self, kept: &mut Vec<usize>) -> Option<()> {
        loop {
            let mut dropped = false;
            for i in (0..kept.len()).rev() {
                match self.attempt(kept, i..i + 1, None) {
                    Attempt::Drop => {
                        kept.remove(i);
                        dropped = true;
                    }
                    Attempt::Keep => {}
                    Attempt::OutOfBudget => return None,
                }
            }
            if !dropped {
                return Some(());
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
    let cap = verdict_steps.saturating_mul(4).saturating_add(RUN_ATTEMPT_FLOOR);
    let mut shrinker = Shrinker { model, ops, budget };
    let finished = shrinker
        .runs(&mut kept, cap)
        .and_then(|()| shrinker.singles(&mut kept))
        .is_some();
    Shrunk {
        positions: kept,
        one_minimal: finished,
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
        (1..=6).map(|v| In::Write { value: v }).chain([In::Read]).collect()
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
