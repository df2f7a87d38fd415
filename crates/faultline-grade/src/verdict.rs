//! Verdicts that the code under test cannot forge.
//!
//! The patched crate runs in the same process as libtest, so it can print lines shaped like
//! libtest's events and end the process with any status. Printed events and the exit status are
//! therefore only believed within a setup that every grade builds afresh from a seed the
//! operating system provides:
//!
//! - **Random names.** The oracle's tests are not run under their own names. Wrapper tests with
//!   random names call them, from a module appended to a copy of the oracle's source; an in-crate
//!   oracle is compiled as a module with a random name. Nothing a test thread can see names the
//!   oracle.
//! - **One process per wrapper.** Each wrapper runs alone (`--exact NAME`), and its process must
//!   report exactly that test, once. A forger that ends its process only decides that process,
//!   and one that claims tests it was not asked to run is caught.
//! - **Canaries.** Further wrappers, shaped like the real ones and calling the same oracle test
//!   functions (so forging code gets control inside them too), carry a `should_panic` whose
//!   expected message is random: they fail whatever the test function does. A canary that
//!   reports `ok`, or whose process exits with status 0, is proof of forgery. The regression run,
//!   one process over the crate's own tests, gets canaries of its own that must report `failed`.
//!
//! What stays possible is written down in `docs/grading.md`.

use crate::libtest::{RunVerdict, TestReport, TestResult};
use crate::workbench::{TestBinary, Workbench, lib_root};
use anyhow::{Context, Result, bail};
use faultline_corpus::Case;
use faultline_corpus::confined::Confined;
use faultline_corpus::workspace::{GUEST_ORACLE, GUEST_WORKSPACE};
use faultline_schema::OracleKind;
use futures_util::future::join_all;
use quote::ToTokens;
use rand::rngs::ChaCha8Rng;
use rand::{Rng, SeedableRng, TryRng};
use sha2::{Digest, Sha256};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Canary wrappers per oracle test. A forger that cannot tell a canary from a real wrapper, and
/// so forges in some of the processes that run a given test function, passes that test in one
/// run with a probability of at most one in `ORACLE_CANARIES_PER_TEST + 1`, and must do so for
/// every test the bug fails, in every run.
pub const ORACLE_CANARIES_PER_TEST: usize = 3;

/// Canary tests compiled into every regression test executable.
pub const REGRESSION_CANARIES: usize = 2;

/// Length of the random identifiers (a letter, then letters and digits).
const NAME_LEN: usize = 12;

/// Length of a canary's random expected panic message.
const EXPECTED_LEN: usize = 24;

/// Draws a per-grade seed from the operating system's random source.
pub fn fresh_seed() -> Result<u64> {
    rand::rngs::SysRng
        .try_next_u64()
        .context("the operating system's random source failed")
}

/// A ChaCha8 stream for one purpose of one grade, keyed by the SHA-256 of the seed and the
/// purpose, so that each derivation is independent of the order the others are drawn in.
fn stream(seed: u64, purpose: &str) -> ChaCha8Rng {
    let mut h = Sha256::new();
    h.update(seed.to_le_bytes());
    h.update(purpose.as_bytes());
    ChaCha8Rng::from_seed(h.finalize().into())
}

/// A uniform index in `0..n` (multiply-shift with rejection, so a recorded seed replays the same
/// choices whatever a future `rand` does with ranges).
fn below(rng: &mut ChaCha8Rng, n: usize) -> usize {
    let n = u32::try_from(n).unwrap_or(u32::MAX).max(1);
    let threshold = n.wrapping_neg() % n;
    loop {
        let product = u64::from(rng.next_u32()) * u64::from(n);
        if (product as u32) >= threshold {
            return (product >> 32) as usize;
        }
    }
}

/// Shuffles in place (Fisher–Yates).
fn shuffle<T>(rng: &mut ChaCha8Rng, items: &mut [T]) {
    for i in (1..items.len()).rev() {
        items.swap(i, below(rng, i + 1));
    }
}

const LETTERS: &[u8] = b"abcdefghijklmnopqrstuvwxyz";
const ALPHANUMERIC: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";

