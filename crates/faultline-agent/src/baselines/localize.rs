//! The lexical localizers' view of a crate: every function of its `src/` with its lines and
//! words, ranked against a report by BM25 (`bm25`, and `everything`'s choice of files) or
//! picked by the stack traces and paths the report names (`stacktrace`). They read words only,
//! so what they find is what the report gives away.

use anyhow::Result;
use faultline_schema::DiagnosedBlock;
use faultline_schema::diagnosis::MAX_DIAGNOSIS_BLOCKS;
use regex::Regex;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::LazyLock;

/// A function of the crate with its line range and its words.
#[derive(Debug, Clone)]
pub struct FunctionBlock {
    /// Path relative to the crate root.
    pub file: String,
    /// The function's name (`Type::method` for methods).
    pub name: String,
    /// First line (1-based).
    pub start: u32,
    /// Last line.
    pub end: u32,
    words: Vec<String>,
}

/// Every function of a crate's `src/`, found by parsing the files.
#[derive(Debug, Default)]
pub struct FunctionIndex {
    /// The functions, in file and line order.
    pub functions: Vec<FunctionBlock>,
    /// The line count of every file that parsed, by path relative to the crate root (for
    /// whole-file blocks).
    pub file_lines: BTreeMap<String, u32>,
}

static WORD: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"[A-Za-z][A-Za-z0-9]*").expect("valid regex"));

/// Words of a text: identifiers split at `_` and case changes, lowercased.
fn words(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for m in WORD.find_iter(text) {
        let s = m.as_str();
        let mut cur = String::new();
        let mut prev_lower = false;
        for c in s.chars() {
            if c.is_uppercase() && prev_lower && !cur.is_empty() {
                out.push(cur.to_lowercase());
                cur.clear();
            }
            prev_lower = c.is_lowercase() || c.is_ascii_digit();
            cur.push(c);
        }
        if !cur.is_empty() {
            out.push(cur.to_lowercase());
        }
    }
    out.retain(|w| w.len() > 1);
    out
}

impl FunctionIndex {
    /// Parses every `.rs` file under `root/src`; files that do not parse are skipped.
    pub fn build(root: &Path) -> Result<FunctionIndex> {
        let mut index = FunctionIndex::default();
        let mut files: Vec<_> = walk_rs(&root.join("src"));
        files.sort();
        for path in files {
            let Ok(text) = std::fs::read_to_string(&path) else {
                continue;
            };
            let Ok(file) = syn::parse_file(&text) else {
                continue;
            };
            let rel = path
                .strip_prefix(root)
                .unwrap_or(&path)
                .to_string_lossy()
                .replace('\\', "/");
            let lines: Vec<&str> = text.lines().collect();
            index.file_lines.insert(rel.clone(), lines.len() as u32);
            let mut push = |name: String, span: proc_macro2::Span| {
                let (start, end) = (span.start().line as u32, span.end().line as u32);
                if start == 0 || end < start {
                    return;
                }
                let body = lines
                    .get(start as usize - 1..(end as usize).min(lines.len()))
                    .map(|l| l.join("\n"))
                    .unwrap_or_default();
                index.functions.push(FunctionBlock {
                    file: rel.clone(),
                    words: words(&format!("{name} {body}")),
                    name,
                    start,
                    end,
                });
            };
            collect_fns(&file.items, None, &mut push);
        }
        Ok(index)
    }

    /// The `k` functions whose words best match the report (Okapi BM25, k1 = 1.2, b = 0.75).
    pub fn bm25(&self, report: &str, k: usize) -> Vec<DiagnosedBlock> {
        self.ranked(report)
            .into_iter()
            .take(k)
            .map(block_of)
            .collect()
    }

