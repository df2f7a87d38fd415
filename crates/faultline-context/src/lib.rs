//! Context providers: what an agent is shown besides the symptom, per condition.
//!
//! A condition with a bundle names a provider: `curated` (the case's own bundle), `irrelevant`
//! (another case's bundle of the same system, the control for "more text"), `static` (a
//! deterministic static analysis led by the symptom), a model ([`ModelProvider`], `model:NAME`),
//! or an external program ([`ExternalProvider`]). Every bundle, whoever wrote it, passes the same gate before any agent
//! sees it: one to three Markdown files, within the bundle token budget, and clean under the
//! case's leak check. A bundle that fails is refused for that case, with the reason recorded,
//! never cut to fit. Bundles are cached in the data directory per case (by its content hash) and
//! provider version, so every agent and every resumed run sees the same text.

pub mod external;
pub mod irrelevant;
pub mod model;
pub mod static_analysis;

use anyhow::{Context, Result, bail};
pub use external::ExternalProvider;
use faultline_corpus::checks::leak_check;
use faultline_corpus::gold::diff_trees;
use faultline_corpus::tokens::{self, BUNDLE_TOKEN_BUDGET};
use faultline_corpus::{BundleFile, Case, DataDir, PreparedCase, TemplateKind};
use faultline_sandbox::Toolchain;
use faultline_schema::bundle::{BUNDLE_SCHEMA_VERSION, BundleDir, MAX_BUNDLE_FILES};
use faultline_schema::{BundleRecord, BundleStatus, Condition, ConditionKind};
pub use model::ModelProvider;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::time::Instant;

/// The providers a run may use beyond the built-in ones.
#[derive(Debug, Clone, Default)]
pub struct Providers {
    /// External providers by condition name.
    pub external: BTreeMap<String, ExternalProvider>,
    /// Model providers by the name after `model:`.
    pub models: BTreeMap<String, ModelProvider>,
}

/// What a provider needs of one case.
pub struct Inputs<'a> {
    /// The case.
    pub case: &'a Case,
    /// Every case of the corpus (the `irrelevant` control picks from them).
    pub corpus: &'a [Case],
    /// The prepared case: the agent's template is what a provider reads.
    pub prepared: &'a PreparedCase,
    /// Where the cache and scratch space are.
    pub data: &'a DataDir,
    /// The toolchain mounted into an external provider's sandbox.
    pub toolchain: &'a Toolchain,
}

/// One case's bundle in one condition, and its record.
#[derive(Debug, Clone, PartialEq)]
pub struct Bundle {
    /// Status, provider version, tokens, leaks, cost.
    pub record: BundleRecord,
    /// The files agents see; empty when refused.
    pub files: Vec<BundleFile>,
}

/// What a provider produced, before the gate.
struct Produced {
    files: Vec<BundleFile>,
    source_case: Option<String>,
    failure: Option<String>,
    log_tail: Option<String>,
    cost_usd: Option<f64>,
}

impl Providers {
    /// Checks that every condition names a provider this run can use, before anything runs.
    pub fn check(&self, conditions: &[Condition]) -> Result<()> {
        for c in conditions {
            match c.kind() {
                ConditionKind::External(name) if !self.external.contains_key(name) => bail!(
                    "condition `{c}` names no provider: declare it with --provider {c}=PROGRAM"
                ),
                ConditionKind::Model(name) if !self.models.contains_key(name) => bail!(
                    "condition `{c}` needs its model: run with --model {name} (and --base-url, \
                     --protocol as for a model agent)"
                ),
                _ => {}
            }
        }
        Ok(())
    }

