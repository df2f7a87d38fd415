//! The `static` provider: a deterministic reading of the buggy crate led by the symptom alone.
//! It finds the functions that the symptom's code identifiers name and that hold the messages it
//! quotes, and lists each with its signature, its callers and its callees. It knows nothing of
//! the fix, the oracle or the labels: what it finds is what the symptom and the code give away.

use faultline_agent::baselines::localize::{FunctionBlock, FunctionIndex};
use faultline_corpus::BundleFile;
use faultline_corpus::tokens;
use regex::Regex;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::LazyLock;

/// Changes whenever the output for the same input may change; part of the cache key.
pub const STATIC_PROVIDER_VERSION: &str = "static-1";

/// The bundle file this provider writes.
pub const STATIC_FILE: &str = "static-analysis.md";

/// Tokens the provider stops adding at, leaving room under the bundle budget.
const TOKEN_TARGET: usize = 1_200;
/// Functions the symptom leads to that are listed.
const MAX_SEEDS: usize = 6;
/// Callers and callees listed per function.
const MAX_NEIGHBOURS: usize = 6;
/// Quoted text shorter than this is too generic to search the code for.
const MIN_QUOTE: usize = 8;

static IDENT_PATH: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"\b[A-Za-z_][A-Za-z0-9_]*(?:::[A-Za-z_][A-Za-z0-9_]*)*\b").expect("valid regex")
});
static QUOTED: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r#""([^"\n]+)"|`([^`\n]+)`"#).expect("valid regex"));
static CALL: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"\b([A-Za-z_][A-Za-z0-9_]*)\s*\(").expect("valid regex"));

/// Whether a word reads as code rather than prose: a path, snake_case or CamelCase.
fn looks_like_code(word: &str) -> bool {
    let camel = word.chars().next().is_some_and(char::is_uppercase)
        && word.chars().skip(1).any(char::is_lowercase)
        && word.chars().skip(1).any(char::is_uppercase);
    word.contains("::") || (word.contains('_') && word.len() > 3) || camel
}

/// Why a function is listed.
enum Lead {
    Message(String),
    Name(String),
}

