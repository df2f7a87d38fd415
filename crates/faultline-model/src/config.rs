//! Client configuration: which endpoint, which model, which key, what limits.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::duration_ms;
use crate::retry::RetryPolicy;

/// The hosted OpenAI API, used when an OpenAI-protocol config names no base
/// URL. This and [`ANTHROPIC_DEFAULT_BASE_URL`] are the only provider hosts
/// the crate knows.
pub const OPENAI_DEFAULT_BASE_URL: &str = "https://api.openai.com/v1";

/// The hosted Anthropic API, used when an Anthropic-protocol config names no
/// base URL.
pub const ANTHROPIC_DEFAULT_BASE_URL: &str = "https://api.anthropic.com";

/// The `anthropic-version` header value this client's request and response
/// handling is written against.
pub const ANTHROPIC_VERSION: &str = "2023-06-01";

/// The wire protocol a model is reached through.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Protocol {
    /// `POST {base_url}/chat/completions`: hosted OpenAI and compatible
    /// servers (vLLM, llama.cpp server, ollama, most hosted open-weight APIs).
    #[serde(rename = "openai_chat")]
    OpenAiChat,
    /// `POST {base_url}/v1/messages` with `x-api-key` and `anthropic-version`.
    #[serde(rename = "anthropic_messages")]
    AnthropicMessages,
}

impl Protocol {
    /// The hosted endpoint used when no base URL is configured.
    pub fn default_base_url(self) -> &'static str {
        match self {
            Self::OpenAiChat => OPENAI_DEFAULT_BASE_URL,
            Self::AnthropicMessages => ANTHROPIC_DEFAULT_BASE_URL,
        }
    }

    /// The environment variable conventionally holding the hosted API's key.
    pub fn default_api_key_env(self) -> &'static str {
        match self {
            Self::OpenAiChat => "OPENAI_API_KEY",
            Self::AnthropicMessages => "ANTHROPIC_API_KEY",
        }
    }
}

/// Which request field carries the output-token limit on the OpenAI protocol.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MaxTokensField {
    /// `max_tokens`: understood by vLLM, llama.cpp server, ollama and older models.
    #[default]
    MaxTokens,
    /// `max_completion_tokens`: required by hosted OpenAI reasoning models
    /// (GPT-5 family, o-series), which reject `max_tokens`.
    MaxCompletionTokens,
}

/// An API key. Its `Debug` output is redacted so configs can be logged.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiKey(String);

impl ApiKey {
    /// Wraps a key.
    pub fn new(key: impl Into<String>) -> Self {
        Self(key.into())
    }

    /// The key itself, for building request headers.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ApiKey(<redacted>)")
    }
}

/// Everything a [`crate::ModelClient`] needs. Serializable (without the key)
/// so a run's lock file can record exactly how the model was called.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelConfig {
    /// The wire protocol.
    pub protocol: Protocol,
    /// The model name sent in each request.
    pub model: String,
    /// The endpoint; `None` means the protocol's hosted default. For the
    /// OpenAI protocol it includes the version segment (`http://host:8000/v1`);
    /// for Anthropic it need not (a trailing `/v1` is accepted and not repeated).
    #[serde(default)]
    pub base_url: Option<String>,
    /// The environment variable to read the key from when `api_key` is not
    /// set. When unset, the protocol's conventional variable is read, but only
    /// for the hosted default endpoint, so a hosted key is never sent to a
    /// local or third-party server by accident.
    #[serde(default)]
    pub api_key_env: Option<String>,
    /// The key, if given directly. Never serialized.
    #[serde(skip)]
    pub api_key: Option<ApiKey>,
    /// How transient failures are retried.
    #[serde(default)]
    pub retry: RetryPolicy,
    /// Limit on one attempt, from connecting to the last body byte.
    #[serde(with = "duration_ms", default = "default_attempt_timeout")]
    #[serde(rename = "attempt_timeout_ms")]
    pub attempt_timeout: Duration,
    /// Limit on establishing the connection.
    #[serde(with = "duration_ms", default = "default_connect_timeout")]
    #[serde(rename = "connect_timeout_ms")]
    pub connect_timeout: Duration,
    /// Reply bodies larger than this are rejected, so a misbehaving server
    /// cannot exhaust memory.
    #[serde(default = "default_max_response_bytes")]
    pub max_response_bytes: usize,
    /// The OpenAI-protocol field for the output-token limit.
    #[serde(default)]
    pub max_tokens_field: MaxTokensField,
    /// Anthropic only: mark the system prompt and the newest message as
    /// prompt-cache breakpoints (5-minute cache), so each turn re-reads the
    /// conversation from cache instead of paying full input price.
    #[serde(default)]
    pub anthropic_prompt_caching: bool,
}

