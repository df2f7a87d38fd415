//! Scoring a diagnosis against the labeled blocks.
//!
//! The matching rule (fixed; see `docs/grading.md`):
//!
//! - Paths are normalized: a leading `./` or `/workspace/` is removed; anything else absolute, or
//!   with `..`, is rejected.
//! - A diagnosed block is rejected (and reported) if its file does not exist in the buggy source,
//!   its range is reversed, starts at 0, or ends past the file's last line. Rejected blocks name
//!   no lines.
//! - **Budgeted coverage** (the track's score): the accepted blocks are read in the diagnosis's
//!   order, each adding the lines it names that no earlier block named, until one would take the
//!   total past [`DIAGNOSIS_LINE_BUDGET`]; that block and every later one are not read. The score
//!   is the share of labeled blocks that some block read overlaps. Whatever a diagnosis names, its
//!   score is what at most that many of its lines earn, so naming more code never raises it.
//! - **Block coverage** (DistDebug's, without the budget): the share of labeled blocks that some
//!   accepted diagnosed block overlaps (same file, at least one common line).
//! - **Block precision**: the share of the lines the diagnosis names (the union of its accepted
//!   blocks) that lie in some labeled block.
//! - **File coverage**: the share of the labeled blocks' distinct files that the diagnosis names.
//! - **Line F1**: the harmonic mean of line precision (= block precision) and line recall (the
//!   share of labeled lines named).
//!
//! An empty diagnosis scores 0 everywhere.

use faultline_schema::diagnosis::DIAGNOSIS_LINE_BUDGET;
use faultline_schema::grade::DiagnosisScores;
use faultline_schema::{Diagnosis, LabeledBlock};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Normalizes a diagnosed path to one relative to the crate root.
pub fn normalize_path(p: &str) -> Result<String, String> {
    let mut s = p.trim().replace('\\', "/");
    for prefix in ["/workspace/", "./"] {
        while let Some(rest) = s.strip_prefix(prefix) {
            s = rest.to_string();
        }
    }
    if s.is_empty() || s.starts_with('/') || s.split('/').any(|c| c == "..") {
        return Err(format!("`{p}` is not a path inside the crate"));
    }
    Ok(s)
}