fn random_text(rng: &mut ChaCha8Rng, len: usize) -> String {
    (0..len)
        .map(|_| ALPHANUMERIC[below(rng, ALPHANUMERIC.len())] as char)
        .collect()
}

/// Random identifiers, never the same twice within one grade.
struct Names {
    rng: ChaCha8Rng,
    taken: BTreeSet<String>,
}

impl Names {
    fn next(&mut self) -> String {
        loop {
            let mut name = String::with_capacity(NAME_LEN);
            name.push(LETTERS[below(&mut self.rng, LETTERS.len())] as char);
            name.push_str(&random_text(&mut self.rng, NAME_LEN - 1));
            if self.taken.insert(name.clone()) {
                return name;
            }
        }
    }
}

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

/// A source file the plan writes into the workbench.
#[derive(Debug, Clone)]
struct PlannedFile {
    /// Path relative to the workbench's crate copy (`in_oracle` false) or oracle copy (true).
    rel: PathBuf,
    in_oracle: bool,
    text: String,
    /// Whether the file holds oracle wrappers, and so is kept out of the sandbox while tests run.
    hidden_while_running: bool,
}

/// Everything one grade draws from its seed: the names, the canaries, the files that hold them.
#[derive(Debug, Clone)]
pub struct VerdictPlan {
    /// The per-grade seed, recorded in the grade.
    pub seed: u64,
    /// The random module name an in-crate oracle is compiled as.
    pub oracle_module: Option<String>,
    /// The random name of every module of wrappers.
    pub wrapper_module: String,
    /// The oracle's wrappers, real and canary.
    pub wrappers: Vec<Wrapper>,
    /// Regression canaries: (cargo target, full test name).
    pub regression_canaries: Vec<(String, String)>,
    files: Vec<PlannedFile>,
    /// Module declarations appended to the library root, if they are not there yet.
    root_lines: Vec<String>,
}

/// A test function found in an oracle file.
#[derive(Debug, Clone)]
struct FoundTest {
    name: String,
    /// `#[cfg]` attributes, as written.
    cfgs: Vec<String>,
    /// The `#[should_panic]` attribute, as written.
    should_panic: Option<String>,
}

/// A module of an oracle file (the file itself or an inline module) that holds tests.
#[derive(Debug, Clone)]
struct TestModule {
    /// Path of inline modules from the file's root, each followed by `::`.
    prefix: String,
    /// Byte offset where the wrapper module goes (before the closing brace, or the file's end).
    insert_at: usize,
    tests: Vec<FoundTest>,
}

/// The test functions of one oracle source file, by module. Ignored tests are left out (libtest
/// would not run them either).
fn find_tests(source: &str) -> Result<Vec<TestModule>> {
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
struct FileNames<'a> {
    /// The module every wrapper module is called.
    module: &'a str,
    /// The helper that turns a test's return value into a panic.
    helper: &'a str,
}

/// One wrapper to write into a test module.
struct Planned {
    name: String,
    calls: String,
    role: Role,
    attrs: Vec<String>,
}

