//! The retry policy: which failures are retried, and how long to wait.

use std::time::{Duration, SystemTime};

use rand::RngExt;
use rand::rngs::ChaCha8Rng;
use reqwest::header::HeaderMap;
use serde::{Deserialize, Serialize};

use crate::duration_ms;
use crate::error::ErrorKind;

/// How a client retries transient failures (429, 408, 5xx, 529, connect
/// errors, timeouts).
///
/// The wait before retry `n` (counting from 0) is
/// `min(initial_backoff * multiplier^n, max_backoff)`, scaled down by a
/// random factor in `(1 - jitter, 1]` drawn from a generator seeded with
/// `jitter_seed`, so a test (or a rerun) sees the same schedule. When the
/// server says how long to wait (`retry-after-ms`, else `Retry-After` in
/// seconds or as an HTTP date) that wait is used exactly instead; if it is
/// longer than `max_retry_after` the call fails rather than stalling the run.
///
/// Each client owns one jitter generator, so the schedule is reproducible
/// for the calls of one client made one after another; concurrent calls on
/// the same client draw from it in whatever order they fail.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RetryPolicy {
    /// Retries after the first attempt; 0 disables retrying.
    pub max_retries: u32,
    /// Wait before the first retry, before jitter.
    #[serde(with = "duration_ms", rename = "initial_backoff_ms")]
    pub initial_backoff: Duration,
    /// Cap on the computed wait, before jitter.
    #[serde(with = "duration_ms", rename = "max_backoff_ms")]
    pub max_backoff: Duration,
    /// Growth factor per retry; at least 1.
    pub multiplier: f64,
    /// Fraction of each wait that is randomized, in `[0, 1]`; 0 gives exact
    /// exponential waits.
    pub jitter: f64,
    /// Seed of the jitter generator.
    pub jitter_seed: u64,
    /// The longest server-requested wait the client will honour.
    #[serde(with = "duration_ms", rename = "max_retry_after_ms")]
    pub max_retry_after: Duration,
    /// The most time one call may spend on failed attempts and the waits between them: no
    /// retry starts once the next wait would take the call past it. `None`: only `max_retries`
    /// bounds a call.
    #[serde(
        with = "optional_duration_ms",
        rename = "max_total_wait_ms",
        skip_serializing_if = "Option::is_none"
    )]
    pub max_total_wait: Option<Duration>,
}

/// Serde helper: an optional [`Duration`] as whole milliseconds.
mod optional_duration_ms {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub(crate) fn serialize<S: Serializer>(
        value: &Option<Duration>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        match value {
            Some(d) => serializer.serialize_u64(u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
            None => serializer.serialize_none(),
        }
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Option<Duration>, D::Error> {
        Ok(Option::<u64>::deserialize(deserializer)?.map(Duration::from_millis))
    }
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_retries: 6,
            initial_backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(60),
            multiplier: 2.0,
            jitter: 0.5,
            jitter_seed: 0,
            max_retry_after: Duration::from_secs(300),
            max_total_wait: None,
        }
    }
}

impl RetryPolicy {
    /// A policy that never retries.
    pub fn none() -> Self {
        Self {
            max_retries: 0,
            ..Self::default()
        }
    }

    /// Rejects settings that would make the schedule meaningless.
    pub(crate) fn validate(&self) -> Result<(), String> {
        if !(self.multiplier.is_finite() && self.multiplier >= 1.0) {
            return Err(format!(
                "retry multiplier must be a finite number >= 1, got {}",
                self.multiplier
            ));
        }
        if !(0.0..=1.0).contains(&self.jitter) {
            return Err(format!(
                "retry jitter must be within [0, 1], got {}",
                self.jitter
            ));
        }
        if self.initial_backoff > self.max_backoff {
            return Err("initial_backoff must not exceed max_backoff".to_string());
        }
        Ok(())
    }

    /// The wait before retry number `retry` (0-based), drawing jitter from `rng`.
    pub(crate) fn backoff(&self, retry: u32, rng: &mut ChaCha8Rng) -> Duration {
        let exponent = i32::try_from(retry).unwrap_or(i32::MAX);
        let grown = self.initial_backoff.as_secs_f64() * self.multiplier.powi(exponent);
        let capped = grown.min(self.max_backoff.as_secs_f64());
        let unit: f64 = rng.random();
        Duration::try_from_secs_f64(capped * (1.0 - self.jitter * unit)).unwrap_or(self.max_backoff)
    }
}