    /// The shotgun: the `files` files that hold BM25's best-matching functions, each as one
    /// whole-file block, then every function of those files (files in that order, functions in
    /// line order), as many as a diagnosis may name.
    pub fn everything(&self, report: &str, files: usize) -> Vec<DiagnosedBlock> {
        let mut top: Vec<&str> = Vec::new();
        for f in self.ranked(report) {
            if top.len() == files {
                break;
            }
            if !top.contains(&f.file.as_str()) {
                top.push(&f.file);
            }
        }
        let whole = top.iter().filter_map(|file| {
            let lines = *self.file_lines.get(*file)?;
            (lines > 0).then(|| DiagnosedBlock {
                file: file.to_string(),
                start_line: 1,
                end_line: lines,
                symbol: None,
                explanation: None,
            })
        });
        let functions = top
            .iter()
            .flat_map(|file| self.functions.iter().filter(move |f| f.file == *file))
            .map(block_of);
        whole.chain(functions).take(MAX_DIAGNOSIS_BLOCKS).collect()
    }

    /// Every function that shares a word with the report, best BM25 match first.
    fn ranked(&self, report: &str) -> Vec<&FunctionBlock> {
        let query: BTreeSet<String> = words(report).into_iter().collect();
        let n = self.functions.len() as f64;
        if n == 0.0 || query.is_empty() {
            return Vec::new();
        }
        let avg = self.functions.iter().map(|f| f.words.len()).sum::<usize>() as f64 / n;
        let mut df: BTreeMap<&str, f64> = BTreeMap::new();
        for f in &self.functions {
            let unique: BTreeSet<&str> = f.words.iter().map(String::as_str).collect();
            for w in unique {
                if query.contains(w) {
                    *df.entry(w).or_insert(0.0) += 1.0;
                }
            }
        }
        let mut scored: Vec<(f64, &FunctionBlock)> = self
            .functions
            .iter()
            .map(|f| {
                let len = f.words.len() as f64;
                let mut tf: BTreeMap<&str, f64> = BTreeMap::new();
                for w in &f.words {
                    if query.contains(w) {
                        *tf.entry(w.as_str()).or_insert(0.0) += 1.0;
                    }
                }
                let score = tf
                    .iter()
                    .map(|(w, t)| {
                        let d = df[w];
                        let idf = ((n - d + 0.5) / (d + 0.5) + 1.0).ln();
                        idf * t * 2.2 / (t + 1.2 * (0.25 + 0.75 * len / avg))
                    })
                    .sum::<f64>();
                (score, f)
            })
            .filter(|(s, _)| *s > 0.0)
            .collect();
        scored.sort_by(|a, b| {
            b.0.total_cmp(&a.0)
                .then(a.1.file.cmp(&b.1.file))
                .then(a.1.start.cmp(&b.1.start))
        });
        scored.into_iter().map(|(_, f)| f).collect()
    }

    /// Functions that file:line locations or function paths in the report point at, in the
    /// order they appear.
    pub fn from_traces(&self, report: &str, k: usize) -> Vec<DiagnosedBlock> {
        static LOCATION: LazyLock<Regex> =
            LazyLock::new(|| Regex::new(r"([\w./-]+\.rs):(\d+)").expect("valid regex"));
        static PATH: LazyLock<Regex> = LazyLock::new(|| {
            Regex::new(r"\b(?:[A-Za-z_]\w*::)+([A-Za-z_]\w*)\b").expect("valid regex")
        });
        let mut found: Vec<&FunctionBlock> = Vec::new();
        fn add<'a>(f: &'a FunctionBlock, found: &mut Vec<&'a FunctionBlock>) {
            if !found.iter().any(|g| std::ptr::eq(*g, f)) {
                found.push(f);
            }
        }
        for line in report.lines() {
            for c in LOCATION.captures_iter(line) {
                let path = &c[1];
                let Ok(no) = c[2].parse::<u32>() else {
                    continue;
                };
                let hit = self
                    .functions
                    .iter()
                    .filter(|f| path.ends_with(&f.file) && f.start <= no && no <= f.end)
                    .min_by_key(|f| f.end - f.start);
                if let Some(f) = hit {
                    add(f, &mut found);
                }
            }
            for c in PATH.captures_iter(line) {
                let path: Vec<&str> = c[0].split("::").collect();
                for f in self.functions.iter().filter(|f| path_names(&path, &f.name)) {
                    add(f, &mut found);
                }
            }
        }
        found.into_iter().take(k).map(block_of).collect()
    }
}

