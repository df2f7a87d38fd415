//! Linearizability checking of operation histories.
//!
//! A history records, for each operation a client invoked, when it was called, when it
//! returned (or that it never did) and what it returned. It is *linearizable* against a
//! sequential [`Model`] when every operation can be given one instant inside its interval so
//! that, applied one by one in the order of those instants, the model accepts every output.
//! The build track scores a student's system by this property, so the checker must be right
//! on every history it answers for, and must say "unknown" rather than hang on the rest.
//!
//! # The search
//!
//! [`check`] runs the algorithm of Wing and Gong, with the memoization Lowe added, as
//! Porcupine does:
//!
//! - **Entries.** A partition's call and return events are sorted by time (a call before a
//!   return at the same instant: intervals are closed) into a doubly linked list.
//! - **Lift and unlift.** Walking the list from its head, a call whose operation the model
//!   accepts from the current state is *linearized*: the call and its return are lifted out of
//!   the list, the previous state is pushed on a stack and the walk restarts at the head. A
//!   return reached in the walk belongs to an operation that must already have taken effect,
//!   so the walk backtracks: the last linearized operation is popped and unlifted back in
//!   place, and the walk goes on past it. Backtracking from an empty stack proves that no
//!   linearization exists. Once every completed operation is lifted the partition is
//!   linearizable; the stack is the witness order.
//! - **Cache.** A configuration is the set of operations linearized so far (a bitset) with the
//!   model state it led to. Two paths reaching equal configurations have the same future, so a
//!   step into a configuration already seen is not taken. This turns the factorial search into
//!   one bounded by the number of distinct configurations. The bitset's hash is maintained
//!   incrementally and combined with the state's [`Hash`], so a lookup costs little more than
//!   hashing the state.
//! - **Operations that never returned** have a call and no return: nothing forces them to
//!   take effect, so the search may linearize them anywhere after their call or leave them
//!   out, and the model sees no output for them. Three rules keep them cheap, each sound
//!   because such an operation is optional: at each configuration the search tries them only
//!   after the completed operations; a configuration is cut when one with the same completed
//!   operations and state was reached with a subset of the never-returned ones (it had every
//!   option this one has); and of several never-returned operations with equal inputs, once
//!   called, only the earliest not yet linearized is tried, since any of them can stand for
//!   another. On Jepsen's etcd histories, whose timed-out writes never return, this is what
//!   makes the hard ones fast.
//!
//! The problem is NP-complete, so the search is exponential in the worst case. [`CheckOptions`]
//! bounds it by a step count and a wall-clock timeout; when either runs out the verdict is
//! [`Verdict::Unknown`], never a guess.
//!
//! # Partitioning
//!
//! A model names the partition of each operation ([`Model::partition`]): for a key-value store
//! the key. Operations on different keys never constrain each other, so a history is
//! linearizable if and only if each key's sub-history is (linearizability is *local*, in
//! Herlihy and Wing's words). Each partition is searched on its own, from the model's initial
//! state, which turns one search exponential in all the concurrency into several exponential
//! only in each key's. The partitions take turns of a few thousand steps, so one slow key does
//! not delay finding another key illegal, and the check stops at the first illegal one.
//!
//! # Counterexamples
//!
//! When a partition has no linearization the check shrinks it to a small sub-history that
//! alone has none ([`Counterexample`]). Dropping operations outright can change *why* a
//! history is illegal (drop the write a stale read saw, and the read now sees a value nothing
//! wrote), so operations are instead *relaxed*, a run or one operation at a time and
//! cumulatively: a relaxed operation may take effect at some instant of its interval with any
//! output, or not at all, so it can do anything the original or its absence could, and a
//! relaxation is kept when the partition stays illegal. Relaxed operations are then dropped
//! unless one of the exact ones needs them. What is left:
//!
//! - the **operations**, exact: not linearizable on their own, nor with the context;
//! - the **context**, relaxed: the operations without which some exact one would no longer be
//!   needed, such as the write a stale read saw, or a never-returned write a read saw.
//!
//! The counterexample is **1-minimal** (when every attempt finished within its budget):
//! relaxing any one of its operations as well makes it linearizable together with its
//! context, so each is needed exactly as recorded. "Removing any one makes the rest
//! linearizable" would be the wrong test: a stale read without the write it saw is still
//! illegal, for another reason, so that write would never count as needed; the context holds
//! such operations. It is not necessarily the smallest illegal subset. The partition report
//! also gives the deepest partial linearization the search built.
//!
//! # Histories on disk
//!
//! [`History`] reads and writes JSON lines, one [`Operation`] per line, with the input and
//! output in the model's own serde form; a key-value put that returned, then a get that never
//! did:
//!
//! ```text
//! {"client":1,"call":0,"input":{"op":"put","key":"x","value":"1"},"return":{"time":10,"output":{"op":"put"}}}
//! {"client":2,"call":4,"input":{"op":"get","key":"x"},"return":null}
//! ```
//!
//! [`porcupine_format`] reads the two text formats of Porcupine's published test histories.
//!
//! ```
//! use faultline_linearize::models::{KvInput, KvModel, KvOutput};
//! use faultline_linearize::{CheckOptions, History, Operation, Verdict, check};
//!
//! let put = KvInput::Put { key: "x".into(), value: "1".into() };
//! let get = KvInput::Get { key: "x".into() };
//! // The put completes at 10; a get called at 20 still reads the empty value.
//! let history = History::new(vec![
//!     Operation::returned(1, 0, put, 10, KvOutput::Put),
//!     Operation::returned(2, 20, get, 30, KvOutput::Get { value: String::new() }),
//! ])?;
//! let result = check(&KvModel, &history, &CheckOptions::default());
//! assert_eq!(result.verdict, Verdict::Illegal);
//! let counterexample = result.counterexample.expect("an illegal history has one");
//! assert_eq!(counterexample.operations, vec![0, 1]);
//! assert!(counterexample.one_minimal);
//! # Ok::<(), faultline_linearize::HistoryError>(())
//! ```

#[cfg(feature = "check")]
mod budget;
#[cfg(feature = "check")]
mod cache;
#[cfg(feature = "check")]
mod check;
pub mod generate;
mod history;
mod model;
pub mod models;
pub mod porcupine_format;
#[cfg(feature = "check")]
mod search;
#[cfg(feature = "check")]
mod shrink;

#[cfg(feature = "check")]
pub use check::{
    CheckOptions, CheckResult, Counterexample, PartitionOutcome, PartitionReport, Verdict, check,
    describe,
};
pub use history::{History, HistoryError, Operation, Return};
pub use model::Model;
