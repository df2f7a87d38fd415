//! Grading a submission through a cache of verdicts about submissions, so re-grading a run or
//! grading a repeated submission costs nothing.
//!
//! A cached grade is served only for exactly the inputs it was made from: the case (its id and
//! the hash of its files), the track, the submission, the grading rules and settings, the
//! template it was graded on (the hash of its manifest), the toolchain (`rustc -vV`) and the
//! sandbox's protections. And only a verdict about the submission is kept: an outcome the
//! environment may have caused is graded again every time (see [`verdict_about_submission`]).

use crate::grader::{GRADER_VERSION, GradeContext, grade, no_submission};
use anyhow::{Context, Result};
use faultline_corpus::workspace::toolchain_version;
use faultline_corpus::{Case, DataDir, PreparedCase};
use faultline_sandbox::Toolchain;
use faultline_schema::grade::{GRADE_SCHEMA_VERSION, RunVerdict};
use faultline_schema::{Grade, GradingSettings, Outcome, Submission, Track};
use sha2::{Digest, Sha256};
use std::path::PathBuf;

/// Where cached grades live.
pub fn cache_dir(data: &DataDir) -> PathBuf {
    data.grade_cache()
}

/// What a grade depends on besides the case, the submission and the grading settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GradeEnvironment {
    /// The toolchain's `rustc -vV`.
    pub toolchain: String,
    /// The protections a grading sandbox runs under here (`Protections`' text): a verdict made
    /// under weaker ones is not served where stronger ones hold.
    pub protections: String,
    /// SHA-256 of the prepared case's manifest: a rebuilt template is another environment.
    pub template: String,
}

impl GradeEnvironment {
    /// The environment grades of a prepared case get on this machine.
    pub fn of(prepared: &PreparedCase, toolchain: &Toolchain) -> Result<GradeEnvironment> {
        let protections = crate::protections::for_grading(prepared, toolchain);
        Ok(GradeEnvironment {
            toolchain: toolchain_version(toolchain)?,
            protections: protections.to_string(),
            template: prepared.manifest.sha256(),
        })
    }
}

/// The cache key of a grade: a hash of everything the verdict depends on.
pub fn cache_key(
    case: &Case,
    track: Track,
    submission: &str,
    settings: &GradingSettings,
    env: &GradeEnvironment,
) -> Result<String> {
    let mut h = Sha256::new();
    let fields = [
        format!("grade-v{GRADE_SCHEMA_VERSION}"),
        format!("rules-v{GRADER_VERSION}"),
        env!("CARGO_PKG_VERSION").to_string(),
        case.id().to_string(),
        case.content_sha256()
            .with_context(|| format!("hashing the files of case {}", case.id()))?,
        track.to_string(),
        settings.robustness_seeds.to_string(),
        settings.reproduction_k.to_string(),
        env.template.clone(),
        env.toolchain.clone(),
        env.protections.clone(),
    ];
    for field in fields {
        // Length-prefixed, so no two different field lists hash the same text.
        h.update(format!("{}:{field}|", field.len()));
    }
    h.update(submission.as_bytes());
    Ok(hex::encode(h.finalize()))
}

/// Whether a grade is a verdict about the submission alone, and so may be cached. Not so:
/// `infra_error`; `build_error` and `does_not_compile`, and `fail_regression` when the
/// regression tests did not build (a build fails as readily from a damaged template or
/// toolchain as from the patch); `timeout`; and a repair whose oracle crashed or ran out of
/// time, which a resource limit or the out-of-memory killer can cause. Outcomes added later are
/// not cached until they are listed here.
pub fn verdict_about_submission(grade: &Grade) -> bool {
    let oracle = grade.repair.as_ref().and_then(|r| r.oracle);
    match grade.outcome {
        Outcome::FailRegression => grade
            .repair
            .as_ref()
            .is_some_and(|r| r.regression_passed.is_some()),
        Outcome::FailOracle => !matches!(oracle, Some(RunVerdict::Crash | RunVerdict::Timeout)),
        Outcome::Pass
        | Outcome::FailRobustness
        | Outcome::PatchError
        | Outcome::Scored
        | Outcome::Valid
        | Outcome::FailsOnBoth
        | Outcome::PassesOnBoth
        | Outcome::Flaky
        | Outcome::Illegal
        | Outcome::Tampered
        | Outcome::InvalidSubmission => true,
        Outcome::BuildError
        | Outcome::DoesNotCompile
        | Outcome::Timeout
        | Outcome::ResourceLimit
        | Outcome::InfraError => false,
    }
}