/// Appends wrapper modules to one oracle source file: a real wrapper for every test and the
/// canaries assigned to it. Returns the new text and the wrappers, named relative to the file.
fn wrap_file(
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

/// An oracle source file to wrap: its text, where the wrapped copy goes, and the cargo target
/// its tests are compiled into.
struct OracleSource {
    text: String,
    rel: PathBuf,
    in_oracle: bool,
    target: String,
    /// Prefix of its tests' libtest names (the in-crate module's name and `::`, or nothing).
    name_prefix: String,
}

impl VerdictPlan {
    /// Draws a plan from `seed` for a case whose grading copy is `bench`: parses the oracle's
    /// sources to find its tests, and names every wrapper, canary and module.
    pub fn new(seed: u64, case: &Case, bench: &Workbench) -> Result<VerdictPlan> {
        let mut names = Names {
            rng: stream(seed, "names"),
            taken: BTreeSet::new(),
        };
        let lib_target = case.manifest.source.crate_name().replace('-', "_");
        let mut sources = Vec::new();
        let mut oracle_module = None;
        let mut root_lines = Vec::new();
        match case.manifest.oracle.kind {
            OracleKind::InCrate => {
                let module = names.next();
                let root = lib_root(bench.files())?;
                let dir = root.parent().map(Path::to_path_buf).unwrap_or_default();
                let path = case.oracle_dir().join("oracle.rs");
                sources.push(OracleSource {
                    text: std::fs::read_to_string(&path)
                        .with_context(|| format!("reading {}", path.display()))?,
                    rel: dir.join(format!("{module}.rs")),
                    in_oracle: false,
                    target: lib_target.clone(),
                    name_prefix: format!("{module}::"),
                });
                root_lines.push(format!(
                    "#[cfg(test)]\n#[path = \"{module}.rs\"]\nmod {module};"
                ));
                oracle_module = Some(module);
            }
            OracleKind::External => {
                let oracle = bench
                    .oracle
                    .as_ref()
                    .context("this case has no external oracle package")?;
                let oracle = Confined::open(oracle)?;
                let files: Vec<PathBuf> = oracle
                    .read_dir("tests")
                    .context("listing the oracle's tests")?
                    .into_iter()
                    .map(|e| Path::new("tests").join(e.name))
                    .filter(|p| oracle.is_file(p) && p.extension().is_some_and(|x| x == "rs"))
                    .collect();
                for path in files {
                    let stem = path
                        .file_stem()
                        .map(|s| s.to_string_lossy().into_owned())
                        .unwrap_or_default();
                    sources.push(OracleSource {
                        text: oracle
                            .read_to_string(&path)
                            .with_context(|| format!("reading {}", path.display()))?,
                        rel: PathBuf::from("tests").join(format!("{stem}.rs")),
                        in_oracle: true,
                        target: stem,
                        name_prefix: String::new(),
                    });
                }
            }
        }
        let wrapper_module = names.next();
        let helper = names.next();
        let file_names = FileNames {
            module: &wrapper_module,
            helper: &helper,
        };
        let mut found = Vec::new();
        for s in &sources {
            let modules = find_tests(&s.text)
                .with_context(|| format!("reading the oracle's tests in {}", s.rel.display()))?;
            found.push(modules);
        }
        // Every oracle test gets one real wrapper and the same number of canaries, so a forger
        // that fires only inside one test function meets canaries there too.
        if found.iter().all(|modules| modules.is_empty()) {
            bail!("the oracle has no tests to run");
        }
        let mut canary_rng = stream(seed, "canaries");
        let mut planned: Vec<Vec<Vec<Planned>>> = Vec::new();
        for modules in &found {
            let mut per_module = Vec::new();
            for module in modules {
                let mut here = Vec::new();
                for test in &module.tests {
                    let calls = format!("{}{}", module.prefix, test.name);
                    let mut attrs = test.cfgs.clone();
                    attrs.extend(test.should_panic.clone());
                    here.push(Planned {
                        name: names.next(),
                        calls: calls.clone(),
                        role: Role::Oracle,
                        attrs,
                    });
                    for _ in 0..ORACLE_CANARIES_PER_TEST {
                        let mut attrs = test.cfgs.clone();
                        attrs.push(format!(
                            "#[should_panic(expected = \"{}\")]",
                            random_text(&mut canary_rng, EXPECTED_LEN)
                        ));
                        here.push(Planned {
                            name: names.next(),
                            calls: calls.clone(),
                            role: Role::Canary,
                            attrs,
                        });
                    }
                }
                per_module.push(here);
            }
            planned.push(per_module);
        }
        let mut order_rng = stream(seed, "source order");
        let mut files = Vec::new();
        let mut wrappers = Vec::new();
        for (f, s) in sources.iter().enumerate() {
            for (m, module) in planned[f].iter_mut().enumerate() {
                shuffle(&mut order_rng, module);
                for w in module.iter() {
                    wrappers.push(Wrapper {
                        target: s.target.clone(),
                        name: format!(
                            "{}{}{wrapper_module}::{}",
                            s.name_prefix, found[f][m].prefix, w.name
                        ),
                        calls: w.calls.clone(),
                        role: w.role,
                    });
                }
            }
            files.push(PlannedFile {
                rel: s.rel.clone(),
                in_oracle: s.in_oracle,
                text: wrap_file(&s.text, &found[f], &file_names, &planned[f]),
                hidden_while_running: true,
            });
        }
        let (regression_files, regression_canaries, regression_root) =
            regression_canaries(seed, case, bench, &mut names, &lib_target)?;
        files.extend(regression_files);
        root_lines.extend(regression_root);
        Ok(VerdictPlan {
            seed,
            oracle_module,
            wrapper_module,
            wrappers,
            regression_canaries,
            files,
            root_lines,
        })
    }

    /// The libtest `--skip` filters the regression run adds (the in-crate oracle's module).
    pub fn regression_skip(&self) -> Vec<String> {
        self.oracle_module
            .iter()
            .map(|m| format!("{m}::"))
            .collect()
    }

    /// The regression canaries compiled into a cargo target.
    pub fn canaries_of(&self, target: &str) -> Vec<String> {
        self.regression_canaries
            .iter()
            .filter(|(t, _)| t == target)
            .map(|(_, n)| n.clone())
            .collect()
    }

    /// Writes the plan into a workbench: the wrapped oracle sources and the regression canaries,
    /// and the module declarations at the end of the library root. Safe to repeat: a declaration
    /// already there is not added again (a test swap may have removed it, see
    /// [`Workbench::take_tests_from`]).
    pub fn inject(&self, bench: &Workbench) -> Result<()> {
        let oracle = bench.oracle.as_deref().map(Confined::open).transpose()?;
        for f in &self.files {
            let tree = if f.in_oracle {
                oracle
                    .as_ref()
                    .context("this case has no external oracle package")?
            } else {
                bench.files()
            };
            let current = tree.read_to_string(&f.rel).ok();
            if current.as_deref() != Some(f.text.as_str()) {
                tree.write(&f.rel, f.text.as_bytes())
                    .with_context(|| format!("writing {}", f.rel.display()))?;
            }
        }
        let root = lib_root(bench.files())?;
        let mut text = bench.files().read_to_string(&root)?;
        let mut changed = false;
        for line in &self.root_lines {
            if !text.contains(line.as_str()) {
                if !text.ends_with('\n') {
                    text.push('\n');
                }
                text.push('\n');
                text.push_str(line);
                text.push('\n');
                changed = true;
            }
        }
        if changed {
            bench.files().write(&root, text.as_bytes())?;
        }
        Ok(())
    }

    /// The files holding oracle wrappers (host paths), kept out of the sandbox while tests run so
    /// that no test can read which wrappers are canaries.
    pub fn hidden_sources(&self, bench: &Workbench) -> Vec<PathBuf> {
        self.files
            .iter()
            .filter(|f| f.hidden_while_running)
            .filter_map(|f| {
                let base = if f.in_oracle {
                    bench.oracle.as_ref()?
                } else {
                    &bench.workspace
                };
                Some(base.join(&f.rel))
            })
            .collect()
    }
}

type RegressionParts = (Vec<PlannedFile>, Vec<(String, String)>, Vec<String>);

/// Canaries for each regression target: an inline module at the end of the library root and of
/// each integration test file the case runs. Their names never match a `--skip` filter.
fn regression_canaries(
    seed: u64,
    case: &Case,
    bench: &Workbench,
    names: &mut Names,
    lib_target: &str,
) -> Result<RegressionParts> {
    let skips = &case.manifest.regression.skip;
    let mut rng = stream(seed, "regression canaries");
    let mut module = names.next();
    while skips
        .iter()
        .any(|s| !s.is_empty() && format!("{module}::").contains(s.as_str()))
    {
        module = names.next();
    }
    let mut files = Vec::new();
    let mut canaries = Vec::new();
    let mut root = Vec::new();
    let mut body = |target: &str, canaries: &mut Vec<(String, String)>| {
        let mut text = format!("mod {module} {{\n");
        for _ in 0..REGRESSION_CANARIES {
            let mut name = names.next();
            while skips
                .iter()
                .any(|s| !s.is_empty() && format!("{module}::{name}").contains(s.as_str()))
            {
                name = names.next();
            }
            text.push_str(&format!(
                "    #[test]\n    fn {name}() {{\n        panic!(\"{}\");\n    }}\n",
                random_text(&mut rng, EXPECTED_LEN)
            ));
            canaries.push((target.to_string(), format!("{module}::{name}")));
        }
        text.push('}');
        format!("#[cfg(test)]\n{text}")
    };
    for target in &case.manifest.regression.targets {
        match target.strip_prefix("test:") {
            None => root.push(body(lib_target, &mut canaries)),
            Some(name) => {
                let rel = test_target_path(bench.files(), name)?;
                let original = bench
                    .files()
                    .read_to_string(&rel)
                    .with_context(|| format!("reading {}", rel.display()))?;
                let mut text = original;
                if !text.ends_with('\n') {
                    text.push('\n');
                }
                text.push('\n');
                text.push_str(&body(name, &mut canaries));
                text.push('\n');
                files.push(PlannedFile {
                    rel,
                    in_oracle: false,
                    text,
                    hidden_while_running: false,
                });
            }
        }
    }
    Ok((files, canaries, root))
}

/// The root file of an integration test target: a `[[test]]` entry's `path`, else
/// `tests/<name>.rs` or `tests/<name>/main.rs`.
fn test_target_path(workspace: &Confined, name: &str) -> Result<PathBuf> {
    let manifest: toml::Table = workspace
        .read_to_string("Cargo.toml")?
        .parse()
        .context("parsing Cargo.toml")?;
    let declared = manifest
        .get("test")
        .and_then(|t| t.as_array())
        .into_iter()
        .flatten()
        .find(|t| t.get("name").and_then(|n| n.as_str()) == Some(name))
        .and_then(|t| t.get("path"))
        .and_then(|p| p.as_str())
        .map(PathBuf::from);
    let candidates = declared.into_iter().chain([
        PathBuf::from("tests").join(format!("{name}.rs")),
        PathBuf::from("tests").join(name).join("main.rs"),
    ]);
    for c in candidates {
        if workspace.is_file(&c) {
            return Ok(c);
        }
    }
    bail!("the crate has no integration test `{name}`")
}

/// How one process's events and exit status are judged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Judged {
    /// An honest run with this verdict (for a canary: it failed, crashed or hung, as it may).
    Verdict(RunVerdict),
    /// The output was forged; why we know.
    Forged(String),
}

