//! The Anthropic messages wire format.

use serde_json::{Map, Value, json};

use crate::config::ModelConfig;
use crate::types::{FinishReason, Message, ModelRequest, ToolCall};
use crate::usage::Usage;
use crate::wire::{Decoded, non_empty, optional_string};

/// Builds the request body. Consecutive turns of the same role are merged
/// into one message, because the protocol expects user and assistant turns
/// to alternate and wants all results of one assistant turn's tool calls in
/// the next user message, ahead of any text.
pub(crate) fn encode(config: &ModelConfig, request: &ModelRequest) -> Result<Value, String> {
    let groups = group(&request.messages, 0)?;
    let last = groups.len().saturating_sub(1);
    let mut body = encode_rest(config, request);
    let messages = groups
        .into_iter()
        .enumerate()
        .map(|(i, g)| g.into_message(config.anthropic_prompt_caching && i == last))
        .collect();
    body.insert("messages".into(), Value::Array(messages));
    Ok(Value::Object(body))
}

/// Consecutive messages of one role, as one message of the protocol.
pub(crate) struct Group {
    role: &'static str,
    blocks: Vec<Value>,
    /// How many of the conversation's messages it holds.
    pub(crate) messages: usize,
}

impl Group {
    /// The protocol's message. A user turn's tool results come first, each kind in its order;
    /// `cached` marks its last block as the end of the prompt to cache (the conversation's last
    /// message, when prompt caching is on).
    pub(crate) fn into_message(mut self, cached: bool) -> Value {
        if self.role == "user" {
            self.blocks
                .sort_by_key(|block| block["type"] != "tool_result");
        }
        if cached && let Some(last) = self.blocks.last_mut() {
            last["cache_control"] = json!({ "type": "ephemeral" });
        }
        json!({ "role": self.role, "content": self.blocks })
    }
}

/// Groups `messages` (the first of which is the conversation's message number `first`, for
/// errors): the protocol expects user and assistant turns to alternate and wants all results of
/// one assistant turn's tool calls in the next user message, ahead of any text.
pub(crate) fn group(messages: &[Message], first: usize) -> Result<Vec<Group>, String> {
    let mut groups: Vec<Group> = Vec::new();
    for (offset, message) in messages.iter().enumerate() {
        let index = first + offset;
        let (role, blocks) = match message {
            Message::User { text } => {
                if text.is_empty() {
                    return Err(format!("message {index}: user text is empty"));
                }
                ("user", vec![json!({ "type": "text", "text": text })])
            }
            Message::ToolResult { call_id, content } => (
                "user",
                vec![json!({ "type": "tool_result", "tool_use_id": call_id, "content": content })],
            ),
            Message::Assistant { text, tool_calls } => {
                let mut blocks = Vec::new();
                if let Some(text) = text.as_ref().filter(|t| !t.is_empty()) {
                    blocks.push(json!({ "type": "text", "text": text }));
                }
                for call in tool_calls {
                    let input = call
                        .parsed_arguments
                        .as_ref()
                        .filter(|v| v.is_object())
                        .ok_or_else(|| {
                            format!(
                                "message {index}: tool call {} has arguments that are not a \
                                 JSON object, which this protocol cannot carry",
                                call.id
                            )
                        })?;
                    blocks.push(json!({
                        "type": "tool_use", "id": call.id, "name": call.name, "input": input
                    }));
                }
                if blocks.is_empty() {
                    return Err(format!(
                        "message {index}: assistant turn has no text and no tool calls"
                    ));
                }
                ("assistant", blocks)
            }
        };
        match groups.last_mut() {
            Some(last) if last.role == role => {
                last.blocks.extend(blocks);
                last.messages += 1;
            }
            _ => groups.push(Group {
                role,
                blocks,
                messages: 1,
            }),
        }
    }
    Ok(groups)
}

