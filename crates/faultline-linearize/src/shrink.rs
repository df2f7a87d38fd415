//! Shrinking an illegal partition to a small illegal sub-history.
//!
//! Operations are never dropped outright on the way: dropping the write a stale read saw
//! makes the read illegal for another reason (it saw a value nothing wrote), and shrinking
//! would then end on that lone read, which says nothing about the fault. Instead operations
//! are *relaxed*: a relaxed operation may take effect at some instant of its interval with any
//! output, or not at all (one that never returned stays as it is). It can do everything the
//! original could and everything its absence could, so a partition that stays illegal with
//! some operations relaxed was illegal before, and the operations left exact are illegal on
//! their own (let every relaxed one be skipped).
//!
//! Each operation is *exact*, *relaxed* (kept as context) or *dropped*. A relaxed operation is
//! dropped when every exact operation known to be *necessary* (relaxing it too makes the
//! partition linearizable) stays necessary without it, once it cannot take effect before any
//! exact operation not yet known necessary returns (so it cannot be what one of those saw),
//! or at the end of a pass.
//! What remains relaxed is the context that explains why the exact ones are needed: the write
//! a stale read saw, the never-returned write a read saw. Dropping early also keeps the
//! searches small, since every relaxed operation can double the configurations of a search.
//!
//! Two passes, the operations in call order:
//! 1. relax runs of consecutive exact operations, latest runs first, the run length halving
//!    from half the partition down to two, keeping each relaxation that leaves it illegal;
//! 2. relax single exact operations, latest first, keeping each relaxation that leaves it
//!    illegal (and dropping the operation at once if it is not needed as context), then drop
//!    the relaxed operations not needed as context; repeat until a pass relaxes none.
//!
//! The exact operations are the counterexample, *1-minimal* when the last pass found each one
//! necessary. Every search has a cap on its steps (one with relaxed operations can take far
//! longer than the verdict did); an attempt that reaches it is undone, which only leaves the
//! result larger and not known to be 1-minimal. A smaller illegal set may exist: two
//! operations are never relaxed together in the last pass.

use crate::budget::Budget;
use crate::model::Model;
use crate::search::{Op, Search, search};

/// An illegal subset of a partition with its context, in positions of the partition's slice.
pub(crate) struct Shrunk {
    /// The operations left exact, in call order.
    pub(crate) positions: Vec<usize>,
    /// The relaxed operations some necessary exact one needs, in call order.
    pub(crate) context: Vec<usize>,
    /// Whether the last pass found every exact operation necessary.
    pub(crate) one_minimal: bool,
}

/// Steps a run attempt may take beyond a multiple of the verdict's.
const RUN_ATTEMPT_FLOOR: u64 = 10_000;
/// Steps a single attempt may take at least.
const SINGLE_ATTEMPT_FLOOR: u64 = 250_000;

/// What an operation is in the sub-history being shrunk.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Role {
    Exact,
    Relaxed,
    Dropped,
}

/// What one search found.
#[derive(PartialEq, Eq)]
enum Found {
    Illegal,
    Linearizable,
    /// The attempt's cap ran out.
    GaveUp,
}

/// The whole shrinking budget is spent.
struct OutOfBudget;

struct Shrinker<'a, 'h, M: Model> {
    model: &'a M,
    ops: &'a [Op<'h, M::Input, M::Output>],
    budget: &'a mut Budget,
    role: Vec<Role>,
    /// Positions in call order.
    by_call: Vec<usize>,
    cap: u64,
}

impl<M: Model> Shrinker<'_, '_, M> {
    /// Positions with `role`, in call order.
    fn with(&self, role: Role) -> Vec<usize> {
        self.by_call
            .iter()
            .copied()
            .filter(|&p| self.role[p] == role)
            .collect()
    }

    /// Searches the sub-history with the roles `change` gives some positions, within `cap`.
    fn search_with(&mut self, change: &[(usize, Role)], cap: u64) -> Result<Found, OutOfBudget> {
        let role = |p: usize| {
            change
                .iter()
                .find(|(q, _)| *q == p)
                .map_or(self.role[p], |c| c.1)
        };
        // Every exact operation has returned by the horizon; a relaxed one called later can
        // only come after all of them, so it cannot matter.
        let horizon = (0..self.ops.len())
            .filter(|&p| role(p) == Role::Exact)
            .map(|p| self.ops[p].ret.unwrap_or(u64::MAX))
            .max()
            .unwrap_or(0);
        let sub: Vec<_> = (0..self.ops.len())
            .filter_map(|p| {
                let op = self.ops[p];
                match role(p) {
                    Role::Exact => Some(op),
                    Role::Relaxed => (op.call <= horizon).then_some(Op {
                        output: None,
                        may_skip: true,
                        ..op
                    }),
                    Role::Dropped => None,
                }
            })
            .collect();
        match self.budget.capped(cap, |b| search(self.model, &sub, b)) {
            Search::Illegal(_) => Ok(Found::Illegal),
            Search::Linearizable(_) => Ok(Found::Linearizable),
            Search::Exhausted if self.budget.exhausted() => Err(OutOfBudget),
            Search::Exhausted => Ok(Found::GaveUp),
        }
    }