/// Whether a path from a report (`raft::Raft::new`, split at `::`) names the function `name`
/// (`Type::method`, or a free function's name): the path ends with the type and the method, so
/// `Raft::new` names no other type's `new`; a free function is named only by a path whose
/// segment before it is a module, not a type.
fn path_names(path: &[&str], name: &str) -> bool {
    let segments: Vec<&str> = name.split("::").collect();
    if !path.ends_with(&segments) {
        return false;
    }
    segments.len() > 1
        || path
            .len()
            .checked_sub(2)
            .is_none_or(|owner| !path[owner].starts_with(|c: char| c.is_ascii_uppercase()))
}

fn block_of(f: &FunctionBlock) -> DiagnosedBlock {
    DiagnosedBlock {
        file: f.file.clone(),
        start_line: f.start,
        end_line: f.end,
        symbol: Some(f.name.clone()),
        explanation: None,
    }
}

fn walk_rs(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk_rs(&p));
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
    out
}

fn type_name(ty: &syn::Type) -> String {
    match ty {
        syn::Type::Path(p) => p
            .path
            .segments
            .last()
            .map(|s| s.ident.to_string())
            .unwrap_or_default(),
        _ => "impl".into(),
    }
}

fn collect_fns(
    items: &[syn::Item],
    owner: Option<&str>,
    push: &mut dyn FnMut(String, proc_macro2::Span),
) {
    use syn::spanned::Spanned;
    for item in items {
        match item {
            syn::Item::Fn(f) => push(qualified(owner, &f.sig.ident), f.span()),
            syn::Item::Impl(i) => {
                let ty = type_name(&i.self_ty);
                for it in &i.items {
                    if let syn::ImplItem::Fn(m) = it {
                        push(qualified(Some(&ty), &m.sig.ident), m.span());
                    }
                }
            }
            syn::Item::Trait(t) => {
                for it in &t.items {
                    if let syn::TraitItem::Fn(m) = it
                        && m.default.is_some()
                    {
                        push(
                            qualified(Some(&t.ident.to_string()), &m.sig.ident),
                            m.span(),
                        );
                    }
                }
            }
            syn::Item::Mod(m) => {
                if let Some((_, inner)) = &m.content {
                    collect_fns(inner, owner, push);
                }
            }
            _ => {}
        }
    }
}

