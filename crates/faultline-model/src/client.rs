//! The HTTP client: one `complete` call = encode, send with retries, decode.

use std::error::Error as _;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Instant, SystemTime};

use rand::SeedableRng;
use rand::rngs::ChaCha8Rng;
use reqwest::header::{AUTHORIZATION, CONTENT_TYPE, HeaderMap, HeaderValue};
use serde_json::Value;

use crate::config::{ANTHROPIC_VERSION, ApiKey, ModelConfig, Protocol};
use crate::encode::EncodeCache;
use crate::error::{ErrorKind, ModelError, RetryStats};
use crate::retry::{classify_status, server_delay, should_retry};
use crate::types::{ModelRequest, ModelResponse};
use crate::wire::Decoded;
use crate::{anthropic, openai};
use bytes::Bytes;

/// Error bodies and malformed replies are kept up to this many bytes.
const KEPT_BODY_BYTES: usize = 4096;

/// A client for one configured model. Cheap to share behind an `Arc`; calls
/// may run concurrently.
#[derive(Debug)]
pub struct ModelClient {
    config: ModelConfig,
    api_key: Option<ApiKey>,
    endpoint: reqwest::Url,
    http: reqwest::Client,
    jitter: Mutex<ChaCha8Rng>,
}

/// A failed attempt, with the response headers when there was a response,
/// because they decide whether and when to retry.
struct AttemptError {
    error: ModelError,
    headers: Option<HeaderMap>,
}

impl ModelClient {
    /// Builds a client, taking the API key from the process environment as
    /// described in [`ModelConfig::resolve_api_key`].
    pub fn new(config: ModelConfig) -> Result<Self, ModelError> {
        let api_key = config.resolve_api_key(|name| std::env::var(name).ok());
        Self::with_resolved_api_key(config, api_key)
    }

    /// Builds a client with an already resolved key (or none, for local
    /// servers that need no authentication).
    pub fn with_resolved_api_key(
        config: ModelConfig,
        api_key: Option<ApiKey>,
    ) -> Result<Self, ModelError> {
        config.validate().map_err(ModelError::Config)?;
        let endpoint = config.endpoint();
        let endpoint = reqwest::Url::parse(&endpoint)
            .map_err(|e| ModelError::Config(format!("endpoint {endpoint:?}: {e}")))?;
        if let Some(key) = &api_key
            && HeaderValue::from_str(key.expose()).is_err()
        {
            return Err(ModelError::Config(
                "API key contains characters not allowed in an HTTP header".to_string(),
            ));
        }
        // reqwest is built without a bundled crypto provider (to avoid a C
        // build); use ring unless the process already chose one.
        if rustls::crypto::CryptoProvider::get_default().is_none() {
            // Losing a race to another thread installing a provider is fine.
            let _ = rustls::crypto::ring::default_provider().install_default();
        }
        let http = reqwest::Client::builder()
            .connect_timeout(config.connect_timeout)
            .build()
            .map_err(|e| ModelError::Config(format!("cannot build HTTP client: {e}")))?;
        let jitter = Mutex::new(ChaCha8Rng::seed_from_u64(config.retry.jitter_seed));
        Ok(Self {
            config,
            api_key,
            endpoint,
            http,
            jitter,
        })
    }

    /// The configuration this client was built from.
    pub fn config(&self) -> &ModelConfig {
        &self.config
    }

    /// Sends `request`, retrying transient failures per the configured
    /// [`crate::RetryPolicy`], and returns the decoded reply.
    pub async fn complete(&self, request: &ModelRequest) -> Result<ModelResponse, ModelError> {
        self.complete_counting(request, &AtomicU32::new(0)).await
    }

    /// [`Self::complete`], counting the attempts that failed in `failed_attempts` as they fail,
    /// so a caller that gives up on the call (its own deadline) can tell a call the provider
    /// kept failing from one that was merely slow.
    pub async fn complete_counting(
        &self,
        request: &ModelRequest,
        failed_attempts: &AtomicU32,
    ) -> Result<ModelResponse, ModelError> {
        let body = self.encode(request)?;
        self.send(body.into(), request.tool.is_some(), failed_attempts)
            .await
    }

    /// [`Self::complete_counting`] for one turn of a conversation that grows from call to call:
    /// `cache` keeps what earlier calls encoded, so a call encodes only what is new. Use one
    /// cache per conversation.
    pub async fn complete_cached(
        &self,
        request: &ModelRequest,
        cache: &mut EncodeCache,
        failed_attempts: &AtomicU32,
    ) -> Result<ModelResponse, ModelError> {
        check(request)?;
        let lent = cache
            .body(&self.config, request)
            .map_err(ModelError::InvalidRequest)?;
        let result = self
            .send(lent.bytes.clone(), request.tool.is_some(), failed_attempts)
            .await;
        cache.take_back(lent);
        result
    }

