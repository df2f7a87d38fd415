//! Grading submissions: repairs against the hidden oracle, regression tests and fresh seeds
//! ([`repair`]); diagnoses against the labeled blocks ([`diagnose`]); reproducers against the
//! buggy and the fixed code ([`reproduce`]). Every grade is built in a fresh workbench, never in
//! the agent's workspace. This module holds what the three share: the context, the rules'
//! version, the dispatch by track, and how a [`Grade`] is built and concluded (also for
//! the grades a run records without grading, [`infra_error`] and [`no_submission`]).

mod diagnose;
mod repair;
mod reproduce;

pub use diagnose::grade_diagnosis;
pub use repair::grade_repair;
pub use reproduce::grade_reproduction;

use anyhow::{Context, Result};
use faultline_corpus::{Case, DataDir, PreparedCase, TemplateKind};
use faultline_sandbox::Toolchain;
use faultline_schema::grade::{GRADE_SCHEMA_VERSION, GradeInputs};
use faultline_schema::{Grade, GradingSettings, Outcome, Track};
use sha2::{Digest, Sha256};
use std::time::{Instant, SystemTime};

/// Version of the grading rules; part of every grade-cache key, so a change of the rules never
/// serves a grade made under the old ones. Bump it with every change to what a grade decides.
pub const GRADER_VERSION: u32 = 6;

/// What the grader needs to know about a case.
#[derive(Debug, Clone, Copy)]
pub struct GradeContext<'a> {
    /// The case.
    pub case: &'a Case,
    /// Its prepared workspace.
    pub prepared: &'a PreparedCase,
    /// Where scratch copies go.
    pub data: &'a DataDir,
    /// The toolchain.
    pub toolchain: &'a Toolchain,
}

/// Grades a submitted text by its track's rules, so a caller needs no knowledge of the tracks.
pub async fn grade(
    ctx: &GradeContext<'_>,
    trial_id: &str,
    track: Track,
    text: &str,
    settings: &GradingSettings,
) -> Result<Grade> {
    match track {
        Track::Diagnose => grade_diagnosis(ctx, trial_id, text),
        Track::Repair => grade_repair(ctx, trial_id, text, settings).await,
        Track::Reproduce => grade_reproduction(ctx, trial_id, text, settings).await,
        Track::Build => anyhow::bail!(
            "{trial_id}: a build is graded on its task's hidden schedules, not by a case's oracle"
        ),
    }
}

/// The grade of a trial whose agent never got to submit, because the harness failed to give it
/// its environment: `infra_error` with the reason, no score, never a failure of the agent.
pub fn infra_error(case: &Case, trial_id: &str, track: Track, why: &str) -> Result<Grade> {
    ungraded(case, trial_id, track, Outcome::InfraError, why)
}

/// The grade of a trial whose agent submitted nothing: `invalid_submission`, scored 0.
pub fn no_submission(case: &Case, trial_id: &str, track: Track) -> Result<Grade> {
    ungraded(
        case,
        trial_id,
        track,
        Outcome::InvalidSubmission,
        "nothing was submitted",
    )
}

/// A grade decided without grading anything: no submission to hash, no time spent.
fn ungraded(
    case: &Case,
    trial_id: &str,
    track: Track,
    outcome: Outcome,
    reason: &str,
) -> Result<Grade> {
    let g = new_grade(case, trial_id, track, None)?;
    Ok(finish(g, outcome, reason, 0.0))
}

/// A grade not yet decided: its identity and inputs, with `infra_error` until it is concluded.
/// `submission` is the graded text (`None`: nothing was submitted, and its hash is empty).
fn new_grade(case: &Case, trial_id: &str, track: Track, submission: Option<&str>) -> Result<Grade> {
    Ok(Grade {
        schema_version: GRADE_SCHEMA_VERSION,
        trial_id: trial_id.into(),
        case_id: case.id().into(),
        track,
        outcome: Outcome::InfraError,
        reason: String::new(),
        score: None,
        diagnosis: None,
        repair: None,
        reproduction: None,
        build: None,
        inputs: GradeInputs {
            submission_sha256: submission
                .map(|s| hex::encode(Sha256::digest(s.as_bytes())))
                .unwrap_or_default(),
            case_sha256: case
                .content_sha256()
                .with_context(|| format!("hashing the files of case {}", case.id()))?,
            faultline_version: env!("CARGO_PKG_VERSION").into(),
        },
        graded_at: String::new(),
        wall_secs: 0.0,
        protections: Vec::new(),
    })
}

/// A grade begun for a submission graded in this context: [`new_grade`] with the protections
/// its grading sandbox runs under.
fn begin(ctx: &GradeContext<'_>, trial_id: &str, track: Track, submission: &str) -> Result<Grade> {
    let mut g = new_grade(ctx.case, trial_id, track, Some(submission))?;
    g.protections = crate::protections::records(&crate::protections::for_grading(
        ctx.prepared,
        ctx.toolchain,
    ));
    Ok(g)
}

/// Concludes a grade begun at `started` with its outcome and reason.
fn conclude(g: Grade, outcome: Outcome, reason: impl Into<String>, started: Instant) -> Grade {
    finish(g, outcome, reason, started.elapsed().as_secs_f64())
}

/// Sets the outcome, the reason, the score the outcome earns, and when and how long.
fn finish(mut g: Grade, outcome: Outcome, reason: impl Into<String>, wall_secs: f64) -> Grade {
    g.outcome = outcome;
    g.reason = reason.into();
    g.score = match outcome {
        Outcome::InfraError => None,
        Outcome::Scored => g.diagnosis.as_ref().map(|d| d.budgeted_coverage),
        o if o.is_success() => Some(1.0),
        _ => Some(0.0),
    };
    g.graded_at = humantime::format_rfc3339_seconds(SystemTime::now()).to_string();
    g.wall_secs = wall_secs;
    g
}

/// The last `n` characters of a compiler's or a tool's words.
fn cap(s: &str, n: usize) -> String {
    let chars: Vec<char> = s.chars().collect();
    if chars.len() <= n {
        s.to_string()
    } else {
        chars[chars.len() - n..].iter().collect()
    }
}

/// Whether the templates a grade copied still match their manifest after it: a verdict stands
/// only then (the check before the copy is in [`crate::Workbench::new`]), so no change made
/// during the grade, by whatever process, can hide behind one.
fn still_intact(ctx: &GradeContext<'_>, kinds: &[TemplateKind]) -> Result<()> {
    for kind in kinds {
        ctx.prepared
            .check(*kind)
            .context("after grading, the templates no longer matched their manifest")?;
    }
    Ok(())
}
