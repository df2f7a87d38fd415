//! The wrappers in an oracle's source: finding the oracle's test functions (with their modules
//! and attributes) and appending, inside each module, a module of wrapper tests that call them,
//! real ones and canaries alike, so that nothing in the text tells them apart but their names.

use anyhow::{Context, Result};
use quote::ToTokens;

/// What a wrapper is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Calls an oracle test; its result is the oracle's.
    Oracle,
    /// Calls an oracle test and fails whatever it does; an `ok` from it is forged.
    Canary,
}

/// One generated test of the oracle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wrapper {
    /// The cargo target of the test executable it is compiled into.
    pub target: String,
    /// Its full libtest name, as selected with `--exact`.
    pub name: String,
    /// The oracle test function it calls (its path within its file).
    pub calls: String,
    /// Real or canary.
    pub role: Role,
}

/// A test function found in an oracle file.
#[derive(Debug, Clone)]
pub(super) struct FoundTest {
    pub(super) name: String,
    /// `#[cfg]` attributes, as written.
    pub(super) cfgs: Vec<String>,
    /// The `#[should_panic]` attribute, as written.
    pub(super) should_panic: Option<String>,
}

/// A module of an oracle file (the file itself or an inline module) that holds tests.
#[derive(Debug, Clone)]
pub(super) struct TestModule {
    /// Path of inline modules from the file's root, each followed by `::`.
    pub(super) prefix: String,
    /// Byte offset where the wrapper module goes (before the closing brace, or the file's end).
    insert_at: usize,
    pub(super) tests: Vec<FoundTest>,
}

/// The test functions of one oracle source file, by module. Ignored tests are left out (libtest
/// would not run them either).
pub(super) fn find_tests(source: &str) -> Result<Vec<TestModule>> {
    let file = syn::parse_file(source).context("cannot parse")?;
    let mut out = Vec::new();
    collect_tests(source, &file.items, "", source.len(), &mut out);
    Ok(out)
}

fn collect_tests(
    source: &str,
    items: &[syn::Item],
    prefix: &str,
    insert_at: usize,
    out: &mut Vec<TestModule>,
) {
    let mut here = TestModule {
        prefix: prefix.to_string(),
        insert_at,
        tests: Vec::new(),
    };
    for item in items {
        match item {
            syn::Item::Fn(f) if is_test(&f.attrs) && !has_attr(&f.attrs, "ignore") => {
                here.tests.push(FoundTest {
                    name: f.sig.ident.to_string(),
                    cfgs: attrs_named(&f.attrs, "cfg"),
                    should_panic: attrs_named(&f.attrs, "should_panic").into_iter().next(),
                });
            }
            syn::Item::Mod(m) => {
                if let Some((brace, inner)) = &m.content {
                    let close = brace.span.close().start();
                    if let Some(offset) = byte_offset(source, close.line, close.column) {
                        collect_tests(
                            source,
                            inner,
                            &format!("{prefix}{}::", m.ident),
                            offset,
                            out,
                        );
                    }
                }
            }
            _ => {}
        }
    }
    if !here.tests.is_empty() {
        out.push(here);
    }
}

/// A test function: any attribute whose last path segment is `test` (`#[test]`,
/// `#[tokio::test]` and the like, which all leave a plain function of the same name).
fn is_test(attrs: &[syn::Attribute]) -> bool {
    attrs
        .iter()
        .any(|a| a.path().segments.last().is_some_and(|s| s.ident == "test"))
}

fn has_attr(attrs: &[syn::Attribute], name: &str) -> bool {
    attrs.iter().any(|a| a.path().is_ident(name))
}

fn attrs_named(attrs: &[syn::Attribute], name: &str) -> Vec<String> {
    attrs
        .iter()
        .filter(|a| a.path().is_ident(name))
        .map(|a| a.to_token_stream().to_string())
        .collect()
}

/// The byte offset of a 1-based line and 0-based column counted in characters.
fn byte_offset(source: &str, line: usize, column: usize) -> Option<usize> {
    let start = if line <= 1 {
        0
    } else {
        source
            .match_indices('\n')
            .nth(line - 2)
            .map(|(i, _)| i + 1)?
    };
    let rest = source.get(start..)?;
    match rest.char_indices().nth(column) {
        Some((i, _)) => Some(start + i),
        None => Some(source.len()),
    }
}

/// The names one oracle file's wrappers use.
pub(super) struct FileNames<'a> {
    /// The module every wrapper module is called.
    pub(super) module: &'a str,
    /// The helper that turns a test's return value into a panic.
    pub(super) helper: &'a str,
}

/// One wrapper to write into a test module.
pub(super) struct Planned {
    pub(super) name: String,
    pub(super) calls: String,
    pub(super) role: Role,
    pub(super) attrs: Vec<String>,
}

