//! The bundles of a run: before any trial, each prepared case gets its bundle in every condition
//! that has one, from the condition's provider (through the provider cache). The run keeps each
//! bundle and its record under `bundles/<case>/<condition>/`, so a report can show exactly what
//! an agent of that condition saw; a refused bundle means no trial of that case runs in that
//! condition, and the record says why.

use anyhow::{Context, Result};
use faultline_context::{Bundle, Inputs, Providers};
use faultline_corpus::{BundleFile, Case, DataDir, PreparedCase};
use faultline_sandbox::Toolchain;
use faultline_schema::{BundleStatus, Condition, RunDir};
use std::collections::BTreeMap;

/// Bundles by case id and condition.
#[derive(Debug, Default)]
pub struct RunBundles(BTreeMap<(String, Condition), Bundle>);

impl RunBundles {
    /// The files an agent of `condition` is shown for `case` (none in `symptom`).
    pub fn files(&self, case: &str, condition: &Condition) -> Vec<BundleFile> {
        self.0
            .get(&(case.to_string(), condition.clone()))
            .map(|b| b.files.clone())
            .unwrap_or_default()
    }

    /// Whether trials of `case` may run in `condition`: always without a bundle, else only
    /// when its bundle passed the gate.
    pub fn allows(&self, case: &str, condition: &Condition) -> bool {
        !condition.has_bundle()
            || self
                .0
                .get(&(case.to_string(), condition.clone()))
                .is_some_and(|b| b.record.status == BundleStatus::Ready)
    }
}

/// What resolving needs besides the cases.
pub struct Resolver<'a> {
    /// The run's providers.
    pub providers: &'a Providers,
    /// Every case of the corpus.
    pub corpus: &'a [Case],
    /// The data directory.
    pub data: &'a DataDir,
    /// The toolchain.
    pub toolchain: &'a Toolchain,
    /// The run directory the bundles are recorded in.
    pub run: &'a RunDir,
}

/// Resolves and records the bundle of every case in every condition with one.
pub async fn resolve(
    cx: &Resolver<'_>,
    cases: &[(&Case, &PreparedCase)],
    conditions: &[Condition],
) -> Result<RunBundles> {
    let mut out = BTreeMap::new();
    for condition in conditions.iter().filter(|c| c.has_bundle()) {
        for (case, prepared) in cases {
            let inputs = Inputs {
                case,
                corpus: cx.corpus,
                prepared,
                data: cx.data,
                toolchain: cx.toolchain,
            };
            let bundle = cx
                .providers
                .bundle(condition, &inputs)
                .await
                .with_context(|| format!("the {condition} bundle of {}", case.id()))?;
            if let Some(why) = &bundle.record.refusal {
                tracing::warn!(
                    "{condition} bundle of {} refused: {why}; its trials in this condition are \
                     not run",
                    case.id()
                );
            }
            cx.run
                .bundle(case.id(), condition)
                .write(&bundle.record, &bundle.files)?;
            out.insert((case.id().to_string(), condition.clone()), bundle);
        }
    }
    Ok(RunBundles(out))
}