/// Classifies an error status. `code` and `message` come from the error body
/// and are only consulted to recognise context-length errors.
pub(crate) fn classify_status(status: u16, code: &str, message: &str) -> ErrorKind {
    match status {
        401 | 403 => ErrorKind::Auth,
        404 => ErrorKind::NotFound,
        408 => ErrorKind::Timeout,
        429 => ErrorKind::RateLimited,
        529 => ErrorKind::Overloaded,
        500..=599 => ErrorKind::Server,
        400..=499 if is_context_length(code, message) => ErrorKind::ContextLength,
        _ => ErrorKind::BadRequest,
    }
}

/// Whether an error body says the prompt is too long for the model. Servers
/// word this differently (hosted OpenAI and Anthropic, vLLM, llama.cpp), so
/// both the machine-readable code and a few telling phrases are checked.
fn is_context_length(code: &str, message: &str) -> bool {
    const CODES: [&str; 2] = ["context_length_exceeded", "exceed_context_size_error"];
    const PHRASES: [&str; 8] = [
        "context length",
        "context_length",
        "context window",
        "maximum context",
        "context size",
        "context limit",
        "prompt is too long",
        "maximum model length",
    ];
    if CODES.contains(&code) {
        return true;
    }
    let message = message.to_ascii_lowercase();
    PHRASES.iter().any(|phrase| message.contains(phrase))
}

/// Whether to retry an error of `kind`, given the response headers. A server
/// may override the status-based decision with `x-should-retry`, except that
/// auth, not-found and context-length errors are never retried.
pub(crate) fn should_retry(kind: ErrorKind, headers: Option<&HeaderMap>) -> bool {
    let hint = headers
        .and_then(|h| h.get("x-should-retry"))
        .and_then(|v| v.to_str().ok());
    match (kind, hint) {
        (ErrorKind::Auth | ErrorKind::NotFound | ErrorKind::ContextLength, _) => false,
        (_, Some("false")) => false,
        (ErrorKind::BadRequest, Some("true")) => true,
        _ => kind.is_retryable(),
    }
}

