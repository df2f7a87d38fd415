//! The OpenAI-compatible chat completions wire format.

use serde_json::{Map, Value, json};

use crate::config::{MaxTokensField, ModelConfig};
use crate::types::{FinishReason, Message, ModelRequest, ToolCall};
use crate::usage::Usage;
use crate::wire::{Decoded, non_empty, optional_string};

/// Builds the request body.
pub(crate) fn encode(config: &ModelConfig, request: &ModelRequest) -> Result<Value, String> {
    let mut messages = Vec::with_capacity(request.messages.len() + 1);
    if let Some(system) = &request.system {
        messages.push(system_message(system));
    }
    messages.extend(request.messages.iter().map(encode_message));
    let mut body = encode_rest(config, request);
    body.insert("messages".into(), Value::Array(messages));
    Ok(Value::Object(body))
}

/// The system prompt as the first message.
pub(crate) fn system_message(system: &str) -> Value {
    json!({ "role": "system", "content": system })
}

/// One message of the conversation; each is encoded on its own, so a conversation's encoding
/// can be kept and extended ([`crate::encode::EncodeCache`]).
pub(crate) fn encode_message(message: &Message) -> Value {
    match message {
        Message::User { text } => json!({ "role": "user", "content": text }),
        Message::Assistant { text, tool_calls } => {
            let mut turn = Map::new();
            turn.insert("role".into(), "assistant".into());
            let content = match (text, tool_calls.is_empty()) {
                (Some(text), _) => Value::String(text.clone()),
                // Servers accept a null content only beside tool calls.
                (None, false) => Value::Null,
                (None, true) => Value::String(String::new()),
            };
            turn.insert("content".into(), content);
            if !tool_calls.is_empty() {
                let calls = tool_calls
                    .iter()
                    .map(|call| {
                        json!({
                            "id": call.id,
                            "type": "function",
                            "function": { "name": call.name, "arguments": call.arguments }
                        })
                    })
                    .collect();
                turn.insert("tool_calls".into(), Value::Array(calls));
            }
            Value::Object(turn)
        }
        Message::ToolResult { call_id, content } => {
            json!({ "role": "tool", "tool_call_id": call_id, "content": content })
        }
    }
}

/// Everything in the body but the messages.
pub(crate) fn encode_rest(config: &ModelConfig, request: &ModelRequest) -> Map<String, Value> {
    let mut body = Map::new();
    body.insert("model".into(), config.model.clone().into());
    let limit_field = match config.max_tokens_field {
        MaxTokensField::MaxTokens => "max_tokens",
        MaxTokensField::MaxCompletionTokens => "max_completion_tokens",
    };
    body.insert(limit_field.into(), request.max_output_tokens.into());
    if let Some(temperature) = request.temperature {
        body.insert("temperature".into(), json!(temperature));
    }
    if let Some(tool) = &request.tool {
        body.insert(
            "tools".into(),
            json!([{
                "type": "function",
                "function": {
                    "name": tool.name,
                    "description": tool.description,
                    "parameters": tool.parameters
                }
            }]),
        );
    }
    body
}

/// Reads the usage object, if any; a present but unreadable one is an error.
pub(crate) fn usage(body: &Value) -> Result<Option<Usage>, String> {
    match body.get("usage") {
        None | Some(Value::Null) => Ok(None),
        Some(raw) => Usage::from_openai(raw).map(Some),
    }
}

/// Reads the first choice of a response body.
pub(crate) fn decode(body: &Value) -> Result<Decoded, String> {
    let choices = body
        .get("choices")
        .ok_or("response has no `choices` field")?
        .as_array()
        .ok_or("`choices` is not an array")?;
    let choice = choices
        .first()
        .ok_or("response has an empty `choices` list")?;
    let message = choice
        .get("message")
        .filter(|m| m.is_object())
        .ok_or("first choice has no `message` object")?;

    let text = match message.get("content") {
        None | Some(Value::Null) => None,
        Some(Value::String(text)) => non_empty(text.clone()),
        // Some servers send content as a list of typed parts.
        Some(Value::Array(parts)) => non_empty(
            parts
                .iter()
                .filter_map(|part| part.get("text").and_then(Value::as_str))
                .collect::<String>(),
        ),
        Some(other) => return Err(format!("message `content` has unexpected type: {other}")),
    };
    let reasoning_text = match optional_string(message, "reasoning_content")? {
        Some(reasoning) => non_empty(reasoning),
        None => optional_string(message, "reasoning")?.and_then(non_empty),
    };

    let tool_calls = match message.get("tool_calls") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(calls)) => calls
            .iter()
            .enumerate()
            .map(|(index, call)| tool_call(index, call))
            .collect::<Result<_, _>>()?,
        Some(other) => return Err(format!("`tool_calls` is not an array: {other}")),
    };

    let finish_reason = match optional_string(choice, "finish_reason")?.as_deref() {
        None => FinishReason::Unknown,
        Some("stop") => FinishReason::Stop,
        Some("tool_calls" | "function_call") => FinishReason::ToolCalls,
        Some("length") => FinishReason::Length,
        Some("content_filter") => FinishReason::ContentFilter,
        Some(other) => FinishReason::Other(other.to_string()),
    };

    Ok(Decoded {
        model: optional_string(body, "model")?,
        text,
        reasoning_text,
        tool_calls,
        finish_reason,
    })
}

