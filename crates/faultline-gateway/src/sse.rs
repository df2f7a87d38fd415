//! Streaming answers made from a complete reply.
//!
//! The gateway always calls its provider without streaming, so that the reply's usage is exact
//! and a failed attempt can be retried whole. A client that asked for a stream gets the same
//! reply as the protocol's server-sent events, all at once: the text of each block in one delta,
//! a tool call's arguments in one fragment, and the usage at the end, as the providers send it.
//! The stream therefore starts when the reply is complete; its first byte comes no earlier than
//! a non-streaming answer's would.

use serde_json::{Value, json};

/// An OpenAI chat-completions reply as `chat.completion.chunk` events, ending with a chunk that
/// carries the usage (as with `stream_options.include_usage`) and `[DONE]`.
pub fn openai(reply: &Value) -> String {
    let id = reply
        .get("id")
        .cloned()
        .unwrap_or(json!("chatcmpl-gateway"));
    let created = reply.get("created").cloned().unwrap_or(json!(0));
    let model = reply.get("model").cloned().unwrap_or(Value::Null);
    let chunk = |choices: Value| {
        json!({
            "id": id, "object": "chat.completion.chunk", "created": created, "model": model,
            "choices": choices,
        })
    };
    let mut out = String::new();
    let mut push = |event: Value| {
        out.push_str("data: ");
        out.push_str(&event.to_string());
        out.push_str("\n\n");
    };
    let choices = reply.get("choices").and_then(Value::as_array);
    for (position, choice) in choices.into_iter().flatten().enumerate() {
        let index = choice.get("index").cloned().unwrap_or(json!(position));
        let message = choice.get("message").cloned().unwrap_or(json!({}));
        let mut delta = json!({"role": "assistant", "content": message.get("content").cloned().unwrap_or(json!(""))});
        for extra in ["reasoning_content", "reasoning", "refusal"] {
            if let Some(value) = message.get(extra).filter(|v| !v.is_null()) {
                delta[extra] = value.clone();
            }
        }
        push(chunk(
            json!([{"index": index, "delta": delta, "finish_reason": null}]),
        ));
        if let Some(calls) = message.get("tool_calls").and_then(Value::as_array) {
            let calls: Vec<Value> = calls
                .iter()
                .enumerate()
                .map(|(i, call)| {
                    let mut call = call.clone();
                    call["index"] = json!(i);
                    call
                })
                .collect();
            push(chunk(
                json!([{"index": index, "delta": {"tool_calls": calls}, "finish_reason": null}]),
            ));
        }
        let finish = choice.get("finish_reason").cloned().unwrap_or(Value::Null);
        push(chunk(
            json!([{"index": index, "delta": {}, "finish_reason": finish}]),
        ));
    }
    if let Some(usage) = reply.get("usage") {
        let mut last = chunk(json!([]));
        last["usage"] = usage.clone();
        push(last);
    }
    out.push_str("data: [DONE]\n\n");
    out
}

