//! What of a submitted patch the grader applies.
//!
//! A repair is a change to the crate's source files. Everything else a patch touches is dropped
//! and reported: tests, manifests, build scripts, lockfiles, paths outside the crate, and binary
//! changes. A change to a source file may only create, change or
//! delete a regular file there: a section that would make a symbolic link or any other kind of
//! file, change a file's mode, or rename or copy a file into or out of `src/` is refused, and
//! the whole patch with it (see [`refusal`]). After the patch is applied, source files whose
//! existing tests it changed or removed are put back as they were (see [`check_tests_kept`]).

use faultline_corpus::gold::is_source_path;
use quote::ToTokens;
use std::collections::BTreeMap;

/// One file's section of a unified diff.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FilePatch {
    /// Path relative to the crate root (the new side's, or the old side's for a deletion).
    pub path: String,
    /// The section's text, headers included.
    pub text: String,
    /// Whether the section is a binary change.
    pub binary: bool,
}

/// Splits a unified diff (git style or plain `---`/`+++`) into per-file sections.
pub fn split_patch(patch: &str) -> Vec<FilePatch> {
    let mut sections: Vec<Vec<&str>> = Vec::new();
    let lines: Vec<&str> = patch.split_inclusive('\n').collect();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        let starts_git = line.starts_with("diff --git ");
        let starts_plain = line.starts_with("--- ")
            && lines.get(i + 1).is_some_and(|n| n.starts_with("+++ "))
            && !sections.last().is_some_and(|s| {
                s.first().is_some_and(|h| h.starts_with("diff --git "))
                    && !s.iter().any(|l| l.starts_with("@@"))
            });
        if starts_git || starts_plain || sections.is_empty() {
            sections.push(Vec::new());
        }
        sections.last_mut().expect("pushed above").push(line);
        i += 1;
    }
    sections
        .into_iter()
        .filter_map(|s| {
            let text: String = s.concat();
            let path = section_path(&s)?;
            let binary = s
                .iter()
                .any(|l| l.starts_with("GIT binary patch") || l.starts_with("Binary files "));
            Some(FilePatch { path, text, binary })
        })
        .collect()
}

fn strip_side(p: &str) -> Option<String> {
    let p = p.trim_end_matches(['\n', '\r']).split('\t').next()?.trim();
    if p == "/dev/null" {
        return None;
    }
    let p = p
        .strip_prefix("a/")
        .or_else(|| p.strip_prefix("b/"))
        .unwrap_or(p);
    Some(p.to_string())
}

fn section_path(lines: &[&str]) -> Option<String> {
    let new = lines
        .iter()
        .find_map(|l| l.strip_prefix("+++ "))
        .and_then(strip_side);
    let old = lines
        .iter()
        .find_map(|l| l.strip_prefix("--- "))
        .and_then(strip_side);
    new.or(old).or_else(|| {
        let header = lines.first()?.strip_prefix("diff --git ")?;
        let b = header.split(" b/").nth(1)?;
        Some(b.trim().to_string())
    })
}

/// The sections to apply and the dropped ones with reasons.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Filtered {
    /// The patch to apply.
    pub patch: String,
    /// Paths applied.
    pub applied: Vec<String>,
    /// `path: reason` for every dropped section.
    pub dropped: Vec<String>,
    /// `path: reason` for every refused section; any makes the patch a `patch_error`.
    pub refused: Vec<String>,
}

/// The mode of a regular file as git writes it; an executable one is `100755`.
const REGULAR: &str = "100644";

