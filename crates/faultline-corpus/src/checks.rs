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

    let mut causal_functions = Vec::new();
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
        let name = match &b.symbol {
            Some(s) => s.rsplit("::").next().unwrap_or(s).to_string(),
            None => enclosing_fn(&lines, b.start).unwrap_or_default(),
        };
        if !name.is_empty() && !causal_functions.contains(&name) {
            causal_functions.push(name);
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

    let buggy_sources = read_sources(&sources.buggy);
    let leak = LeakCheck::new(
        &gold,
        &buggy_sources,
        &case.manifest.source.fixed_markers(),
        &case.manifest.upstream,
    );
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

    let symptom_names = causal_functions
        .into_iter()
        .filter(|f| {
            Regex::new(&format!(r"\b{}\b", regex::escape(f)))
                .expect("escaped identifier is a valid regex")
                .is_match(&case.symptom)
        })
        .collect();

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
}
