//! Shrinking an illegal partition to a small illegal sub-history.
//!
//! Operations are never dropped outright: dropping the write a stale read saw makes the read
//! illegal for another reason (it saw a value nothing wrote), and shrinking would then end on
//! that lone read, which says nothing about the fault. Instead operations are *relaxed*: a
//! relaxed operation may take effect at some instant of its interval with any output, or not
//! at all (one that never returned stays as it is). It can do everything the original could
//! and everything its absence could, so a partition that stays illegal with some operations
//! relaxed was illegal before, and the operations left exact are illegal on their own (let
//! every relaxed one be skipped). Relaxations accumulate: each attempt keeps every operation
//! relaxed so far.
//!
//! Three passes, the operations in call order:
//! 1. relax runs of consecutive operations, latest runs first, the run length halving from
//!    half the partition down to two, keeping each relaxation that leaves it illegal;
//! 2. relax single operations, latest first, keeping each relaxation that leaves it illegal,
//!    and repeat until a whole pass keeps none. The operations left exact are the
//!    counterexample; each one that the last pass showed needed (relaxing it too makes the
//!    partition linearizable) is *necessary*, and the counterexample is *1-minimal* when all
//!    are;
//! 3. find the *context*: drop relaxed operations, latest first, as long as every necessary
//!    operation stays necessary without them. What remains explains why the exact ones are
//!    needed (the write a stale read saw, the never-returned write a read saw); without it an
//!    exact operation could be illegal for another reason.
//!
//! Every attempt has a cap on its steps (the search with relaxed operations can take longer
//! than the verdict did); an attempt that reaches it is undone, which only leaves the result
//! larger. A smaller illegal set may exist: two operations are never relaxed together in the
//! last pass.

use crate::budget::Budget;
use crate::model::Model;
use crate::search::{Op, Search, search};

/// An illegal subset of a partition with its context, in positions of the partition's slice.
pub(crate) struct Shrunk {
    /// The operations left exact, in call order.
    pub(crate) positions: Vec<usize>,
    /// Relaxed operations without which some exact one would no longer be needed, in call
    /// order.
    pub(crate) context: Vec<usize>,
    /// Whether the last pass decided every attempt and found every exact operation necessary.
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
    /// Whether each position is relaxed; the others are exact.
    relaxed: Vec<bool>,
    /// Whether each position is left out (only relaxed ones are, in the context pass).
    dropped: Vec<bool>,
    /// Positions in call order.
    by_call: Vec<usize>,
}

/// What one search found.
#[derive(PartialEq, Eq)]
enum Found {
    Illegal,
    Linearizable,
    /// The attempt's cap ran out.
    GaveUp,
    /// The whole budget is spent.
    OutOfBudget,
}

impl<M: Model> Shrinker<'_, '_, M> {
    fn exact(&self) -> Vec<usize> {
        self.by_call
            .iter()
            .copied()
            .filter(|&p| !self.relaxed[p])
            .collect()
    }

    /// Searches the partition with the operations at `also` relaxed too, within `cap` steps.
    fn try_relaxing(&mut self, also: &[usize], cap: u64) -> Found {
        let relaxed = |p: usize| self.relaxed[p] || also.contains(&p);
        // Every exact operation has returned by the horizon; a relaxed one called later can
        // only come after all of them, so it cannot matter.
        let horizon = (0..self.ops.len())
            .filter(|&p| !relaxed(p))
            .map(|p| self.ops[p].ret.unwrap_or(u64::MAX))
            .max()
            .unwrap_or(0);
        let sub: Vec<_> = (0..self.ops.len())
            .filter(|&p| !self.dropped[p])
            .filter_map(|p| {
                let op = self.ops[p];
                if !relaxed(p) {
                    Some(op)
                } else {
                    (op.call <= horizon).then_some(Op {
                        output: None,
                        may_skip: true,
                        ..op
                    })
                }
            })
            .collect();
        match self.budget.capped(cap, |b| search(self.model, &sub, b)) {
            Search::Illegal(_) => Found::Illegal,
            Search::Linearizable(_) => Found::Linearizable,
            Search::Exhausted if self.budget.exhausted() => Found::OutOfBudget,
            Search::Exhausted => Found::GaveUp,
        }
    }

    /// Relaxes `positions` for good if the partition stays illegal.
    fn relax(&mut self, positions: &[usize], cap: u64) -> Option<bool> {
        match self.try_relaxing(positions, cap) {
            Found::Illegal => {
                for &p in positions {
                    self.relaxed[p] = true;
                }
                Some(true)
            }
            Found::OutOfBudget => None,
            Found::Linearizable | Found::GaveUp => Some(false),
        }
    }

    /// Pass 1: relaxes runs of `len / 2`, `len / 4`, ... down to 2 exact operations.
    fn runs(&mut self, cap: u64) -> Option<()> {
        let mut run = self.exact().len() / 2;
        while run > 1 {
            let exact = self.exact();
            let mut end = exact.len();
            while end > 0 {
                let start = end.saturating_sub(run);
                self.relax(&exact[start..end], cap)?;
                end = start;
            }
            run /= 2;
        }
        Some(())
    }

