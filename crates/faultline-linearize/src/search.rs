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

/// One linearized operation on the stack: its call node and the state before it.
struct Frame<S> {
    call: u32,
    before: S,
}

/// Searches for a linearization of `ops` (one partition) from the model's initial state.
pub(crate) fn search<M: Model>(
    model: &M,
    ops: &[Op<'_, M::Input, M::Output>],
    budget: &mut Budget,
) -> Search {
    let mut list = Events::new(ops);
    let mut open = ops.iter().filter(|op| op.ret.is_some()).count();
    let mut linearized = Bitset::new(ops.len());
    let mut set_hash = 0u64;
    let mut cache = Cache::new();
    let mut stack: Vec<Frame<M::State>> = Vec::new();
    let mut longest: Vec<usize> = Vec::new();
    let mut state = model.init();
    let mut entry = list.next[HEAD as usize];
    let order =
        |stack: &[Frame<M::State>], list: &Events| stack.iter().map(|f| list.op[f.call as usize] as usize).collect();
    loop {
        if open == 0 {
            return Search::Linearizable(order(&stack, &list));
        }
        if !budget.step() {
            return Search::Exhausted;
        }
        if entry != NIL && list.is_call[entry as usize] {
            let i = list.op[entry as usize] as usize;
            let op = &ops[i];
            if let Some(next) = model.step(&state, op.input, op.output) {
                linearized.set(i);
                let next_set_hash = set_hash ^ zobrist(i);
                if cache.insert(next_set_hash ^ state_hash(&next), &linearized, &next) {
                    stack.push(Frame {
                        call: entry,
                        before: std::mem::replace(&mut state, next),
                    });
                    set_hash = next_set_hash;
                    list.lift(entry);
                    if op.ret.is_some() {
                        open -= 1;
                    }
                    entry = list.next[HEAD as usize];
                    continue;
                }
                linearized.clear(i);
            }
            entry = list.next[entry as usize];
        } else {
            if stack.len() > longest.len() {
                longest = order(&stack, &list);
            }
            let Some(frame) = stack.pop() else {
                return Search::Illegal(longest);
            };
            let i = list.op[frame.call as usize] as usize;
            state = frame.before;
            linearized.clear(i);
            set_hash ^= zobrist(i);
            list.unlift(frame.call);
            if ops[i].ret.is_some() {
                open += 1;
            }
            entry = list.next[frame.call as usize];
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::models::{RegisterInput as In, RegisterModel, RegisterOutput as Out};

    fn op<'h>(call: u64, ret: Option<u64>, input: &'h In, output: Option<&'h Out>) -> Op<'h, In, Out> {
        Op {
            call,
            ret,
            input,
            output,
        }
    }

    fn run(ops: &[Op<'_, In, Out>]) -> Search {
        search(&RegisterModel, ops, &mut Budget::new(None, None))
    }

    #[test]
    fn a_read_concurrent_with_its_write_is_ordered_after_it() {
        let (w, r) = (In::Write { value: 1 }, In::Read);
        let read1 = Out::Read { value: Some(1) };
        let ops = [op(0, Some(10), &r, Some(&read1)), op(5, Some(6), &w, Some(&Out::Write))];
        assert_eq!(run(&ops), Search::Linearizable(vec![1, 0]));
    }

    #[test]
    fn a_read_that_returns_before_the_write_is_called_is_illegal() {
        let (w, r) = (In::Write { value: 1 }, In::Read);
        let read1 = Out::Read { value: Some(1) };
        let ops = [op(0, Some(4), &r, Some(&read1)), op(5, Some(6), &w, Some(&Out::Write))];
        assert_eq!(run(&ops), Search::Illegal(vec![]));
    }

    #[test]
    fn touching_intervals_are_concurrent() {
        let (w, r) = (In::Write { value: 1 }, In::Read);
        let read1 = Out::Read { value: Some(1) };
        let ops = [op(0, Some(5), &r, Some(&read1)), op(5, Some(6), &w, Some(&Out::Write))];
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
        let ops = [op(0, Some(10), &r, Some(&read1)), op(5, Some(6), &w, Some(&Out::Write))];
        let mut budget = Budget::new(Some(1), None);
        assert_eq!(search(&RegisterModel, &ops, &mut budget), Search::Exhausted);
    }
}
