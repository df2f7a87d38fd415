//! Prices per model, and the cost of a call.
//!
//! Costs are published results, so an unknown price is never treated as
//! free: [`PricingTable::cost`] returns `None` when the model, or any rate
//! the call actually needs, is missing from the table.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::usage::Usage;

/// The table shipped with the crate (`pricing/pricing.toml`).
pub const BUILTIN_PRICING_TOML: &str = include_str!("../pricing/pricing.toml");

/// The only table layout this version understands.
pub const PRICING_SCHEMA_VERSION: u32 = 1;

/// A versioned table of USD prices per million tokens.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PricingTable {
    /// The layout version; must equal [`PRICING_SCHEMA_VERSION`].
    pub schema_version: u32,
    /// The version of the prices, recorded with every run that used them.
    pub table_version: String,
    /// When the prices were compiled (ISO 8601 date).
    pub updated: String,
    /// Caveats about the table as a whole.
    #[serde(default)]
    pub notes: Option<String>,
    /// Prices by model id.
    pub models: BTreeMap<String, ModelPrice>,
}

/// What one model costs, in USD per million tokens.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelPrice {
    /// Other names the same model is called by (dated snapshots, hosts'
    /// prefixed names). Matching is exact; there is no prefix matching,
    /// since `gpt-5` and `gpt-5.2` are priced differently.
    #[serde(default)]
    pub aliases: Vec<String>,
    /// Prompt tokens that are neither cache reads nor cache writes.
    pub input: f64,
    /// Prompt tokens read from cache; `None` if the provider has no such rate.
    #[serde(default)]
    pub cached_input: Option<f64>,
    /// Prompt tokens written to cache (Anthropic's 5-minute cache, the only
    /// kind this crate's client requests); `None` if there is no such rate.
    #[serde(default)]
    pub cache_write: Option<f64>,
    /// Generated tokens, reasoning included unless `reasoning` is set.
    pub output: f64,
    /// Generated reasoning tokens, when billed differently from output.
    #[serde(default)]
    pub reasoning: Option<f64>,
    /// Higher rates that apply to the whole call when its prompt is large.
    #[serde(default)]
    pub long_context: Option<LongContextPrice>,
    /// Where the price comes from.
    pub source: String,
    /// When the provider's price was published or last confirmed.
    pub as_of: String,
}

/// Rates for calls whose prompt exceeds a threshold, in USD per million
/// tokens; the fields mean the same as in [`ModelPrice`].
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LongContextPrice {
    /// The rates apply when the prompt (`Usage::input_tokens`) is larger than this.
    pub above_input_tokens: u64,
    /// Uncached prompt tokens.
    pub input: f64,
    /// Prompt tokens read from cache.
    #[serde(default)]
    pub cached_input: Option<f64>,
    /// Prompt tokens written to cache.
    #[serde(default)]
    pub cache_write: Option<f64>,
    /// Generated tokens.
    pub output: f64,
    /// Generated reasoning tokens, when billed differently from output.
    #[serde(default)]
    pub reasoning: Option<f64>,
}

/// One tier of rates, as used in a cost computation.
#[derive(Clone, Copy)]
struct Rates {
    input: f64,
    cached_input: Option<f64>,
    cache_write: Option<f64>,
    output: f64,
    reasoning: Option<f64>,
}

/// Problems with a pricing table or with running under it. A message names its cause, which is
/// therefore not also the error's `source` (a chain printed whole would show it twice).
#[derive(Debug, thiserror::Error)]
pub enum PricingError {
    /// The table file could not be read.
    #[error("cannot read pricing table {path}: {cause}")]
    Read {
        /// The file.
        path: String,
        /// The failure.
        cause: std::io::Error,
    },
    /// The table is not valid TOML of the expected layout.
    #[error("pricing table is not valid: {0}")]
    Parse(toml::de::Error),
    /// The table parsed but its content is inconsistent.
    #[error("pricing table is not valid: {0}")]
    Invalid(String),
    /// A cost limit was requested for a model the table cannot price, so the
    /// limit could never trigger.
    #[error(
        "a cost limit is set but pricing table {table_version} has no price for model {model:?}; \
         give a table that prices it with `--pricing FILE`, or run without a cost limit \
         (`--cost 0`)"
    )]
    UnknownPrice {
        /// The model.
        model: String,
        /// The table consulted.
        table_version: String,
    },
    /// The cost limit itself is not a usable amount.
    #[error("cost limit must be a positive, finite amount of USD, got {0}")]
    InvalidCostLimit(f64),
}

impl PricingTable {
    /// The table shipped with the crate.
    pub fn builtin() -> Result<Self, PricingError> {
        Self::from_toml_str(BUILTIN_PRICING_TOML)
    }

    /// Parses and validates a table.
    pub fn from_toml_str(text: &str) -> Result<Self, PricingError> {
        let table: Self = toml::from_str(text).map_err(PricingError::Parse)?;
        table.validate()?;
        Ok(table)
    }

