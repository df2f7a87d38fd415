//! Grading a stored submission, through a cache keyed by case, track, submission and oracle
//! version, so re-grading a run or grading a repeated submission costs nothing.

use anyhow::Result;
use faultline_agent::Submission;
use faultline_corpus::{DataDir, PreparedCase};
use faultline_grade::grader::case_hash;
use faultline_grade::{
    GradeContext, GradeOptions, grade_diagnosis, grade_repair, grade_reproduction,
};
use faultline_sandbox::Toolchain;
use faultline_schema::grade::GRADE_SCHEMA_VERSION;
use faultline_schema::{Grade, Outcome, Track};
use sha2::{Digest, Sha256};
use std::path::PathBuf;

/// Where cached grades live.
pub fn cache_dir(data: &DataDir) -> PathBuf {
    data.root.join("grade-cache")
}

/// Grades a submission, reusing a cached grade of the same inputs unless `use_cache` is false.
#[allow(clippy::too_many_arguments)]
pub async fn grade_submission(
    case: &faultline_corpus::Case,
    prepared: &PreparedCase,
    data: &DataDir,
    toolchain: &Toolchain,
    trial_id: &str,
    track: Track,
    submission: &Submission,
    opts: &GradeOptions,
    use_cache: bool,
) -> Result<Grade> {
    let Some(text) = submission.text() else {
        let ctx = GradeContext {
            case,
            prepared,
            data,
            toolchain,
        };
        return no_submission(&ctx, trial_id, track);
    };
    let key = {
        let mut h = Sha256::new();
        h.update(format!(
            "grade-v{GRADE_SCHEMA_VERSION}|rules-v{}|{}|{}|{track}|{}|{}|{}|",
            faultline_grade::grader::GRADER_VERSION,
            env!("CARGO_PKG_VERSION"),
            case.id(),
            case_hash(case)?,
            opts.robustness_seeds,
            opts.reproduction_k
        ));
        h.update(text.as_bytes());
        hex::encode(h.finalize())
    };
    let cached = cache_dir(data).join(format!("{key}.json"));
    if use_cache
        && let Ok(mut g) = faultline_schema::io::read_json::<Grade>(&cached, "cached grade")
    {
        g.trial_id = trial_id.to_string();
        return Ok(g);
    }
    let ctx = GradeContext {
        case,
        prepared,
        data,
        toolchain,
    };
    let grade = match track {
        Track::Diagnose => grade_diagnosis(&ctx, trial_id, text)?,
        Track::Repair => grade_repair(&ctx, trial_id, text, opts).await?,
        Track::Reproduce => grade_reproduction(&ctx, trial_id, text, opts).await?,
    };
    if grade.outcome != Outcome::InfraError {
        faultline_schema::io::write_json_atomic(&cached, &grade)?;
    }
    Ok(grade)
}

fn no_submission(ctx: &GradeContext, trial_id: &str, track: Track) -> Result<Grade> {
    Ok(Grade {
        schema_version: GRADE_SCHEMA_VERSION,
        trial_id: trial_id.into(),
        case_id: ctx.case.id().into(),
        track,
        outcome: Outcome::InvalidSubmission,
        reason: "nothing was submitted".into(),
        score: Some(0.0),
        diagnosis: None,
        repair: None,
        reproduction: None,
        inputs: faultline_schema::grade::GradeInputs {
            submission_sha256: String::new(),
            case_sha256: case_hash(ctx.case)?,
            faultline_version: env!("CARGO_PKG_VERSION").into(),
        },
        graded_at: humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
        wall_secs: 0.0,
    })
}
