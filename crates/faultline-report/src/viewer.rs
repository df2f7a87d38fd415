//! What the HTML report's trajectory viewer shows: each trial's steps (capped), its submission
//! and grade, and per case the source excerpts around the labeled and the diagnosed blocks.

use faultline_schema::{Diagnosis, Grade, ResultRecord, Trajectory};
use serde::Serialize;
use std::collections::BTreeMap;

/// Characters of a command's output or a thought kept per step (head and tail).
pub const TEXT_CAP: usize = 4_000;
/// Lines of context around a labeled or diagnosed block.
pub const CONTEXT_LINES: u32 = 6;
/// Most lines of one block shown (a diagnosis may name a whole file).
pub const BLOCK_CAP: u32 = 200;

/// `text` cut to about `cap` characters, keeping its head and tail.
pub fn cap(text: &str, cap: usize) -> String {
    let n = text.chars().count();
    if n <= cap {
        return text.to_string();
    }
    let head: String = text.chars().take(cap / 2).collect();
    let tail: String = text.chars().skip(n - cap / 2).collect();
    format!("{head}\n[... {} characters left out ...]\n{tail}", n - cap)
}

/// A code block: labeled by the case or named by a diagnosis.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BlockView {
    /// Path relative to the crate root.
    pub file: String,
    /// First line, 1-based.
    pub start: u32,
    /// Last line, inclusive.
    pub end: u32,
    /// The enclosing item, if given.
    pub symbol: Option<String>,
    /// The agent's explanation (diagnoses only).
    pub explanation: Option<String>,
}

/// A diagnosis path as a crate-relative path (`./` and `/workspace/` dropped); `None` for a path
/// that could leave the crate.
pub fn crate_path(file: &str) -> Option<String> {
    let p = file
        .trim()
        .trim_start_matches("/workspace/")
        .trim_start_matches("./");
    let ok = !p.is_empty()
        && !p.starts_with('/')
        && p.split('/').all(|c| !c.is_empty() && c != ".." && c != ".");
    ok.then(|| p.to_string())
}

/// One step of a trajectory.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StepView {
    /// Step number, from 1.
    pub index: u32,
    /// The reply's text.
    pub thought: Option<String>,
    /// The command run.
    pub command: Option<String>,
    /// Its kind (`read`, `edit`, ...).
    pub kind: Option<String>,
    /// Its exit code.
    pub exit_code: Option<i32>,
    /// Whether it timed out.
    pub timed_out: bool,
    /// What the agent saw.
    pub output: Option<String>,
    /// Why the reply could not be parsed.
    pub format_error: Option<String>,
    /// The workspace diff after the step, when it changed.
    pub diff: Option<String>,
}

/// One trial as the viewer shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TrialView {
    /// The trial id.
    pub trial_id: String,
    /// The agent configuration.
    pub agent: String,
    /// The case.
    pub case_id: String,
    /// The track.
    pub track: String,
    /// The condition.
    pub condition: String,
    /// The attempt.
    pub attempt: u32,
    /// The outcome.
    pub outcome: String,
    /// The score.
    pub score: Option<f64>,
    /// The grader's reason.
    pub reason: Option<String>,
    /// How the agent's part ended.
    pub exit_status: String,
    /// The error of a failed trial.
    pub error: Option<String>,
    /// The steps (empty when the trajectory was not embedded).
    pub steps: Vec<StepView>,
    /// Whether the steps are embedded (the report has a size budget).
    pub embedded: bool,
    /// The diagnosed blocks.
    pub diagnosis: Vec<BlockView>,
    /// The diagnosis summary.
    pub summary: Option<String>,
    /// A patch or reproducer, capped.
    pub submission: Option<String>,
}

impl TrialView {
    /// Builds the view of a trial from what its directory holds.
    pub fn new(
        record: &ResultRecord,
        trajectory: Option<&Trajectory>,
        grade: Option<&Grade>,
        diagnosis: Option<&Diagnosis>,
        submission: Option<&str>,
    ) -> TrialView {
        let opt = |s: &Option<String>| s.as_deref().map(|t| cap(t, TEXT_CAP));
        let steps = trajectory
            .map(|t| {
                t.steps
                    .iter()
                    .map(|s| StepView {
                        index: s.index,
                        thought: opt(&s.thought),
                        command: s.action.as_ref().map(|a| cap(&a.command, TEXT_CAP)),
                        kind: s
                            .action
                            .as_ref()
                            .map(|a| crate::markdown::action_name(a.kind).to_string()),
                        exit_code: s.action.as_ref().and_then(|a| a.exit_code),
                        timed_out: s.action.as_ref().is_some_and(|a| a.timed_out),
                        output: s.action.as_ref().map(|a| cap(&a.output, TEXT_CAP)),
                        format_error: opt(&s.format_error),
                        diff: opt(&s.diff),
                    })
                    .collect()
            })
            .unwrap_or_default();
        TrialView {
            trial_id: record.trial_id.clone(),
            agent: record.agent.clone(),
            case_id: record.case_id.clone(),
            track: record.track.to_string(),
            condition: record.condition.to_string(),
            attempt: record.attempt,
            outcome: record.outcome.as_str().to_string(),
            score: record.score,
            reason: grade.map(|g| cap(&g.reason, TEXT_CAP)),
            exit_status: record.exit_status.as_str().to_string(),
            error: trajectory.and_then(|t| t.error.as_deref().map(|e| cap(e, TEXT_CAP))),
            steps,
            embedded: true,
            diagnosis: diagnosis
                .map(|d| {
                    d.blocks
                        .iter()
                        .filter_map(|b| {
                            Some(BlockView {
                                file: crate_path(&b.file)?,
                                start: b.start_line,
                                end: b.end_line,
                                symbol: b.symbol.clone(),
                                explanation: b.explanation.as_deref().map(|e| cap(e, TEXT_CAP)),
                            })
                        })
                        .collect()
                })
                .unwrap_or_default(),
            summary: diagnosis.and_then(|d| d.summary.as_deref().map(|s| cap(s, TEXT_CAP))),
            submission: submission.map(|s| cap(s, 4 * TEXT_CAP)),
        }
    }