/// Names the events mention other than `expected`.
fn others<'a>(report: &'a TestReport, expected: &[&str]) -> Vec<&'a str> {
    report
        .tests
        .keys()
        .chain(report.unfinished.iter())
        .map(String::as_str)
        .filter(|n| !expected.contains(n))
        .collect()
}

fn list(names: &[&str]) -> String {
    let shown: Vec<String> = names.iter().take(3).map(|n| format!("`{n}`")).collect();
    let more = names.len().saturating_sub(3);
    if more > 0 {
        format!("{} and {more} more", shown.join(", "))
    } else {
        shown.join(", ")
    }
}

/// Judges the process that ran one wrapper alone (`--exact`).
pub fn judge_wrapper(
    report: &TestReport,
    exit_code: Option<i32>,
    timed_out: bool,
    name: &str,
    role: Role,
) -> Judged {
    if let Some(c) = report.contradictions.first() {
        return Judged::Forged(format!(
            "the events of `{name}`'s run contradict themselves: {c}"
        ));
    }
    let foreign = others(report, &[name]);
    if !foreign.is_empty() {
        return Judged::Forged(format!(
            "the run of `{name}` reported tests it was not asked to run ({})",
            list(&foreign)
        ));
    }
    match role {
        Role::Oracle => Judged::Verdict(crate::libtest::judge(report, exit_code, timed_out)),
        Role::Canary => {
            let nothing_ran = report.tests.is_empty()
                && report.unfinished.is_empty()
                && report.suite.is_some_and(|s| s.passed == 0 && s.failed == 0);
            if report.tests.get(name) == Some(&TestResult::Ok) {
                Judged::Forged(format!(
                    "`{name}`, which fails whatever happens, reported `ok`"
                ))
            } else if nothing_ran {
                // Compiled out (a `#[cfg]` of the test it calls): nothing can be judged.
                Judged::Verdict(RunVerdict::NoTests)
            } else if exit_code == Some(0) {
                Judged::Forged(format!(
                    "the run of `{name}`, which fails whatever happens, exited with status 0"
                ))
            } else {
                Judged::Verdict(crate::libtest::judge(report, exit_code, timed_out))
            }
        }
    }
}

