//! The sequential specification a history is checked against.

use std::fmt::Debug;
use std::hash::Hash;

/// A sequential specification: what each operation does to a state, and which outputs it may
/// give from that state.
///
/// Steps must be pure (same arguments, same answer): the checker replays them in many orders
/// and caches the states they return.
pub trait Model {
    /// What a client asks. Equal inputs of operations that never returned are interchangeable
    /// to the search, which tries only one of them at a time.
    type Input: Eq + Hash;
    /// What a client is told.
    type Output;
    /// The state of one partition. Equal states must behave the same from then on: the cache
    /// merges them.
    type State: Clone + Eq + Hash + Debug;
    /// Names a partition: operations with different keys never affect each other, so each key's
    /// sub-history is checked on its own (a history is linearizable if and only if each
    /// partition is). A model that cannot split returns `()`.
    type Key: Clone + Ord + Debug;

    /// The state of every partition before any operation.
    fn init(&self) -> Self::State;

    /// The state after applying `input` to `state` when the client saw `output`, or `None`
    /// when that output is impossible from that state. `output` is `None` for an operation that
    /// never returned: any output is then acceptable, only the effect matters.
    fn step(
        &self,
        state: &Self::State,
        input: &Self::Input,
        output: Option<&Self::Output>,
    ) -> Option<Self::State>;

    /// The partition an operation belongs to.
    fn partition(&self, input: &Self::Input) -> Self::Key;

    /// One line naming an operation and its output for reports, e.g. `get("x") -> "1"`.
    fn describe_operation(&self, input: &Self::Input, output: Option<&Self::Output>) -> String;
}