    /// The provider's version for `condition`: with the case's hash, the cache key.
    pub fn version(&self, condition: &Condition) -> Result<String> {
        Ok(match condition.kind() {
            ConditionKind::Symptom => "none".into(),
            ConditionKind::Aid(aid) => format!("aid-{}", aid.as_str()),
            ConditionKind::Curated => "curated-1".into(),
            ConditionKind::Irrelevant => "irrelevant-1".into(),
            ConditionKind::Static => static_analysis::STATIC_PROVIDER_VERSION.into(),
            ConditionKind::External(name) => match self.external.get(name) {
                Some(p) => p.version()?,
                None => bail!("no provider is declared for condition `{condition}`"),
            },
            ConditionKind::Model(name) => match self.models.get(name) {
                Some(m) => m.version(),
                None => bail!("no model is configured for condition `{condition}`"),
            },
        })
    }

    /// The bundle of one case in one condition: from the cache when this provider version
    /// made it for this exact case, else produced, checked and cached.
    pub async fn bundle(&self, condition: &Condition, inputs: &Inputs<'_>) -> Result<Bundle> {
        let case = inputs.case;
        let mut version = self.version(condition)?;
        if condition.kind() == ConditionKind::Irrelevant {
            // The control's text is other cases': which ones, and their state, are in the key.
            let mut digest = Sha256::new();
            for other in irrelevant::candidates(case, inputs.corpus) {
                digest.update(other.id().as_bytes());
                digest.update(
                    other
                        .content_sha256()
                        .with_context(|| format!("hashing {}", other.id()))?
                        .as_bytes(),
                );
            }
            version.push(':');
            version.push_str(&hex::encode(digest.finalize())[..16]);
        }
        let hash = case
            .content_sha256()
            .with_context(|| format!("hashing {}", case.id()))?;
        let cache = BundleDir::at(
            inputs
                .data
                .bundle_cache()
                .join(condition.as_str())
                .join(format!("{}-{}", case.id(), &hash[..16])),
        );
        if let Ok(Some((record, files))) = cache.read()
            && record.provider_version == version
        {
            return Ok(Bundle { record, files });
        }
        let started = Instant::now();
        let bundle = if condition.kind() == ConditionKind::Irrelevant {
            control(condition, &version, inputs, started)?
        } else {
            let produced = self.produce(condition, inputs).await?;
            gate(condition, &version, produced, inputs, started)?
        };
        if let Err(e) = cache.write(&bundle.record, &bundle.files) {
            tracing::warn!("cannot cache the {condition} bundle of {}: {e}", case.id());
        }
        Ok(bundle)
    }

    async fn produce(&self, condition: &Condition, inputs: &Inputs<'_>) -> Result<Produced> {
        let case = inputs.case;
        let none = |files: Vec<BundleFile>| Produced {
            files,
            source_case: None,
            failure: None,
            log_tail: None,
            cost_usd: None,
        };
        Ok(match condition.kind() {
            ConditionKind::Symptom => none(Vec::new()),
            ConditionKind::Aid(_) => {
                bail!("`{condition}` is an aid of the build track, not a case's bundle")
            }
            ConditionKind::Curated => none(case.bundle.clone()),
            ConditionKind::Irrelevant => bail!("the irrelevant control is not produced alone"),
            ConditionKind::Static => {
                let root = &inputs.prepared.template(TemplateKind::Agent).workspace;
                let symptom = &case.symptom;
                none(static_analysis::analyze(root, symptom)?)
            }
            ConditionKind::External(name) => {
                let provider = self
                    .external
                    .get(name)
                    .with_context(|| format!("no provider is declared for `{condition}`"))?;
                let out = provider
                    .run(
                        inputs.prepared,
                        &case.symptom,
                        inputs.data,
                        inputs.toolchain,
                    )
                    .await?;
                Produced {
                    failure: out.failure,
                    log_tail: Some(out.log_tail),
                    ..none(out.files)
                }
            }
            ConditionKind::Model(name) => {
                let model = self
                    .models
                    .get(name)
                    .with_context(|| format!("no model is configured for `{condition}`"))?;
                let root = &inputs.prepared.template(TemplateKind::Agent).workspace;
                let written = model.write(root, &case.symptom).await?;
                Produced {
                    cost_usd: written.cost_usd,
                    ..none(written.files)
                }
            }
        })
    }
}

