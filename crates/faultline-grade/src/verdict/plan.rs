//! The plan of one grade: everything drawn from its seed (module and wrapper names, canaries and
//! their order) and the files that carry it into a workbench, for the oracle's tests and for the
//! regression run's canaries.

use super::names::{EXPECTED_LEN, Names, random_text, shuffle, stream};
use super::wrappers::{FileNames, Planned, Role, Wrapper, find_tests, wrap_file};
use crate::workbench::{Workbench, lib_root};
use anyhow::{Context, Result, bail};
use faultline_corpus::Case;
use faultline_corpus::confined::Confined;
use faultline_schema::{OracleKind, RegressionTarget};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// Canary wrappers per oracle test. A forger that cannot tell a canary from a real wrapper, and
/// so forges in some of the processes that run a given test function, passes that test in one
/// run with a probability of at most one in `ORACLE_CANARIES_PER_TEST + 1`, and must do so for
/// every test the bug fails, in every run.
pub const ORACLE_CANARIES_PER_TEST: usize = 3;

/// Canary tests compiled into every regression test executable.
pub const REGRESSION_CANARIES: usize = 2;

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
    for target in case.manifest.regression.declared() {
        match target {
            RegressionTarget::Lib => root.push(body(lib_target, &mut canaries)),
            RegressionTarget::Test(name) => {
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