/// Scores a diagnosis; `source_root` is the buggy crate (to check files and line counts).
pub fn score(
    diagnosis: &Diagnosis,
    labeled: &[LabeledBlock],
    source_root: &Path,
) -> DiagnosisScores {
    let mut rejected = Vec::new();
    let mut named: BTreeMap<String, BTreeSet<u32>> = BTreeMap::new();
    let mut accepted: Vec<(String, u32, u32)> = Vec::new();
    // The accepted blocks read before the budget ran out, the distinct lines they name, and the
    // index of the block that would have overrun it.
    let mut read: Vec<(String, u32, u32)> = Vec::new();
    let mut budget_spent: u32 = 0;
    let mut overran_at: Option<usize> = None;
    let mut line_counts: BTreeMap<String, Option<u32>> = BTreeMap::new();
    for (i, b) in diagnosis.blocks.iter().enumerate() {
        let label = format!("blocks[{i}] {}:{}-{}", b.file, b.start_line, b.end_line);
        let file = match normalize_path(&b.file) {
            Ok(f) => f,
            Err(e) => {
                rejected.push(format!("{label}: {e}"));
                continue;
            }
        };
        let lines = *line_counts.entry(file.clone()).or_insert_with(|| {
            std::fs::read_to_string(source_root.join(&file))
                .ok()
                .map(|t| t.lines().count() as u32)
        });
        let Some(lines) = lines else {
            rejected.push(format!("{label}: no such file in the crate"));
            continue;
        };
        if b.start_line == 0 || b.end_line < b.start_line {
            rejected.push(format!("{label}: the range is empty or reversed"));
            continue;
        }
        if b.end_line > lines {
            rejected.push(format!("{label}: the file has only {lines} lines"));
            continue;
        }
        let lines_of_file = named.entry(file.clone()).or_default();
        if overran_at.is_none() {
            // Until the budget runs out, every accepted block has been read, so the lines named
            // so far are exactly the lines read so far.
            let fresh = (b.start_line..=b.end_line)
                .filter(|n| !lines_of_file.contains(n))
                .count() as u32;
            if budget_spent.saturating_add(fresh) > DIAGNOSIS_LINE_BUDGET {
                overran_at = Some(i);
            } else {
                budget_spent += fresh;
                read.push((file.clone(), b.start_line, b.end_line));
            }
        }
        lines_of_file.extend(b.start_line..=b.end_line);
        accepted.push((file, b.start_line, b.end_line));
    }
    let mut labeled_lines: BTreeMap<&str, BTreeSet<u32>> = BTreeMap::new();
    for l in labeled {
        labeled_lines
            .entry(&l.file)
            .or_default()
            .extend(l.start..=l.end);
    }
    let covered_by = |blocks: &[(String, u32, u32)]| {
        labeled
            .iter()
            .filter(|l| {
                blocks
                    .iter()
                    .any(|(f, s, e)| f == &l.file && *s <= l.end && *e >= l.start)
            })
            .count()
    };
    let named_total: usize = named.values().map(BTreeSet::len).sum();
    let labeled_total: usize = labeled_lines.values().map(BTreeSet::len).sum();
    let hits: usize = named
        .iter()
        .map(|(f, lines)| {
            labeled_lines
                .get(f.as_str())
                .map_or(0, |l| lines.intersection(l).count())
        })
        .sum();
    let ratio = |a: usize, b: usize| if b == 0 { 0.0 } else { a as f64 / b as f64 };
    let precision = ratio(hits, named_total);
    let recall = ratio(hits, labeled_total);
    let labeled_files: BTreeSet<&str> = labeled.iter().map(|l| l.file.as_str()).collect();
    let files_named = labeled_files
        .iter()
        .filter(|f| named.contains_key(**f))
        .count();
    DiagnosisScores {
        budgeted_coverage: ratio(covered_by(&read), labeled.len()),
        blocks_read: overran_at.unwrap_or(diagnosis.blocks.len()) as u32,
        block_coverage: ratio(covered_by(&accepted), labeled.len()),
        block_precision: precision,
        file_coverage: ratio(files_named, labeled_files.len()),
        line_f1: if precision + recall == 0.0 {
            0.0
        } else {
            2.0 * precision * recall / (precision + recall)
        },
        blocks_named: diagnosis.blocks.len() as u32,
        lines_named: named_total as u32,
        rejected_blocks: rejected,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use faultline_schema::DiagnosedBlock;

    fn crate_dir() -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(d.path().join("src")).unwrap();
        std::fs::write(d.path().join("src/a.rs"), "x\n".repeat(100)).unwrap();
        std::fs::write(d.path().join("src/b.rs"), "x\n".repeat(50)).unwrap();
        d
    }

    fn labels() -> Vec<LabeledBlock> {
        vec![
            LabeledBlock {
                file: "src/a.rs".into(),
                start: 10,
                end: 14,
                symbol: None,
                outside_diff: false,
            },
            LabeledBlock {
                file: "src/b.rs".into(),
                start: 20,
                end: 24,
                symbol: None,
                outside_diff: false,
            },
        ]
    }

    fn diag(blocks: &[(&str, u32, u32)]) -> Diagnosis {
        Diagnosis {
            schema_version: 1,
            blocks: blocks
                .iter()
                .map(|(f, s, e)| DiagnosedBlock {
                    file: f.to_string(),
                    start_line: *s,
                    end_line: *e,
                    symbol: None,
                    explanation: None,
                })
                .collect(),
            summary: None,
        }
    }

    #[test]
    fn the_labels_themselves_score_one() {
        let d = crate_dir();
        let s = score(
            &diag(&[("src/a.rs", 10, 14), ("./src/b.rs", 20, 24)]),
            &labels(),
            d.path(),
        );
        assert_eq!(
            (
                s.budgeted_coverage,
                s.block_coverage,
                s.block_precision,
                s.file_coverage,
                s.line_f1
            ),
            (1.0, 1.0, 1.0, 1.0, 1.0)
        );
        assert_eq!(s.blocks_read, 2);
    }

    #[test]
    fn an_empty_diagnosis_scores_zero() {
        let d = crate_dir();
        let s = score(&diag(&[]), &labels(), d.path());
        assert_eq!(
            (
                s.budgeted_coverage,
                s.block_coverage,
                s.block_precision,
                s.file_coverage,
                s.line_f1
            ),
            (0.0, 0.0, 0.0, 0.0, 0.0)
        );
        assert_eq!(s.blocks_read, 0);
    }

    #[test]
    fn whole_files_cover_every_block_but_earn_no_score() {
        let d = crate_dir();
        let s = score(
            &diag(&[("src/a.rs", 1, 100), ("src/b.rs", 1, 50)]),
            &labels(),
            d.path(),
        );
        assert_eq!(s.block_coverage, 1.0);
        assert_eq!(s.budgeted_coverage, 0.0);
        assert_eq!(s.blocks_read, 0);
        assert_eq!(s.lines_named, 150);
    }

    #[test]
    fn the_block_that_overruns_the_budget_ends_the_reading() {
        let d = crate_dir();
        // The second block overruns the budget; the third, precise as it is, is never read.
        let s = score(
            &diag(&[
                ("src/a.rs", 10, 14),
                ("src/a.rs", 1, 100),
                ("src/b.rs", 20, 24),
            ]),
            &labels(),
            d.path(),
        );
        assert_eq!(s.block_coverage, 1.0);
        assert_eq!(s.budgeted_coverage, 0.5);
        assert_eq!(s.blocks_read, 1);
    }

    #[test]
    fn the_budget_is_inclusive() {
        let d = crate_dir();
        let budget = DIAGNOSIS_LINE_BUDGET;
        let at = score(&diag(&[("src/a.rs", 1, budget)]), &labels(), d.path());
        assert_eq!((at.budgeted_coverage, at.blocks_read), (0.5, 1));
        let past = score(&diag(&[("src/a.rs", 1, budget + 1)]), &labels(), d.path());
        assert_eq!((past.budgeted_coverage, past.blocks_read), (0.0, 0));
        // Cutting the same lines into pieces buys nothing: the pieces add up the same way.
        let half = budget / 2;
        let pieces = score(
            &diag(&[
                ("src/a.rs", 1, half),
                ("src/a.rs", half + 1, budget),
                ("src/b.rs", 24, 24),
            ]),
            &labels(),
            d.path(),
        );
        assert_eq!((pieces.budgeted_coverage, pieces.blocks_read), (0.5, 2));
    }

    #[test]
    fn lines_named_again_are_not_spent_again() {
        let d = crate_dir();
        let budget = DIAGNOSIS_LINE_BUDGET;
        let mut blocks = vec![("src/a.rs", 1, budget - 10)];
        blocks.extend(std::iter::repeat_n(("src/a.rs", 10, 14), 20));
        blocks.push(("src/b.rs", 15, 24));
        let s = score(&diag(&blocks), &labels(), d.path());
        assert_eq!(s.budgeted_coverage, 1.0);
        assert_eq!(s.blocks_read, 22);
        assert_eq!(s.lines_named, budget);
    }

    #[test]
    fn the_documented_budget_is_the_one_applied() {
        let docs = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs");
        let read = |name: &str| std::fs::read_to_string(docs.join(name)).unwrap();
        assert!(read("grading.md").contains(&format!(
            "only the first **{DIAGNOSIS_LINE_BUDGET} lines** a"
        )));
        assert!(
            read("case-format.md")
                .contains(&format!("most {DIAGNOSIS_LINE_BUDGET} distinct lines"))
        );
    }

    #[test]
    fn rejected_blocks_spend_nothing() {
        let d = crate_dir();
        let s = score(
            &diag(&[
                ("src/nope.rs", 1, 1_000),
                ("src/a.rs", 1, 4_000_000),
                ("src/a.rs", 10, 14),
                ("src/b.rs", 20, 24),
            ]),
            &labels(),
            d.path(),
        );
        assert_eq!(s.rejected_blocks.len(), 2);
        assert_eq!((s.budgeted_coverage, s.blocks_read), (1.0, 4));
    }

    #[test]
    fn partial_overlap_and_wide_blocks() {
        let d = crate_dir();
        // Covers the first label with a 20-line block: 5 of 20 lines are causal.
        let s = score(
            &diag(&[("/workspace/src/a.rs", 1, 20)]),
            &labels(),
            d.path(),
        );
        assert_eq!(s.block_coverage, 0.5);
        assert_eq!(s.budgeted_coverage, 0.5);
        assert_eq!(s.block_precision, 0.25);
        assert_eq!(s.file_coverage, 0.5);
        let recall = 0.5;
        assert!((s.line_f1 - 2.0 * 0.25 * recall / (0.25 + recall)).abs() < 1e-12);
    }

    #[test]
    fn bad_blocks_are_reported_not_fatal() {
        let d = crate_dir();
        let s = score(
            &diag(&[
                ("src/a.rs", 14, 10),
                ("src/a.rs", 99, 4_000_000),
                ("src/nope.rs", 1, 2),
                ("../etc/passwd", 1, 1),
                ("src/a.rs", 0, 3),
                ("src/a.rs", 12, 12),
            ]),
            &labels(),
            d.path(),
        );
        assert_eq!(s.rejected_blocks.len(), 5, "{:?}", s.rejected_blocks);
        assert_eq!(s.block_coverage, 0.5);
        assert_eq!(s.block_precision, 1.0);
    }
}