/// The `irrelevant` control: the first other case of the system whose bundle passes this case's
/// gate, or a refusal that names why each candidate failed.
fn control(
    condition: &Condition,
    version: &str,
    inputs: &Inputs<'_>,
    started: Instant,
) -> Result<Bundle> {
    let mut reasons = Vec::new();
    for other in irrelevant::candidates(inputs.case, inputs.corpus) {
        let produced = Produced {
            files: other.bundle.clone(),
            source_case: Some(other.id().to_string()),
            failure: None,
            log_tail: None,
            cost_usd: None,
        };
        let bundle = gate(condition, version, produced, inputs, started)?;
        match &bundle.record.refusal {
            None => return Ok(bundle),
            Some(why) => reasons.push(format!("{}: {why}", other.id())),
        }
    }
    let failure = if reasons.is_empty() {
        format!(
            "no other case of system `{}` has a bundle",
            inputs.case.manifest.system
        )
    } else {
        format!(
            "no other case's bundle passes this case's gate ({})",
            reasons.join("; ")
        )
    };
    let produced = Produced {
        files: Vec::new(),
        source_case: None,
        failure: Some(failure),
        log_tail: None,
        cost_usd: None,
    };
    gate(condition, version, produced, inputs, started)
}

/// The gate every bundle passes: file count and names, the token budget, the leak check.
fn gate(
    condition: &Condition,
    version: &str,
    produced: Produced,
    inputs: &Inputs<'_>,
    started: Instant,
) -> Result<Bundle> {
    let case = inputs.case;
    let files = produced.files;
    let tokens: usize = files.iter().map(|f| tokens::count(&f.text)).sum();
    let mut leaks = Vec::new();
    let mut refusal = produced.failure;
    if refusal.is_none() {
        refusal = if files.is_empty() {
            Some("the provider wrote no Markdown file".into())
        } else if files.len() > MAX_BUNDLE_FILES {
            Some(format!(
                "the provider wrote {} files; at most {MAX_BUNDLE_FILES} are shown",
                files.len()
            ))
        } else if tokens > BUNDLE_TOKEN_BUDGET {
            Some(format!(
                "the bundle has {tokens} tokens; the budget is {BUNDLE_TOKEN_BUDGET}"
            ))
        } else {
            None
        };
    }
    if refusal.is_none() {
        let sources = &inputs.prepared.sources;
        let release = diff_trees(&sources.buggy, &sources.fixed)
            .with_context(|| format!("diffing the two versions of {}", case.id()))?;
        let check = leak_check(case, sources, &release);
        for f in &files {
            leaks.extend(check.scan(&format!("context/{}", f.name), &f.text));
        }
        if let Some(l) = leaks.first() {
            refusal = Some(format!(
                "the leak check found {} finding(s), first in {} line {}: {:?} `{}`",
                leaks.len(),
                l.file,
                l.line,
                l.kind,
                l.excerpt
            ));
        }
    }
    let status = if refusal.is_some() {
        BundleStatus::Refused
    } else {
        BundleStatus::Ready
    };
    let record = BundleRecord {
        schema_version: BUNDLE_SCHEMA_VERSION,
        case_id: case.id().to_string(),
        condition: condition.clone(),
        provider_version: version.to_string(),
        source_case: produced.source_case,
        status,
        refusal,
        files: if status == BundleStatus::Ready {
            files.iter().map(|f| f.name.clone()).collect()
        } else {
            Vec::new()
        },
        tokens,
        leaks,
        cost_usd: produced.cost_usd,
        seconds: started.elapsed().as_secs_f64(),
        log_tail: produced.log_tail,
    };
    let files = if status == BundleStatus::Ready {
        files
    } else {
        Vec::new()
    };
    Ok(Bundle { record, files })
}
