//! Grading a diagnosis: parsed, then scored against the labeled blocks on the agent template's
//! files (no build; the scores themselves are [`crate::diagnosis::score`]).

use super::{GradeContext, begin, conclude};
use crate::diagnosis;
use anyhow::Result;
use faultline_corpus::TemplateKind;
use faultline_schema::diagnosis::DIAGNOSIS_LINE_BUDGET;
use faultline_schema::{Diagnosis, Grade, Outcome, Track};
use std::time::Instant;

/// Grades a diagnosis (no build; the scores are pure).
pub fn grade_diagnosis(ctx: &GradeContext, trial_id: &str, text: &str) -> Result<Grade> {
    let started = Instant::now();
    let mut g = begin(ctx, trial_id, Track::Diagnose, text)?;
    let parsed = match Diagnosis::from_json(text) {
        Ok(d) => d,
        Err(e) => {
            g.diagnosis = Some(Default::default());
            return Ok(conclude(
                g,
                Outcome::InvalidSubmission,
                e.to_string(),
                started,
            ));
        }
    };
    // Blocks are checked against the agent template's files: only an intact one will do.
    if let Err(e) = ctx.prepared.check(TemplateKind::Agent) {
        return Ok(conclude(g, Outcome::InfraError, format!("{e:#}"), started));
    }
    let scores = diagnosis::score(
        &parsed,
        &ctx.case.manifest.blocks,
        &ctx.prepared.stamp.agent.workspace,
    );
    let reason = format!(
        "budgeted coverage {:.2} ({} of {} blocks read within {DIAGNOSIS_LINE_BUDGET} lines), \
         block coverage {:.2}, block precision {:.2}, {} blocks rejected",
        scores.budgeted_coverage,
        scores.blocks_read,
        scores.blocks_named,
        scores.block_coverage,
        scores.block_precision,
        scores.rejected_blocks.len(),
    );
    g.diagnosis = Some(scores);
    Ok(conclude(g, Outcome::Scored, reason, started))
}