/// The bundle for one crate (its root holds `src/`) and symptom.
pub fn analyze(crate_root: &Path, symptom: &str) -> anyhow::Result<Vec<BundleFile>> {
    let index = FunctionIndex::build(crate_root)?;
    let mut texts: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for f in &index.functions {
        if !texts.contains_key(f.file.as_str()) {
            let text = std::fs::read_to_string(crate_root.join(&f.file)).unwrap_or_default();
            texts.insert(&f.file, text.lines().map(str::to_string).collect());
        }
    }
    let body = |f: &FunctionBlock| -> String {
        texts
            .get(f.file.as_str())
            .and_then(|l| l.get(f.start as usize - 1..(f.end as usize).min(l.len())))
            .map(|l| l.join("\n"))
            .unwrap_or_default()
    };

    let mut seeds: Vec<(usize, Lead)> = Vec::new();
    let add = |i: usize, lead: Lead, seeds: &mut Vec<(usize, Lead)>| {
        if seeds.len() < MAX_SEEDS && !seeds.iter().any(|(j, _)| *j == i) {
            seeds.push((i, lead));
        }
    };
    for c in QUOTED.captures_iter(symptom) {
        let quote = c.get(1).or(c.get(2)).map_or("", |m| m.as_str()).trim();
        if quote.len() < MIN_QUOTE || !quote.contains(' ') {
            continue;
        }
        for (i, f) in index.functions.iter().enumerate() {
            if body(f).contains(quote) {
                add(i, Lead::Message(quote.to_string()), &mut seeds);
            }
        }
    }
    let identifiers: BTreeSet<&str> = IDENT_PATH
        .find_iter(symptom)
        .map(|m| m.as_str())
        .filter(|w| looks_like_code(w))
        .collect();
    for ident in &identifiers {
        let (ty, name) = match ident.rsplit_once("::") {
            Some((ty, name)) => (ty.rsplit("::").next(), name),
            None => (None, *ident),
        };
        for (i, f) in index.functions.iter().enumerate() {
            let (f_ty, f_name) = match f.name.rsplit_once("::") {
                Some((t, n)) => (Some(t), n),
                None => (None, f.name.as_str()),
            };
            let matches = match ty {
                Some(ty) => f_ty == Some(ty) && f_name == name,
                None => f_name == name,
            };
            if matches {
                add(i, Lead::Name(ident.to_string()), &mut seeds);
            }
        }
    }

    let mut out = String::from(
        "# Static analysis of the crate, led by the symptom\n\n\
         Written by faultline's `static` provider from the symptom's code identifiers and quoted \
         messages and a parse of the crate's `src/`. It does not know the fix; a function listed \
         here is where the symptom's words lead, not necessarily where the bug is.\n",
    );
    if seeds.is_empty() {
        out.push_str(
            "\nNo function of the crate matches an identifier or a message of the symptom. \
             The crate's files and their functions:\n\n",
        );
        let mut by_file: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for f in &index.functions {
            by_file.entry(&f.file).or_default().push(&f.name);
        }
        for (file, names) in by_file {
            let line = format!("- `{file}`: {}\n", names.join(", "));
            if tokens::count(&out) + tokens::count(&line) > TOKEN_TARGET {
                out.push_str("- (more files left out for the token budget)\n");
                break;
            }
            out.push_str(&line);
        }
    }
    for (i, lead) in &seeds {
        let f = &index.functions[*i];
        let text = body(f);
        let signature: String = text
            .lines()
            .take_while(|l| !l.trim_end().ends_with('{'))
            .chain(text.lines().find(|l| l.trim_end().ends_with('{')))
            .take(6)
            .collect::<Vec<_>>()
            .join("\n");
        let last = f.name.rsplit("::").next().unwrap_or(&f.name);
        let callers: Vec<String> = index
            .functions
            .iter()
            .filter(|g| g.name != f.name)
            .filter(|g| CALL.captures_iter(&body(g)).any(|c| &c[1] == last))
            .take(MAX_NEIGHBOURS)
            .map(|g| format!("`{}` ({}:{})", g.name, g.file, g.start))
            .collect();
        let known: BTreeSet<&str> = index
            .functions
            .iter()
            .map(|g| g.name.rsplit("::").next().unwrap_or(&g.name))
            .collect();
        let callees: BTreeSet<String> = CALL
            .captures_iter(&text)
            .map(|c| c[1].to_string())
            .filter(|n| n != last && known.contains(n.as_str()))
            .take(MAX_NEIGHBOURS)
            .collect();
        let why = match lead {
            Lead::Message(m) => {
                format!("its code holds the message \"{m}\" that the symptom quotes")
            }
            Lead::Name(n) => format!("the symptom names `{n}`"),
        };
        let mut section = format!(
            "\n## `{}` ({}:{}-{})\n\nListed because {why}.\n\n```rust\n{signature}\n```\n",
            f.name, f.file, f.start, f.end
        );
        section.push_str(&format!(
            "\n- called by: {}\n- calls: {}\n",
            if callers.is_empty() {
                "no other function of the crate".to_string()
            } else {
                callers.join(", ")
            },
            if callees.is_empty() {
                "no other function of the crate".to_string()
            } else {
                callees
                    .iter()
                    .map(|c| format!("`{c}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            }
        ));
        if tokens::count(&out) + tokens::count(&section) > TOKEN_TARGET {
            out.push_str("\n(Further functions left out for the token budget.)\n");
            break;
        }
        out.push_str(&section);
    }
    Ok(vec![BundleFile {
        name: STATIC_FILE.into(),
        text: out,
    }])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn crate_with(src: &str) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("src")).unwrap();
        std::fs::write(dir.path().join("src/lib.rs"), src).unwrap();
        dir
    }

    const SRC: &str = "pub struct Node;\n\
        impl Node {\n    pub fn handle_ack(&mut self) {\n        self.bump_term();\n    }\n\
        \n    fn bump_term(&mut self) {\n        panic!(\"term went backwards here\");\n    }\n}\n\
        \npub fn drive(n: &mut Node) {\n    n.handle_ack();\n}\n\
        \npub fn unrelated() {}\n";

    #[test]
    fn the_symptom_leads_to_named_functions_their_callers_and_callees() {
        let dir = crate_with(SRC);
        let files = analyze(dir.path(), "After `Node::handle_ack` the node hangs.").unwrap();
        let text = &files[0].text;
        assert!(
            text.contains("## `Node::handle_ack` (src/lib.rs:3-5)"),
            "{text}"
        );
        assert!(
            text.contains("called by: `drive` (src/lib.rs:12)"),
            "{text}"
        );
        assert!(text.contains("calls: `bump_term`"), "{text}");
        assert!(!text.contains("## `unrelated`"), "{text}");
    }

    #[test]
    fn a_quoted_message_leads_to_the_function_that_holds_it() {
        let dir = crate_with(SRC);
        let files = analyze(dir.path(), "It panicked: \"term went backwards here\"").unwrap();
        assert!(
            files[0].text.contains("## `Node::bump_term`"),
            "{}",
            files[0].text
        );
        assert!(files[0].text.contains("called by: `Node::handle_ack`"));
    }

    #[test]
    fn prose_leads_nowhere_and_the_bundle_maps_the_crate_instead() {
        let dir = crate_with(SRC);
        let files = analyze(dir.path(), "the cluster stops making progress").unwrap();
        let text = &files[0].text;
        assert!(!text.contains("## `"), "{text}");
        assert!(text.contains("`src/lib.rs`: Node::handle_ack, Node::bump_term, drive"));
    }

    #[test]
    fn the_output_is_the_same_every_time() {
        let dir = crate_with(SRC);
        let symptom = "`drive` then `Node::handle_ack`";
        assert_eq!(
            analyze(dir.path(), symptom).unwrap(),
            analyze(dir.path(), symptom).unwrap()
        );
    }
}
