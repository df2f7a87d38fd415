//! Pieces shared by the two wire formats.

use serde_json::Value;

use crate::types::{FinishReason, ToolCall};

/// The protocol-specific part of a response, before timing and usage are added.
pub(crate) struct Decoded {
    pub(crate) model: Option<String>,
    pub(crate) text: Option<String>,
    pub(crate) reasoning_text: Option<String>,
    pub(crate) tool_calls: Vec<ToolCall>,
    pub(crate) finish_reason: FinishReason,
}

/// `None` for an empty string, so "no text" has one representation.
pub(crate) fn non_empty(text: String) -> Option<String> {
    (!text.is_empty()).then_some(text)
}

/// A field that may be absent or null but, if present, must be a string.
pub(crate) fn optional_string(object: &Value, field: &str) -> Result<Option<String>, String> {
    match object.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(text)) => Ok(Some(text.clone())),
        Some(other) => Err(format!("`{field}` is not a string: {other}")),
    }
}
