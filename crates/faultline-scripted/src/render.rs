//! Turns a script step into an HTTP reply in one protocol's wire format.
//!
//! The shapes follow the public API references of the two protocols; only the
//! fields clients rely on are produced.

use serde_json::{Value, json};

use crate::script::{Step, StepUsage};
use serde::Serialize;

/// The wire format of a request, decided by the path it was sent to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Protocol {
    /// OpenAI-compatible chat completions (`/v1/chat/completions` or `/chat/completions`).
    #[serde(rename = "openai")]
    OpenAi,
    /// Anthropic messages (`/v1/messages`).
    #[serde(rename = "anthropic")]
    Anthropic,
}

/// What the server does for one request.
pub(crate) enum Action {
    /// Send this reply.
    Reply(Reply),
    /// Keep the connection open without answering.
    Hang,
}

/// A complete HTTP reply.
pub(crate) struct Reply {
    pub(crate) status: u16,
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) body: String,
}

impl Reply {
    fn json(status: u16, body: &Value) -> Self {
        Self {
            status,
            headers: Vec::new(),
            body: body.to_string(),
        }
    }
}

/// Renders `step` for a request in `protocol` that named `model`; `seq` makes
/// generated ids unique and deterministic.
pub(crate) fn render(step: &Step, protocol: Protocol, model: &str, seq: u64) -> Action {
    let reply = match step {
        Step::ToolCall {
            command,
            text,
            id,
            raw_arguments,
            usage,
        } => {
            let arguments = raw_arguments
                .clone()
                .unwrap_or_else(|| json!({ "command": command }).to_string());
            tool_call(
                protocol,
                model,
                seq,
                text.as_deref(),
                id.as_deref(),
                &arguments,
                *usage,
            )
        }
        Step::Text {
            text,
            truncated,
            usage,
        } => Reply::json(
            200,
            &text_body(protocol, model, seq, text, *truncated, *usage),
        ),
        Step::Error {
            status,
            message,
            retry_after,
            retry_after_ms,
            headers,
        } => {
            let message = message
                .clone()
                .unwrap_or_else(|| format!("scripted error with status {status}"));
            let mut reply = Reply::json(*status, &error_body(protocol, *status, &message, None));
            if let Some(value) = retry_after {
                reply.headers.push(("retry-after".into(), value.clone()));
            }
            if let Some(ms) = retry_after_ms {
                reply
                    .headers
                    .push(("retry-after-ms".into(), ms.to_string()));
            }
            reply
                .headers
                .extend(headers.iter().map(|(k, v)| (k.clone(), v.clone())));
            reply
        }
        Step::ContextLength {} => {
            let (message, code) = match protocol {
                Protocol::OpenAi => (
                    "This model's maximum context length is 8192 tokens, but the request \
                     has 9000 tokens. Please shorten the messages.",
                    Some("context_length_exceeded"),
                ),
                Protocol::Anthropic => ("prompt is too long: 210000 tokens > 200000 maximum", None),
            };
            Reply::json(400, &error_body(protocol, 400, message, code))
        }
        Step::Malformed { body } => Reply {
            status: 200,
            headers: Vec::new(),
            body: body
                .clone()
                .unwrap_or_else(|| r#"{"id": "scripted", "choices": [{"mess"#.to_string()),
        },
        Step::Raw { status, body } => Reply {
            status: *status,
            headers: Vec::new(),
            body: body.clone(),
        },
        Step::Hang {} => return Action::Hang,
        Step::Oversized { bytes } => {
            let padding = "x".repeat(*bytes);
            Reply::json(200, &text_body(protocol, model, seq, &padding, false, None))
        }
    };
    Action::Reply(reply)
}

/// The reply used when a request arrives after the script has run out.
pub(crate) fn exhausted(protocol: Protocol, steps: usize) -> Reply {
    let message = format!("faultline-scripted: script exhausted after {steps} step(s)");
    Reply::json(400, &error_body(protocol, 400, &message, None))
}

/// The reply used when a request is not a well-formed call of the protocol.
pub(crate) fn bad_request(protocol: Protocol, reason: &str) -> Reply {
    let message = format!("faultline-scripted: {reason}");
    Reply::json(400, &error_body(protocol, 400, &message, None))
}

/// The reply to a request without the key the server was started to require.
pub(crate) fn unauthorized(protocol: Protocol) -> Reply {
    let message = "faultline-scripted: missing or wrong API key";
    Reply::json(401, &error_body(protocol, 401, message, None))
}

fn tool_call(
    protocol: Protocol,
    model: &str,
    seq: u64,
    text: Option<&str>,
    id: Option<&str>,
    arguments: &str,
    usage: Option<StepUsage>,
) -> Reply {
    let mut body = match protocol {
        Protocol::OpenAi => {
            let id = id.map_or_else(|| format!("call_scripted_{seq}"), str::to_string);
            json!({
                "id": format!("chatcmpl-scripted-{seq}"),
                "object": "chat.completion",
                "created": 0,
                "model": model,
                "choices": [{
                    "index": 0,
                    "message": {
                        "role": "assistant",
                        "content": text,
                        "tool_calls": [{
                            "id": id,
                            "type": "function",
                            "function": { "name": "bash", "arguments": arguments }
                        }]
                    },
                    "finish_reason": "tool_calls"
                }]
            })
        }
        Protocol::Anthropic => {
            let id = id.map_or_else(|| format!("toolu_scripted_{seq}"), str::to_string);
            let input = serde_json::from_str::<Value>(arguments)
                .unwrap_or_else(|_| Value::String(arguments.to_string()));
            let mut content = Vec::new();
            if let Some(text) = text {
                content.push(json!({ "type": "text", "text": text }));
            }
            content.push(json!({ "type": "tool_use", "id": id, "name": "bash", "input": input }));
            anthropic_message(model, seq, content, "tool_use")
        }
    };
    add_usage(&mut body, protocol, usage);
    Reply::json(200, &body)
}

fn text_body(
    protocol: Protocol,
    model: &str,
    seq: u64,
    text: &str,
    truncated: bool,
    usage: Option<StepUsage>,
) -> Value {
    let mut body = match protocol {
        Protocol::OpenAi => json!({
            "id": format!("chatcmpl-scripted-{seq}"),
            "object": "chat.completion",
            "created": 0,
            "model": model,
            "choices": [{
                "index": 0,
                "message": { "role": "assistant", "content": text },
                "finish_reason": if truncated { "length" } else { "stop" }
            }]
        }),
        Protocol::Anthropic => anthropic_message(
            model,
            seq,
            vec![json!({ "type": "text", "text": text })],
            if truncated { "max_tokens" } else { "end_turn" },
        ),
    };
    add_usage(&mut body, protocol, usage);
    body
}

fn anthropic_message(model: &str, seq: u64, content: Vec<Value>, stop_reason: &str) -> Value {
    json!({
        "id": format!("msg_scripted_{seq}"),
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": null
    })
}

/// Adds `usage` in the protocol's own terms: OpenAI counts cached tokens
/// inside `prompt_tokens`; Anthropic's `input_tokens` leaves out cache reads
/// and writes, which get fields of their own.
fn add_usage(body: &mut Value, protocol: Protocol, usage: Option<StepUsage>) {
    let Some(u) = usage else { return };
    let rendered = match protocol {
        Protocol::OpenAi => json!({
            "prompt_tokens": u.input,
            "completion_tokens": u.output,
            "total_tokens": u.input.saturating_add(u.output),
            "prompt_tokens_details": { "cached_tokens": u.cached_input },
            "completion_tokens_details": { "reasoning_tokens": u.reasoning }
        }),
        Protocol::Anthropic => json!({
            "input_tokens": u.input.saturating_sub(u.cached_input + u.cache_write),
            "cache_creation_input_tokens": u.cache_write,
            "cache_read_input_tokens": u.cached_input,
            "output_tokens": u.output
        }),
    };
    body["usage"] = rendered;
}

fn error_body(protocol: Protocol, status: u16, message: &str, code: Option<&str>) -> Value {
    let kind = match status {
        400 | 413 | 422 => "invalid_request_error",
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        429 => "rate_limit_error",
        529 => "overloaded_error",
        _ => "api_error",
    };
    match protocol {
        Protocol::OpenAi => json!({
            "error": { "message": message, "type": kind, "param": null, "code": code }
        }),
        Protocol::Anthropic => json!({
            "type": "error",
            "error": { "type": kind, "message": message }
        }),
    }
}
