//! Model clients for the faultline agent loop.
//!
//! Two wire protocols, written directly on HTTP so that every token and
//! every retry is accounted for exactly: OpenAI-compatible chat completions
//! (hosted OpenAI, vLLM, llama.cpp server, ollama, other compatible hosts)
//! and Anthropic messages. The agent loop speaks one provider-neutral
//! [`ModelRequest`] / [`ModelResponse`] pair; [`Usage`] normalizes each
//! provider's token counts; [`PricingTable`] turns usage into a cost that is
//! `None`, never 0, when the price is unknown.
//!
//! ```no_run
//! # async fn demo() -> Result<(), faultline_model::ModelError> {
//! use faultline_model::*;
//!
//! let config = ModelConfig::new(Protocol::OpenAiChat, "gpt-oss-120b")
//!     .with_base_url("http://127.0.0.1:8000/v1");
//! let client = ModelClient::new(config)?;
//! let response = client
//!     .complete(&ModelRequest {
//!         system: Some("You are a careful engineer.".into()),
//!         messages: vec![Message::User { text: "List the files.".into() }],
//!         tool: Some(ToolDefinition::bash("Run a shell command.")),
//!         max_output_tokens: 1024,
//!         temperature: None,
//!     })
//!     .await?;
//! let working = response.total_time - response.retry.waiting();
//! # let _ = working;
//! # Ok(()) }
//! ```

mod anthropic;
mod client;
mod config;
mod encode;
mod error;
mod openai;
mod pricing;
mod retry;
mod types;
mod usage;
mod wire;

pub use client::ModelClient;
pub use config::{
    ANTHROPIC_DEFAULT_BASE_URL, ANTHROPIC_VERSION, ApiKey, DEFAULT_ATTEMPT_TIMEOUT, MaxTokensField,
    ModelConfig, OPENAI_DEFAULT_BASE_URL, Protocol,
};
pub use encode::EncodeCache;
pub use error::{ErrorKind, ModelError, RetryStats, TOOLS_REFUSED};
pub use pricing::{
    BUILTIN_PRICING_TOML, LongContextPrice, ModelPrice, PRICING_SCHEMA_VERSION, PricingError,
    PricingTable,
};
pub use retry::RetryPolicy;
pub use types::{FinishReason, Message, ModelRequest, ModelResponse, ToolCall, ToolDefinition};
pub use usage::Usage;

/// Serde helper: a [`std::time::Duration`] as whole milliseconds, the unit
/// config files use.
mod duration_ms {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub(crate) fn serialize<S: Serializer>(
        value: &Duration,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        serializer.serialize_u64(u64::try_from(value.as_millis()).unwrap_or(u64::MAX))
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Duration, D::Error> {
        u64::deserialize(deserializer).map(Duration::from_millis)
    }
}