/// An Anthropic messages reply as the events of its streaming API: `message_start`, a start,
/// one delta and a stop per content block, `message_delta` with the stop reason and output
/// tokens, and `message_stop`.
pub fn anthropic(reply: &Value) -> String {
    let mut out = String::new();
    let mut push = |name: &str, data: Value| {
        out.push_str("event: ");
        out.push_str(name);
        out.push_str("\ndata: ");
        out.push_str(&data.to_string());
        out.push_str("\n\n");
    };
    let mut start = reply.clone();
    start["content"] = json!([]);
    start["stop_reason"] = Value::Null;
    start["stop_sequence"] = Value::Null;
    let usage = reply.get("usage").cloned().unwrap_or(json!({}));
    let mut start_usage = usage.clone();
    start_usage["output_tokens"] = json!(0);
    start["usage"] = start_usage;
    push(
        "message_start",
        json!({"type": "message_start", "message": start}),
    );
    let blocks = reply.get("content").and_then(Value::as_array);
    for (index, block) in blocks.into_iter().flatten().enumerate() {
        let kind = block
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let (skeleton, deltas) = match kind {
            "text" => (
                json!({"type": "text", "text": ""}),
                vec![
                    json!({"type": "text_delta", "text": block.get("text").cloned().unwrap_or(json!(""))}),
                ],
            ),
            "tool_use" => {
                let mut skeleton = block.clone();
                skeleton["input"] = json!({});
                let input = block.get("input").cloned().unwrap_or(json!({}));
                (
                    skeleton,
                    vec![json!({"type": "input_json_delta", "partial_json": input.to_string()})],
                )
            }
            "thinking" => {
                let mut deltas = vec![
                    json!({"type": "thinking_delta", "thinking": block.get("thinking").cloned().unwrap_or(json!(""))}),
                ];
                if let Some(signature) = block.get("signature") {
                    deltas.push(json!({"type": "signature_delta", "signature": signature}));
                }
                (json!({"type": "thinking", "thinking": ""}), deltas)
            }
            _ => (block.clone(), Vec::new()),
        };
        push(
            "content_block_start",
            json!({"type": "content_block_start", "index": index, "content_block": skeleton}),
        );
        for delta in deltas {
            push(
                "content_block_delta",
                json!({"type": "content_block_delta", "index": index, "delta": delta}),
            );
        }
        push(
            "content_block_stop",
            json!({"type": "content_block_stop", "index": index}),
        );
    }
    push(
        "message_delta",
        json!({
            "type": "message_delta",
            "delta": {
                "stop_reason": reply.get("stop_reason").cloned().unwrap_or(Value::Null),
                "stop_sequence": reply.get("stop_sequence").cloned().unwrap_or(Value::Null),
            },
            "usage": {"output_tokens": usage.get("output_tokens").cloned().unwrap_or(json!(0))},
        }),
    );
    push("message_stop", json!({"type": "message_stop"}));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reassembles a streamed OpenAI reply the way a client does, to check nothing is lost.
    fn reassemble_openai(stream: &str) -> (String, Vec<Value>, Value, Value) {
        let mut text = String::new();
        let mut calls = Vec::new();
        let mut finish = Value::Null;
        let mut usage = Value::Null;
        for line in stream.lines().filter_map(|l| l.strip_prefix("data: ")) {
            if line == "[DONE]" {
                continue;
            }
            let chunk: Value = serde_json::from_str(line).unwrap();
            if let Some(u) = chunk.get("usage") {
                usage = u.clone();
            }
            for choice in chunk["choices"].as_array().unwrap() {
                if let Some(t) = choice["delta"]["content"].as_str() {
                    text.push_str(t);
                }
                if let Some(c) = choice["delta"]["tool_calls"].as_array() {
                    calls.extend(c.iter().cloned());
                }
                if !choice["finish_reason"].is_null() {
                    finish = choice["finish_reason"].clone();
                }
            }
        }
        (text, calls, finish, usage)
    }

    #[test]
    fn openai_stream_carries_text_tool_calls_finish_and_usage() {
        let reply = json!({
            "id": "x", "object": "chat.completion", "created": 1, "model": "m",
            "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
                "role": "assistant", "content": "looking",
                "tool_calls": [{"id": "c1", "type": "function",
                                "function": {"name": "bash", "arguments": "{\"command\":\"ls\"}"}}]}}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 3, "total_tokens": 13}
        });
        let stream = openai(&reply);
        assert!(stream.ends_with("data: [DONE]\n\n"));
        let (text, calls, finish, usage) = reassemble_openai(&stream);
        assert_eq!(text, "looking");
        assert_eq!(calls.len(), 1);
        assert_eq!(calls[0]["function"]["arguments"], "{\"command\":\"ls\"}");
        assert_eq!(calls[0]["index"], 0);
        assert_eq!(finish, "tool_calls");
        assert_eq!(usage["total_tokens"], 13);
    }

    #[test]
    fn anthropic_stream_has_every_block_and_the_stop_reason() {
        let reply = json!({
            "id": "msg_1", "type": "message", "role": "assistant", "model": "m",
            "content": [
                {"type": "text", "text": "running"},
                {"type": "tool_use", "id": "t1", "name": "bash", "input": {"command": "ls"}}
            ],
            "stop_reason": "tool_use", "stop_sequence": null,
            "usage": {"input_tokens": 12, "output_tokens": 4}
        });
        let stream = anthropic(&reply);
        let events: Vec<(&str, Value)> = stream
            .split("\n\n")
            .filter(|e| !e.is_empty())
            .map(|e| {
                let (name, data) = e.split_once('\n').unwrap();
                (
                    name.strip_prefix("event: ").unwrap(),
                    serde_json::from_str(data.strip_prefix("data: ").unwrap()).unwrap(),
                )
            })
            .collect();
        let names: Vec<&str> = events.iter().map(|(n, _)| *n).collect();
        assert_eq!(
            names,
            [
                "message_start",
                "content_block_start",
                "content_block_delta",
                "content_block_stop",
                "content_block_start",
                "content_block_delta",
                "content_block_stop",
                "message_delta",
                "message_stop"
            ]
        );
        assert_eq!(events[0].1["message"]["usage"]["input_tokens"], 12);
        assert_eq!(events[2].1["delta"]["text"], "running");
        let args: Value =
            serde_json::from_str(events[5].1["delta"]["partial_json"].as_str().unwrap()).unwrap();
        assert_eq!(args["command"], "ls");
        assert_eq!(events[7].1["delta"]["stop_reason"], "tool_use");
        assert_eq!(events[7].1["usage"]["output_tokens"], 4);
    }
}
