//! The agents a run is configured with, and what running one outside the sandbox records.

use crate::plan::AgentPlan;
use faultline_agent::baselines::Baseline;
use faultline_agent::{ExternalAgent, Templates};
use faultline_model::ModelConfig;
use faultline_schema::trajectory::{AgentInfo, AgentKind};
use std::collections::BTreeMap;

/// An agent configuration of a run.
#[derive(Debug, Clone)]
pub enum AgentSpec {
    /// The built-in loop with a model.
    Builtin {
        /// Name in results (defaults to the model name).
        name: String,
        /// How to reach the model.
        model: Box<ModelConfig>,
        /// Prompt templates.
        templates: Templates,
        /// Native tool calls or text blocks.
        tool_mode: bool,
        /// Output tokens per reply.
        max_output_tokens: u32,
        /// Sampling temperature.
        temperature: Option<f64>,
    },
    /// A command.
    External(ExternalAgent),
    /// A baseline.
    Baseline(Baseline),
}

impl AgentSpec {
    /// Whether this is an external agent run outside the sandbox.
    pub fn on_host(&self) -> bool {
        matches!(self, AgentSpec::External(e) if e.on_host)
    }

    /// The name used in trial ids and tables (`/` and spaces replaced).
    pub fn name(&self) -> String {
        let raw = match self {
            AgentSpec::Builtin { name, .. } => name.clone(),
            AgentSpec::External(e) => e.name.clone(),
            AgentSpec::Baseline(b) => b.name().to_string(),
        };
        raw.chars()
            .map(|c| {
                if c == '/' || c.is_whitespace() {
                    '-'
                } else {
                    c
                }
            })
            .collect()
    }

    /// What the lock records about this agent.
    pub fn info(&self, templates_fingerprint: Option<String>) -> AgentInfo {
        match self {
            AgentSpec::Builtin {
                model,
                tool_mode,
                max_output_tokens,
                temperature,
                ..
            } => {
                let mut settings = BTreeMap::new();
                settings.insert(
                    "prompts".into(),
                    templates_fingerprint.unwrap_or_default().into(),
                );
                settings.insert("tool_mode".into(), (*tool_mode).into());
                settings.insert("max_output_tokens".into(), (*max_output_tokens).into());
                settings.insert("temperature".into(), serde_json::json!(temperature));
                settings.insert("base_url".into(), model.effective_base_url().into());
                AgentInfo {
                    kind: AgentKind::Builtin,
                    name: self.name(),
                    model: Some(model.model.clone()),
                    protocol: Some(format!("{:?}", model.protocol)),
                    settings,
                }
            }
            AgentSpec::External(e) => AgentInfo {
                name: self.name(),
                ..e.info()
            },
            AgentSpec::Baseline(b) => AgentInfo {
                kind: AgentKind::Baseline,
                name: b.name().into(),
                model: None,
                protocol: None,
                settings: BTreeMap::new(),
            },
        }
    }

    pub(crate) fn plan(&self) -> AgentPlan {
        AgentPlan {
            name: self.name(),
            baseline: match self {
                AgentSpec::Baseline(b) => Some(*b),
                _ => None,
            },
        }
    }
}

/// The protection record's name for external agents' sandbox.
pub(crate) const AGENT_SANDBOX: &str = "agent sandbox";

/// The record of external agents run outside the sandbox (`--agents-on-host`): like a
/// protection the machine lacks, it makes the run's scores not comparable.
pub(crate) fn agents_on_host() -> faultline_schema::ProtectionRecord {
    faultline_schema::ProtectionRecord {
        name: AGENT_SANDBOX.into(),
        state: faultline_schema::ProtectionState::Off,
        detail: "external agents ran on the host (--agents-on-host), beside the fixed crates \
                 and the oracles: unsandboxed, not comparable"
            .into(),
    }
}
