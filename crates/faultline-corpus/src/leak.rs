//! The leak check: nothing an agent is shown may give the fix away.
//!
//! A symptom or bundle leaks when it contains a line the fix adds, the fixed version number, an
//! upstream issue, pull-request or commit reference, or a quoted string that, searched for in the
//! buggy source, lands on a line the fix rewrites.

use crate::gold::TreeDiff;
pub use faultline_schema::validation::{LeakFinding, LeakKind};
use regex::Regex;
use std::collections::BTreeSet;

/// Added lines shorter than this (after trimming) are too generic to count as a leak.
const MIN_LEAK_LINE: usize = 12;

/// An added line that the buggy source already has elsewhere counts from this length: quoting
/// it still points at the fix, but short ones (`return Ok(());`) are everywhere.
const MIN_EXISTING_LEAK_LINE: usize = 20;

/// Quoted strings shorter than this are too generic to search for.
const MIN_QUOTE: usize = 8;

/// What the check looks for, derived once per case.
#[derive(Debug)]
pub struct LeakCheck {
    fix_lines: Vec<String>,
    markers: Vec<Regex>,
    references: Vec<Regex>,
    fix_sites: Vec<String>,
}

fn normalize(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

impl LeakCheck {
    /// Builds the check from the gold patch, the whole buggy source text (a line that already
    /// exists there is a leak only from [`MIN_EXISTING_LEAK_LINE`] characters), the
    /// fixed-version markers and the upstream references.
    pub fn new(
        gold: &TreeDiff,
        buggy_sources: &[String],
        fixed_markers: &[String],
        upstream: &faultline_schema::case::Upstream,
    ) -> LeakCheck {
        let existing: BTreeSet<String> = buggy_sources
            .iter()
            .flat_map(|s| s.lines())
            .map(normalize)
            .collect();
        let fix_lines: BTreeSet<String> = gold
            .added_lines()
            .into_iter()
            .map(|(_, l)| normalize(l))
            .filter(|l| l.len() >= MIN_LEAK_LINE && l.chars().any(char::is_alphanumeric))
            .filter(|l| !existing.contains(l) || l.len() >= MIN_EXISTING_LEAK_LINE)
            .collect();
        let markers = fixed_markers
            .iter()
            .filter(|m| !m.is_empty())
            .map(|m| word_regex(m))
            .collect();
        let mut references = Vec::new();
        let number = Regex::new(r"#(\d+)").expect("valid regex");
        let hex = Regex::new(r"\b([0-9a-f]{7,40})\b").expect("valid regex");
        for r in &upstream.references {
            for c in number.captures_iter(r) {
                references.push(Regex::new(&format!(r"#{}\b", &c[1])).expect("valid regex"));
            }
            for c in hex.captures_iter(r) {
                let prefix = &c[1][..7];
                references
                    .push(Regex::new(&format!(r"\b{prefix}[0-9a-f]*\b")).expect("valid regex"));
            }
        }
        let repo = upstream
            .repository
            .trim_end_matches('/')
            .trim_end_matches(".git")
            .split("://")
            .last()
            .unwrap_or("")
            .to_string();
        if !repo.is_empty() {
            references.push(Regex::new(&regex::escape(&repo)).expect("valid regex"));
        }
        let fix_sites = gold
            .changed_old_lines()
            .into_iter()
            .map(|(_, _, l)| l.to_string())
            .collect();
        LeakCheck {
            fix_lines: fix_lines.into_iter().collect(),
            markers,
            references,
            fix_sites,
        }
    }

    /// Checks one text shown to agents.
    pub fn scan(&self, file: &str, text: &str) -> Vec<LeakFinding> {
        let mut out = Vec::new();
        let mut push = |line: usize, kind: LeakKind, excerpt: &str| {
            out.push(LeakFinding {
                file: file.to_string(),
                line,
                kind,
                excerpt: excerpt.chars().take(120).collect(),
            })
        };
        for (i, raw) in text.lines().enumerate() {
            let line = normalize(raw);
            for fix in &self.fix_lines {
                if line.contains(fix.as_str()) {
                    push(i + 1, LeakKind::FixLine, fix);
                }
            }
            for m in &self.markers {
                if let Some(hit) = m.find(raw) {
                    push(i + 1, LeakKind::FixedVersion, hit.as_str());
                }
            }
            for r in &self.references {
                if let Some(hit) = r.find(raw) {
                    push(i + 1, LeakKind::UpstreamReference, hit.as_str());
                }
            }
            for quote in quoted_strings(raw) {
                if self.fix_sites.iter().any(|site| site.contains(quote)) {
                    push(i + 1, LeakKind::QuoteLocatesFix, quote);
                }
            }
        }
        out
    }
}

/// A regex matching `s` not preceded or followed by a digit, letter or dot-digit (so `0.9.24`
/// does not match inside `0.9.245`).
fn word_regex(s: &str) -> Regex {
    Regex::new(&format!(
        r"(^|[^0-9A-Za-z.]){}($|[^0-9A-Za-z]|\.[^0-9])",
        regex::escape(s)
    ))
    .expect("escaped text is a valid regex")
}

/// Strings a reader could paste into a search: `backticked` and "double-quoted" spans.
fn quoted_strings(line: &str) -> Vec<&str> {
    let mut out = Vec::new();
    for delim in ['`', '"'] {
        let parts: Vec<&str> = line.split(delim).collect();
        for (i, part) in parts.iter().enumerate() {
            if i % 2 == 1 && i + 1 < parts.len() && part.trim().len() >= MIN_QUOTE {
                out.push(part.trim());
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gold::diff_trees;
    use faultline_schema::case::Upstream;

    fn check() -> LeakCheck {
        let a = tempfile::tempdir().unwrap();
        let b = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(a.path().join("src")).unwrap();
        std::fs::create_dir_all(b.path().join("src")).unwrap();
        let old = "fn apply(&mut self) {\n    let end = clock + len;\n    self.store(end);\n}\n";
        let new = "fn apply(&mut self) {\n    let end = state + len;\n    self.store(end);\n}\n";
        std::fs::write(a.path().join("src/lib.rs"), old).unwrap();
        std::fs::write(b.path().join("src/lib.rs"), new).unwrap();
        let gold = diff_trees(a.path(), b.path()).unwrap();
        let upstream = Upstream {
            repository: "https://example.org/team/kv".into(),
            references: vec!["PR #642".into(), "commit 648e7fe1".into()],
            notes: None,
        };
        LeakCheck::new(&gold, &[old.to_string()], &["0.27.2".into()], &upstream)
    }

    #[test]
    fn a_line_of_the_fix_is_a_leak() {
        let found = check().scan("context/log.md", "note:\n  let   end = state + len;\n");
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].kind, LeakKind::FixLine);
        assert_eq!(found[0].line, 2);
    }

    #[test]
    fn a_long_fix_line_is_a_leak_even_where_the_buggy_source_has_it_elsewhere() {
        let a = tempfile::tempdir().unwrap();
        let b = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(a.path().join("src")).unwrap();
        std::fs::create_dir_all(b.path().join("src")).unwrap();
        let other =
            "fn reset(&mut self) {\n    self.commit_index = self.applied;\n    return Ok(());\n}\n";
        let old = format!("{other}fn step(&mut self) {{\n    self.tick();\n}}\n");
        let new = format!(
            "{other}fn step(&mut self) {{\n    self.commit_index = self.applied;\n    return Ok(());\n    self.tick();\n}}\n"
        );
        std::fs::write(a.path().join("src/lib.rs"), &old).unwrap();
        std::fs::write(b.path().join("src/lib.rs"), &new).unwrap();
        let gold = diff_trees(a.path(), b.path()).unwrap();
        let upstream = Upstream {
            repository: String::new(),
            references: Vec::new(),
            notes: None,
        };
        let c = LeakCheck::new(&gold, &[old], &[], &upstream);
        let found = c.scan(
            "symptom.md",
            "maybe `self.commit_index = self.applied;` is missing",
        );
        assert!(
            found.iter().any(|f| f.kind == LeakKind::FixLine),
            "{found:?}"
        );
        // A short line that is everywhere in the source is not one.
        assert!(
            c.scan("symptom.md", "it ends with return Ok(()); as usual")
                .is_empty()
        );
    }

    #[test]
    fn versions_and_references_are_leaks() {
        let c = check();
        let kinds = |t: &str| {
            c.scan("symptom.md", t)
                .into_iter()
                .map(|f| f.kind)
                .collect::<Vec<_>>()
        };
        assert_eq!(
            kinds("upgrading to 0.27.2 fixed it"),
            [LeakKind::FixedVersion]
        );
        assert_eq!(kinds("I use 0.27.1 and 0.27.21"), []);
        assert_eq!(kinds("see #642"), [LeakKind::UpstreamReference]);
        assert_eq!(kinds("see #6421"), []);
        assert_eq!(kinds("commit 648e7fe"), [LeakKind::UpstreamReference]);
        assert_eq!(
            kinds("from example.org/team/kv"),
            [LeakKind::UpstreamReference]
        );
    }

    #[test]
    fn a_quote_that_finds_the_fixed_line_is_a_leak() {
        let c = check();
        let found = c.scan(
            "symptom.md",
            "the code does `let end = clock + len` somewhere",
        );
        assert_eq!(found[0].kind, LeakKind::QuoteLocatesFix);
        assert!(
            c.scan("symptom.md", "it printed `self.store(end)` twice")
                .is_empty()
        );
    }
}