/// Why a section that changes a source file must not be applied, if it must not: it asks for
/// something other than creating, changing or deleting a regular file under `src/`. Those are a
/// symbolic link or any other kind of file (git modes `120000`, `160000`, ...), an executable,
/// a change of mode, or a rename or copy whose other side is not a source file. Every name the
/// section gives (git's header, `---`/`+++`, `rename`/`copy` lines) must be a source file too.
pub fn refusal(section: &FilePatch) -> Option<String> {
    let what = |mode: &str| match mode {
        "120000" => "a symbolic link".to_string(),
        "160000" => "a submodule".to_string(),
        "100755" => "an executable file".to_string(),
        other => format!("a file of mode {other}"),
    };
    let regular = |mode: &str| mode == REGULAR || mode == "100755";
    let mut names = Vec::new();
    for line in section.text.lines().map(str::trim_end) {
        if line.starts_with("@@") {
            break;
        }
        if let Some(rest) = line.strip_prefix("diff --git ") {
            if let Some((a, b)) = rest.split_once(" b/") {
                names.push(a.strip_prefix("a/").unwrap_or(a).to_string());
                names.push(b.to_string());
            }
        } else if let Some(side) = line
            .strip_prefix("--- ")
            .or_else(|| line.strip_prefix("+++ "))
        {
            names.extend(strip_side(side));
        } else if line.starts_with("old mode ") || line.starts_with("new mode ") {
            return Some("changes a file's mode".into());
        } else if let Some(mode) = line.strip_prefix("new file mode ") {
            if mode != REGULAR {
                return Some(format!("creates {}", what(mode)));
            }
        } else if let Some(mode) = line.strip_prefix("deleted file mode ") {
            if !regular(mode) {
                return Some(format!("deletes {}", what(mode)));
            }
        } else if let Some(name) = ["rename from ", "rename to ", "copy from ", "copy to "]
            .iter()
            .find_map(|k| line.strip_prefix(k))
        {
            names.push(name.to_string());
        } else if let Some((_, mode)) = line
            .strip_prefix("index ")
            .and_then(|rest| rest.split_once(' '))
            && !regular(mode)
        {
            return Some(format!("changes {}", what(mode)));
        }
    }
    names.iter().find(|n| !is_source_path(n)).map(|n| {
        format!("also names {n}, which is not a source file (renames and copies stay in src/)")
    })
}

/// Keeps the sections that change the crate's source files.
pub fn filter_patch(patch: &str) -> Filtered {
    let mut out = Filtered::default();
    for section in split_patch(patch) {
        let reason = if section.binary {
            Some("binary change")
        } else if section.path.starts_with('/') || section.path.split('/').any(|p| p == "..") {
            Some("outside the crate")
        } else if !is_source_path(&section.path) {
            Some(
                "not a source file (tests, manifests, build scripts and lockfiles are not part of a repair)",
            )
        } else if let Some(why) = refusal(&section) {
            out.refused.push(format!("{}: {why}", section.path));
            continue;
        } else if !section.text.contains("\n@@") && !section.text.starts_with("@@") {
            Some("no change hunks")
        } else {
            None
        };
        match reason {
            Some(r) => out.dropped.push(format!("{}: {r}", section.path)),
            None => {
                out.applied.push(section.path.clone());
                out.patch.push_str(&section.text);
                if !out.patch.ends_with('\n') {
                    out.patch.push('\n');
                }
            }
        }
    }
    out
}

/// Whether the patched text of a source file keeps every test of the original: each `#[test]`
/// function and each item inside a `#[cfg(test)]` module must still be there, unchanged (new ones
/// may be added). Returns the names of tests that were changed or removed. A file that does not
/// parse is compared as text.
pub fn check_tests_kept(original: &str, patched: &str) -> Vec<String> {
    let (Ok(old), Ok(new)) = (syn::parse_file(original), syn::parse_file(patched)) else {
        return Vec::new();
    };
    let before = test_items(&old.items);
    let after = test_items(&new.items);
    let mut missing = Vec::new();
    for (key, count) in &before {
        if after.get(key).copied().unwrap_or(0) < *count {
            missing.push(key.0.clone());
        }
    }
    missing.sort();
    missing.dedup();
    // Name the test functions when any changed; a changed module header or helper item is
    // reported only when nothing more specific is.
    let functions: Vec<String> = missing
        .iter()
        .filter(|l| !l.ends_with("(item)") && !l.starts_with("mod "))
        .cloned()
        .collect();
    if functions.is_empty() {
        missing
    } else {
        functions
    }
}

/// The patched text with every top-level test item (anything under `#[cfg(test)]`, and
/// `#[test]` functions) taken from `reference` instead: the patch's changes to tests are dropped,
/// its other changes kept. The reference's test items go at the end of the file. `None` when
/// either text does not parse or tests nested deeper would still differ; the caller then keeps
/// the whole reference file.
pub fn restore_tests(reference: &str, patched: &str) -> Option<String> {
    let old = syn::parse_file(reference).ok()?;
    let new = syn::parse_file(patched).ok()?;
    let drop = top_level_test_lines(&new.items);
    let mut out = String::new();
    for (i, line) in patched.split_inclusive('\n').enumerate() {
        if !drop.iter().any(|(a, b)| (*a..=*b).contains(&(i + 1))) {
            out.push_str(line);
        }
    }
    let reference_lines: Vec<&str> = reference.split_inclusive('\n').collect();
    for (a, b) in top_level_test_lines(&old.items) {
        if !out.ends_with('\n') {
            out.push('\n');
        }
        out.push('\n');
        for line in reference_lines.get(a - 1..b)? {
            out.push_str(line);
        }
    }
    if !out.ends_with('\n') {
        out.push('\n');
    }
    check_tests_kept(reference, &out).is_empty().then_some(out)
}