/// Judges a regression run, whose `canaries` must all report `failed`: libtest then exits with
/// status 101, so status 0 is forged too. The verdict is the other tests'.
pub fn judge_regression(
    report: &TestReport,
    exit_code: Option<i32>,
    timed_out: bool,
    canaries: &[String],
) -> Judged {
    if let Some(c) = report.contradictions.first() {
        return Judged::Forged(format!("the events contradict themselves: {c}"));
    }
    if let Some(c) = canaries
        .iter()
        .find(|c| report.tests.get(*c) == Some(&TestResult::Ok))
    {
        return Judged::Forged(format!(
            "`{c}`, which fails whatever happens, reported `ok`"
        ));
    }
    if !canaries.is_empty() && exit_code == Some(0) {
        return Judged::Forged(
            "the run exited with status 0 although tests in it fail whatever happens".into(),
        );
    }
    if timed_out {
        return Judged::Verdict(RunVerdict::Timeout);
    }
    if report.suite.is_some()
        && let Some(c) = canaries
            .iter()
            .find(|c| !matches!(report.tests.get(*c), Some(TestResult::Failed { .. })))
    {
        return Judged::Forged(format!(
            "the run finished without `{c}`, which fails whatever happens, reporting `failed`"
        ));
    }
    let mut rest = report.clone();
    for c in canaries {
        rest.tests.remove(c);
        rest.unfinished.retain(|u| u != c);
    }
    if let Some(s) = rest.suite.as_mut() {
        s.failed = s.failed.saturating_sub(canaries.len() as u32);
    }
    let honest_exit = if canaries.is_empty() {
        exit_code
    } else {
        // Every canary failed, so libtest's own status is 101 whatever the other tests did.
        match exit_code {
            Some(101) => Some(0),
            other => other,
        }
    };
    let any_failed = rest
        .tests
        .values()
        .any(|r| matches!(r, TestResult::Failed { .. }));
    Judged::Verdict(if any_failed {
        RunVerdict::Fail
    } else {
        crate::libtest::judge(&rest, honest_exit, false)
    })
}