    /// Sends a request body an agent wrote in this client's protocol, as a gateway does: its
    /// `model` is replaced by the configured one and streaming is turned off (the reply is
    /// decoded whole, so its usage is exact), then it goes through the same retries, timeouts
    /// and decoding as [`Self::complete`]. A body that is not a JSON object is refused.
    pub async fn forward(
        &self,
        mut body: Value,
        failed_attempts: &AtomicU32,
    ) -> Result<ModelResponse, ModelError> {
        let Some(object) = body.as_object_mut() else {
            return Err(ModelError::InvalidRequest(
                "the request body is not a JSON object".to_string(),
            ));
        };
        object.insert("model".into(), Value::String(self.config.model.clone()));
        object.remove("stream");
        object.remove("stream_options");
        let has_tools = object
            .get("tools")
            .and_then(Value::as_array)
            .is_some_and(|tools| !tools.is_empty());
        let body =
            serde_json::to_vec(&body).map_err(|e| ModelError::InvalidRequest(e.to_string()))?;
        self.send(body.into(), has_tools, failed_attempts).await
    }

    /// Posts `body`, retrying transient failures, and decodes the reply.
    async fn send(
        &self,
        body: Bytes,
        has_tools: bool,
        failed_attempts: &AtomicU32,
    ) -> Result<ModelResponse, ModelError> {
        let started = Instant::now();
        let mut stats = RetryStats::default();
        loop {
            let attempt_started = Instant::now();
            let failure = match self.attempt(body.clone()).await {
                Ok(bytes) => {
                    let latency = attempt_started.elapsed();
                    return self.decode(&bytes).map_or_else(
                        |mut error| {
                            error.set_retry(stats);
                            Err(error)
                        },
                        |(decoded, usage, raw)| {
                            Ok(ModelResponse {
                                model: decoded.model,
                                text: decoded.text,
                                reasoning_text: decoded.reasoning_text,
                                tool_calls: decoded.tool_calls,
                                finish_reason: decoded.finish_reason,
                                usage,
                                latency,
                                total_time: started.elapsed(),
                                retry: stats,
                                raw,
                            })
                        },
                    );
                }
                Err(failure) => failure,
            };
            failed_attempts.fetch_add(1, Ordering::Relaxed);
            let AttemptError { mut error, headers } = failure;
            let wait = if should_retry(error.kind(), headers.as_ref())
                && stats.retries < self.config.retry.max_retries
            {
                match headers
                    .as_ref()
                    .and_then(|h| server_delay(h, SystemTime::now()))
                {
                    Some(delay) if delay > self.config.retry.max_retry_after => None,
                    Some(delay) => Some(delay),
                    None => Some(self.config.retry.backoff(stats.retries, &mut self.rng())),
                }
            } else {
                None
            };
            // A wait that would take the call past its total budget ends it instead.
            let spent = stats.waiting() + attempt_started.elapsed();
            let wait = wait.filter(|wait| {
                self.config
                    .retry
                    .max_total_wait
                    .is_none_or(|budget| spent + *wait <= budget)
            });
            let Some(wait) = wait else {
                error.set_retry(stats);
                if has_tools {
                    error.note_tools_refused();
                }
                return Err(error);
            };
            stats.failed_attempts += attempt_started.elapsed();
            let sleep_started = Instant::now();
            tokio::time::sleep(wait).await;
            stats.backoff += sleep_started.elapsed();
            stats.retries += 1;
        }
    }

    fn rng(&self) -> std::sync::MutexGuard<'_, ChaCha8Rng> {
        // The generator holds no invariant a panic elsewhere could break.
        self.jitter.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn encode(&self, request: &ModelRequest) -> Result<Vec<u8>, ModelError> {
        check(request)?;
        let body = match self.config.protocol {
            Protocol::OpenAiChat => openai::encode(&self.config, request),
            Protocol::AnthropicMessages => anthropic::encode(&self.config, request),
        }
        .map_err(ModelError::InvalidRequest)?;
        serde_json::to_vec(&body).map_err(|e| ModelError::InvalidRequest(e.to_string()))
    }

    /// One HTTP exchange. Returns the body of a 2xx reply.
    async fn attempt(&self, body: Bytes) -> Result<Vec<u8>, AttemptError> {
        let mut request = self
            .http
            .post(self.endpoint.clone())
            .timeout(self.config.attempt_timeout)
            .header(CONTENT_TYPE, "application/json")
            .body(body);
        match self.config.protocol {
            Protocol::OpenAiChat => {
                if let Some(key) = &self.api_key {
                    request = request.header(AUTHORIZATION, format!("Bearer {}", key.expose()));
                }
            }
            Protocol::AnthropicMessages => {
                request = request.header("anthropic-version", ANTHROPIC_VERSION);
                if let Some(key) = &self.api_key {
                    request = request.header("x-api-key", key.expose());
                }
            }
        }
        let mut response = request.send().await.map_err(transport)?;
        let status = response.status();
        let headers = response.headers().clone();
        let limit = self.config.max_response_bytes;
        let too_large = || AttemptError {
            error: ModelError::TooLarge {
                limit,
                retry: RetryStats::default(),
            },
            headers: None,
        };
        if response
            .content_length()
            .is_some_and(|length| length > u64::try_from(limit).unwrap_or(u64::MAX))
        {
            return Err(too_large());
        }
        let mut bytes = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(transport)? {
            if bytes.len() + chunk.len() > limit {
                return Err(too_large());
            }
            bytes.extend_from_slice(&chunk);
        }
        if status.is_success() {
            return Ok(bytes);
        }
        let (code, message) = error_details(&bytes);
        Err(AttemptError {
            error: ModelError::Status {
                kind: classify_status(status.as_u16(), &code, &message),
                status: status.as_u16(),
                message,
                body: kept(&bytes),
                retry: RetryStats::default(),
            },
            headers: Some(headers),
        })
    }