    /// Characters this view embeds, for the report's size budget.
    pub fn size(&self) -> usize {
        self.steps
            .iter()
            .map(|s| {
                [&s.thought, &s.command, &s.output, &s.diff]
                    .iter()
                    .map(|t| t.as_ref().map_or(0, String::len))
                    .sum::<usize>()
            })
            .sum::<usize>()
            + self.submission.as_ref().map_or(0, String::len)
    }

    /// Drops the steps (over the budget), keeping the summary.
    pub fn without_steps(mut self) -> TrialView {
        self.steps.clear();
        self.embedded = false;
        self
    }
}

/// Consecutive source lines of one file.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Segment {
    /// Line number of the first line.
    pub start: u32,
    /// The lines.
    pub lines: Vec<String>,
}

/// The excerpts of one file.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FileExcerpt {
    /// Path relative to the crate root.
    pub file: String,
    /// Excerpts in line order, not overlapping.
    pub segments: Vec<Segment>,
}

/// A case's labeled blocks and the source around every block any trial names.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CaseView {
    /// The case id.
    pub case_id: String,
    /// The labeled causal blocks.
    pub labeled: Vec<BlockView>,
    /// Source excerpts of the buggy version.
    pub files: Vec<FileExcerpt>,
}

impl CaseView {
    /// The excerpts around `labeled` and `diagnosed` blocks; `read` gives a crate-relative
    /// file's text (`None` when it does not exist).
    pub fn new<'a>(
        case_id: &str,
        labeled: Vec<BlockView>,
        diagnosed: impl IntoIterator<Item = &'a BlockView>,
        read: impl Fn(&str) -> Option<String>,
    ) -> CaseView {
        let mut ranges: BTreeMap<String, Vec<(u32, u32)>> = BTreeMap::new();
        let mut add = |b: &BlockView| {
            if b.start == 0 || b.end < b.start {
                return;
            }
            let end = b.end.min(b.start.saturating_add(BLOCK_CAP));
            ranges.entry(b.file.clone()).or_default().push((
                b.start.saturating_sub(CONTEXT_LINES).max(1),
                end.saturating_add(CONTEXT_LINES),
            ));
        };
        labeled.iter().for_each(&mut add);
        diagnosed.into_iter().for_each(add);
        let mut files = Vec::new();
        for (file, mut rs) in ranges {
            let Some(text) = read(&file) else { continue };
            let lines: Vec<&str> = text.lines().collect();
            rs.sort();
            let mut merged: Vec<(u32, u32)> = Vec::new();
            for (a, b) in rs {
                match merged.last_mut() {
                    Some(last) if a <= last.1 + 1 => last.1 = last.1.max(b),
                    _ => merged.push((a, b)),
                }
            }
            let segments: Vec<Segment> = merged
                .into_iter()
                .filter_map(|(a, b)| {
                    let from = a as usize - 1;
                    let to = (b as usize).min(lines.len());
                    (from < to).then(|| Segment {
                        start: a,
                        lines: lines[from..to].iter().map(|l| cap(l, 400)).collect(),
                    })
                })
                .collect();
            if !segments.is_empty() {
                files.push(FileExcerpt { file, segments });
            }
        }
        CaseView {
            case_id: case_id.to_string(),
            labeled,
            files,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(file: &str, start: u32, end: u32) -> BlockView {
        BlockView {
            file: file.into(),
            start,
            end,
            symbol: None,
            explanation: None,
        }
    }

    #[test]
    fn excerpts_merge_and_clip() {
        let text: String = (1..=100).map(|i| format!("line {i}\n")).collect();
        let diagnosed = [block("src/a.rs", 20, 22), block("src/gone.rs", 1, 2)];
        let v = CaseView::new(
            "c",
            vec![block("src/a.rs", 10, 12), block("src/a.rs", 95, 140)],
            diagnosed.iter(),
            |f| (f == "src/a.rs").then(|| text.clone()),
        );
        assert_eq!(v.files.len(), 1);
        let segs = &v.files[0].segments;
        assert_eq!(segs.len(), 2);
        assert_eq!(segs[0].start, 4);
        assert_eq!(segs[0].lines.first().unwrap(), "line 4");
        assert_eq!(segs[0].lines.last().unwrap(), "line 28");
        assert_eq!(segs[1].start, 89);
        assert_eq!(segs[1].lines.last().unwrap(), "line 100");
    }

    #[test]
    fn paths_stay_inside_the_crate() {
        assert_eq!(
            crate_path("/workspace/src/a.rs").as_deref(),
            Some("src/a.rs")
        );
        assert_eq!(crate_path("./src/a.rs").as_deref(), Some("src/a.rs"));
        assert_eq!(crate_path("../etc/passwd"), None);
        assert_eq!(crate_path("/etc/passwd"), None);
        assert_eq!(crate_path("src//a.rs"), None);
    }

    #[test]
    fn long_text_keeps_head_and_tail() {
        let t = "a".repeat(50) + &"b".repeat(50);
        let c = cap(&t, 20);
        assert!(c.starts_with("aaaaaaaaaa\n[... 80 characters"));
        assert!(c.ends_with("bbbbbbbbbb"));
        assert_eq!(cap("short", 20), "short");
    }
}
