//! Token usage of one call, normalized across providers.
//!
//! The providers count differently, and published cost numbers depend on
//! getting this right:
//!
//! - OpenAI-compatible: `prompt_tokens` **includes** the cached tokens in
//!   `prompt_tokens_details.cached_tokens`; there is no cache-write count.
//!   `completion_tokens` **includes** `completion_tokens_details.reasoning_tokens`.
//! - Anthropic: `input_tokens` **excludes** both `cache_read_input_tokens` and
//!   `cache_creation_input_tokens`; `output_tokens` includes any thinking, which
//!   is not reported separately.
//!
//! [`Usage`] uses one convention for both: `input_tokens` is every prompt token
//! the model processed, and the cache counts are subsets of it.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Normalized token counts of one call, plus the provider's usage object verbatim.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Usage {
    /// All prompt tokens, including `cached_input_tokens` and `cache_write_tokens`.
    /// OpenAI: `prompt_tokens`. Anthropic: `input_tokens + cache_read_input_tokens
    /// + cache_creation_input_tokens`.
    pub input_tokens: u64,
    /// Prompt tokens served from the prompt cache (a subset of `input_tokens`).
    /// 0 when the provider reported no cache breakdown.
    pub cached_input_tokens: u64,
    /// Prompt tokens written to the prompt cache (a subset of `input_tokens`);
    /// only Anthropic reports this, so it is 0 elsewhere.
    pub cache_write_tokens: u64,
    /// All generated tokens, including `reasoning_tokens`.
    pub output_tokens: u64,
    /// Generated reasoning tokens (a subset of `output_tokens`); `None` when
    /// the provider does not report them separately (Anthropic never does).
    pub reasoning_tokens: Option<u64>,
    /// The `usage` object exactly as the provider sent it.
    pub raw: Value,
}

impl Usage {
    /// Prompt tokens billed at the plain input rate: neither cache reads nor
    /// cache writes.
    pub fn uncached_input_tokens(&self) -> u64 {
        self.input_tokens
            .saturating_sub(self.cached_input_tokens)
            .saturating_sub(self.cache_write_tokens)
    }

    /// Every token processed, prompt plus generated.
    pub fn total_tokens(&self) -> u64 {
        self.input_tokens.saturating_add(self.output_tokens)
    }

    /// Reads an OpenAI-compatible `usage` object. Returns an error naming the
    /// field when a required count is missing or not a non-negative integer.
    pub(crate) fn from_openai(raw: &Value) -> Result<Self, String> {
        let input_tokens = required(raw, "prompt_tokens")?;
        let output_tokens = required(raw, "completion_tokens")?;
        // The standard place is `prompt_tokens_details.cached_tokens`; some
        // compatible servers put the count at the top level instead, under
        // `cached_tokens` or `prompt_cache_hit_tokens`.
        let cached_input_tokens = optional(&raw["prompt_tokens_details"], "cached_tokens")?
            .or(optional(raw, "cached_tokens")?)
            .or(optional(raw, "prompt_cache_hit_tokens")?)
            .unwrap_or(0);
        let reasoning_tokens = optional(&raw["completion_tokens_details"], "reasoning_tokens")?;
        if cached_input_tokens > input_tokens {
            return Err(format!(
                "usage: cached tokens ({cached_input_tokens}) exceed prompt_tokens ({input_tokens})"
            ));
        }
        if reasoning_tokens.is_some_and(|r| r > output_tokens) {
            return Err(format!(
                "usage: reasoning tokens exceed completion_tokens ({output_tokens})"
            ));
        }
        Ok(Self {
            input_tokens,
            cached_input_tokens,
            cache_write_tokens: 0,
            output_tokens,
            reasoning_tokens,
            raw: raw.clone(),
        })
    }

    /// Reads an Anthropic `usage` object, folding the cache counts into
    /// `input_tokens` so it means the same as for OpenAI.
    pub(crate) fn from_anthropic(raw: &Value) -> Result<Self, String> {
        let uncached = required(raw, "input_tokens")?;
        let output_tokens = required(raw, "output_tokens")?;
        let cache_read = optional(raw, "cache_read_input_tokens")?.unwrap_or(0);
        let cache_write = optional(raw, "cache_creation_input_tokens")?.unwrap_or(0);
        let input_tokens = uncached
            .checked_add(cache_read)
            .and_then(|n| n.checked_add(cache_write))
            .ok_or("usage: input token counts overflow")?;
        Ok(Self {
            input_tokens,
            cached_input_tokens: cache_read,
            cache_write_tokens: cache_write,
            output_tokens,
            reasoning_tokens: None,
            raw: raw.clone(),
        })
    }
}

