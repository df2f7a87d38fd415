//! Errors of a model call, classified so the agent loop can map them to an
//! exit status and report whether retries were spent on them.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::usage::Usage;

/// What went wrong, in terms the agent loop acts on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    /// 401 or 403: the key is missing, wrong or lacks access. Never retried.
    Auth,
    /// 404: wrong base URL or unknown model. Never retried.
    NotFound,
    /// The prompt does not fit the model's context window. Never retried.
    ContextLength,
    /// Any other 4xx the provider refused. Never retried.
    BadRequest,
    /// 429. Retried.
    RateLimited,
    /// Anthropic 529, the provider is overloaded. Retried.
    Overloaded,
    /// 5xx other than 529. Retried.
    Server,
    /// The attempt timed out (client side) or the server answered 408. Retried.
    Timeout,
    /// The connection could not be made. Retried.
    Connect,
    /// The connection failed after it was made (reset, closed mid-body). Retried.
    Network,
    /// The reply was not valid JSON or lacked required fields. Not retried:
    /// the call may already have been billed.
    MalformedResponse,
    /// The reply body exceeded the configured size cap. Not retried.
    ResponseTooLarge,
    /// The request could not be expressed in the protocol. Not retried.
    InvalidRequest,
    /// The client configuration is unusable. Not retried.
    Config,
}

impl ErrorKind {
    /// Whether an error of this kind is transient and worth another attempt.
    pub fn is_retryable(self) -> bool {
        matches!(
            self,
            Self::RateLimited
                | Self::Overloaded
                | Self::Server
                | Self::Timeout
                | Self::Connect
                | Self::Network
        )
    }

    /// Whether a call that failed for good with this kind says nothing about the model's
    /// ability: the provider was down, overloaded, misconfigured or answered outside its
    /// protocol. Only a prompt that outgrew the context window is the agent's own doing.
    pub fn is_infrastructure(self) -> bool {
        self != Self::ContextLength
    }

    /// A stable snake_case name for logs and result files.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Auth => "auth",
            Self::NotFound => "not_found",
            Self::ContextLength => "context_length",
            Self::BadRequest => "bad_request",
            Self::RateLimited => "rate_limited",
            Self::Overloaded => "overloaded",
            Self::Server => "server",
            Self::Timeout => "timeout",
            Self::Connect => "connect",
            Self::Network => "network",
            Self::MalformedResponse => "malformed_response",
            Self::ResponseTooLarge => "response_too_large",
            Self::InvalidRequest => "invalid_request",
            Self::Config => "config",
        }
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Retries spent on one call, so callers can tell working time from time
/// lost to provider trouble.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetryStats {
    /// Attempts made after the first.
    pub retries: u32,
    /// Time slept between attempts (backoff and `Retry-After` waits).
    pub backoff: Duration,
    /// Time spent in attempts that failed and were retried.
    pub failed_attempts: Duration,
}

impl RetryStats {
    /// All time the call lost to retrying: backoff plus failed attempts.
    /// The agent's working time is its wall time minus this.
    pub fn waiting(&self) -> Duration {
        self.backoff + self.failed_attempts
    }
}

/// A model call that failed.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    /// The provider answered with an error status.
    #[error(
        "model API returned HTTP {status} ({kind}){}: {message}",
        retried_note(retry)
    )]
    Status {
        /// The classification of the status and body.
        kind: ErrorKind,
        /// The HTTP status.
        status: u16,
        /// The provider's error message, or the start of the body.
        message: String,
        /// The response body, cut to a few KiB.
        body: String,
        /// Retries spent before giving up.
        retry: RetryStats,
    },
    /// No usable HTTP response: connect failure, timeout or broken connection.
    #[error("model API request failed ({kind}){}: {message}", retried_note(retry))]
    Transport {
        /// [`ErrorKind::Connect`], [`ErrorKind::Timeout`] or [`ErrorKind::Network`].
        kind: ErrorKind,
        /// What the HTTP client reported.
        message: String,
        /// Retries spent before giving up.
        retry: RetryStats,
    },
    /// A 2xx reply that cannot be understood.
    #[error("malformed model response{}: {reason}", retried_note(retry))]
    Malformed {
        /// What is wrong with it.
        reason: String,
        /// The response body, cut to a few KiB.
        body: String,
        /// Usage, when the body was JSON with a readable usage object: the
        /// call was likely billed even though it is unusable. Boxed to keep
        /// the error small.
        usage: Option<Box<Usage>>,
        /// Retries spent before this reply.
        retry: RetryStats,
    },
    /// A reply body larger than the configured cap.
    #[error(
        "model response exceeded the {limit}-byte limit{}",
        retried_note(retry)
    )]
    TooLarge {
        /// The cap in bytes.
        limit: usize,
        /// Retries spent before this reply.
        retry: RetryStats,
    },
    /// The request cannot be expressed in the protocol (nothing was sent).
    #[error("invalid model request: {0}")]
    InvalidRequest(String),
    /// The client configuration is unusable (nothing was sent).
    #[error("invalid model client configuration: {0}")]
    Config(String),
}

/// What a refusal of tool definitions adds to its message.
pub const TOOLS_REFUSED: &str =
    " (the server does not take tool definitions; run the agent with --text-mode)";

fn retried_note(retry: &RetryStats) -> String {
    match retry.retries {
        0 => String::new(),
        1 => " after 1 retry".to_string(),
        n => format!(" after {n} retries"),
    }
}

impl ModelError {
    /// The classification the agent loop maps to an exit status.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Self::Status { kind, .. } | Self::Transport { kind, .. } => *kind,
            Self::Malformed { .. } => ErrorKind::MalformedResponse,
            Self::TooLarge { .. } => ErrorKind::ResponseTooLarge,
            Self::InvalidRequest(_) => ErrorKind::InvalidRequest,
            Self::Config(_) => ErrorKind::Config,
        }
    }

    /// Retries spent on the call before it failed.
    pub fn retry_stats(&self) -> RetryStats {
        match self {
            Self::Status { retry, .. }
            | Self::Transport { retry, .. }
            | Self::Malformed { retry, .. }
            | Self::TooLarge { retry, .. } => *retry,
            Self::InvalidRequest(_) | Self::Config(_) => RetryStats::default(),
        }
    }

    /// Whether any retry was made before giving up.
    pub fn was_retried(&self) -> bool {
        self.retry_stats().retries > 0
    }

    /// Usage the provider reported for a failed call, which should still
    /// count towards cost.
    pub fn billed_usage(&self) -> Option<&Usage> {
        match self {
            Self::Malformed { usage, .. } => usage.as_deref(),
            _ => None,
        }
    }

    /// Adds the way out to a refusal of a request that carried a tool definition, when the
    /// server says tools are what it refuses (vLLM started without a tool-call parser, say):
    /// every call of the run would fail the same way.
    pub(crate) fn note_tools_refused(&mut self) {
        if let Self::Status {
            kind: ErrorKind::BadRequest,
            message,
            ..
        } = self
            && message.to_lowercase().contains("tool")
        {
            message.push_str(TOOLS_REFUSED);
        }
    }

    pub(crate) fn set_retry(&mut self, stats: RetryStats) {
        match self {
            Self::Status { retry, .. }
            | Self::Transport { retry, .. }
            | Self::Malformed { retry, .. }
            | Self::TooLarge { retry, .. } => *retry = stats,
            Self::InvalidRequest(_) | Self::Config(_) => {}
        }
    }
}
