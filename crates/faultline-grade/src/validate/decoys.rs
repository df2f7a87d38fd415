//! Decoys: patches a curator wrote to hide the symptom without fixing its cause. Each is graded
//! like the gold patch and must be caught every time, so an oracle's strength is measured, not
//! assumed.

use super::{Variant, run_variant};
use anyhow::Result;
use faultline_corpus::curated::decoy_patch;
use faultline_corpus::{Case, DataDir, PreparedCase};
use faultline_sandbox::Toolchain;
use faultline_schema::validation::{DecoyResult, VariantResult};

/// Builds and runs every decoy of a case; each result comes with the reason it could not be
/// tried, if it could not (its patch does not apply or touches more than sources).
pub async fn run_decoys(
    case: &Case,
    prepared: &PreparedCase,
    data: &DataDir,
    toolchain: &Toolchain,
    k: u32,
) -> Result<Vec<(DecoyResult, Option<String>)>> {
    let mut results = Vec::new();
    for decoy in &case.manifest.decoys {
        let (result, unusable) = match decoy_patch(case, &prepared.sources, decoy) {
            Ok(patch) => (
                run_variant(case, prepared, data, toolchain, &patch, Variant::Decoy, k).await?,
                None,
            ),
            Err(e) => (
                VariantResult {
                    build_error: None,
                    build_secs: 0.0,
                    runs: Vec::new(),
                    robustness_runs: Vec::new(),
                    regression: None,
                },
                Some(format!("{e:#}")),
            ),
        };
        let caught = unusable.is_none() && is_caught(&result, k);
        results.push((
            DecoyResult {
                name: decoy.name.clone(),
                class: decoy.class,
                caught,
                result,
            },
            unusable,
        ));
    }
    Ok(results)
}

/// A decoy is caught when it builds and then the oracle fails in each of k runs or the
/// regression tests fail. One that does not build proves nothing about the oracle.
pub fn is_caught(result: &VariantResult, k: u32) -> bool {
    if result.build_error.is_some() {
        return false;
    }
    let oracle_failures = result.runs.iter().filter(|r| r.failed).count() as u32;
    let regression_failed = result.regression.as_ref().is_some_and(|r| !r.passed);
    (oracle_failures == k && k > 0) || regression_failed
}

/// The validation problems of a case's decoys, one per decoy that is not caught.
pub fn problems(decoys: &[(DecoyResult, Option<String>)], k: u32) -> Vec<String> {
    let mut problems = Vec::new();
    for (decoy, unusable) in decoys {
        let name = &decoy.name;
        if let Some(why) = unusable {
            problems.push(format!("the decoy `{name}`: {why}"));
        } else if let Some(error) = &decoy.result.build_error {
            problems.push(format!(
                "the decoy `{name}` does not build, so it shows nothing about the oracle:\n{error}"
            ));
        } else if !decoy.caught {
            let failures = decoy.result.runs.iter().filter(|r| r.failed).count();
            problems.push(format!(
                "the decoy `{name}` ({}) is not caught: the oracle fails in only {failures} of {k} \
                 runs and the regression tests pass; the oracle does not check the property the \
                 fix restores",
                decoy.class
            ));
        }
    }
    problems
}
