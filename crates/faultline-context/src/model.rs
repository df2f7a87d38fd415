//! Model providers (`model:NAME`): a model writes the bundle in one call, from the symptom and
//! a map of the buggy crate (what the `static` provider finds), through the same clients and
//! pricing as the agents. Its cost is recorded with the bundle and reported apart from the
//! agents'. A failed call is an error of the run, never a refused bundle: an outage must not be
//! cached as the provider's answer.

use crate::static_analysis;
use anyhow::{Context, Result};
use faultline_corpus::BundleFile;
use faultline_model::{Message, ModelClient, ModelRequest, PricingTable};
use sha2::{Digest, Sha256};
use std::path::Path;
use std::sync::Arc;

/// What the model is told; its hash is part of the provider's version.
const SYSTEM: &str = "You prepare debugging context for an engineer who will investigate a bug \
report about a Rust crate used in a distributed system. Write what would help them find the \
cause quickly: the code paths the report leads to, the state and message orders worth checking, \
and questions to answer. Do not propose a fix and do not write code. Answer with one to three \
Markdown files, each starting with a line `=== NAME.md ===` (NAME in lowercase letters, digits \
and dashes), together under 1,000 words.";

/// Generated tokens allowed for the bundle.
const MAX_OUTPUT_TOKENS: u32 = 2_000;

/// A model configured as a provider.
#[derive(Clone)]
pub struct ModelProvider {
    /// The model, as `model:NAME` names it.
    pub name: String,
    /// The client, shared with nothing else.
    pub client: Arc<ModelClient>,
    /// Prices, for the bundle's cost.
    pub pricing: PricingTable,
}

impl std::fmt::Debug for ModelProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModelProvider")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// What the model wrote and what it cost.
pub struct Written {
    /// The files, in the order the model wrote them.
    pub files: Vec<BundleFile>,
    /// Dollars; `None` when the model's price is unknown.
    pub cost_usd: Option<f64>,
}

impl ModelProvider {
    /// The version in the cache key: the model, and the instructions it is given.
    pub fn version(&self) -> String {
        let prompt = hex::encode(Sha256::digest(SYSTEM.as_bytes()));
        format!("model:{}:{}", self.client.config().model, &prompt[..12])
    }

    /// Asks the model for the bundle of one crate and symptom.
    pub async fn write(&self, crate_root: &Path, symptom: &str) -> Result<Written> {
        let map = static_analysis::analyze(crate_root, symptom)?
            .into_iter()
            .map(|f| f.text)
            .collect::<Vec<_>>()
            .join("\n");
        let request = ModelRequest {
            system: Some(SYSTEM.into()),
            messages: vec![Message::User {
                text: format!(
                    "# The bug report\n\n{symptom}\n\n# What a static reading of the crate \
                     found\n\n{map}"
                ),
            }],
            tool: None,
            max_output_tokens: MAX_OUTPUT_TOKENS,
            temperature: Some(0.0),
        };
        let reply = self
            .client
            .complete(&request)
            .await
            .with_context(|| format!("the model provider {} failed", self.name))?;
        let cost_usd = reply
            .usage
            .as_ref()
            .and_then(|u| self.pricing.cost(&self.client.config().model, u));
        Ok(Written {
            files: split_files(reply.text.as_deref().unwrap_or_default()),
            cost_usd,
        })
    }
}

/// The files of a reply: each `=== NAME.md ===` line starts one. Text before the first marker
/// is dropped; a reply without any marker is one file, `notes.md`; a name that is not a plain
/// Markdown file name is replaced by `notes-N.md`, so no name reaches the disk unchecked.
pub fn split_files(reply: &str) -> Vec<BundleFile> {
    let mut files: Vec<BundleFile> = Vec::new();
    for line in reply.lines() {
        let marker = line
            .trim()
            .strip_prefix("===")
            .and_then(|l| l.strip_suffix("==="))
            .map(str::trim);
        match marker {
            Some(name) => {
                let plain = name.strip_suffix(".md").is_some_and(|stem| {
                    !stem.is_empty()
                        && stem
                            .chars()
                            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                });
                files.push(BundleFile {
                    name: if plain {
                        name.to_string()
                    } else {
                        format!("notes-{}.md", files.len() + 1)
                    },
                    text: String::new(),
                });
            }
            None => {
                if let Some(f) = files.last_mut() {
                    f.text.push_str(line);
                    f.text.push('\n');
                }
            }
        }
    }
    if files.is_empty() && !reply.trim().is_empty() {
        files.push(BundleFile {
            name: "notes.md".into(),
            text: reply.to_string(),
        });
    }
    files
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reply_splits_into_its_files_with_safe_names() {
        let files =
            split_files("Sure.\n=== paths.md ===\n# Paths\nmerge\n=== ../../etc/passwd ===\nx\n");
        let names: Vec<&str> = files.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(names, ["paths.md", "notes-2.md"]);
        assert_eq!(files[0].text, "# Paths\nmerge\n");
        assert_eq!(split_files("just text")[0].name, "notes.md");
        assert!(split_files("  \n").is_empty());
    }
}
