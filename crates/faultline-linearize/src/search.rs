//! The WGL search over one partition.
//!
//! The partition's call and return events, sorted by time (a call before a return at the same
//! instant, since intervals are closed), form a doubly linked list behind a head sentinel. The
//! search walks it from the head: at a call it tries to linearize that operation now (the model
//! must accept the step, and the resulting configuration must be new to the cache); on success
//! it *lifts* the call and its return out of the list, pushes the previous state and restarts
//! from the head. Reaching a return means the operation it closes cannot wait any longer while
//! none of the calls before it can go first, so the last linearized operation is popped,
//! *unlifted* back into its place, and the walk continues after it. An empty stack at a return
//! means no order exists. The partition is linearizable once every completed operation is
//! lifted: an operation that never returned has no return event, so it may be linearized
//! anywhere after its call or left out.
//!
//! Shrinking a counterexample also uses completed operations that may be *skipped*: they must
//! be settled before their return like any other, either by taking effect (with any output)
//! or by being lifted without effect.

use std::collections::HashMap;

use crate::budget::Budget;
use crate::cache::{Bitset, Cache, state_hash, zobrist};
use crate::model::Model;

/// No node.
const NIL: u32 = u32::MAX;
/// The head sentinel's node.
const HEAD: u32 = 0;

/// One operation of a partition, borrowed from the history.
pub(crate) struct Op<'h, I, O> {
    pub(crate) call: u64,
    pub(crate) ret: Option<u64>,
    pub(crate) input: &'h I,
    pub(crate) output: Option<&'h O>,
    /// For a completed operation: it may also have had no effect at all.
    pub(crate) may_skip: bool,
}

// Hand-written: every field is a copy or a shared reference whatever `I` and `O` are.
impl<I, O> Clone for Op<'_, I, O> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<I, O> Copy for Op<'_, I, O> {}

/// What the search found, in positions of the slice it was given.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Search {
    /// An order of the linearized operations (every completed one, and the pending ones that
    /// took effect).
    Linearizable(Vec<usize>),
    /// No order exists; the longest prefix of a linearization the search built.
    Illegal(Vec<usize>),
    /// The budget ran out first.
    Exhausted,
}

/// The event list with lift and unlift.
struct Events {
    next: Vec<u32>,
    prev: Vec<u32>,
    /// The operation of each node (unused for the head).
    op: Vec<u32>,
    /// For a call node, its return node, or `NIL` when it never returned; `NIL` for a return
    /// node, which tells the two kinds apart.
    ret: Vec<u32>,
    is_call: Vec<bool>,
}