/// Grades a submission, reusing a cached grade of the same inputs unless `use_cache` is false.
pub async fn grade_submission(
    ctx: &GradeContext<'_>,
    trial_id: &str,
    track: Track,
    submission: &Submission,
    settings: &GradingSettings,
    use_cache: bool,
) -> Result<Grade> {
    let case = ctx.case;
    let Some(text) = submission.text() else {
        return no_submission(case, trial_id, track);
    };
    // Without its environment a grade cannot be keyed; the grader then reports the problem.
    let cached = match GradeEnvironment::of(ctx.prepared, ctx.toolchain) {
        Ok(env) => Some(cache_dir(ctx.data).join(format!(
            "{}.json",
            cache_key(case, track, text, settings, &env)?
        ))),
        Err(e) => {
            tracing::warn!("{}: grading without the cache: {e:#}", case.id());
            None
        }
    };
    if use_cache
        && let Some(cached) = &cached
        && let Ok(mut g) = faultline_schema::io::read_json::<Grade>(cached, "cached grade")
        && verdict_about_submission(&g)
    {
        g.trial_id = trial_id.to_string();
        return Ok(g);
    }
    let grade = grade(ctx, trial_id, track, text, settings).await?;
    if let Some(cached) = &cached
        && verdict_about_submission(&grade)
    {
        faultline_schema::io::write_json_atomic(cached, &grade)
            .with_context(|| format!("writing the cached grade {}", cached.display()))?;
    }
    Ok(grade)
}

#[cfg(test)]
mod tests {
    use super::*;
    use faultline_schema::grade::{GradeInputs, RepairDetails};

    fn grade(outcome: Outcome, repair: Option<RepairDetails>) -> Grade {
        Grade {
            schema_version: GRADE_SCHEMA_VERSION,
            trial_id: "t".into(),
            case_id: "c".into(),
            track: Track::Repair,
            outcome,
            reason: String::new(),
            score: None,
            diagnosis: None,
            repair,
            reproduction: None,
            build: None,
            inputs: GradeInputs {
                submission_sha256: String::new(),
                case_sha256: String::new(),
                faultline_version: String::new(),
            },
            graded_at: String::new(),
            wall_secs: 0.0,
            protections: Vec::new(),
        }
    }

    #[test]
    fn only_verdicts_about_the_submission_are_cached() {
        let ran = |oracle: RunVerdict, regression: Option<u32>| RepairDetails {
            oracle: Some(oracle),
            regression_passed: regression,
            ..Default::default()
        };
        for (outcome, repair) in [
            (Outcome::Pass, Some(ran(RunVerdict::Pass, Some(3)))),
            (Outcome::FailOracle, Some(ran(RunVerdict::Fail, None))),
            (
                Outcome::FailRegression,
                Some(ran(RunVerdict::Pass, Some(2))),
            ),
            (Outcome::PatchError, Some(RepairDetails::default())),
            (Outcome::Valid, None),
            (Outcome::Scored, None),
        ] {
            assert!(
                verdict_about_submission(&grade(outcome, repair)),
                "{outcome:?}"
            );
        }
        for (outcome, repair) in [
            (Outcome::BuildError, Some(RepairDetails::default())),
            (Outcome::Timeout, Some(ran(RunVerdict::Timeout, None))),
            (Outcome::InfraError, None),
            (Outcome::DoesNotCompile, None),
            (Outcome::FailRegression, Some(ran(RunVerdict::Pass, None))),
            (Outcome::FailOracle, Some(ran(RunVerdict::Crash, None))),
        ] {
            assert!(
                !verdict_about_submission(&grade(outcome, repair)),
                "{outcome:?}"
            );
        }
    }

    #[test]
    fn the_key_changes_with_every_input_of_the_verdict() {
        let dir = tempfile::tempdir().unwrap();
        let case = faultline_testkit::fixture_case(dir.path(), "toy-key", |_| {}).unwrap();
        let env = GradeEnvironment {
            toolchain: "rustc 1.95.0".into(),
            protections: "network isolation: active".into(),
            template: "aa".into(),
        };
        let opts = GradingSettings::default();
        let key = |env: &GradeEnvironment, opts: &GradingSettings, text: &str| {
            cache_key(&case, Track::Repair, text, opts, env).unwrap()
        };
        let base = key(&env, &opts, "patch");
        assert_eq!(base, key(&env, &opts, "patch"));
        let others = [
            key(&env, &opts, "patch2"),
            key(
                &GradeEnvironment {
                    template: "bb".into(),
                    ..env.clone()
                },
                &opts,
                "patch",
            ),
            key(
                &GradeEnvironment {
                    toolchain: "rustc 1.96.0".into(),
                    ..env.clone()
                },
                &opts,
                "patch",
            ),
            key(
                &GradeEnvironment {
                    protections: "network isolation: off".into(),
                    ..env.clone()
                },
                &opts,
                "patch",
            ),
            key(
                &env,
                &GradingSettings {
                    robustness_seeds: 1,
                    ..opts
                },
                "patch",
            ),
        ];
        for other in others {
            assert_ne!(base, other);
        }
    }
}
