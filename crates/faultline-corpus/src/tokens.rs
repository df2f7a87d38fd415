//! Offline token counts (OpenAI o200k encoding), for the symptom and bundle budgets.

/// Token budget of a whole bundle (DDBench: median 321, maximum 1,403).
pub const BUNDLE_TOKEN_BUDGET: usize = 1_500;

/// Token budget of a symptom.
pub const SYMPTOM_TOKEN_BUDGET: usize = 1_500;

/// Counts tokens with the o200k encoding; the encoder is built once per process.
pub fn count(text: &str) -> usize {
    tiktoken_rs::o200k_base_singleton()
        .encode_with_special_tokens(text)
        .len()
}

#[cfg(test)]
mod tests {
    #[test]
    fn known_counts() {
        assert_eq!(super::count("hello world"), 2);
        assert_eq!(super::count(""), 0);
    }
}