impl Events {
    fn new<I, O>(ops: &[Op<'_, I, O>]) -> Self {
        let mut events: Vec<(u64, bool, u32)> = Vec::with_capacity(ops.len() * 2);
        for (i, op) in ops.iter().enumerate() {
            events.push((op.call, false, i as u32));
            if let Some(ret) = op.ret {
                events.push((ret, true, i as u32));
            }
        }
        // `false < true`: calls sort before returns at the same time.
        events.sort_unstable();
        let n = events.len() + 1;
        let mut list = Events {
            next: (1..=n as u32).collect(),
            prev: (0..n as u32).map(|i| i.wrapping_sub(1)).collect(),
            op: vec![NIL; n],
            ret: vec![NIL; n],
            is_call: vec![false; n],
        };
        list.next[n - 1] = NIL;
        let mut return_node = vec![NIL; ops.len()];
        for (k, &(_, is_return, op)) in events.iter().enumerate() {
            let node = k as u32 + 1;
            list.op[node as usize] = op;
            if is_return {
                return_node[op as usize] = node;
            } else {
                list.is_call[node as usize] = true;
            }
        }
        for node in 1..n {
            if list.is_call[node] {
                list.ret[node] = return_node[list.op[node] as usize];
            }
        }
        list
    }

    fn unlink(&mut self, node: u32) {
        let (p, n) = (self.prev[node as usize], self.next[node as usize]);
        self.next[p as usize] = n;
        if n != NIL {
            self.prev[n as usize] = p;
        }
    }

    fn relink(&mut self, node: u32) {
        let (p, n) = (self.prev[node as usize], self.next[node as usize]);
        self.next[p as usize] = node;
        if n != NIL {
            self.prev[n as usize] = node;
        }
    }

    /// Takes a call and its return out of the list; their own links are kept for `unlift`.
    fn lift(&mut self, call: u32) {
        self.unlink(call);
        let ret = self.ret[call as usize];
        if ret != NIL {
            self.unlink(ret);
        }
    }

    /// Undoes the most recent `lift` still in force, which must be of `call`.
    fn unlift(&mut self, call: u32) {
        let ret = self.ret[call as usize];
        if ret != NIL {
            self.relink(ret);
        }
        self.relink(call);
    }
}

/// One linearized operation on the stack: its call node, the state before it, and whether it
/// was lifted without effect.
struct Frame<S> {
    call: u32,
    before: S,
    skipped: bool,
}

/// A search over one partition that can stop when its budget refuses a step and go on later
/// where it stopped, so that several partitions can take turns.
pub(crate) struct Searcher<'m, 'h, M: Model> {
    model: &'m M,
    ops: Vec<Op<'h, M::Input, M::Output>>,
    list: Events,
    /// Per operation, its position among the completed operations or among the
    /// never-returned ones.
    slot: Vec<usize>,
    /// Per never-returned operation, the latest one called before it with an equal input, if
    /// any. Either can stand for the other once both are called, so the later one is tried
    /// only when the earlier one is already linearized.
    twin: Vec<Option<usize>>,
    /// Completed operations not linearized yet.
    open: usize,
    /// The completed operations linearized.
    done: Bitset,
    /// The never-returned operations linearized.
    optional: Bitset,
    /// The Zobrist hash of `done`.
    set_hash: u64,
    cache: Cache<M::State>,
    stack: Vec<Frame<M::State>>,
    longest: Vec<usize>,
    state: M::State,
    entry: u32,
    /// Whether the walk is trying never-returned operations: at each configuration it tries
    /// the completed ones first and the optional ones only when those fail, so that the
    /// configurations reached with fewer optional operations come first and make the later
    /// ones with more redundant in the cache.
    optional_turn: bool,
    /// Whether the operation at `entry`, which may be skipped and has been tried with its
    /// effect, is now to be tried without.
    skip_turn: bool,
}

impl<'m, 'h, M: Model> Searcher<'m, 'h, M> {
    /// A search of `ops` (one partition) from the model's initial state.
    pub(crate) fn new(model: &'m M, ops: Vec<Op<'h, M::Input, M::Output>>) -> Self {
        let list = Events::new(&ops);
        let entry = list.next[HEAD as usize];
        let (mut completed, mut pending) = (0, 0);
        let slot = ops
            .iter()
            .map(|op| {
                let counter = if op.ret.is_some() {
                    &mut completed
                } else {
                    &mut pending
                };
                *counter += 1;
                *counter - 1
            })
            .collect();
        let mut by_call: Vec<usize> = (0..ops.len()).filter(|&i| ops[i].ret.is_none()).collect();
        by_call.sort_by_key(|&i| (ops[i].call, i));
        let mut twin = vec![None; ops.len()];
        let mut latest: HashMap<&M::Input, usize> = HashMap::new();
        for i in by_call {
            twin[i] = latest.insert(ops[i].input, i);
        }
        let (done, optional) = (Bitset::new(completed), Bitset::new(pending));
        let state = model.init();
        let mut cache = Cache::new();
        cache.insert(state_hash(&state), &done, &state, &optional);
        Searcher {
            model,
            open: completed,
            slot,
            twin,
            done,
            optional,
            ops,
            list,
            set_hash: 0,
            cache,
            stack: Vec::new(),
            longest: Vec::new(),
            state,
            entry,
            optional_turn: false,
            skip_turn: false,
        }
    }

    /// Adds (or removes) operation `i` to the linearized sets; returns the Zobrist hash of
    /// the completed set it leads to.
    fn toggle(&mut self, i: usize, linearized: bool) -> u64 {
        let slot = self.slot[i];
        let (set, hash) = if self.ops[i].ret.is_some() {
            (&mut self.done, self.set_hash ^ zobrist(slot))
        } else {
            (&mut self.optional, self.set_hash)
        };
        if linearized {
            set.set(slot);
        } else {
            set.clear(slot);
        }
        hash
    }

    /// The operations that took effect on the stack, in order.
    fn order(&self) -> Vec<usize> {
        self.stack
            .iter()
            .filter(|f| !f.skipped)
            .map(|f| self.list.op[f.call as usize] as usize)
            .collect()
    }

