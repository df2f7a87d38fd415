//! Histories: what clients invoked, when, and what they got back.
//!
//! On disk a history is JSON lines, one [`Operation`] per line, so a harness can append
//! operations as they complete and a checker can read them back in any other process.

use std::io::{BufRead, Write};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// One operation a client invoked, with its real-time interval.
///
/// The interval `[call, return.time]` is closed: two operations whose intervals share an instant
/// are concurrent, which is what a clock that can return the same reading twice needs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Operation<I, O> {
    /// Who invoked it; used only to describe operations in reports.
    pub client: u64,
    /// When it was invoked.
    pub call: u64,
    /// What was asked.
    pub input: I,
    /// When and what it returned; `None` when it never returned (a crashed client, a timeout
    /// whose outcome is unknown): it may take effect at any instant after its call, or never.
    #[serde(rename = "return")]
    pub ret: Option<Return<O>>,
}

/// The completion of an operation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Return<O> {
    /// When the client got the answer; never before the call.
    pub time: u64,
    /// The answer.
    pub output: O,
}

impl<I, O> Operation<I, O> {
    /// An operation that returned `output` at `ret`.
    pub fn returned(client: u64, call: u64, input: I, ret: u64, output: O) -> Self {
        Operation {
            client,
            call,
            input,
            ret: Some(Return { time: ret, output }),
        }
    }

    /// An operation that never returned.
    pub fn pending(client: u64, call: u64, input: I) -> Self {
        Operation {
            client,
            call,
            input,
            ret: None,
        }
    }

    /// The return time, if it returned.
    pub fn return_time(&self) -> Option<u64> {
        self.ret.as_ref().map(|r| r.time)
    }

    /// The output, if it returned.
    pub fn output(&self) -> Option<&O> {
        self.ret.as_ref().map(|r| &r.output)
    }
}

/// Why a history could not be read or built.
#[derive(Debug, thiserror::Error)]
pub enum HistoryError {
    /// The reader failed.
    #[error("reading the history failed: {0}")]
    Io(std::io::Error),
    /// A line is not an operation of the expected shape.
    #[error("history line {line}: {message}")]
    Parse {
        /// 1-based line number.
        line: usize,
        /// What the JSON decoder said.
        message: String,
    },
    /// An operation returned before it was called.
    #[error("operation {index} (client {client}) returns at {ret}, before its call at {call}")]
    ReturnBeforeCall {
        /// 0-based position of the operation in the history.
        index: usize,
        /// Its client.
        client: u64,
        /// Its call time.
        call: u64,
        /// Its return time.
        ret: u64,
    },
}

/// A validated history: every operation returns no earlier than it is called.
///
/// Operations keep the order they were given in; every index a check reports is a position in
/// [`History::operations`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct History<I, O> {
    operations: Vec<Operation<I, O>>,
}

impl<I, O> History<I, O> {
    /// Validates `operations` as a history.
    pub fn new(operations: Vec<Operation<I, O>>) -> Result<Self, HistoryError> {
        for (index, op) in operations.iter().enumerate() {
            if let Some(ret) = op.return_time()
                && ret < op.call
            {
                return Err(HistoryError::ReturnBeforeCall {
                    index,
                    client: op.client,
                    call: op.call,
                    ret,
                });
            }
        }
        Ok(History { operations })
    }

    /// The operations, in the order given.
    pub fn operations(&self) -> &[Operation<I, O>] {
        &self.operations
    }

    /// Number of operations.
    pub fn len(&self) -> usize {
        self.operations.len()
    }

    /// Whether it has no operation.
    pub fn is_empty(&self) -> bool {
        self.operations.is_empty()
    }

    /// The history made of the operations at `indices` (in that order), e.g. a counterexample
    /// to write to disk on its own.
    pub fn subset(&self, indices: &[usize]) -> Self
    where
        I: Clone,
        O: Clone,
    {
        History {
            operations: indices
                .iter()
                .filter_map(|&i| self.operations.get(i).cloned())
                .collect(),
        }
    }
}

impl<I: DeserializeOwned, O: DeserializeOwned> History<I, O> {
    /// Reads JSON lines, one operation each; blank lines are skipped.
    pub fn read_jsonl(reader: impl BufRead) -> Result<Self, HistoryError> {
        let mut operations = Vec::new();
        for (n, line) in reader.lines().enumerate() {
            let line = line.map_err(HistoryError::Io)?;
            if line.trim().is_empty() {
                continue;
            }
            let op = serde_json::from_str(&line).map_err(|e| HistoryError::Parse {
                line: n + 1,
                message: e.to_string(),
            })?;
            operations.push(op);
        }
        History::new(operations)
    }
}

impl<I: Serialize, O: Serialize> History<I, O> {
    /// Writes JSON lines, one operation each, readable by [`History::read_jsonl`].
    pub fn write_jsonl(&self, mut writer: impl Write) -> std::io::Result<()> {
        for op in &self.operations {
            serde_json::to_writer(&mut writer, op)?;
            writer.write_all(b"\n")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type Ops = History<String, String>;

    #[test]
    fn jsonl_round_trips_returned_and_pending_operations() {
        let history = Ops::new(vec![
            Operation::returned(1, 0, "put".into(), 5, "ok".into()),
            Operation::pending(2, 3, "get".into()),
        ])
        .unwrap();
        let mut bytes = Vec::new();
        history.write_jsonl(&mut bytes).unwrap();
        let text = String::from_utf8(bytes).unwrap();
        assert_eq!(text.lines().count(), 2);
        assert!(text.contains(r#""return":null"#), "{text}");
        assert_eq!(Ops::read_jsonl(text.as_bytes()).unwrap(), history);
    }

    #[test]
    fn a_bad_line_is_named() {
        let text = "{\"client\":1,\"call\":0,\"input\":\"a\",\"return\":null}\n\n{\"client\":1}\n";
        let err = Ops::read_jsonl(text.as_bytes()).unwrap_err();
        assert!(matches!(err, HistoryError::Parse { line: 3, .. }), "{err}");
    }

    #[test]
    fn an_unknown_field_is_refused() {
        let text = r#"{"client":1,"call":0,"input":"a","return":null,"retrun":3}"#;
        assert!(Ops::read_jsonl(text.as_bytes()).is_err());
    }

    #[test]
    fn a_return_before_its_call_is_refused() {
        let err =
            Ops::new(vec![Operation::returned(4, 10, "a".into(), 9, "b".into())]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "operation 0 (client 4) returns at 9, before its call at 10"
        );
    }
}
