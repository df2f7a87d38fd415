//! The context providers of `faultline run`, from its arguments: `--provider` programs and the
//! models that `model:NAME` conditions name.

use anyhow::Result;
use faultline_model::{ModelClient, ModelConfig, PricingTable};
use faultline_schema::{Condition, ConditionKind};
use std::sync::Arc;

/// The providers of the run's conditions beyond the built-in ones: the `--provider` programs
/// (`NAME=PROGRAM`), and the models `model:NAME` conditions name, configured by `model` as a
/// model agent's would be.
pub(crate) fn providers(
    programs: &[String],
    conditions: &[Condition],
    model: impl Fn(&str) -> Result<ModelConfig>,
    pricing: &PricingTable,
) -> Result<faultline_context::Providers> {
    let mut providers = faultline_context::Providers::default();
    for spec in programs {
        let p = faultline_context::ExternalProvider::parse(spec)?;
        providers.external.insert(p.name.clone(), p);
    }
    for c in conditions {
        if let ConditionKind::Model(name) = c.kind() {
            providers.models.insert(
                name.to_string(),
                faultline_context::ModelProvider {
                    name: name.to_string(),
                    client: Arc::new(ModelClient::new(model(name)?)?),
                    pricing: pricing.clone(),
                },
            );
        }
    }
    Ok(providers)
}
