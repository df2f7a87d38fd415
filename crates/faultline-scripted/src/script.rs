//! The script format: what the server answers, in which order.

use std::collections::BTreeMap;
use std::path::Path;

use hyper::header::{HeaderName, HeaderValue};
use serde::{Deserialize, Serialize};

/// A sequence of canned replies the server hands out, one per model request.
///
/// Scripts are plain data so that a test can build one in code, or an
/// end-to-end test can write it to a JSON or TOML file for the binary.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Script {
    /// Whether all requests share one cursor or each conversation has its own.
    #[serde(default)]
    pub mode: ScriptMode,
    /// The replies, in the order they are served.
    pub steps: Vec<Step>,
}

/// How requests are mapped onto the steps of a [`Script`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ScriptMode {
    /// One cursor for the whole server: request N gets step N, whoever sends it.
    #[default]
    Global,
    /// Each conversation walks the steps from the start on its own cursor, so
    /// several agents can run the same script concurrently. A conversation is
    /// identified by its system prompt plus its first user message.
    PerConversation,
}

/// One canned reply.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
// Field-less steps are written `Hang {}` rather than `Hang` so that
// `deny_unknown_fields` also rejects stray keys on them in script files.
pub enum Step {
    /// An assistant turn that calls the `bash` tool natively (OpenAI
    /// `tool_calls`, Anthropic `tool_use` block).
    ToolCall {
        /// The command put in the tool call's `{"command": ...}` arguments.
        command: String,
        /// Assistant text sent alongside the call, if any.
        #[serde(default)]
        text: Option<String>,
        /// The tool-call id; a deterministic one is generated when absent.
        #[serde(default)]
        id: Option<String>,
        /// Replaces the generated `{"command": ...}` arguments verbatim, to
        /// test clients against invalid or unexpected arguments. Anthropic
        /// carries arguments as a JSON value, so text that is not JSON is sent
        /// there as a JSON string.
        #[serde(default)]
        raw_arguments: Option<String>,
        /// Token counts to report; the usage object is omitted when absent.
        #[serde(default)]
        usage: Option<StepUsage>,
    },
    /// A plain assistant text reply (for example one holding a fenced
    /// ```` ```bash ```` block, for agents' text fallback).
    Text {
        /// The reply text.
        text: String,
        /// Report the reply as cut off by the output-token limit.
        #[serde(default)]
        truncated: bool,
        /// Token counts to report; the usage object is omitted when absent.
        #[serde(default)]
        usage: Option<StepUsage>,
    },
    /// An HTTP error in the provider's error-body shape.
    Error {
        /// The HTTP status, for example 429, 500, 529, 401 or 404.
        status: u16,
        /// The error message; a generic one is used when absent.
        #[serde(default)]
        message: Option<String>,
        /// The `Retry-After` header value, verbatim (seconds or an HTTP date).
        #[serde(default)]
        retry_after: Option<String>,
        /// The `retry-after-ms` header value (an Anthropic extension).
        #[serde(default)]
        retry_after_ms: Option<u64>,
        /// Any further response headers.
        #[serde(default)]
        headers: BTreeMap<String, String>,
    },
    /// A 400 reply saying the prompt exceeds the model's context window, in
    /// the wording and error shape of the protocol that was called.
    ContextLength {},
    /// A 200 reply whose body is not valid JSON.
    Malformed {
        /// The body to send; a truncated JSON document when absent.
        #[serde(default)]
        body: Option<String>,
    },
    /// A reply sent exactly as given, for shapes no other step covers (for
    /// example a response with an empty `choices` list).
    Raw {
        /// The HTTP status.
        #[serde(default = "ok_status")]
        status: u16,
        /// The body, verbatim.
        body: String,
    },
    /// Never answer: the connection stays open until the client gives up or
    /// the server stops. Exercises client timeouts.
    Hang {},
    /// A valid text reply padded so that the body is at least `bytes` long.
    Oversized {
        /// The minimum body size in bytes.
        bytes: usize,
    },
}

impl Step {
    /// A complete text reply without usage, the step tests script most.
    pub fn text(text: impl Into<String>) -> Step {
        Step::Text {
            text: text.into(),
            truncated: false,
            usage: None,
        }
    }
}

fn ok_status() -> u16 {
    200
}