    /// Searches until it knows the answer, or returns `Search::Exhausted` when `budget`
    /// refuses a step; calling it again goes on from there.
    pub(crate) fn run(&mut self, budget: &mut Budget) -> Search {
        loop {
            if self.open == 0 {
                return Search::Linearizable(self.order());
            }
            if !budget.step() {
                return Search::Exhausted;
            }
            let entry = self.entry;
            if entry != NIL && self.list.is_call[entry as usize] {
                let i = self.list.op[entry as usize] as usize;
                let op = self.ops[i];
                let waits_for_twin =
                    self.twin[i].is_some_and(|t| !self.optional.contains(self.slot[t]));
                if op.ret.is_none() != self.optional_turn || waits_for_twin {
                    self.entry = self.list.next[entry as usize];
                    continue;
                }
                let skipped = self.skip_turn;
                let next = if skipped {
                    Some(self.state.clone())
                } else {
                    self.model.step(&self.state, op.input, op.output)
                };
                if let Some(next) = next {
                    let set_hash = self.toggle(i, true);
                    let key = set_hash ^ state_hash(&next);
                    if self.cache.insert(key, &self.done, &next, &self.optional) {
                        self.stack.push(Frame {
                            call: entry,
                            before: std::mem::replace(&mut self.state, next),
                            skipped,
                        });
                        self.set_hash = set_hash;
                        self.list.lift(entry);
                        if op.ret.is_some() {
                            self.open -= 1;
                        }
                        self.entry = self.list.next[HEAD as usize];
                        self.optional_turn = false;
                        self.skip_turn = false;
                        continue;
                    }
                    self.toggle(i, false);
                }
                if op.may_skip && op.ret.is_some() && !skipped {
                    self.skip_turn = true;
                } else {
                    self.skip_turn = false;
                    self.entry = self.list.next[entry as usize];
                }
            } else if !self.optional_turn && self.optional.len() > 0 {
                self.optional_turn = true;
                self.entry = self.list.next[HEAD as usize];
            } else {
                if self.stack.len() > self.longest.len() {
                    self.longest = self.order();
                }
                let Some(frame) = self.stack.pop() else {
                    return Search::Illegal(std::mem::take(&mut self.longest));
                };
                let i = self.list.op[frame.call as usize] as usize;
                let op = self.ops[i];
                self.state = frame.before;
                self.set_hash = self.toggle(i, false);
                self.list.unlift(frame.call);
                if op.ret.is_some() {
                    self.open += 1;
                }
                self.optional_turn = op.ret.is_none();
                if op.may_skip && op.ret.is_some() && !frame.skipped {
                    self.skip_turn = true;
                    self.entry = frame.call;
                } else {
                    self.skip_turn = false;
                    self.entry = self.list.next[frame.call as usize];
                }
            }
        }
    }
}

/// Searches `ops` (one partition) to the end or until `budget` is spent.
pub(crate) fn search<M: Model>(
    model: &M,
    ops: &[Op<'_, M::Input, M::Output>],
    budget: &mut Budget,
) -> Search {
    Searcher::new(model, ops.to_vec()).run(budget)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::models::{RegisterInput as In, RegisterModel, RegisterOutput as Out};

    fn op<'h>(
        call: u64,
        ret: Option<u64>,
        input: &'h In,
        output: Option<&'h Out>,
    ) -> Op<'h, In, Out> {
        Op {
            call,
            ret,
            input,
            output,
            may_skip: ret.is_none(),
        }
    }