/// The oracle's verdict for one seed, over all its wrappers.
#[derive(Debug, Clone)]
pub struct OracleVerdict {
    /// The verdict: the first real wrapper's non-pass, or `tampered` with [`Self::reason`].
    pub verdict: RunVerdict,
    /// Why, for verdicts other than a pass.
    pub reason: Option<String>,
    /// Wall-clock seconds of all the processes.
    pub wall_secs: f64,
    /// Seconds libtest measured, summed (absent when a run did not finish).
    pub test_secs: Option<f64>,
}

/// Runs every wrapper of the plan in its own process, in an order drawn for this seed, and judges
/// them together. As many processes run at once as libtest would have run the oracle's tests at
/// once (one per test, up to the number of processors), so the machine is no busier than before.
/// Stops at the first forgery and at the first hang.
pub async fn run_oracle(
    bench: &Workbench,
    binaries: &[TestBinary],
    plan: &VerdictPlan,
    seed: u64,
    timeout: Duration,
) -> Result<OracleVerdict> {
    let mut order: Vec<&Wrapper> = plan.wrappers.iter().collect();
    shuffle(&mut stream(plan.seed, &format!("order {seed}")), &mut order);
    let package_root = match plan.oracle_module {
        Some(_) => GUEST_WORKSPACE,
        None => GUEST_ORACLE,
    };
    let tests = plan
        .wrappers
        .iter()
        .filter(|w| w.role == Role::Oracle)
        .count();
    let processors = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut out = OracleVerdict {
        verdict: RunVerdict::Pass,
        reason: None,
        wall_secs: 0.0,
        test_secs: Some(0.0),
    };
    for batch in order.chunks(tests.min(processors).max(1)) {
        let mut runnable = Vec::new();
        for w in batch {
            match binaries
                .iter()
                .find(|b| b.target == w.target && b.cwd == package_root)
            {
                Some(bin) => runnable.push((*w, bin)),
                None if w.role == Role::Oracle && out.verdict == RunVerdict::Pass => {
                    out.verdict = RunVerdict::NoTests;
                    out.reason = Some(format!("no test executable for `{}`", w.target));
                }
                None => {}
            }
        }
        let runs = join_all(
            runnable
                .iter()
                .map(|(w, bin)| bench.run_exact(bin, &w.name, seed, timeout)),
        )
        .await;
        let mut hung = false;
        for ((w, _), run) in runnable.into_iter().zip(runs) {
            let run = run?;
            out.wall_secs += run.wall_secs;
            out.test_secs = match (out.test_secs, run.report.suite.and_then(|s| s.exec_time)) {
                (Some(a), Some(b)) => Some(a + b),
                _ => None,
            };
            let judged = judge_wrapper(&run.report, run.exit_code, run.timed_out, &w.name, w.role);
            let verdict = match judged {
                Judged::Forged(why) => {
                    out.verdict = RunVerdict::Tampered;
                    out.reason = Some(why);
                    return Ok(out);
                }
                Judged::Verdict(v) => v,
            };
            let first_failure = out.verdict == RunVerdict::Pass;
            match (w.role, verdict) {
                (Role::Oracle, v) if v != RunVerdict::Pass && first_failure => {
                    out.verdict = v;
                    out.reason = Some(format!("in `{}`", w.calls));
                }
                (Role::Canary, RunVerdict::NoTests) if first_failure => {
                    out.verdict = RunVerdict::NoTests;
                    out.reason = Some(format!(
                        "a canary of `{}` is not in the test executable",
                        w.calls
                    ));
                }
                _ => {}
            }
            // A hang ends the run: the oracle is deterministic, so the real wrapper of a test
            // whose canary hangs would hang too. A process that claimed a pass and then hung
            // does not, so that the canaries can speak.
            if run.timed_out && run.report.tests.get(&w.name) != Some(&TestResult::Ok) {
                hung = true;
                if out.verdict == RunVerdict::Pass {
                    out.verdict = RunVerdict::Timeout;
                    out.reason = Some(format!("`{}` ran out of time", w.calls));
                }
            }
        }
        if hung {
            return Ok(out);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::libtest::parse;

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
    fn a_seed_draws_the_same_names_and_order_every_time() {
        let draw = |seed| {
            let mut names = Names {
                rng: stream(seed, "names"),
                taken: BTreeSet::new(),
            };
            let mut v: Vec<String> = (0..5).map(|_| names.next()).collect();
            shuffle(&mut stream(seed, "order 1"), &mut v);
            v
        };
        assert_eq!(draw(7), draw(7));
        assert_ne!(draw(7), draw(8));
        for n in draw(7) {
            assert_eq!(n.len(), NAME_LEN);
            assert!(n.chars().next().unwrap().is_ascii_lowercase());
            assert!(
                n.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
            );
        }
        let mut rng = stream(1, "x");
        let mut counts = [0u32; 3];
        for _ in 0..3000 {
            counts[below(&mut rng, 3)] += 1;
        }
        assert!(counts.iter().all(|&c| c > 900), "{counts:?}");
    }

    #[test]
    fn bad_sources_are_errors_not_panics() {
        assert!(find_tests("fn (").is_err());
        assert!(find_tests("").unwrap().is_empty());
        assert_eq!(byte_offset("ab\ncd", 2, 1), Some(4));
        assert_eq!(byte_offset("ab", 9, 0), None);
    }

    fn events(lines: &[&str]) -> TestReport {
        parse(&lines.join("\n"))
    }

    const STARTED: &str = r#"{ "type": "suite", "event": "started", "test_count": 1 }"#;

    fn started(name: &str) -> String {
        format!(r#"{{ "type": "test", "event": "started", "name": "{name}" }}"#)
    }

    fn result(name: &str, event: &str) -> String {
        format!(r#"{{ "type": "test", "name": "{name}", "event": "{event}" }}"#)
    }

    fn suite(event: &str, passed: u32, failed: u32) -> String {
        format!(
            r#"{{ "type": "suite", "event": "{event}", "passed": {passed}, "failed": {failed}, "ignored": 0, "measured": 0, "filtered_out": 4 }}"#
        )
    }

    #[test]
    fn a_wrapper_passes_only_alone_and_a_canary_never() {
        let ok = events(&[
            STARTED,
            &started("m::a"),
            &result("m::a", "ok"),
            &suite("ok", 1, 0),
        ]);
        let j = |r: &TestReport, code, role| judge_wrapper(r, code, false, "m::a", role);
        assert_eq!(
            j(&ok, Some(0), Role::Oracle),
            Judged::Verdict(RunVerdict::Pass)
        );
        assert!(matches!(j(&ok, Some(0), Role::Canary), Judged::Forged(_)));
        let failed = events(&[
            STARTED,
            &started("m::a"),
            &result("m::a", "failed"),
            &suite("failed", 0, 1),
        ]);
        assert_eq!(
            j(&failed, Some(101), Role::Canary),
            Judged::Verdict(RunVerdict::Fail)
        );
        // A canary process that ends with status 0 and no events at all was cut short.
        let nothing = events(&[STARTED, &started("m::a")]);
        assert!(matches!(
            j(&nothing, Some(0), Role::Canary),
            Judged::Forged(_)
        ));
        assert_eq!(
            j(&nothing, None, Role::Canary),
            Judged::Verdict(RunVerdict::Crash)
        );
        // Claiming every test of the executable.
        let claimed = events(&[
            STARTED,
            &started("m::a"),
            &started("m::b"),
            &result("m::a", "ok"),
            &result("m::b", "ok"),
            &suite("ok", 2, 0),
        ]);
        assert!(matches!(
            j(&claimed, Some(0), Role::Oracle),
            Judged::Forged(w) if w.contains("`m::b`")
        ));
    }

    #[test]
    fn a_regression_run_needs_its_canaries_to_fail() {
        let canaries = vec!["c::x".to_string()];
        let honest = events(&[
            STARTED,
            &started("t::one"),
            &started("c::x"),
            &result("t::one", "ok"),
            &result("c::x", "failed"),
            &suite("failed", 1, 1),
        ]);
        let j = |r: &TestReport, code| judge_regression(r, code, false, &canaries);
        assert_eq!(j(&honest, Some(101)), Judged::Verdict(RunVerdict::Pass));
        assert!(matches!(j(&honest, Some(0)), Judged::Forged(_)));
        let one_failed = events(&[
            STARTED,
            &started("t::one"),
            &started("c::x"),
            &result("t::one", "failed"),
            &result("c::x", "failed"),
            &suite("failed", 0, 2),
        ]);
        assert_eq!(j(&one_failed, Some(101)), Judged::Verdict(RunVerdict::Fail));
        // Ended early with everything claimed.
        let forged = events(&[
            STARTED,
            &started("t::one"),
            &result("t::one", "ok"),
            &suite("ok", 1, 0),
        ]);
        assert!(matches!(j(&forged, Some(0)), Judged::Forged(_)));
        assert!(matches!(j(&forged, Some(101)), Judged::Forged(w) if w.contains("without")));
        // A crash mid-run is a crash.
        let crashed = events(&[STARTED, &started("t::one")]);
        assert_eq!(j(&crashed, None), Judged::Verdict(RunVerdict::Crash));
        let claimed = events(&[
            STARTED,
            &started("t::one"),
            &started("c::x"),
            &result("t::one", "ok"),
            &result("c::x", "ok"),
            &suite("ok", 2, 0),
        ]);
        assert!(matches!(j(&claimed, Some(0)), Judged::Forged(_)));
    }
}