/// Appends wrapper modules to one oracle source file: a real wrapper for every test and the
/// canaries assigned to it. Returns the new text and the wrappers, named relative to the file.
pub(super) fn wrap_file(
    source: &str,
    modules: &[TestModule],
    names: &FileNames,
    planned: &[Vec<Planned>],
) -> String {
    let mut inserts: Vec<(usize, String)> = modules
        .iter()
        .zip(planned)
        .map(|(m, wrappers)| (m.insert_at, wrapper_module_text(names, wrappers)))
        .collect();
    inserts.sort_by_key(|(at, _)| std::cmp::Reverse(*at));
    let mut text = source.to_string();
    if !text.ends_with('\n') {
        text.push('\n');
    }
    for (at, module) in inserts {
        let at = at.min(text.len());
        text.insert_str(at, &module);
    }
    text
}

fn wrapper_module_text(names: &FileNames, wrappers: &[Planned]) -> String {
    let FileNames { module, helper } = names;
    let mut out = format!(
        "\nmod {module} {{\n    \
         fn {helper}<T: ::std::process::Termination>(result: T) {{\n        \
         if ::std::process::Termination::report(result) != ::std::process::ExitCode::SUCCESS {{\n            \
         panic!(\"the test returned an error\");\n        }}\n    }}\n"
    );
    for w in wrappers {
        out.push_str("\n    #[test]\n");
        for a in &w.attrs {
            out.push_str(&format!("    {a}\n"));
        }
        out.push_str(&format!(
            "    fn {}() {{\n        {helper}(super::{}());\n    }}\n",
            w.name,
            w.calls.rsplit("::").next().unwrap_or(&w.calls)
        ));
    }
    out.push_str("}\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const ORACLE: &str = r#"use std::fmt;

fn helper() -> u32 { 2 }

#[test]
fn adds() {
    assert_eq!(helper(), 2);
}

#[test]
#[ignore]
fn slow() {}

#[tokio::test(flavor = "current_thread")]
async fn returns_result() -> Result<(), String> {
    Ok(())
}

mod nested {
    #[test]
    #[should_panic(expected = "boom")]
    fn panics() {
        panic!("boom — ünïcode");
    }
}
"#;

    #[test]
    fn tests_are_found_with_their_modules_and_attributes() {
        let modules = find_tests(ORACLE).unwrap();
        assert_eq!(modules.len(), 2);
        let nested = &modules[0];
        assert_eq!(nested.prefix, "nested::");
        assert_eq!(nested.tests[0].name, "panics");
        assert!(
            nested.tests[0]
                .should_panic
                .as_deref()
                .unwrap()
                .contains("boom")
        );
        // The wrapper module of `nested` goes right before its closing brace.
        assert_eq!(&ORACLE[nested.insert_at..nested.insert_at + 2], "}\n");
        let top = &modules[1];
        let names: Vec<&str> = top.tests.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["adds", "returns_result"]);
        assert_eq!(top.insert_at, ORACLE.len());
    }

    #[test]
    fn wrapped_source_still_parses_and_calls_every_test() {
        let modules = find_tests(ORACLE).unwrap();
        let planned: Vec<Vec<Planned>> = modules
            .iter()
            .map(|m| {
                m.tests
                    .iter()
                    .map(|t| Planned {
                        name: format!("w_{}", t.name),
                        calls: t.name.clone(),
                        role: Role::Oracle,
                        attrs: t.should_panic.iter().cloned().collect(),
                    })
                    .collect()
            })
            .collect();
        let names = FileNames {
            module: "m",
            helper: "h",
        };
        let text = wrap_file(ORACLE, &modules, &names, &planned);
        let file = syn::parse_file(&text).unwrap();
        assert!(
            text.contains("fn w_adds() {\n        h(super::adds());"),
            "{text}"
        );
        assert!(text.contains("h(super::returns_result());"), "{text}");
        assert!(
            text.contains("should_panic (expected = \"boom\")"),
            "{text}"
        );
        // The nested module's wrappers are inside it, so they reach its private test.
        let nested = file
            .items
            .iter()
            .find_map(|i| match i {
                syn::Item::Mod(m) if m.ident == "nested" => m.content.as_ref(),
                _ => None,
            })
            .unwrap();
        assert!(
            nested
                .1
                .iter()
                .any(|i| matches!(i, syn::Item::Mod(m) if m.ident == "m"))
        );
    }

    #[test]
    fn bad_sources_are_errors_not_panics() {
        assert!(find_tests("fn (").is_err());
        assert!(find_tests("").unwrap().is_empty());
        assert_eq!(byte_offset("ab\ncd", 2, 1), Some(4));
        assert_eq!(byte_offset("ab", 9, 0), None);
    }
}