    /// Relaxes the exact operations at `positions` if the sub-history stays illegal.
    fn relax(&mut self, positions: &[usize], cap: u64) -> Result<Found, OutOfBudget> {
        let change: Vec<_> = positions.iter().map(|&p| (p, Role::Relaxed)).collect();
        let found = self.search_with(&change, cap)?;
        if found == Found::Illegal {
            for &p in positions {
                self.role[p] = Role::Relaxed;
            }
        }
        Ok(found)
    }

    /// Drops the relaxed operation at `p` if every operation in `necessary` stays necessary.
    fn try_drop(&mut self, p: usize, necessary: &[usize]) -> Result<(), OutOfBudget> {
        for &n in necessary {
            let found = self.search_with(&[(p, Role::Dropped), (n, Role::Relaxed)], self.cap)?;
            if found != Found::Linearizable {
                return Ok(());
            }
        }
        self.role[p] = Role::Dropped;
        Ok(())
    }

    /// Pass 1: relaxes runs of `len / 2`, `len / 4`, ... down to 2 exact operations.
    fn runs(&mut self, cap: u64) -> Result<(), OutOfBudget> {
        let mut run = self.with(Role::Exact).len() / 2;
        while run > 1 {
            let exact = self.with(Role::Exact);
            let mut end = exact.len();
            while end > 0 {
                let start = end.saturating_sub(run);
                self.relax(&exact[start..end], cap)?;
                end = start;
            }
            run /= 2;
        }
        Ok(())
    }

    /// Tries once to drop each relaxed operation that can no longer be what an exact
    /// operation not yet known necessary saw: it is called after all of those returned.
    fn drop_settled(&mut self, necessary: &[usize], tried: &mut [bool]) -> Result<(), OutOfBudget> {
        let unverified = self
            .with(Role::Exact)
            .into_iter()
            .filter(|q| !necessary.contains(q))
            .map(|q| self.ops[q].ret.unwrap_or(u64::MAX))
            .max();
        for p in self.with(Role::Relaxed).into_iter().rev() {
            if !tried[p] && unverified.is_none_or(|r| self.ops[p].call > r) {
                tried[p] = true;
                self.try_drop(p, necessary)?;
            }
        }
        Ok(())
    }

    /// Pass 2: relaxes single operations, latest first, dropping what no necessary one needs,
    /// until a pass relaxes none; returns whether every exact operation was found necessary.
    fn singles(&mut self) -> Result<bool, OutOfBudget> {
        loop {
            let mut relaxed_any = false;
            let mut necessary = Vec::new();
            // A drop that failed fails again later in the pass: `necessary` only grows.
            let mut tried = vec![false; self.ops.len()];
            for p in self.with(Role::Exact).into_iter().rev() {
                match self.relax(&[p], self.cap)? {
                    Found::Illegal => relaxed_any = true,
                    Found::Linearizable => necessary.push(p),
                    Found::GaveUp => {}
                }
                self.drop_settled(&necessary, &mut tried)?;
            }
            for p in self.with(Role::Relaxed).into_iter().rev() {
                if !tried[p] {
                    self.try_drop(p, &necessary)?;
                }
            }
            if !relaxed_any {
                return Ok(necessary.len() == self.with(Role::Exact).len());
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
    let mut by_call: Vec<usize> = (0..ops.len()).collect();
    by_call.sort_by_key(|&p| (ops[p].call, p));
    let run_cap = verdict_steps
        .saturating_mul(4)
        .saturating_add(RUN_ATTEMPT_FLOOR);
    let mut shrinker = Shrinker {
        model,
        ops,
        budget,
        role: vec![Role::Exact; ops.len()],
        by_call,
        cap: verdict_steps.saturating_mul(16).max(SINGLE_ATTEMPT_FLOOR),
    };
    let one_minimal = shrinker.runs(run_cap).and_then(|()| shrinker.singles());
    let positions = shrinker.with(Role::Exact);
    // Relaxed operations called after the last exact return cannot matter.
    let horizon = positions
        .iter()
        .map(|&p| ops[p].ret.unwrap_or(u64::MAX))
        .max()
        .unwrap_or(0);
    let context = shrinker
        .with(Role::Relaxed)
        .into_iter()
        .filter(|&p| ops[p].call <= horizon)
        .collect();
    Shrunk {
        positions,
        context,
        one_minimal: matches!(one_minimal, Ok(true)),
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