    fn decode(&self, bytes: &[u8]) -> Result<(Decoded, Option<crate::Usage>, Value), ModelError> {
        let malformed = |reason: String, usage| ModelError::Malformed {
            reason,
            body: kept(bytes),
            usage,
            retry: RetryStats::default(),
        };
        let raw: Value = serde_json::from_slice(bytes)
            .map_err(|e| malformed(format!("response is not valid JSON: {e}"), None))?;
        if !raw.is_object() {
            return Err(malformed("response is not a JSON object".to_string(), None));
        }
        let (usage, decoded) = match self.config.protocol {
            Protocol::OpenAiChat => (openai::usage(&raw), openai::decode(&raw)),
            Protocol::AnthropicMessages => (anthropic::usage(&raw), anthropic::decode(&raw)),
        };
        let usage = usage.map_err(|reason| malformed(reason, None))?;
        let decoded = decoded.map_err(|reason| malformed(reason, usage.clone().map(Box::new)))?;
        Ok((decoded, usage, raw))
    }
}

/// Refuses a request no provider could answer.
fn check(request: &ModelRequest) -> Result<(), ModelError> {
    if request.max_output_tokens == 0 {
        return Err(ModelError::InvalidRequest(
            "max_output_tokens must be greater than zero".to_string(),
        ));
    }
    if request
        .temperature
        .is_some_and(|t| !t.is_finite() || t < 0.0)
    {
        return Err(ModelError::InvalidRequest(
            "temperature must be a finite, non-negative number".to_string(),
        ));
    }
    if request.messages.is_empty() {
        return Err(ModelError::InvalidRequest(
            "the request has no messages".to_string(),
        ));
    }
    Ok(())
}

/// Classifies a failure of the HTTP client itself.
fn transport(error: reqwest::Error) -> AttemptError {
    let kind = if error.is_timeout() {
        ErrorKind::Timeout
    } else if error.is_connect() {
        ErrorKind::Connect
    } else {
        ErrorKind::Network
    };
    // reqwest's own message is terse; the source chain says what happened.
    let mut message = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        message.push_str(": ");
        message.push_str(&cause.to_string());
        source = cause.source();
    }
    AttemptError {
        error: ModelError::Transport {
            kind,
            message,
            retry: RetryStats::default(),
        },
        headers: None,
    }
}

/// The machine-readable code and the human message of an error body, in
/// either protocol's shape or the looser shapes of compatible servers.
fn error_details(bytes: &[u8]) -> (String, String) {
    let Ok(body) = serde_json::from_slice::<Value>(bytes) else {
        return (String::new(), kept(bytes));
    };
    let error = &body["error"];
    let code = [&error["code"], &error["type"]]
        .into_iter()
        .find_map(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let message = [&error["message"], error, &body["message"], &body["detail"]]
        .into_iter()
        .find_map(Value::as_str)
        .map_or_else(|| kept(bytes), str::to_string);
    (code, message)
}

/// At most [`KEPT_BODY_BYTES`] of a body, as text, cut at a character boundary.
fn kept(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    if text.len() <= KEPT_BODY_BYTES {
        return text.into_owned();
    }
    let mut end = KEPT_BODY_BYTES;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… ({} bytes in all)", &text[..end], bytes.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_details_from_each_shape() {
        let openai = br#"{"error":{"message":"too long","type":"invalid_request_error","code":"context_length_exceeded"}}"#;
        assert_eq!(
            error_details(openai),
            ("context_length_exceeded".into(), "too long".into())
        );
        let anthropic = br#"{"type":"error","error":{"type":"overloaded_error","message":"busy"}}"#;
        assert_eq!(
            error_details(anthropic),
            ("overloaded_error".into(), "busy".into())
        );
        assert_eq!(
            error_details(br#"{"error":"model not found"}"#).1,
            "model not found"
        );
        assert_eq!(error_details(br#"{"detail":"nope"}"#).1, "nope");
        assert_eq!(
            error_details(b"<html>bad gateway</html>").1,
            "<html>bad gateway</html>"
        );
    }

    #[test]
    fn kept_bodies_are_cut_on_char_boundaries() {
        let long = "é".repeat(KEPT_BODY_BYTES);
        let cut = kept(long.as_bytes());
        assert!(cut.len() < long.len());
        assert!(cut.ends_with(&format!("({} bytes in all)", long.len())));
    }
}