/// Token counts a step reports, in provider-neutral terms; the server
/// translates them into each protocol's own usage fields.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StepUsage {
    /// All prompt tokens, including `cached_input` and `cache_write`.
    pub input: u64,
    /// Prompt tokens read from the prompt cache.
    #[serde(default)]
    pub cached_input: u64,
    /// Prompt tokens written to the prompt cache (reported only by Anthropic).
    #[serde(default)]
    pub cache_write: u64,
    /// All generated tokens, including `reasoning`.
    pub output: u64,
    /// Generated reasoning tokens (reported only by the OpenAI format).
    #[serde(default)]
    pub reasoning: u64,
}

/// Why a script could not be loaded. Each message names its cause, which is therefore not also
/// the error's `source` (a chain printed whole would show it twice).
#[derive(Debug, thiserror::Error)]
pub enum ScriptError {
    /// The file could not be read.
    #[error("cannot read script {path}: {cause}")]
    Read {
        /// The file named by the caller.
        path: String,
        /// The I/O failure.
        cause: std::io::Error,
    },
    /// The file is neither `.json` nor `.toml`.
    #[error("script {path}: unknown format, expected a .json or .toml file")]
    UnknownFormat {
        /// The file named by the caller.
        path: String,
    },
    /// The JSON could not be parsed into a script.
    #[error("script {path}: {cause}")]
    Json {
        /// The file named by the caller.
        path: String,
        /// The parse failure.
        cause: serde_json::Error,
    },
    /// The TOML could not be parsed into a script.
    #[error("script {path}: {cause}")]
    Toml {
        /// The file named by the caller.
        path: String,
        /// The parse failure.
        cause: toml::de::Error,
    },
    /// The script parsed but cannot be served as written.
    #[error("script step {index}: {reason}")]
    Invalid {
        /// Zero-based position of the offending step.
        index: usize,
        /// What is wrong with it.
        reason: String,
    },
}

impl Script {
    /// A global script with the given steps.
    pub fn new(steps: Vec<Step>) -> Self {
        Self {
            mode: ScriptMode::Global,
            steps,
        }
    }

    /// The same steps replayed separately for each conversation.
    pub fn per_conversation(steps: Vec<Step>) -> Self {
        Self {
            mode: ScriptMode::PerConversation,
            steps,
        }
    }

    /// Loads a script from a `.json` or `.toml` file and validates it.
    pub fn load(path: &Path) -> Result<Self, ScriptError> {
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|cause| ScriptError::Read {
            path: shown.clone(),
            cause,
        })?;
        let script: Script = match path.extension().and_then(|e| e.to_str()) {
            Some("json") => serde_json::from_str(&text).map_err(|cause| ScriptError::Json {
                path: shown.clone(),
                cause,
            })?,
            Some("toml") => toml::from_str(&text).map_err(|cause| ScriptError::Toml {
                path: shown.clone(),
                cause,
            })?,
            _ => return Err(ScriptError::UnknownFormat { path: shown }),
        };
        script.validate()?;
        Ok(script)
    }

    /// Checks the things serde cannot: statuses that exist, usage that adds up.
    pub fn validate(&self) -> Result<(), ScriptError> {
        for (index, step) in self.steps.iter().enumerate() {
            let invalid = |reason: String| ScriptError::Invalid { index, reason };
            match step {
                Step::Error { status, .. } if !(400..=599).contains(status) => {
                    return Err(invalid(format!(
                        "error status {status} is not a 4xx or 5xx status"
                    )));
                }
                Step::Error {
                    headers,
                    retry_after,
                    ..
                } => {
                    let bad_value = retry_after
                        .iter()
                        .chain(headers.values())
                        .find(|v| HeaderValue::from_str(v).is_err());
                    if let Some(value) = bad_value {
                        return Err(invalid(format!("header value {value:?} is not valid")));
                    }
                    if let Some(name) = headers
                        .keys()
                        .find(|k| HeaderName::from_bytes(k.as_bytes()).is_err())
                    {
                        return Err(invalid(format!("header name {name:?} is not valid")));
                    }
                }
                Step::Raw { status, .. } if !(200..=599).contains(status) => {
                    return Err(invalid(format!(
                        "status {status} is not a final HTTP status"
                    )));
                }
                Step::ToolCall { usage: Some(u), .. } | Step::Text { usage: Some(u), .. } => {
                    if u.cached_input.saturating_add(u.cache_write) > u.input {
                        return Err(invalid(format!(
                            "usage: cached_input ({}) + cache_write ({}) exceed input ({})",
                            u.cached_input, u.cache_write, u.input
                        )));
                    }
                    if u.reasoning > u.output {
                        return Err(invalid(format!(
                            "usage: reasoning ({}) exceeds output ({})",
                            u.reasoning, u.output
                        )));
                    }
                }
                _ => {}
            }
        }
        Ok(())
    }
}