fn qualified(owner: Option<&str>, ident: &syn::Ident) -> String {
    match owner {
        Some(o) => format!("{o}::{ident}"),
        None => ident.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn crate_dir() -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(d.path().join("src")).unwrap();
        std::fs::write(
            d.path().join("src/lib.rs"),
            "pub struct Ledger;\n\nimpl Ledger {\n    pub fn apply_delete(&mut self) {\n        let pending = 1;\n    }\n\n    pub fn snapshot(&self) -> u32 {\n        assert!(true, \"snapshot id must grow\");\n        3\n    }\n}\n\nfn unrelated() {}\n",
        )
        .unwrap();
        d
    }

    #[test]
    fn functions_are_indexed_with_their_lines() {
        let d = crate_dir();
        let idx = FunctionIndex::build(d.path()).unwrap();
        let names: Vec<_> = idx
            .functions
            .iter()
            .map(|f| (f.name.as_str(), f.start, f.end))
            .collect();
        assert_eq!(
            names,
            [
                ("Ledger::apply_delete", 4, 6),
                ("Ledger::snapshot", 8, 11),
                ("unrelated", 14, 14)
            ]
        );
    }

    #[test]
    fn bm25_ranks_by_the_report_words() {
        let d = crate_dir();
        let idx = FunctionIndex::build(d.path()).unwrap();
        let top = idx.bm25("After a snapshot, the snapshot id did not grow", 1);
        assert_eq!(top[0].symbol.as_deref(), Some("Ledger::snapshot"));
        assert!(idx.bm25("", 3).is_empty());
    }

    #[test]
    fn everything_names_the_top_files_whole_then_their_functions() {
        let d = crate_dir();
        std::fs::write(
            d.path().join("src/growth.rs"),
            "fn grow() {\n    let x = 1;\n}\n",
        )
        .unwrap();
        std::fs::write(d.path().join("src/quiet.rs"), "fn silent() {}\n").unwrap();
        let idx = FunctionIndex::build(d.path()).unwrap();
        let blocks = idx.everything("the snapshot id did not grow", 3);
        let named: Vec<_> = blocks
            .iter()
            .map(|b| (b.file.as_str(), b.start_line, b.end_line))
            .collect();
        assert_eq!(
            named,
            [
                ("src/lib.rs", 1, 14),
                ("src/growth.rs", 1, 3),
                ("src/lib.rs", 4, 6),
                ("src/lib.rs", 8, 11),
                ("src/lib.rs", 14, 14),
                ("src/growth.rs", 1, 3),
            ]
        );
        assert!(idx.everything("", 3).is_empty());
    }

    #[test]
    fn everything_stops_at_the_most_blocks_a_diagnosis_may_name() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(d.path().join("src")).unwrap();
        let text: String = (0..80).map(|i| format!("fn grow_{i}() {{}}\n")).collect();
        std::fs::write(d.path().join("src/lib.rs"), text).unwrap();
        let idx = FunctionIndex::build(d.path()).unwrap();
        let blocks = idx.everything("grow", 3);
        assert_eq!(blocks.len(), MAX_DIAGNOSIS_BLOCKS);
        assert_eq!((blocks[0].start_line, blocks[0].end_line), (1, 80));
    }

    #[test]
    fn traces_point_at_functions() {
        let d = crate_dir();
        let idx = FunctionIndex::build(d.path()).unwrap();
        let report = "thread 'main' panicked at /home/u/.cargo/registry/src/x/ledger-0.1.0/src/lib.rs:9:9\n  3: ledger::Ledger::apply_delete";
        let blocks = idx.from_traces(report, 3);
        let names: Vec<_> = blocks.iter().map(|b| b.symbol.clone().unwrap()).collect();
        assert_eq!(names, ["Ledger::snapshot", "Ledger::apply_delete"]);
        assert!(idx.from_traces("no trace here", 3).is_empty());
    }

    #[test]
    fn a_method_path_names_that_types_method_only() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(d.path().join("src")).unwrap();
        std::fs::write(
            d.path().join("src/lib.rs"),
            "pub struct Raft;\nimpl Raft {\n    pub fn new() -> Self {\n        Raft\n    }\n}\n\
             pub struct Log;\nimpl Log {\n    pub fn new() -> Self {\n        Log\n    }\n}\n\
             pub fn new() {}\npub fn step() {}\n",
        )
        .unwrap();
        let idx = FunctionIndex::build(d.path()).unwrap();
        let names = |report| -> Vec<String> {
            idx.from_traces(report, 5)
                .iter()
                .map(|b| b.symbol.clone().unwrap())
                .collect()
        };
        assert_eq!(names("calling Raft::new twice"), ["Raft::new"]);
        assert_eq!(names("  4: raft::Raft::new"), ["Raft::new"]);
        assert_eq!(names("  7: raft::core::step"), ["step"]);
        assert_eq!(names("  7: raft::new"), ["new"]);
        assert!(names("Peer::new").is_empty());
    }

    #[test]
    fn words_split_identifiers() {
        assert_eq!(
            words("applyDelete pending_ds X"),
            ["apply", "delete", "pending", "ds"]
        );
    }
}