fn tool_call(index: usize, call: &Value) -> Result<ToolCall, String> {
    let function = call
        .get("function")
        .filter(|f| f.is_object())
        .ok_or_else(|| format!("tool call {index} has no `function` object"))?;
    let name = function
        .get("name")
        .and_then(Value::as_str)
        .ok_or_else(|| format!("tool call {index} has no function name"))?;
    // Arguments are a JSON text by specification; a few servers send the
    // object itself, which is kept as its JSON text.
    let arguments = match function.get("arguments") {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(text)) => text.clone(),
        Some(other) => other.to_string(),
    };
    // Some local servers omit call ids; a positional id keeps tool results
    // matched to their call within the turn.
    let id = match call.get("id") {
        Some(Value::String(id)) if !id.is_empty() => id.clone(),
        _ => format!("call_{index}"),
    };
    Ok(ToolCall::new(id, name, arguments))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Protocol;
    use crate::types::ToolDefinition;

    fn request() -> ModelRequest {
        ModelRequest {
            system: Some("be brief".into()),
            messages: vec![
                Message::User {
                    text: "fix it".into(),
                },
                Message::Assistant {
                    text: None,
                    tool_calls: vec![ToolCall::new("c1", "bash", r#"{"command":"ls"}"#)],
                },
                Message::ToolResult {
                    call_id: "c1".into(),
                    content: "src".into(),
                },
            ],
            tool: Some(ToolDefinition::bash("run a command")),
            max_output_tokens: 512,
            temperature: Some(0.0),
        }
    }

    #[test]
    fn encodes_roles_tool_calls_and_limits() {
        let mut config = ModelConfig::new(Protocol::OpenAiChat, "m");
        let body = encode(&config, &request()).unwrap();
        let messages = body["messages"].as_array().unwrap();
        assert_eq!(
            messages[0],
            json!({"role": "system", "content": "be brief"})
        );
        assert_eq!(messages[1]["role"], "user");
        assert_eq!(messages[2]["content"], Value::Null);
        assert_eq!(
            messages[2]["tool_calls"][0]["function"]["arguments"],
            r#"{"command":"ls"}"#
        );
        assert_eq!(
            messages[3],
            json!({"role": "tool", "tool_call_id": "c1", "content": "src"})
        );
        assert_eq!(body["max_tokens"], 512);
        assert_eq!(body["temperature"], 0.0);
        assert_eq!(body["tools"][0]["function"]["name"], "bash");

        config.max_tokens_field = MaxTokensField::MaxCompletionTokens;
        let body = encode(
            &config,
            &ModelRequest {
                temperature: None,
                ..request()
            },
        )
        .unwrap();
        assert_eq!(body["max_completion_tokens"], 512);
        assert!(body.get("max_tokens").is_none());
        assert!(body.get("temperature").is_none());
    }

    #[test]
    fn decodes_content_parts_reasoning_and_missing_ids() {
        let body = json!({
            "model": "m",
            "choices": [{
                "message": {
                    "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
                    "reasoning_content": "thinking",
                    "tool_calls": [{"function": {"name": "bash", "arguments": {"command": "ls"}}}]
                },
                "finish_reason": "tool_calls"
            }]
        });
        let decoded = decode(&body).unwrap();
        assert_eq!(decoded.text.as_deref(), Some("ab"));
        assert_eq!(decoded.reasoning_text.as_deref(), Some("thinking"));
        assert_eq!(decoded.tool_calls[0].id, "call_0");
        assert_eq!(decoded.tool_calls[0].command(), Some("ls"));
        assert_eq!(decoded.finish_reason, FinishReason::ToolCalls);
    }

    #[test]
    fn malformed_shapes_are_errors() {
        for body in [
            json!({}),
            json!({"choices": {}}),
            json!({"choices": []}),
            json!({"choices": [{}]}),
            json!({"choices": [{"message": {"content": 5}}]}),
            json!({"choices": [{"message": {"tool_calls": [{"id": "x"}]}}]}),
            json!({"choices": [{"message": {}, "finish_reason": 3}]}),
        ] {
            assert!(decode(&body).is_err(), "{body}");
        }
    }
}