/// The wait the server asked for: `retry-after-ms` (milliseconds), else
/// `Retry-After` as seconds or an HTTP date relative to `now`. A date in the
/// past means "now". Unparseable values are ignored.
pub(crate) fn server_delay(headers: &HeaderMap, now: SystemTime) -> Option<Duration> {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
    };
    if let Some(ms) = header("retry-after-ms").and_then(parse_non_negative) {
        return Some(Duration::from_secs_f64(ms / 1000.0));
    }
    let value = header("retry-after")?;
    if let Some(seconds) = parse_non_negative(value) {
        return Some(Duration::from_secs_f64(seconds));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

fn parse_non_negative(value: &str) -> Option<f64> {
    let number: f64 = value.parse().ok()?;
    // Cap at a day so a silly header cannot overflow `Duration`.
    (number.is_finite() && number >= 0.0).then_some(number.min(86_400.0 * 1000.0))
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;
    use reqwest::header::HeaderValue;

    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(*name, HeaderValue::from_str(value).unwrap());
        }
        map
    }

    #[test]
    fn statuses_are_classified() {
        assert_eq!(classify_status(401, "", ""), ErrorKind::Auth);
        assert_eq!(classify_status(403, "", ""), ErrorKind::Auth);
        assert_eq!(classify_status(404, "", ""), ErrorKind::NotFound);
        assert_eq!(classify_status(408, "", ""), ErrorKind::Timeout);
        assert_eq!(classify_status(429, "", ""), ErrorKind::RateLimited);
        assert_eq!(classify_status(529, "", ""), ErrorKind::Overloaded);
        assert_eq!(classify_status(500, "", ""), ErrorKind::Server);
        assert_eq!(classify_status(503, "", ""), ErrorKind::Server);
        assert_eq!(
            classify_status(400, "", "bad tool schema"),
            ErrorKind::BadRequest
        );
        assert_eq!(classify_status(422, "", ""), ErrorKind::BadRequest);
    }

    #[test]
    fn context_length_is_recognised_by_code_or_wording() {
        let cases = [
            ("context_length_exceeded", "whatever"),
            ("", "prompt is too long: 210000 tokens > 200000 maximum"),
            ("", "This model's maximum context length is 32768 tokens."),
            (
                "exceed_context_size_error",
                "the request exceeds the available context",
            ),
            (
                "",
                "input length and `max_tokens` exceed context limit: 199000 + 8192 > 200000",
            ),
        ];
        for (code, message) in cases {
            assert_eq!(
                classify_status(400, code, message),
                ErrorKind::ContextLength,
                "{message}"
            );
        }
        // A 5xx stays a server error whatever it says.
        assert_eq!(
            classify_status(500, "", "context length"),
            ErrorKind::Server
        );
    }

    #[test]
    fn retry_decisions() {
        assert!(should_retry(ErrorKind::RateLimited, None));
        assert!(should_retry(ErrorKind::Overloaded, None));
        assert!(should_retry(ErrorKind::Timeout, None));
        assert!(!should_retry(ErrorKind::Auth, None));
        assert!(!should_retry(ErrorKind::BadRequest, None));
        assert!(!should_retry(ErrorKind::MalformedResponse, None));
        let no = headers(&[("x-should-retry", "false")]);
        let yes = headers(&[("x-should-retry", "true")]);
        assert!(!should_retry(ErrorKind::Server, Some(&no)));
        assert!(should_retry(ErrorKind::BadRequest, Some(&yes)));
        assert!(!should_retry(ErrorKind::Auth, Some(&yes)));
        assert!(!should_retry(ErrorKind::ContextLength, Some(&yes)));
    }

    #[test]
    fn server_delay_forms() {
        let now = httpdate::parse_http_date("Sun, 29 Nov 2026 10:00:00 GMT").unwrap();
        assert_eq!(
            server_delay(&headers(&[("retry-after", "3")]), now),
            Some(Duration::from_secs(3))
        );
        assert_eq!(
            server_delay(
                &headers(&[("retry-after", "Sun, 29 Nov 2026 10:00:07 GMT")]),
                now
            ),
            Some(Duration::from_secs(7))
        );
        assert_eq!(
            server_delay(
                &headers(&[("retry-after", "Sun, 29 Nov 2026 09:00:00 GMT")]),
                now
            ),
            Some(Duration::ZERO)
        );
        // retry-after-ms is more precise and wins.
        assert_eq!(
            server_delay(
                &headers(&[("retry-after", "3"), ("retry-after-ms", "250")]),
                now
            ),
            Some(Duration::from_millis(250))
        );
        assert_eq!(
            server_delay(&headers(&[("retry-after", "soon")]), now),
            None
        );
        assert_eq!(server_delay(&headers(&[("retry-after", "-4")]), now), None);
        assert_eq!(server_delay(&HeaderMap::new(), now), None);
    }

    #[test]
    fn backoff_grows_caps_and_jitters_deterministically() {
        let policy = RetryPolicy {
            initial_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_millis(500),
            multiplier: 2.0,
            jitter: 0.0,
            ..RetryPolicy::default()
        };
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let waits: Vec<u128> = (0..5)
            .map(|n| policy.backoff(n, &mut rng).as_millis())
            .collect();
        assert_eq!(waits, [100, 200, 400, 500, 500]);

        let jittered = RetryPolicy {
            jitter: 0.5,
            ..policy
        };
        let schedule = |seed| {
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            (0..5)
                .map(|n| jittered.backoff(n, &mut rng))
                .collect::<Vec<_>>()
        };
        assert_eq!(schedule(7), schedule(7));
        assert_ne!(schedule(7), schedule(8));
        for (n, wait) in schedule(7).into_iter().enumerate() {
            let full = [100, 200, 400, 500, 500][n];
            assert!(wait <= Duration::from_millis(full), "{wait:?}");
            assert!(wait >= Duration::from_millis(full / 2), "{wait:?}");
        }
    }

    #[test]
    fn extreme_settings_do_not_overflow() {
        let policy = RetryPolicy {
            initial_backoff: Duration::from_secs(1),
            max_backoff: Duration::MAX,
            multiplier: 10.0,
            ..RetryPolicy::default()
        };
        let mut rng = ChaCha8Rng::seed_from_u64(0);
        for retry in [0, 50, 400, u32::MAX] {
            assert!(policy.backoff(retry, &mut rng) <= Duration::MAX);
        }
        let huge = headers(&[("retry-after", "1e300")]);
        assert!(server_delay(&huge, SystemTime::now()).is_some());
    }

    #[test]
    fn invalid_policies_are_rejected() {
        let bad_multiplier = RetryPolicy {
            multiplier: 0.5,
            ..RetryPolicy::default()
        };
        assert!(bad_multiplier.validate().is_err());
        let bad_jitter = RetryPolicy {
            jitter: 1.5,
            ..RetryPolicy::default()
        };
        assert!(bad_jitter.validate().is_err());
        assert!(RetryPolicy::default().validate().is_ok());
    }
}
