//! The history a run's clients record, in the linearizability checker's form: every operation
//! with its client, when it was called, and when and what it returned (or that it never did).
//!
//! Times are microseconds of simulated time from the start of the run. On disk a history is
//! JSON lines, one operation a line: `{"client":..,"call":..,"input":{"op":"put","key":..,
//! "value":..},"return":{"time":..,"output":{"op":"put"}}}`, `"return":null` for an operation
//! that never returned.

use faultline_linearize::models::{KvInput, KvOutput};
use faultline_linearize::{History, Operation};
use sha2::{Digest, Sha256};

use crate::api::KvOp;

/// A run's history: key-value operations in the order clients called them.
pub type KvHistory = History<KvInput, KvOutput>;

impl From<KvOp> for KvInput {
    fn from(op: KvOp) -> Self {
        match op {
            KvOp::Get { key } => KvInput::Get { key },
            KvOp::Put { key, value } => KvInput::Put { key, value },
            KvOp::Append { key, value } => KvInput::Append { key, value },
        }
    }
}

/// The history as JSON lines.
pub fn to_jsonl(history: &KvHistory) -> Vec<u8> {
    let mut bytes = Vec::new();
    history
        .write_jsonl(&mut bytes)
        .expect("writing to memory cannot fail");
    bytes
}

/// The SHA-256 of the history's JSON lines, in hex: equal digests mean byte-identical runs.
pub fn digest(history: &KvHistory) -> String {
    hex::encode(Sha256::digest(to_jsonl(history)))
}

/// Appends operations as clients call them and fills in returns as they come back.
#[derive(Debug, Default)]
pub(crate) struct Recorder {
    operations: Vec<Operation<KvInput, KvOutput>>,
    protocol_errors: Vec<String>,
}

impl Recorder {
    /// Records a call; the index names it for [`Recorder::returned`].
    pub(crate) fn call(&mut self, client: u64, call: u64, input: KvOp) -> usize {
        self.operations
            .push(Operation::pending(client, call, input.into()));
        self.operations.len() - 1
    }

    /// Records that operation `index` returned `output` at `time`.
    pub(crate) fn returned(&mut self, index: usize, time: u64, output: KvOutput) {
        let op = &mut self.operations[index];
        *op = Operation::returned(op.client, op.call, op.input.clone(), time, output);
    }

    /// Records a reply no correct server sends (a value for a put, an acknowledgement for a get).
    pub(crate) fn protocol_error(&mut self, what: String) {
        self.protocol_errors.push(what);
    }

    /// The history and the protocol errors.
    pub(crate) fn finish(self) -> (KvHistory, Vec<String>) {
        let history = History::new(self.operations).expect("simulated time never runs backwards");
        (history, self.protocol_errors)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_jsonl_form_is_one_operation_a_line_and_reads_back() {
        let mut r = Recorder::default();
        let a = r.call(
            1,
            10,
            KvOp::Put {
                key: "k".into(),
                value: "v".into(),
            },
        );
        r.call(2, 11, KvOp::Get { key: "k".into() });
        r.returned(a, 20, KvOutput::Put);
        let (history, errors) = r.finish();
        assert!(errors.is_empty());
        let bytes = to_jsonl(&history);
        let text = String::from_utf8(bytes.clone()).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[0],
            r#"{"client":1,"call":10,"input":{"op":"put","key":"k","value":"v"},"return":{"time":20,"output":{"op":"put"}}}"#
        );
        assert_eq!(
            lines[1],
            r#"{"client":2,"call":11,"input":{"op":"get","key":"k"},"return":null}"#
        );
        assert_eq!(KvHistory::read_jsonl(&bytes[..]).unwrap(), history);
        assert_eq!(digest(&history).len(), 64);
    }
}