/// Everything in the body but the messages.
pub(crate) fn encode_rest(config: &ModelConfig, request: &ModelRequest) -> Map<String, Value> {
    let mut body = Map::new();
    body.insert("model".into(), config.model.clone().into());
    body.insert("max_tokens".into(), request.max_output_tokens.into());
    if let Some(system) = &request.system {
        let system = if config.anthropic_prompt_caching {
            json!([{ "type": "text", "text": system, "cache_control": { "type": "ephemeral" } }])
        } else {
            Value::String(system.clone())
        };
        body.insert("system".into(), system);
    }
    if let Some(temperature) = request.temperature {
        body.insert("temperature".into(), json!(temperature));
    }
    if let Some(tool) = &request.tool {
        body.insert(
            "tools".into(),
            json!([{
                "name": tool.name,
                "description": tool.description,
                "input_schema": tool.parameters
            }]),
        );
    }
    body
}

/// Reads the usage object, if any; a present but unreadable one is an error.
pub(crate) fn usage(body: &Value) -> Result<Option<Usage>, String> {
    match body.get("usage") {
        None | Some(Value::Null) => Ok(None),
        Some(raw) => Usage::from_anthropic(raw).map(Some),
    }
}

/// Reads the content blocks of a response body.
pub(crate) fn decode(body: &Value) -> Result<Decoded, String> {
    let content = body
        .get("content")
        .ok_or("response has no `content` field")?
        .as_array()
        .ok_or("`content` is not an array")?;
    let mut text = String::new();
    let mut reasoning = String::new();
    let mut tool_calls = Vec::new();
    for (index, block) in content.iter().enumerate() {
        let kind = block
            .get("type")
            .and_then(Value::as_str)
            .ok_or_else(|| format!("content block {index} has no `type`"))?;
        match kind {
            "text" => text.push_str(
                block
                    .get("text")
                    .and_then(Value::as_str)
                    .ok_or_else(|| format!("text block {index} has no `text`"))?,
            ),
            "thinking" => {
                reasoning.push_str(block.get("thinking").and_then(Value::as_str).unwrap_or(""));
            }
            "tool_use" => {
                let field = |name: &str| {
                    block
                        .get(name)
                        .and_then(Value::as_str)
                        .ok_or_else(|| format!("tool_use block {index} has no `{name}`"))
                };
                let input = block
                    .get("input")
                    .ok_or_else(|| format!("tool_use block {index} has no `input`"))?;
                tool_calls.push(ToolCall::new(
                    field("id")?,
                    field("name")?,
                    input.to_string(),
                ));
            }
            // Other blocks (redacted thinking, server tools) carry nothing the
            // agent acts on; they remain in the raw response.
            _ => {}
        }
    }
    let finish_reason = match optional_string(body, "stop_reason")?.as_deref() {
        None => FinishReason::Unknown,
        Some("end_turn" | "stop_sequence") => FinishReason::Stop,
        Some("tool_use") => FinishReason::ToolCalls,
        Some("max_tokens") => FinishReason::Length,
        Some("refusal") => FinishReason::ContentFilter,
        Some(other) => FinishReason::Other(other.to_string()),
    };
    Ok(Decoded {
        model: optional_string(body, "model")?,
        text: non_empty(text),
        reasoning_text: non_empty(reasoning),
        tool_calls,
        finish_reason,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Protocol;
    use crate::types::ToolDefinition;

    fn config() -> ModelConfig {
        ModelConfig::new(Protocol::AnthropicMessages, "claude-test")
    }

    fn call(id: &str, command: &str) -> ToolCall {
        ToolCall::new(id, "bash", json!({ "command": command }).to_string())
    }

    #[test]
    fn merges_turns_and_puts_tool_results_first() {
        let request = ModelRequest {
            system: Some("sys".into()),
            messages: vec![
                Message::User {
                    text: "task".into(),
                },
                Message::Assistant {
                    text: Some("looking".into()),
                    tool_calls: vec![call("t1", "ls"), call("t2", "pwd")],
                },
                Message::ToolResult {
                    call_id: "t1".into(),
                    content: "a".into(),
                },
                Message::User {
                    text: "note".into(),
                },
                Message::ToolResult {
                    call_id: "t2".into(),
                    content: "b".into(),
                },
            ],
            tool: Some(ToolDefinition::bash("run")),
            max_output_tokens: 100,
            temperature: None,
        };
        let body = encode(&config(), &request).unwrap();
        assert_eq!(body["system"], "sys");
        assert_eq!(body["max_tokens"], 100);
        assert!(body.get("temperature").is_none());
        assert_eq!(body["tools"][0]["input_schema"]["required"][0], "command");
        let messages = body["messages"].as_array().unwrap();
        assert_eq!(messages.len(), 3);
        assert_eq!(messages[1]["content"][1]["input"], json!({"command": "ls"}));
        let last = messages[2]["content"].as_array().unwrap();
        let kinds: Vec<_> = last.iter().map(|b| b["type"].as_str().unwrap()).collect();
        assert_eq!(kinds, ["tool_result", "tool_result", "text"]);
        assert_eq!(last[0]["tool_use_id"], "t1");
        assert_eq!(last[1]["tool_use_id"], "t2");
    }

    #[test]
    fn prompt_caching_marks_system_and_newest_block() {
        let mut config = config();
        config.anthropic_prompt_caching = true;
        let request = ModelRequest {
            system: Some("sys".into()),
            messages: vec![Message::User {
                text: "task".into(),
            }],
            tool: None,
            max_output_tokens: 10,
            temperature: Some(0.5),
        };
        let body = encode(&config, &request).unwrap();
        assert_eq!(body["system"][0]["cache_control"]["type"], "ephemeral");
        assert_eq!(
            body["messages"][0]["content"][0]["cache_control"]["type"],
            "ephemeral"
        );
        assert_eq!(body["temperature"], 0.5);
    }

    #[test]
    fn unrepresentable_requests_are_errors() {
        let with = |message| ModelRequest {
            system: None,
            messages: vec![message],
            tool: None,
            max_output_tokens: 10,
            temperature: None,
        };
        let bad_arguments = Message::Assistant {
            text: None,
            tool_calls: vec![ToolCall::new("t", "bash", "{not json")],
        };
        assert!(encode(&config(), &with(bad_arguments)).is_err());
        let empty_turn = Message::Assistant {
            text: Some(String::new()),
            tool_calls: vec![],
        };
        assert!(encode(&config(), &with(empty_turn)).is_err());
        assert!(
            encode(
                &config(),
                &with(Message::User {
                    text: String::new()
                })
            )
            .is_err()
        );
    }

    #[test]
    fn decodes_blocks_and_stop_reasons() {
        let body = json!({
            "model": "claude-test",
            "content": [
                {"type": "thinking", "thinking": "hmm", "signature": "s"},
                {"type": "text", "text": "ok"},
                {"type": "tool_use", "id": "t9", "name": "bash", "input": {"command": "ls"}}
            ],
            "stop_reason": "tool_use"
        });
        let decoded = decode(&body).unwrap();
        assert_eq!(decoded.text.as_deref(), Some("ok"));
        assert_eq!(decoded.reasoning_text.as_deref(), Some("hmm"));
        assert_eq!(decoded.tool_calls[0].id, "t9");
        assert_eq!(decoded.tool_calls[0].command(), Some("ls"));
        assert_eq!(decoded.finish_reason, FinishReason::ToolCalls);
        let stopped = json!({"content": [], "stop_reason": "pause_turn"});
        assert_eq!(
            decode(&stopped).unwrap().finish_reason,
            FinishReason::Other("pause_turn".into())
        );
    }

    #[test]
    fn malformed_shapes_are_errors() {
        for body in [
            json!({}),
            json!({"content": "text"}),
            json!({"content": [{"text": "no type"}]}),
            json!({"content": [{"type": "text"}]}),
            json!({"content": [{"type": "tool_use", "id": "t", "name": "bash"}]}),
            json!({"content": [{"type": "tool_use", "name": "bash", "input": {}}]}),
        ] {
            assert!(decode(&body).is_err(), "{body}");
        }
    }
}