/// 1-based inclusive line ranges of the top-level test items, attributes and doc comments
/// included.
fn top_level_test_lines(items: &[syn::Item]) -> Vec<(usize, usize)> {
    items
        .iter()
        .filter(|item| {
            let attrs = item_attrs(item);
            has_cfg_test(attrs) || matches!(item, syn::Item::Fn(_)) && is_test_fn(attrs)
        })
        .filter_map(|item| {
            let tokens: Vec<_> = item.to_token_stream().into_iter().collect();
            let first = tokens.first()?.span().start().line;
            let last = tokens.last()?.span().end().line;
            Some((first, last))
        })
        .collect()
}

fn item_attrs(item: &syn::Item) -> &[syn::Attribute] {
    use syn::Item;
    match item {
        Item::Const(i) => &i.attrs,
        Item::Enum(i) => &i.attrs,
        Item::ExternCrate(i) => &i.attrs,
        Item::Fn(i) => &i.attrs,
        Item::ForeignMod(i) => &i.attrs,
        Item::Impl(i) => &i.attrs,
        Item::Macro(i) => &i.attrs,
        Item::Mod(i) => &i.attrs,
        Item::Static(i) => &i.attrs,
        Item::Struct(i) => &i.attrs,
        Item::Trait(i) => &i.attrs,
        Item::TraitAlias(i) => &i.attrs,
        Item::Type(i) => &i.attrs,
        Item::Union(i) => &i.attrs,
        Item::Use(i) => &i.attrs,
        _ => &[],
    }
}

type TestKey = (String, String);

/// (label, tokens) -> count of every item in test context.
fn test_items(items: &[syn::Item]) -> BTreeMap<TestKey, usize> {
    let mut out = BTreeMap::new();
    collect(items, "", false, &mut out);
    out
}

fn collect(items: &[syn::Item], path: &str, in_test: bool, out: &mut BTreeMap<TestKey, usize>) {
    for item in items {
        let tokens = item.to_token_stream().to_string();
        match item {
            syn::Item::Mod(m) => {
                let name = format!("{path}{}", m.ident);
                let test_mod = in_test || has_cfg_test(&m.attrs);
                if test_mod && m.content.is_none() {
                    *out.entry((format!("mod {name}"), tokens)).or_insert(0) += 1;
                }
                if let Some((_, inner)) = &m.content {
                    if test_mod {
                        let header = format!("mod {name}");
                        *out.entry((header, attrs_of(&m.attrs))).or_insert(0) += 1;
                    }
                    collect(inner, &format!("{name}::"), test_mod, out);
                }
            }
            syn::Item::Fn(f) if in_test || is_test_fn(&f.attrs) => {
                *out.entry((format!("{path}{}", f.sig.ident), tokens))
                    .or_insert(0) += 1;
            }
            _ if in_test => {
                *out.entry((format!("{path}(item)"), tokens)).or_insert(0) += 1;
            }
            _ => {}
        }
    }
}

fn attrs_of(attrs: &[syn::Attribute]) -> String {
    attrs
        .iter()
        .map(|a| a.to_token_stream().to_string())
        .collect::<Vec<_>>()
        .join(" ")
}

fn has_cfg_test(attrs: &[syn::Attribute]) -> bool {
    attrs
        .iter()
        .any(|a| a.path().is_ident("cfg") && a.to_token_stream().to_string().contains("test"))
}

fn is_test_fn(attrs: &[syn::Attribute]) -> bool {
    attrs
        .iter()
        .any(|a| a.path().segments.last().is_some_and(|s| s.ident == "test"))
}

#[cfg(test)]
mod tests {
    use super::*;

