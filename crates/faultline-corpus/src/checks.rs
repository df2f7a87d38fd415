//! The checks of a case that need its sources but no build: labeled blocks, text budgets, the
//! leak check, and whether the symptom names a causal function.

use crate::case::Case;
use crate::gold::{TreeDiff, diff_trees};
use crate::leak::LeakCheck;
use crate::store::CaseSources;
use crate::tokens::{self, BUNDLE_TOKEN_BUDGET, SYMPTOM_TOKEN_BUDGET};
use anyhow::Result;
pub use faultline_schema::validation::StaticReport;
use regex::Regex;
use std::fs;
use std::path::Path;

/// Directory beside the bundle files that holds the program that produced them.
pub const BUNDLE_GENERATOR_DIR: &str = "generator";

/// Runs the static checks of a case against its buggy and fixed trees.
pub fn static_checks(case: &Case, sources: &CaseSources) -> Result<(StaticReport, TreeDiff)> {
    let gold = diff_trees(&sources.buggy, &sources.fixed)?;
    let mut problems = Vec::new();
    if gold.is_empty() {
        problems.push("the buggy and fixed versions do not differ in any source file".into());
    }

    for (i, b) in case.manifest.blocks.iter().enumerate() {
        let label = format!("blocks[{i}] {}:{}-{}", b.file, b.start, b.end);
        let Ok(text) = fs::read_to_string(sources.buggy.join(&b.file)) else {
            problems.push(format!(
                "{label}: the file does not exist in the buggy source"
            ));
            continue;
        };
        let lines: Vec<&str> = text.lines().collect();
        if b.end as usize > lines.len() {
            problems.push(format!(
                "{label}: the file has only {} lines; the block lies outside the source",
                lines.len()
            ));
            continue;
        }
        if !b.outside_diff && !gold.touches(&b.file, b.start, b.end) {
            problems.push(format!(
                "{label}: the block does not overlap any change of the gold patch \
                 (mark it `outside_diff = true` if it is causal but unchanged)"
            ));
        }
    }

    let symptom_tokens = tokens::count(&case.symptom);
    if symptom_tokens > SYMPTOM_TOKEN_BUDGET {
        problems.push(format!(
            "symptom.md has {symptom_tokens} tokens; the budget is {SYMPTOM_TOKEN_BUDGET}"
        ));
    }
    let bundle_tokens: usize = case.bundle.iter().map(|f| tokens::count(&f.text)).sum();
    if bundle_tokens > BUNDLE_TOKEN_BUDGET {
        problems.push(format!(
            "the bundle has {bundle_tokens} tokens; the budget is {BUNDLE_TOKEN_BUDGET}"
        ));
    }
    if !case.dir.join("context").join(BUNDLE_GENERATOR_DIR).is_dir() {
        problems.push(format!(
            "context/{BUNDLE_GENERATOR_DIR}/ is missing: keep the program that produced the bundle beside it"
        ));
    }

    let leak = leak_check(case, sources, &gold);
    let mut leaks = leak.scan("symptom.md", &case.symptom);
    for f in &case.bundle {
        leaks.extend(leak.scan(&format!("context/{}", f.name), &f.text));
    }
    for l in &leaks {
        problems.push(format!(
            "leak in {} line {}: {:?} `{}`",
            l.file, l.line, l.kind, l.excerpt
        ));
    }

    let symptom_names = symptom_names(case, sources);

    Ok((
        StaticReport {
            symptom_tokens,
            bundle_tokens,
            bundle_files: case.bundle.len(),
            gold_files: gold.files.len(),
            gold_changed_lines: gold.changed_line_count(),
            blocks: case.manifest.blocks.len(),
            leaks,
            symptom_names,
            problems,
        },
        gold,
    ))
}

/// The leak check of a case, from its release diff (buggy to fixed): the one gate for every text
/// an agent is shown, the symptom and the curated bundle here, any provider's bundle at run time.
pub fn leak_check(case: &Case, sources: &CaseSources, release: &TreeDiff) -> LeakCheck {
    LeakCheck::new(
        release,
        &read_sources(&sources.buggy),
        &case.manifest.source.fixed_markers(),
        &case.manifest.upstream,
    )
}

/// The causal functions that the symptom names as code (a labeled block's declared symbol's last
/// segment, else the function around it): all a run needs of the static checks.
pub fn symptom_names(case: &Case, sources: &CaseSources) -> Vec<String> {
    let mut causal_functions: Vec<String> = Vec::new();
    for b in &case.manifest.blocks {
        let Ok(text) = fs::read_to_string(sources.buggy.join(&b.file)) else {
            continue;
        };
        let lines: Vec<&str> = text.lines().collect();
        if b.end as usize > lines.len() {
            continue;
        }
        let name = match &b.symbol {
            Some(s) => s.rsplit("::").next().unwrap_or(s).to_string(),
            None => enclosing_fn(&lines, b.start).unwrap_or_default(),
        };
        if !name.is_empty() && !causal_functions.contains(&name) {
            causal_functions.push(name);
        }
    }
    causal_functions
        .into_iter()
        .filter(|f| names_identifier(&case.symptom, f))
        .collect()
}

/// Two cases that are one bug: the same two versions of the code with labeled blocks that
/// overlap. A corpus must not hold both, or the bug counts twice.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Duplicate {
    /// The case that comes first by id.
    pub first: String,
    /// The other case.
    pub second: String,
    /// The overlapping blocks, as `file:start-end`.
    pub overlap: String,
}