/// How long one attempt of a call may take by default: far beyond a slow but healthy model's
/// longest reply, so only a stalled server hits it.
pub const DEFAULT_ATTEMPT_TIMEOUT: Duration = Duration::from_secs(600);

fn default_attempt_timeout() -> Duration {
    DEFAULT_ATTEMPT_TIMEOUT
}

fn default_connect_timeout() -> Duration {
    Duration::from_secs(10)
}

fn default_max_response_bytes() -> usize {
    16 * 1024 * 1024
}

impl ModelConfig {
    /// A config with defaults for everything but the protocol and model.
    pub fn new(protocol: Protocol, model: impl Into<String>) -> Self {
        Self {
            protocol,
            model: model.into(),
            base_url: None,
            api_key_env: None,
            api_key: None,
            retry: RetryPolicy::default(),
            attempt_timeout: default_attempt_timeout(),
            connect_timeout: default_connect_timeout(),
            max_response_bytes: default_max_response_bytes(),
            max_tokens_field: MaxTokensField::default(),
            anthropic_prompt_caching: false,
        }
    }

    /// The same config pointed at `base_url`.
    pub fn with_base_url(mut self, base_url: impl Into<String>) -> Self {
        self.base_url = Some(base_url.into());
        self
    }

    /// The same config with a key given directly.
    pub fn with_api_key(mut self, key: ApiKey) -> Self {
        self.api_key = Some(key);
        self
    }

    /// The endpoint base in use, without a trailing slash.
    pub fn effective_base_url(&self) -> &str {
        self.base_url
            .as_deref()
            .unwrap_or(self.protocol.default_base_url())
            .trim_end_matches('/')
    }

    /// Finds the key: `api_key` if set, else the variable named by
    /// `api_key_env`, else (for the hosted default endpoint only) the
    /// protocol's conventional variable. `lookup` reads a variable; pass
    /// `|name| std::env::var(name).ok()` for the process environment.
    /// An empty value counts as no key.
    pub fn resolve_api_key(&self, lookup: impl Fn(&str) -> Option<String>) -> Option<ApiKey> {
        if let Some(key) = &self.api_key {
            return Some(key.clone());
        }
        let variable = match &self.api_key_env {
            Some(name) => name.as_str(),
            None if self.base_url.is_none() => self.protocol.default_api_key_env(),
            None => return None,
        };
        lookup(variable)
            .filter(|value| !value.trim().is_empty())
            .map(ApiKey::new)
    }

    /// Checks, before a run starts, that a key variable named by `api_key_env` holds a key:
    /// a run whose every call is refused for want of one would only show up as failed trials.
    pub fn check_api_key_env(&self, lookup: impl Fn(&str) -> Option<String>) -> Result<(), String> {
        match &self.api_key_env {
            Some(name) if self.api_key.is_none() && self.resolve_api_key(lookup).is_none() => {
                Err(format!(
                    "the environment variable {name} (named by --api-key-env) is not set or empty"
                ))
            }
            _ => Ok(()),
        }
    }

    /// The URL calls are posted to: the base URL and the protocol's path. An Anthropic base URL
    /// that already ends in the version segment (`http://host/v1`) is taken without it, so
    /// calls do not go to `/v1/v1/messages`.
    pub fn endpoint(&self) -> String {
        let base = self.effective_base_url();
        match self.protocol {
            Protocol::OpenAiChat => format!("{base}/chat/completions"),
            Protocol::AnthropicMessages => {
                format!("{}/v1/messages", base.strip_suffix("/v1").unwrap_or(base))
            }
        }
    }

    /// Checks the settings a client cannot work with.
    pub fn validate(&self) -> Result<(), String> {
        if self.model.trim().is_empty() {
            return Err("model name is empty".to_string());
        }
        let base = self.effective_base_url();
        let url = reqwest::Url::parse(base).map_err(|e| format!("base URL {base:?}: {e}"))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(format!("base URL {base:?} must use http or https"));
        }
        if url.query().is_some() || url.fragment().is_some() {
            return Err(format!(
                "base URL {base:?} must not have a query or fragment"
            ));
        }
        if self.attempt_timeout.is_zero() || self.connect_timeout.is_zero() {
            return Err("timeouts must be greater than zero".to_string());
        }
        if self.max_response_bytes == 0 {
            return Err("max_response_bytes must be greater than zero".to_string());
        }
        self.retry.validate()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(name: &str) -> Option<String> {
        match name {
            "OPENAI_API_KEY" => Some("hosted-key".to_string()),
            "LOCAL_KEY" => Some("local-key".to_string()),
            "EMPTY" => Some("  ".to_string()),
            _ => None,
        }
    }