    const PATCH: &str = "diff --git a/src/lib.rs b/src/lib.rs\n--- a/src/lib.rs\n+++ b/src/lib.rs\n@@ -1 +1 @@\n-a\n+b\n\
diff --git a/Cargo.toml b/Cargo.toml\n--- a/Cargo.toml\n+++ b/Cargo.toml\n@@ -1 +1 @@\n-x\n+y\n\
diff --git a/tests/t.rs b/tests/t.rs\ndeleted file mode 100644\n--- a/tests/t.rs\n+++ /dev/null\n@@ -1 +0,0 @@\n-t\n\
diff --git a/src/faultline_oracle.rs b/src/faultline_oracle.rs\nnew file mode 100644\n--- /dev/null\n+++ b/src/faultline_oracle.rs\n@@ -0,0 +1 @@\n+x\n\
diff --git a/src/logo.png b/src/logo.png\nGIT binary patch\nliteral 3\nabc\n";

    #[test]
    fn only_source_changes_are_kept() {
        let f = filter_patch(PATCH);
        // The in-crate oracle has no fixed place (its module name is drawn per grade), so that
        // file is just a new source file that nothing compiles.
        assert_eq!(f.applied, ["src/lib.rs", "src/faultline_oracle.rs"]);
        assert_eq!(f.dropped.len(), 3, "{:?}", f.dropped);
        assert!(f.dropped[0].starts_with("Cargo.toml: not a source file"));
        assert!(f.dropped[1].starts_with("tests/t.rs"));
        assert!(f.dropped[2].contains("binary"));
        assert!(f.patch.starts_with("diff --git a/src/lib.rs") && f.patch.ends_with("+x\n"));
    }

    #[test]
    fn plain_diffs_without_git_headers_are_split() {
        let p = "--- a/src/a.rs\n+++ b/src/a.rs\n@@ -1 +1 @@\n-a\n+b\n--- a/build.rs\n+++ b/build.rs\n@@ -1 +1 @@\n-a\n+b\n";
        let f = filter_patch(p);
        assert_eq!(f.applied, ["src/a.rs"]);
        assert_eq!(f.dropped.len(), 1);
    }

    #[test]
    fn only_regular_files_under_src_may_be_made() {
        let refused = |p: &str| filter_patch(p).refused;
        let symlink = "diff --git a/src/lib.rs b/src/lib.rs\ndeleted file mode 100644\n--- a/src/lib.rs\n+++ /dev/null\n@@ -1 +0,0 @@\n-a\n\
diff --git a/src/lib.rs b/src/lib.rs\nnew file mode 120000\n--- /dev/null\n+++ b/src/lib.rs\n@@ -0,0 +1 @@\n+/etc/passwd\n\\ No newline at end of file\n";
        let f = filter_patch(symlink);
        assert_eq!(f.refused, ["src/lib.rs: creates a symbolic link"]);
        assert_eq!(f.applied, ["src/lib.rs"], "the deletion alone would apply");
        let changed_link = "diff --git a/src/l.rs b/src/l.rs\nindex 1111111..2222222 120000\n--- a/src/l.rs\n+++ b/src/l.rs\n@@ -1 +1 @@\n-/a\n+/b\n";
        assert_eq!(refused(changed_link), ["src/l.rs: changes a symbolic link"]);
        let mode = "diff --git a/src/lib.rs b/src/lib.rs\nold mode 100644\nnew mode 100755\n";
        assert_eq!(refused(mode), ["src/lib.rs: changes a file's mode"]);
        let executable = "diff --git a/src/x.rs b/src/x.rs\nnew file mode 100755\n--- /dev/null\n+++ b/src/x.rs\n@@ -0,0 +1 @@\n+x\n";
        assert_eq!(
            refused(executable),
            ["src/x.rs: creates an executable file"]
        );
        let into_src = "diff --git a/tests/t.rs b/src/t.rs\nsimilarity index 90%\nrename from tests/t.rs\nrename to src/t.rs\n--- a/tests/t.rs\n+++ b/src/t.rs\n@@ -1 +1 @@\n-a\n+b\n";
        let r = refused(into_src);
        assert_eq!(r.len(), 1);
        assert!(
            r[0].contains("tests/t.rs, which is not a source file"),
            "{r:?}"
        );
        let out_of_src = "diff --git a/src/a.rs b/tests/a.rs\nsimilarity index 100%\nrename from src/a.rs\nrename to tests/a.rs\n";
        assert_eq!(filter_patch(out_of_src).applied, Vec::<String>::new());
        let crlf = "diff --git a/src/y.rs b/src/y.rs\r\nnew file mode 100644\r\n--- /dev/null\r\n+++ b/src/y.rs\r\n@@ -0,0 +1 @@\r\n+y\r\n";
        assert!(refused(crlf).is_empty());

        // Within src/, renames and deletions of regular files are repairs like any other.
        let within = "diff --git a/src/a.rs b/src/b.rs\nsimilarity index 90%\nrename from src/a.rs\nrename to src/b.rs\n--- a/src/a.rs\n+++ b/src/b.rs\n@@ -1 +1 @@\n-a\n+b\n";
        assert_eq!(filter_patch(within).applied, ["src/b.rs"]);
        let gone = "diff --git a/src/a.rs b/src/a.rs\ndeleted file mode 100755\n--- a/src/a.rs\n+++ /dev/null\n@@ -1 +0,0 @@\n-a\n";
        assert_eq!(filter_patch(gone).applied, ["src/a.rs"]);
        // Outside src/ nothing is applied anyway: a link or a mode there is only dropped.
        let outside = "diff --git a/tests/l.rs b/tests/l.rs\nnew file mode 120000\n--- /dev/null\n+++ b/tests/l.rs\n@@ -0,0 +1 @@\n+/etc/passwd\n\
diff --git a/build.rs b/build.rs\nold mode 100644\nnew mode 100755\n";
        let f = filter_patch(outside);
        assert!(f.refused.is_empty() && f.applied.is_empty(), "{f:?}");
        assert_eq!(f.dropped.len(), 2);
    }