    /// Reads, parses and validates a table file.
    pub fn load(path: &Path) -> Result<Self, PricingError> {
        let text = std::fs::read_to_string(path).map_err(|cause| PricingError::Read {
            path: path.display().to_string(),
            cause,
        })?;
        Self::from_toml_str(&text)
    }

    fn validate(&self) -> Result<(), PricingError> {
        if self.schema_version != PRICING_SCHEMA_VERSION {
            return Err(PricingError::Invalid(format!(
                "schema_version {} is not supported (expected {PRICING_SCHEMA_VERSION})",
                self.schema_version
            )));
        }
        let mut names = BTreeMap::new();
        for (id, price) in &self.models {
            for name in std::iter::once(id).chain(&price.aliases) {
                if let Some(other) = names.insert(name.as_str(), id.as_str()) {
                    return Err(PricingError::Invalid(format!(
                        "model name {name:?} is used by both {other:?} and {id:?}"
                    )));
                }
            }
            let mut tiers = vec![price.base_rates()];
            tiers.extend(price.long_context.as_ref().map(LongContextPrice::rates));
            for rates in tiers {
                let all = [Some(rates.input), rates.cached_input, rates.cache_write]
                    .into_iter()
                    .chain([Some(rates.output), rates.reasoning])
                    .flatten();
                if let Some(bad) = all.into_iter().find(|p| !p.is_finite() || *p < 0.0) {
                    return Err(PricingError::Invalid(format!(
                        "model {id:?} has an invalid price {bad}"
                    )));
                }
            }
        }
        Ok(())
    }

    /// The price of `model`, looked up by id or alias.
    pub fn price(&self, model: &str) -> Option<&ModelPrice> {
        self.models.get(model).or_else(|| {
            self.models
                .values()
                .find(|price| price.aliases.iter().any(|alias| alias == model))
        })
    }

    /// The USD cost of a call of `model` with `usage`; `None` when the price
    /// is unknown.
    pub fn cost(&self, model: &str, usage: &Usage) -> Option<f64> {
        self.price(model)?.cost(usage)
    }

    /// The check a runner makes before starting: a cost limit needs a price,
    /// or it would silently never trigger.
    pub fn check_cost_limit(
        &self,
        model: &str,
        cost_limit: Option<f64>,
    ) -> Result<(), PricingError> {
        let Some(limit) = cost_limit else {
            return Ok(());
        };
        if !(limit.is_finite() && limit > 0.0) {
            return Err(PricingError::InvalidCostLimit(limit));
        }
        if self.price(model).is_none() {
            return Err(PricingError::UnknownPrice {
                model: model.to_string(),
                table_version: self.table_version.clone(),
            });
        }
        Ok(())
    }
}

impl LongContextPrice {
    fn rates(&self) -> Rates {
        Rates {
            input: self.input,
            cached_input: self.cached_input,
            cache_write: self.cache_write,
            output: self.output,
            reasoning: self.reasoning,
        }
    }
}

impl ModelPrice {
    fn base_rates(&self) -> Rates {
        Rates {
            input: self.input,
            cached_input: self.cached_input,
            cache_write: self.cache_write,
            output: self.output,
            reasoning: self.reasoning,
        }
    }

    /// The USD cost of a call with `usage`. `None` when the call used a kind
    /// of token this price has no rate for (for example cache writes on a
    /// model without a cache-write rate), rather than guessing.
    pub fn cost(&self, usage: &Usage) -> Option<f64> {
        let rates = match &self.long_context {
            Some(tier) if usage.input_tokens > tier.above_input_tokens => tier.rates(),
            _ => self.base_rates(),
        };
        let per_token = |count: u64, rate: Option<f64>| -> Option<f64> {
            match count {
                0 => Some(0.0),
                n => rate.map(|r| n as f64 * r),
            }
        };
        let input = per_token(usage.uncached_input_tokens(), Some(rates.input))?;
        let cached = per_token(usage.cached_input_tokens, rates.cached_input)?;
        let write = per_token(usage.cache_write_tokens, rates.cache_write)?;
        let output = match rates.reasoning {
            None => per_token(usage.output_tokens, Some(rates.output))?,
            Some(reasoning_rate) => {
                let reasoning = usage.reasoning_tokens?;
                per_token(
                    usage.output_tokens.saturating_sub(reasoning),
                    Some(rates.output),
                )? + per_token(reasoning, Some(reasoning_rate))?
            }
        };
        Some((input + cached + write + output) / 1_000_000.0)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::*;

    fn usage(input: u64, cached: u64, write: u64, output: u64, reasoning: Option<u64>) -> Usage {
        Usage {
            input_tokens: input,
            cached_input_tokens: cached,
            cache_write_tokens: write,
            output_tokens: output,
            reasoning_tokens: reasoning,
            raw: Value::Null,
        }
    }

    const TABLE: &str = r#"
        schema_version = 1
        table_version = "test-1"
        updated = "2026-11-29"

        [models.full]
        aliases = ["full-2026"]
        input = 2.0
        cached_input = 0.2
        cache_write = 2.5
        output = 10.0
        source = "test"
        as_of = "2026-11"

        [models.plain]
        input = 1.0
        output = 4.0
        source = "test"
        as_of = "2026-11"

        [models.tiered]
        input = 1.0
        cached_input = 0.1
        output = 5.0
        reasoning = 20.0
        source = "test"
        as_of = "2026-11"
        [models.tiered.long_context]
        above_input_tokens = 1000
        input = 2.0
        cached_input = 0.2
        output = 10.0
        reasoning = 40.0
    "#;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-12
    }

