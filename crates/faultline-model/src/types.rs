//! The provider-neutral request and response the agent loop works with.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::error::RetryStats;
use crate::usage::Usage;

/// One model call: everything the agent loop decides, nothing about the wire.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelRequest {
    /// The system prompt, sent in each protocol's own system slot.
    pub system: Option<String>,
    /// The conversation so far, oldest first.
    pub messages: Vec<Message>,
    /// The tool the model may call; the agent offers a single `bash` tool.
    pub tool: Option<ToolDefinition>,
    /// Upper bound on generated tokens (required by the Anthropic protocol).
    pub max_output_tokens: u32,
    /// Sampling temperature; `None` leaves the provider default, which some
    /// reasoning models require.
    pub temperature: Option<f64>,
}

/// One turn of the conversation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "snake_case")]
pub enum Message {
    /// Text from the user side: the task statement, nudges, format errors.
    User {
        /// The text.
        text: String,
    },
    /// A previous model turn, replayed verbatim so the model sees its own calls.
    Assistant {
        /// The assistant's text, if it wrote any.
        text: Option<String>,
        /// The tool calls it made, in order.
        tool_calls: Vec<ToolCall>,
    },
    /// The output of one tool call, answering the call with the same id.
    ToolResult {
        /// The id of the tool call this answers.
        call_id: String,
        /// What the tool printed (already truncated by the agent).
        content: String,
    },
}

/// A tool the model may call, described by a JSON Schema for its arguments.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolDefinition {
    /// The tool name the model uses in its calls.
    pub name: String,
    /// What the tool does, shown to the model.
    pub description: String,
    /// JSON Schema of the arguments object.
    pub parameters: Value,
}

impl ToolDefinition {
    /// The agent's `bash` tool: `{"command": string}`, run in the sandbox.
    pub fn bash(description: impl Into<String>) -> Self {
        Self {
            name: "bash".to_string(),
            description: description.into(),
            parameters: json!({
                "type": "object",
                "properties": {
                    "command": {
                        "type": "string",
                        "description": "The shell command to run."
                    }
                },
                "required": ["command"]
            }),
        }
    }
}

/// A tool call made by the model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    /// The provider's id for the call; tool results refer to it.
    pub id: String,
    /// The name of the tool called.
    pub name: String,
    /// The arguments exactly as the model produced them (a JSON text). Kept
    /// raw because models do emit invalid JSON and the agent must be able to
    /// show it back to them.
    pub arguments: String,
    /// The arguments parsed as JSON, or `None` when `arguments` is not valid JSON.
    pub parsed_arguments: Option<Value>,
}

impl ToolCall {
    /// Builds a call from raw argument text, parsing it when it is valid JSON.
    pub fn new(
        id: impl Into<String>,
        name: impl Into<String>,
        arguments: impl Into<String>,
    ) -> Self {
        let arguments = arguments.into();
        let parsed_arguments = serde_json::from_str(&arguments).ok();
        Self {
            id: id.into(),
            name: name.into(),
            arguments,
            parsed_arguments,
        }
    }

    /// The `command` string argument, when the arguments parsed and have one.
    pub fn command(&self) -> Option<&str> {
        self.parsed_arguments.as_ref()?.get("command")?.as_str()
    }
}

/// Why the model stopped generating, normalized across protocols.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "reason", content = "raw")]
pub enum FinishReason {
    /// A natural end of the turn (OpenAI `stop`, Anthropic `end_turn` or `stop_sequence`).
    Stop,
    /// The model wants its tool calls run (OpenAI `tool_calls`, Anthropic `tool_use`).
    ToolCalls,
    /// Cut off by the output-token limit (OpenAI `length`, Anthropic `max_tokens`).
    Length,
    /// Withheld by the provider (OpenAI `content_filter`, Anthropic `refusal`).
    ContentFilter,
    /// Any other reason, verbatim.
    Other(String),
    /// The response did not say.
    Unknown,
}

/// A successful model call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelResponse {
    /// The model name the provider reports having used, if it says.
    pub model: Option<String>,
    /// The assistant's text; `None` when it wrote none.
    pub text: Option<String>,
    /// Reasoning text some servers return beside the answer (`reasoning_content`
    /// or `reasoning` on OpenAI-compatible servers, `thinking` blocks on Anthropic).
    pub reasoning_text: Option<String>,
    /// The tool calls, in order.
    pub tool_calls: Vec<ToolCall>,
    /// Why generation stopped.
    pub finish_reason: FinishReason,
    /// Token usage; `None` when the server reported none (never guessed as 0).
    pub usage: Option<Usage>,
    /// Duration of the attempt that succeeded, from sending to the last body byte.
    pub latency: Duration,
    /// Wall time of the whole call, retries and backoff included.
    pub total_time: Duration,
    /// Retries made before this success and the time they cost.
    pub retry: RetryStats,
    /// The response body exactly as received, for trajectories and audits.
    pub raw: Value,
}

impl ModelResponse {
    /// This response as a conversation turn to send back next time.
    pub fn to_message(&self) -> Message {
        Message::Assistant {
            text: self.text.clone(),
            tool_calls: self.tool_calls.clone(),
        }
    }
}
