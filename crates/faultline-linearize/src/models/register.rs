//! One integer register with read, write and compare-and-set, as Jepsen's etcd test drives it.

use serde::{Deserialize, Serialize};

use crate::model::Model;

/// A register operation.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub enum RegisterInput {
    /// Read the value.
    Read,
    /// Overwrite the value.
    Write {
        /// The new value.
        value: i64,
    },
    /// Set the value to `to` if it is `from`.
    Cas {
        /// The expected value.
        from: i64,
        /// The new value.
        to: i64,
    },
}

/// What a register operation returned.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub enum RegisterOutput {
    /// The value read; `None` before the first write.
    Read {
        /// The value read.
        value: Option<i64>,
    },
    /// The write was acknowledged.
    Write,
    /// Whether the compare-and-set swapped.
    Cas {
        /// `true` when it found `from` and wrote `to`.
        ok: bool,
    },
}

/// A single register holding no value at first; one partition.
#[derive(Debug, Clone, Copy, Default)]
pub struct RegisterModel;

impl Model for RegisterModel {
    type Input = RegisterInput;
    type Output = RegisterOutput;
    type State = Option<i64>;
    type Key = ();

    fn init(&self) -> Option<i64> {
        None
    }

    fn step(
        &self,
        state: &Option<i64>,
        input: &RegisterInput,
        output: Option<&RegisterOutput>,
    ) -> Option<Option<i64>> {
        match (input, output) {
            (RegisterInput::Read, None) => Some(*state),
            (RegisterInput::Read, Some(RegisterOutput::Read { value })) => {
                (value == state).then_some(*state)
            }
            (RegisterInput::Write { value }, None | Some(RegisterOutput::Write)) => {
                Some(Some(*value))
            }
            (RegisterInput::Cas { from, to }, output) => {
                let swaps = *state == Some(*from);
                match output {
                    None => Some(if swaps { Some(*to) } else { *state }),
                    Some(RegisterOutput::Cas { ok: true }) => swaps.then_some(Some(*to)),
                    Some(RegisterOutput::Cas { ok: false }) => (!swaps).then_some(*state),
                    Some(_) => None,
                }
            }
            _ => None,
        }
    }

    fn partition(&self, _: &RegisterInput) {}

    fn describe_operation(&self, input: &RegisterInput, output: Option<&RegisterOutput>) -> String {
        let call = match input {
            RegisterInput::Read => "read()".to_string(),
            RegisterInput::Write { value } => format!("write({value})"),
            RegisterInput::Cas { from, to } => format!("cas({from}, {to})"),
        };
        let out = match output {
            None => "?".to_string(),
            Some(RegisterOutput::Read { value: None }) => "nil".to_string(),
            Some(RegisterOutput::Read { value: Some(v) }) => v.to_string(),
            Some(RegisterOutput::Write) => "ok".to_string(),
            Some(RegisterOutput::Cas { ok }) => if *ok { "ok" } else { "fail" }.to_string(),
        };
        format!("{call} -> {out}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cas_outcome_must_agree_with_the_state() {
        let m = RegisterModel;
        let cas = RegisterInput::Cas { from: 1, to: 2 };
        let ok = RegisterOutput::Cas { ok: true };
        let fail = RegisterOutput::Cas { ok: false };
        assert_eq!(m.step(&Some(1), &cas, Some(&ok)), Some(Some(2)));
        assert_eq!(m.step(&Some(1), &cas, Some(&fail)), None);
        assert_eq!(m.step(&None, &cas, Some(&fail)), Some(None));
        assert_eq!(m.step(&None, &cas, Some(&ok)), None);
        assert_eq!(m.step(&Some(1), &cas, None), Some(Some(2)));
        assert_eq!(m.step(&Some(3), &cas, None), Some(Some(3)));
        assert_eq!(m.describe_operation(&cas, Some(&fail)), "cas(1, 2) -> fail");
    }
}