    #[test]
    fn cost_uses_each_rate_once() {
        let table = PricingTable::from_toml_str(TABLE).unwrap();
        // 1000 uncached * 2 + 800 cached * 0.2 + 200 written * 2.5 + 500 out * 10, per 1e6.
        let cost = table
            .cost("full", &usage(2000, 800, 200, 500, Some(100)))
            .unwrap();
        assert!(
            close(cost, (2000.0 + 160.0 + 500.0 + 5000.0) / 1e6),
            "{cost}"
        );
        assert_eq!(
            table.cost("full-2026", &usage(2000, 800, 200, 500, None)),
            Some(cost)
        );
    }

    #[test]
    fn unknown_model_or_missing_rate_is_none_never_zero() {
        let table = PricingTable::from_toml_str(TABLE).unwrap();
        assert_eq!(table.cost("nobody", &usage(10, 0, 0, 10, None)), None);
        assert_eq!(table.cost("plain", &usage(10, 5, 0, 10, None)), None);
        assert_eq!(table.cost("full", &usage(0, 0, 0, 0, None)), Some(0.0));
        let plain = table
            .cost("plain", &usage(1_000_000, 0, 0, 1_000_000, None))
            .unwrap();
        assert!(close(plain, 5.0));
    }

    #[test]
    fn reasoning_rate_and_long_context_tier() {
        let table = PricingTable::from_toml_str(TABLE).unwrap();
        let short = table
            .cost("tiered", &usage(1000, 0, 0, 300, Some(100)))
            .unwrap();
        assert!(
            close(short, (1000.0 + 200.0 * 5.0 + 100.0 * 20.0) / 1e6),
            "{short}"
        );
        let long = table
            .cost("tiered", &usage(1001, 1, 0, 300, Some(100)))
            .unwrap();
        assert!(
            close(
                long,
                (1000.0 * 2.0 + 0.2 + 200.0 * 10.0 + 100.0 * 40.0) / 1e6
            ),
            "{long}"
        );
        // A separate reasoning rate needs a reasoning count.
        assert_eq!(table.cost("tiered", &usage(10, 0, 0, 10, None)), None);
    }

    #[test]
    fn cost_limit_check() {
        let table = PricingTable::from_toml_str(TABLE).unwrap();
        assert!(table.check_cost_limit("nobody", None).is_ok());
        assert!(table.check_cost_limit("plain", Some(5.0)).is_ok());
        let err = table.check_cost_limit("nobody", Some(5.0)).unwrap_err();
        assert!(matches!(err, PricingError::UnknownPrice { .. }));
        assert!(err.to_string().contains("nobody"));
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            assert!(matches!(
                table.check_cost_limit("plain", Some(bad)),
                Err(PricingError::InvalidCostLimit(_))
            ));
        }
    }

    #[test]
    fn invalid_tables_are_rejected() {
        let edited = |from: &str, to: &str| {
            assert!(TABLE.contains(from), "{from}");
            PricingTable::from_toml_str(&TABLE.replacen(from, to, 1))
        };
        assert!(edited("schema_version = 1", "schema_version = 2").is_err());
        assert!(edited("input = 1.0", "input = -1.0").is_err());
        assert!(edited("output = 10.0", "output = nan").is_err());
        assert!(edited(r#"aliases = ["full-2026"]"#, r#"aliases = ["plain"]"#).is_err());
        assert!(edited("[models.plain]", "[models.plain]\n        bogus = 1").is_err());
        assert!(
            edited(
                "above_input_tokens = 1000",
                "above_input_tokens = 1000\n        x = 1"
            )
            .is_err()
        );
        assert!(PricingTable::from_toml_str("not toml [").is_err());
    }

    #[test]
    fn builtin_table_is_valid_and_prices_known_models() {
        let table = PricingTable::builtin().unwrap();
        assert_eq!(table.schema_version, PRICING_SCHEMA_VERSION);
        assert!(!table.models.is_empty());
        for (id, price) in &table.models {
            assert!(!price.source.trim().is_empty(), "{id} has no source");
            assert!(!price.as_of.trim().is_empty(), "{id} has no date");
        }
        // Spot checks against the shipped file, so an accidental edit shows.
        let opus = table.price("claude-opus-4-6").unwrap();
        assert_eq!((opus.input, opus.output), (5.0, 25.0));
        let gpt5 = table.price("gpt-5").unwrap();
        assert_eq!(gpt5.cached_input, Some(0.125));
        // Open-weight models without a first-party price stay unknown.
        assert!(table.price("gpt-oss-120b").is_none());
    }
}