fn required(object: &Value, field: &str) -> Result<u64, String> {
    optional(object, field)?.ok_or_else(|| format!("usage: missing `{field}`"))
}

/// A count that may be absent or null, but if present must be a non-negative integer.
fn optional(object: &Value, field: &str) -> Result<Option<u64>, String> {
    match object.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(value) => value
            .as_u64()
            .map(Some)
            .ok_or_else(|| format!("usage: `{field}` is not a non-negative integer: {value}")),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn openai_prompt_tokens_include_cached() {
        let raw = json!({
            "prompt_tokens": 1000, "completion_tokens": 300, "total_tokens": 1300,
            "prompt_tokens_details": {"cached_tokens": 800},
            "completion_tokens_details": {"reasoning_tokens": 200}
        });
        let usage = Usage::from_openai(&raw).unwrap();
        assert_eq!(usage.input_tokens, 1000);
        assert_eq!(usage.cached_input_tokens, 800);
        assert_eq!(usage.uncached_input_tokens(), 200);
        assert_eq!(usage.cache_write_tokens, 0);
        assert_eq!(usage.output_tokens, 300);
        assert_eq!(usage.reasoning_tokens, Some(200));
        assert_eq!(usage.total_tokens(), 1300);
        assert_eq!(usage.raw, raw);
    }

    #[test]
    fn openai_without_details_has_no_cache_and_unknown_reasoning() {
        let usage =
            Usage::from_openai(&json!({"prompt_tokens": 10, "completion_tokens": 5})).unwrap();
        assert_eq!(usage.cached_input_tokens, 0);
        assert_eq!(usage.reasoning_tokens, None);
    }

    #[test]
    fn openai_top_level_cache_fields_of_compatible_servers() {
        let moonshot = json!({"prompt_tokens": 100, "completion_tokens": 5, "cached_tokens": 60});
        assert_eq!(
            Usage::from_openai(&moonshot).unwrap().cached_input_tokens,
            60
        );
        let deepseek = json!({"prompt_tokens": 100, "completion_tokens": 5,
                              "prompt_cache_hit_tokens": 70, "prompt_cache_miss_tokens": 30});
        assert_eq!(
            Usage::from_openai(&deepseek).unwrap().cached_input_tokens,
            70
        );
    }

    #[test]
    fn openai_bad_counts_are_errors() {
        assert!(Usage::from_openai(&json!({"completion_tokens": 5})).is_err());
        assert!(Usage::from_openai(&json!({"prompt_tokens": -1, "completion_tokens": 5})).is_err());
        assert!(
            Usage::from_openai(&json!({"prompt_tokens": "7", "completion_tokens": 5})).is_err()
        );
        let too_many_cached = json!({"prompt_tokens": 10, "completion_tokens": 5,
                                     "prompt_tokens_details": {"cached_tokens": 11}});
        assert!(Usage::from_openai(&too_many_cached).is_err());
    }

    #[test]
    fn anthropic_input_excludes_cache_reads_and_writes() {
        let raw = json!({
            "input_tokens": 50, "cache_read_input_tokens": 900,
            "cache_creation_input_tokens": 300, "output_tokens": 120
        });
        let usage = Usage::from_anthropic(&raw).unwrap();
        assert_eq!(usage.input_tokens, 1250);
        assert_eq!(usage.cached_input_tokens, 900);
        assert_eq!(usage.cache_write_tokens, 300);
        assert_eq!(usage.uncached_input_tokens(), 50);
        assert_eq!(usage.output_tokens, 120);
        assert_eq!(usage.reasoning_tokens, None);
    }

    #[test]
    fn anthropic_cache_fields_may_be_absent_or_null() {
        let raw = json!({"input_tokens": 5, "output_tokens": 1, "cache_read_input_tokens": null});
        let usage = Usage::from_anthropic(&raw).unwrap();
        assert_eq!((usage.input_tokens, usage.cached_input_tokens), (5, 0));
        assert!(Usage::from_anthropic(&json!({"input_tokens": 5})).is_err());
    }
}