/// Every pair of duplicate cases in `cases`.
pub fn duplicates(cases: &[Case]) -> Vec<Duplicate> {
    let mut found = Vec::new();
    for (i, a) in cases.iter().enumerate() {
        for b in &cases[i + 1..] {
            if !same_versions(a, b) {
                continue;
            }
            let overlap = a.manifest.blocks.iter().find_map(|x| {
                b.manifest
                    .blocks
                    .iter()
                    .find(|y| x.file == y.file && x.start <= y.end && y.start <= x.end)
                    .map(|y| {
                        format!(
                            "{}:{}-{} and {}:{}-{}",
                            x.file, x.start, x.end, y.file, y.start, y.end
                        )
                    })
            });
            if let Some(overlap) = overlap {
                let (first, second) = if a.id() <= b.id() { (a, b) } else { (b, a) };
                found.push(Duplicate {
                    first: first.id().to_string(),
                    second: second.id().to_string(),
                    overlap,
                });
            }
        }
    }
    found
}

/// Whether two cases take the same buggy and fixed code (pins aside).
fn same_versions(a: &Case, b: &Case) -> bool {
    use faultline_schema::case::Source;
    match (&a.manifest.source, &b.manifest.source) {
        (Source::Registry(x), Source::Registry(y)) => {
            x.crate_name == y.crate_name && x.buggy == y.buggy && x.fixed == y.fixed
        }
        (Source::Git(x), Source::Git(y)) => {
            x.repository.trim_end_matches(".git") == y.repository.trim_end_matches(".git")
                && x.buggy_commit == y.buggy_commit
                && x.fixed_commit == y.fixed_commit
                && x.subdir == y.subdir
        }
        (Source::Path(x), Source::Path(y)) => {
            let dir = |case: &Case, rel: &str| fs::canonicalize(case.dir.join(rel)).ok();
            let (bx, by) = (dir(a, &x.buggy), dir(b, &y.buggy));
            let (fx, fy) = (dir(a, &x.fixed), dir(b, &y.fixed));
            bx.is_some() && bx == by && fx.is_some() && fx == fy
        }
        _ => false,
    }
}

/// Whether `text` mentions the function `name` as code rather than as a word of prose: as a
/// path segment or method (`Type::name`, `.name`), a call (`name(`, `name::<`), a code span of
/// its own (`` `name` ``), or, for a name with an underscore, anywhere as a whole word. "actor
/// ids" in a sentence does not name a function `actor`; `` `Change::actor` `` does.
pub fn names_identifier(text: &str, name: &str) -> bool {
    let n = regex::escape(name);
    let mut patterns = vec![
        format!(r"(::|\.)\s*{n}\b"),
        format!(r"\b{n}\s*(\(|::<)"),
        format!(r"`{n}`"),
    ];
    if name.contains('_') {
        patterns.push(format!(r"\b{n}\b"));
    }
    patterns.iter().any(|p| {
        Regex::new(p)
            .expect("escaped identifier is a valid regex")
            .is_match(text)
    })
}

/// The name of the nearest `fn` at or above `line` (1-based).
pub fn enclosing_fn(lines: &[&str], line: u32) -> Option<String> {
    let re = Regex::new(r"\bfn\s+([A-Za-z_][A-Za-z0-9_]*)").expect("valid regex");
    lines
        .iter()
        .take(line as usize)
        .rev()
        .find_map(|l| re.captures(l).map(|c| c[1].to_string()))
}

fn read_sources(root: &Path) -> Vec<String> {
    walkdir::WalkDir::new(root.join("src"))
        .into_iter()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_type().is_file())
        .filter_map(|e| fs::read_to_string(e.path()).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn only_code_mentions_name_a_function() {
        let named = |text| names_identifier(text, "actor");
        assert!(!named("the actor ids of both peers differ"));
        assert!(!named("an actor's changes arrive twice"));
        assert!(named("panicked in `ChangeWithGraph::actor`"));
        assert!(named("calling doc.actor() returns the wrong id"));
        assert!(named("actor(3) is stale"));
        assert!(named("the `actor` of the second change"));
        assert!(names_identifier(
            "after apply_changes runs",
            "apply_changes"
        ));
        assert!(!names_identifier(
            "after changes are applied",
            "apply_changes"
        ));
    }

    use super::*;

    #[test]
    fn finds_the_enclosing_function() {
        let lines = [
            "impl A {",
            "    pub fn apply(&mut self) {",
            "        x += 1;",
            "    }",
            "}",
        ];
        assert_eq!(enclosing_fn(&lines, 3).as_deref(), Some("apply"));
        assert_eq!(enclosing_fn(&lines, 1), None);
    }

    #[test]
    fn a_symptom_names_a_causal_function_only_as_code() {
        let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures");
        let mut case = Case::load(&fixtures.join("corpus/toy/toy-double-merge")).unwrap();
        let sources = CaseSources {
            buggy: fixtures.join("toy-tree/buggy"),
            fixed: fixtures.join("toy-tree/fixed"),
        };
        assert!(symptom_names(&case, &sources).is_empty());
        case.symptom
            .push_str("\nThe counter grows inside `GCounter::merge`.\n");
        assert_eq!(symptom_names(&case, &sources), vec!["merge".to_string()]);
        let report = static_checks(&case, &sources).unwrap().0;
        assert_eq!(report.symptom_names, vec!["merge".to_string()]);
    }
}