    #[test]
    fn hosted_default_reads_the_conventional_variable() {
        let config = ModelConfig::new(Protocol::OpenAiChat, "gpt-5");
        assert_eq!(config.resolve_api_key(env), Some(ApiKey::new("hosted-key")));
        assert_eq!(config.effective_base_url(), OPENAI_DEFAULT_BASE_URL);
    }

    #[test]
    fn custom_endpoint_never_gets_the_hosted_key_implicitly() {
        let config =
            ModelConfig::new(Protocol::OpenAiChat, "qwen").with_base_url("http://h:8000/v1/");
        assert_eq!(config.resolve_api_key(env), None);
        assert_eq!(config.effective_base_url(), "http://h:8000/v1");
        let named = ModelConfig {
            api_key_env: Some("LOCAL_KEY".into()),
            ..config.clone()
        };
        assert_eq!(named.resolve_api_key(env), Some(ApiKey::new("local-key")));
        let empty = ModelConfig {
            api_key_env: Some("EMPTY".into()),
            ..config
        };
        assert_eq!(empty.resolve_api_key(env), None);
    }

    #[test]
    fn explicit_key_wins_and_is_never_printed_or_serialized() {
        let config = ModelConfig::new(Protocol::AnthropicMessages, "claude")
            .with_api_key(ApiKey::new("sk-secret"));
        assert_eq!(config.resolve_api_key(env), Some(ApiKey::new("sk-secret")));
        assert!(!format!("{config:?}").contains("sk-secret"));
        let json = serde_json::to_string(&config).unwrap();
        assert!(!json.contains("sk-secret"), "{json}");
    }

    #[test]
    fn config_round_trips_through_toml_with_defaults() {
        let text = r#"
            protocol = "openai_chat"
            model = "gpt-oss-120b"
            base_url = "http://127.0.0.1:8000/v1"
            attempt_timeout_ms = 1500
            [retry]
            max_retries = 2
            initial_backoff_ms = 10
        "#;
        let config: ModelConfig = toml::from_str(text).unwrap();
        assert_eq!(config.attempt_timeout, Duration::from_millis(1500));
        assert_eq!(config.connect_timeout, Duration::from_secs(10));
        assert_eq!(config.retry.max_retries, 2);
        assert_eq!(config.retry.initial_backoff, Duration::from_millis(10));
        assert_eq!(config.retry.max_backoff, Duration::from_secs(60));
        assert!(config.validate().is_ok());
        let unknown = format!("{text}\nbogus = 1");
        assert!(toml::from_str::<ModelConfig>(&unknown).is_err());
    }

    #[test]
    fn anthropic_base_urls_with_or_without_the_version_reach_one_endpoint() {
        for base in [
            "http://h:4000",
            "http://h:4000/",
            "http://h:4000/v1",
            "http://h:4000/v1/",
        ] {
            let config = ModelConfig::new(Protocol::AnthropicMessages, "m").with_base_url(base);
            assert_eq!(config.endpoint(), "http://h:4000/v1/messages", "{base}");
        }
        let openai = ModelConfig::new(Protocol::OpenAiChat, "m").with_base_url("http://h/v1");
        assert_eq!(openai.endpoint(), "http://h/v1/chat/completions");
    }

    #[test]
    fn a_named_key_variable_that_is_unset_is_refused_before_any_call() {
        let config = ModelConfig::new(Protocol::OpenAiChat, "m").with_base_url("http://h/v1");
        assert!(
            config.check_api_key_env(env).is_ok(),
            "no variable named, none needed"
        );
        for name in ["LOCAL_KEY", "EMPTY", "MISSING"] {
            let named = ModelConfig {
                api_key_env: Some(name.into()),
                ..config.clone()
            };
            let checked = named.check_api_key_env(env);
            assert_eq!(checked.is_ok(), name == "LOCAL_KEY", "{name}: {checked:?}");
            if let Err(e) = checked {
                assert!(e.contains(name) && e.contains("--api-key-env"), "{e}");
            }
        }
    }

    #[test]
    fn unusable_configs_are_rejected() {
        let ok = ModelConfig::new(Protocol::OpenAiChat, "m");
        assert!(ok.validate().is_ok());
        for bad in [
            ModelConfig::new(Protocol::OpenAiChat, " "),
            ok.clone().with_base_url("ftp://example.invalid"),
            ok.clone().with_base_url("not a url"),
            ok.clone().with_base_url("http://h/v1?x=1"),
            ModelConfig {
                attempt_timeout: Duration::ZERO,
                ..ok.clone()
            },
            ModelConfig {
                max_response_bytes: 0,
                ..ok.clone()
            },
        ] {
            assert!(bad.validate().is_err(), "{bad:?}");
        }
    }
}
