//! A key-value store of strings with get, put and append, checked one key at a time.

use serde::{Deserialize, Serialize};

use crate::model::Model;

/// A key-value store operation.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub enum KvInput {
    /// Read a key; a key never written reads as the empty string.
    Get {
        /// The key.
        key: String,
    },
    /// Replace a key's value.
    Put {
        /// The key.
        key: String,
        /// The new value.
        value: String,
    },
    /// Append to a key's value (to the empty string when the key was never written).
    Append {
        /// The key.
        key: String,
        /// What is appended.
        value: String,
    },
}

impl KvInput {
    /// The key the operation touches.
    pub fn key(&self) -> &str {
        match self {
            KvInput::Get { key } | KvInput::Put { key, .. } | KvInput::Append { key, .. } => key,
        }
    }
}

/// What a key-value store operation returned.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub enum KvOutput {
    /// The value a get read.
    Get {
        /// The value read.
        value: String,
    },
    /// A put was acknowledged.
    Put,
    /// An append was acknowledged.
    Append,
}

/// A string key-value store, partitioned per key: a partition's state is that key's value.
///
/// An output of another operation's kind (a get acknowledged as a put) is a step no state
/// allows, so it makes the history illegal rather than being skipped.
#[derive(Debug, Clone, Copy, Default)]
pub struct KvModel;

impl Model for KvModel {
    type Input = KvInput;
    type Output = KvOutput;
    type State = String;
    type Key = String;

    fn init(&self) -> String {
        String::new()
    }

    fn step(&self, state: &String, input: &KvInput, output: Option<&KvOutput>) -> Option<String> {
        match (input, output) {
            (KvInput::Get { .. }, None) => Some(state.clone()),
            (KvInput::Get { .. }, Some(KvOutput::Get { value })) => {
                (value == state).then(|| state.clone())
            }
            (KvInput::Put { value, .. }, None | Some(KvOutput::Put)) => Some(value.clone()),
            (KvInput::Append { value, .. }, None | Some(KvOutput::Append)) => {
                let mut next = String::with_capacity(state.len() + value.len());
                next.push_str(state);
                next.push_str(value);
                Some(next)
            }
            _ => None,
        }
    }

    fn partition(&self, input: &KvInput) -> String {
        input.key().to_string()
    }

    fn describe_operation(&self, input: &KvInput, output: Option<&KvOutput>) -> String {
        let call = match input {
            KvInput::Get { key } => format!("get({key:?})"),
            KvInput::Put { key, value } => format!("put({key:?}, {value:?})"),
            KvInput::Append { key, value } => format!("append({key:?}, {value:?})"),
        };
        match output {
            None => format!("{call} -> ?"),
            Some(KvOutput::Get { value }) => format!("{call} -> {value:?}"),
            Some(KvOutput::Put | KvOutput::Append) => format!("{call} -> ok"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn append(value: &str) -> KvInput {
        KvInput::Append {
            key: "k".into(),
            value: value.into(),
        }
    }

    #[test]
    fn append_extends_and_get_must_match() {
        let m = KvModel;
        let s = m
            .step(&m.init(), &append("a"), Some(&KvOutput::Append))
            .unwrap();
        let s = m.step(&s, &append("b"), None).unwrap();
        assert_eq!(s, "ab");
        let get = KvInput::Get { key: "k".into() };
        let read = |v: &str| KvOutput::Get { value: v.into() };
        assert_eq!(m.step(&s, &get, Some(&read("ab"))), Some("ab".into()));
        assert_eq!(m.step(&s, &get, Some(&read("a"))), None);
        assert_eq!(m.step(&s, &get, Some(&KvOutput::Put)), None);
    }

    #[test]
    fn json_shape_is_tagged_by_operation() {
        let put = KvInput::Put {
            key: "x".into(),
            value: "1".into(),
        };
        assert_eq!(
            serde_json::to_string(&put).unwrap(),
            r#"{"op":"put","key":"x","value":"1"}"#
        );
        assert_eq!(
            serde_json::to_string(&KvOutput::Put).unwrap(),
            r#"{"op":"put"}"#
        );
        assert_eq!(
            KvModel.describe_operation(&put, None),
            r#"put("x", "1") -> ?"#
        );
    }
}