    /// Pass 2: relaxes single operations, latest first, until a pass relaxes none; returns the
    /// exact operations that pass showed necessary.
    fn singles(&mut self, cap: u64) -> Option<Vec<usize>> {
        loop {
            let mut relaxed_any = false;
            let mut necessary = Vec::new();
            for p in self.exact().into_iter().rev() {
                match self.try_relaxing(&[p], cap) {
                    Found::Illegal => {
                        self.relaxed[p] = true;
                        relaxed_any = true;
                    }
                    Found::Linearizable => necessary.push(p),
                    Found::GaveUp => {}
                    Found::OutOfBudget => return None,
                }
            }
            if !relaxed_any {
                return Some(necessary);
            }
        }
    }

    /// Pass 3: drops relaxed operations, latest first, while every operation in `necessary`
    /// stays necessary; returns the relaxed operations left.
    fn context(&mut self, necessary: &[usize], cap: u64) -> Option<Vec<usize>> {
        let horizon = self
            .exact()
            .iter()
            .map(|&p| self.ops[p].ret.unwrap_or(u64::MAX))
            .max()
            .unwrap_or(0);
        for p in 0..self.ops.len() {
            self.dropped[p] = self.relaxed[p] && self.ops[p].call > horizon;
        }
        let candidates: Vec<usize> = self
            .by_call
            .iter()
            .rev()
            .copied()
            .filter(|&p| self.relaxed[p] && !self.dropped[p])
            .collect();
        for p in candidates {
            self.dropped[p] = true;
            for &o in necessary {
                match self.try_relaxing(&[o], cap) {
                    Found::Linearizable => {}
                    Found::OutOfBudget => return None,
                    Found::Illegal | Found::GaveUp => {
                        self.dropped[p] = false;
                        break;
                    }
                }
            }
        }
        Some(
            self.by_call
                .iter()
                .copied()
                .filter(|&p| self.relaxed[p] && !self.dropped[p])
                .collect(),
        )
    }
}

/// Shrinks `ops`, an illegal partition whose verdict took `verdict_steps`, within `budget`.
pub(crate) fn shrink<M: Model>(
    model: &M,
    ops: &[Op<'_, M::Input, M::Output>],
    verdict_steps: u64,
    budget: &mut Budget,
) -> Shrunk {
    let mut by_call: Vec<usize> = (0..ops.len()).collect();
    by_call.sort_by_key(|&p| (ops[p].call, p));
    let run_cap = verdict_steps
        .saturating_mul(4)
        .saturating_add(RUN_ATTEMPT_FLOOR);
    let single_cap = verdict_steps.saturating_mul(16).max(SINGLE_ATTEMPT_FLOOR);
    let mut shrinker = Shrinker {
        model,
        ops,
        budget,
        relaxed: vec![false; ops.len()],
        dropped: vec![false; ops.len()],
        by_call,
    };
    let necessary = shrinker
        .runs(run_cap)
        .and_then(|()| shrinker.singles(single_cap));
    let one_minimal = necessary
        .as_ref()
        .is_some_and(|n| n.len() == shrinker.exact().len());
    let context = match &necessary {
        Some(necessary) => shrinker.context(necessary, single_cap),
        None => None,
    };
    let context = context.unwrap_or_else(|| {
        // Out of budget: every relaxed operation up to the last exact return stays.
        shrinker.dropped.iter_mut().for_each(|d| *d = false);
        let horizon = shrinker
            .exact()
            .iter()
            .map(|&p| ops[p].ret.unwrap_or(u64::MAX))
            .max()
            .unwrap_or(0);
        shrinker
            .by_call
            .iter()
            .copied()
            .filter(|&p| shrinker.relaxed[p] && ops[p].call <= horizon)
            .collect()
    });
    Shrunk {
        positions: shrinker.exact(),
        context,
        one_minimal,
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
                may_skip: false,
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
    fn a_stale_read_keeps_the_overwrite_and_names_the_write_it_saw_as_context() {
        let inputs = inputs();
        let read = Out::Read { value: Some(2) };
        let ops = writes_then_read(&inputs, &read);
        let shrunk = shrink(&RegisterModel, &ops, 0, &mut Budget::new(None, None));
        assert!(shrunk.one_minimal);
        // Any later write overwrote 2 before the read.
        assert_eq!(shrunk.positions.len(), 2, "{:?}", shrunk.positions);
        assert!((2..6).contains(&shrunk.positions[0]));
        assert_eq!(shrunk.positions[1], 6);
        assert_eq!(shrunk.context, vec![1]);
    }

    #[test]
    fn a_read_of_a_value_never_written_shrinks_to_the_read() {
        let inputs = inputs();
        let read = Out::Read { value: Some(9) };
        let ops = writes_then_read(&inputs, &read);
        let shrunk = shrink(&RegisterModel, &ops, 0, &mut Budget::new(None, None));
        assert_eq!(shrunk.positions, vec![6]);
        assert!(shrunk.context.is_empty());
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