    const ORIGINAL: &str = "fn merge() {}\n#[cfg(test)]\nmod tests {\n    use super::*;\n    #[test]\n    fn a() { assert!(true); }\n}\n";

    #[test]
    fn adding_tests_is_fine_and_changing_them_is_not() {
        let fixed = ORIGINAL.replace("fn merge() {}", "fn merge() { let _x = 1; }");
        assert!(check_tests_kept(ORIGINAL, &fixed).is_empty());
        let added = ORIGINAL.replace(
            "    #[test]\n    fn a()",
            "    #[test]\n    fn b() {}\n    #[test]\n    fn a()",
        );
        assert!(check_tests_kept(ORIGINAL, &added).is_empty());
        let edited = ORIGINAL.replace("assert!(true)", "assert!(1 == 1)");
        assert_eq!(check_tests_kept(ORIGINAL, &edited), ["tests::a"]);
        let removed = ORIGINAL.replace("    #[test]\n    fn a() { assert!(true); }\n", "");
        assert_eq!(check_tests_kept(ORIGINAL, &removed), ["tests::a"]);
        let uncfg = ORIGINAL.replace("#[cfg(test)]\n", "#[cfg(any())]\n");
        assert!(!check_tests_kept(ORIGINAL, &uncfg).is_empty());
        let reformatted = ORIGINAL.replace(
            "fn a() { assert!(true); }",
            "fn a() {\n        assert!(true);\n    }",
        );
        assert!(check_tests_kept(ORIGINAL, &reformatted).is_empty());
    }

    #[test]
    fn changes_to_tests_are_dropped_and_the_rest_of_the_file_kept() {
        let patched = ORIGINAL
            .replace("fn merge() {}", "fn merge() { let _fixed = 1; }")
            .replace("assert!(true)", "assert!(1 + 1 == 2)");
        let restored = restore_tests(ORIGINAL, &patched).unwrap();
        assert!(restored.contains("let _fixed = 1;"), "{restored}");
        assert!(restored.contains("assert!(true)"), "{restored}");
        assert!(!restored.contains("1 + 1 == 2"), "{restored}");
        assert!(check_tests_kept(ORIGINAL, &restored).is_empty());
        syn::parse_file(&restored).unwrap();
    }

    #[test]
    fn deleted_tests_come_back() {
        let patched = "fn merge() { let _fixed = 1; }\n";
        let restored = restore_tests(ORIGINAL, patched).unwrap();
        assert!(restored.contains("let _fixed = 1;"));
        assert!(restored.contains("fn a()"));
    }

    #[test]
    fn nested_test_changes_are_not_restored_piecemeal() {
        let original = "mod inner {\n    #[test]\n    fn a() { assert!(true); }\n}\n";
        let patched = original.replace("assert!(true)", "");
        assert_eq!(restore_tests(original, &patched), None);
    }
}