    fn run(ops: &[Op<'_, In, Out>]) -> Search {
        search(&RegisterModel, ops, &mut Budget::new(None, None))
    }

    #[test]
    fn a_read_concurrent_with_its_write_is_ordered_after_it() {
        let (w, r) = (In::Write { value: 1 }, In::Read);
        let read1 = Out::Read { value: Some(1) };
        let ops = [
            op(0, Some(10), &r, Some(&read1)),
            op(5, Some(6), &w, Some(&Out::Write)),
        ];
        assert_eq!(run(&ops), Search::Linearizable(vec![1, 0]));
    }

    #[test]
    fn a_read_that_returns_before_the_write_is_called_is_illegal() {
        let (w, r) = (In::Write { value: 1 }, In::Read);
        let read1 = Out::Read { value: Some(1) };
        let ops = [
            op(0, Some(4), &r, Some(&read1)),
            op(5, Some(6), &w, Some(&Out::Write)),
        ];
        assert_eq!(run(&ops), Search::Illegal(vec![]));
    }

    #[test]
    fn touching_intervals_are_concurrent() {
        let (w, r) = (In::Write { value: 1 }, In::Read);
        let read1 = Out::Read { value: Some(1) };
        let ops = [
            op(0, Some(5), &r, Some(&read1)),
            op(5, Some(6), &w, Some(&Out::Write)),
        ];
        assert!(matches!(run(&ops), Search::Linearizable(_)));
    }

    #[test]
    fn a_pending_write_may_be_left_out_or_taken() {
        let (w, r) = (In::Write { value: 1 }, In::Read);
        let (read1, read_nil) = (Out::Read { value: Some(1) }, Out::Read { value: None });
        let taken = [op(0, None, &w, None), op(3, Some(4), &r, Some(&read1))];
        assert_eq!(run(&taken), Search::Linearizable(vec![0, 1]));
        let left_out = [op(0, None, &w, None), op(3, Some(4), &r, Some(&read_nil))];
        assert_eq!(run(&left_out), Search::Linearizable(vec![1]));
    }

    #[test]
    fn the_longest_prefix_is_reported_when_illegal() {
        let (w1, w2, r) = (In::Write { value: 1 }, In::Write { value: 2 }, In::Read);
        let read1 = Out::Read { value: Some(1) };
        let ops = [
            op(0, Some(1), &w1, Some(&Out::Write)),
            op(2, Some(3), &w2, Some(&Out::Write)),
            op(4, Some(5), &r, Some(&read1)),
        ];
        assert_eq!(run(&ops), Search::Illegal(vec![0, 1]));
    }

    #[test]
    fn a_spent_budget_is_exhausted_not_illegal() {
        let (w, r) = (In::Write { value: 1 }, In::Read);
        let read1 = Out::Read { value: Some(1) };
        let ops = [
            op(0, Some(10), &r, Some(&read1)),
            op(5, Some(6), &w, Some(&Out::Write)),
        ];
        let mut budget = Budget::new(Some(1), None);
        assert_eq!(search(&RegisterModel, &ops, &mut budget), Search::Exhausted);
    }

    #[test]
    fn a_completed_operation_that_may_be_skipped_takes_effect_in_its_interval_or_not_at_all() {
        let (w1, w2, r) = (In::Write { value: 1 }, In::Write { value: 2 }, In::Read);
        let (read1, read2) = (Out::Read { value: Some(1) }, Out::Read { value: Some(2) });
        let skippable = |call, ret, input| Op {
            may_skip: true,
            ..op(call, Some(ret), input, None)
        };
        // write(1) then write(2), both skippable, then a read of 1: write(2) is skipped.
        let ops = [
            skippable(0, 1, &w1),
            skippable(2, 3, &w2),
            op(4, Some(5), &r, Some(&read1)),
        ];
        assert_eq!(run(&ops), Search::Linearizable(vec![0, 2]));
        // A skippable write cannot move past its return: a read of 2 before it is illegal.
        let ops = [op(0, Some(1), &r, Some(&read2)), skippable(2, 3, &w2)];
        assert!(matches!(run(&ops), Search::Illegal(_)));
    }

    #[test]
    fn a_search_resumed_step_by_step_finds_what_one_run_finds() {
        let inputs: Vec<In> = (1..=5)
            .map(|v| In::Write { value: v })
            .chain([In::Read])
            .collect();
        let read = Out::Read { value: Some(3) };
        let ops: Vec<_> = inputs
            .iter()
            .enumerate()
            .map(|(i, input)| {
                let output = if i < 5 { &Out::Write } else { &read };
                op(i as u64, Some(10 + i as u64), input, Some(output))
            })
            .collect();
        let whole = run(&ops);
        assert!(matches!(whole, Search::Linearizable(_)));
        let mut searcher = Searcher::new(&RegisterModel, ops);
        let mut turns = 0;
        let resumed = loop {
            turns += 1;
            match searcher.run(&mut Budget::new(Some(1), None)) {
                Search::Exhausted => continue,
                found => break found,
            }
        };
        assert_eq!(resumed, whole);
        assert!(turns > 5, "{turns}");
    }
}
