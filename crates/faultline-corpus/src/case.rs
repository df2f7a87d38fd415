//! Loading cases from `corpus/<system>/<case-id>/` and selecting them.

use faultline_schema::{CaseManifest, Category, DecoySpec, OracleKind, Reasoning};
use globset::Glob;
use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};

/// A case loaded from disk: its manifest and the texts an agent may be shown.
#[derive(Debug, Clone)]
pub struct Case {
    /// The parsed `case.toml`.
    pub manifest: CaseManifest,
    /// The case directory.
    pub dir: PathBuf,
    /// `symptom.md`: the user's report.
    pub symptom: String,
    /// `context/*.md`, sorted by file name: the debug-context bundle.
    pub bundle: Vec<BundleFile>,
}

/// One file of a debug-context bundle.
pub use faultline_schema::bundle::BundleFile;

/// A case that could not be loaded, with the file to look at.
#[derive(Debug, Clone)]
pub struct CaseError {
    /// The file or directory at fault.
    pub path: PathBuf,
    /// What is wrong, including line and column for TOML errors.
    pub message: String,
}

impl fmt::Display for CaseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path.display(), self.message)
    }
}

impl std::error::Error for CaseError {}

/// The minimal fix's file name in the case directory.
pub const MINIMAL_FIX_FILE: &str = "fix.diff";

/// The directory of the decoy patches in the case directory.
pub const DECOY_DIR: &str = "decoys";

/// Maximum number of files in a bundle (DDBench: 1 to 3 short Markdown files).
pub const MAX_BUNDLE_FILES: usize = 3;

impl Case {
    /// SHA-256 over the relative path and bytes of every file in the case directory (build
    /// output excluded): everything an agent sees and the grader uses (`case.toml` with its
    /// labels, the symptom, the context bundle, the oracle, the lockfile). The one identity of a
    /// case: a validation row, a run's lock, every grade's inputs and the grade cache's key all
    /// record it, so none of them can outlive a change to the case.
    pub fn content_sha256(&self) -> std::io::Result<String> {
        use sha2::{Digest, Sha256};
        let mut files = Vec::new();
        for entry in walkdir::WalkDir::new(&self.dir)
            .sort_by_file_name()
            .into_iter()
            .filter_entry(|e| e.file_name() != "target")
        {
            let entry = entry.map_err(std::io::Error::other)?;
            if entry.file_type().is_file() {
                files.push(entry.into_path());
            }
        }
        let mut hasher = Sha256::new();
        for file in files {
            let relative = file.strip_prefix(&self.dir).unwrap_or(&file);
            hasher.update(relative.to_string_lossy().as_bytes());
            hasher.update([0]);
            hasher.update(fs::read(&file)?);
        }
        Ok(hex::encode(hasher.finalize()))
    }

    /// Loads a case directory and checks its layout.
    pub fn load(dir: &Path) -> Result<Case, CaseError> {
        let err = |path: PathBuf, message: String| CaseError { path, message };
        let manifest_path = dir.join("case.toml");
        let text = fs::read_to_string(&manifest_path)
            .map_err(|e| err(manifest_path.clone(), format!("cannot read: {e}")))?;
        let manifest = CaseManifest::from_toml(&text)
            .map_err(|e| err(manifest_path.clone(), e.to_string()))?;
        let dir_name = dir.file_name().map(|n| n.to_string_lossy().into_owned());
        if dir_name.as_deref() != Some(manifest.id.as_str()) {
            return Err(err(
                manifest_path,
                format!(
                    "id `{}` does not match the directory name `{}`",
                    manifest.id,
                    dir_name.unwrap_or_default()
                ),
            ));
        }
        let system_dir = dir
            .parent()
            .and_then(|p| p.file_name())
            .map(|n| n.to_string_lossy().into_owned());
        if system_dir.as_deref() != Some(manifest.system.as_str()) {
            return Err(err(
                manifest_path,
                format!(
                    "system `{}` does not match the parent directory `{}`",
                    manifest.system,
                    system_dir.unwrap_or_default()
                ),
            ));
        }
        let symptom_path = dir.join("symptom.md");
        let symptom = fs::read_to_string(&symptom_path)
            .map_err(|e| err(symptom_path.clone(), format!("cannot read: {e}")))?;
        if symptom.trim().is_empty() {
            return Err(err(symptom_path, "the symptom is empty".into()));
        }
        let bundle = load_bundle(&dir.join("context"))?;
        let oracle_dir = dir.join("oracle");
        let needed = match manifest.oracle.kind {
            OracleKind::External => oracle_dir.join("Cargo.toml"),
            OracleKind::InCrate => oracle_dir.join("oracle.rs"),
        };
        if !needed.is_file() {
            return Err(err(
                needed,
                format!(
                    "an oracle of kind `{}` needs this file",
                    match manifest.oracle.kind {
                        OracleKind::External => "external",
                        OracleKind::InCrate => "in-crate",
                    }
                ),
            ));
        }
        let case = Case {
            manifest,
            dir: dir.to_owned(),
            symptom,
            bundle,
        };
        case.check_decoy_files()?;
        Ok(case)
    }

    /// Every declared decoy has its patch, and every patch in `decoys/` is declared, so a decoy
    /// can be neither forgotten by validation nor silently missing.
    fn check_decoy_files(&self) -> Result<(), CaseError> {
        for decoy in &self.manifest.decoys {
            let path = self.decoy_path(decoy);
            if !path.is_file() {
                return Err(CaseError {
                    path,
                    message: format!(
                        "the decoy `{}` declared in case.toml has no patch",
                        decoy.name
                    ),
                });
            }
        }
        let dir = self.dir.join(DECOY_DIR);
        let Ok(entries) = fs::read_dir(&dir) else {
            return Ok(());
        };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let declared = name
                .strip_suffix(".diff")
                .is_some_and(|stem| self.manifest.decoys.iter().any(|d| d.name == stem));
            if !declared {
                return Err(CaseError {
                    path: entry.path(),
                    message: "not a decoy declared in case.toml ([[decoys]] name = \"<name>\" for decoys/<name>.diff)".into(),
                });
            }
        }
        Ok(())
    }

    /// Where the case's minimal fix is, whether or not it exists.
    pub fn minimal_fix_path(&self) -> PathBuf {
        self.dir.join(MINIMAL_FIX_FILE)
    }

    /// Where a decoy's patch is.
    pub fn decoy_path(&self, decoy: &DecoySpec) -> PathBuf {
        self.dir
            .join(DECOY_DIR)
            .join(format!("{}.diff", decoy.name))
    }

    /// The case id.
    pub fn id(&self) -> &str {
        &self.manifest.id
    }

    /// The hidden oracle's directory.
    pub fn oracle_dir(&self) -> PathBuf {
        self.dir.join("oracle")
    }

    /// The committed lockfile for the crate's workspace, when the curator recorded one.
    pub fn lockfile(&self) -> Option<PathBuf> {
        Some(self.dir.join("Cargo.lock")).filter(|p| p.is_file())
    }
}

fn load_bundle(dir: &Path) -> Result<Vec<BundleFile>, CaseError> {
    let err = |message: String| CaseError {
        path: dir.to_owned(),
        message,
    };
    let entries = fs::read_dir(dir).map_err(|e| err(format!("cannot read the bundle: {e}")))?;
    let mut files = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| err(e.to_string()))?;
        let path = entry.path();
        if path.is_file() && path.extension().is_some_and(|e| e == "md") {
            let text = fs::read_to_string(&path).map_err(|e| CaseError {
                path: path.clone(),
                message: format!("cannot read: {e}"),
            })?;
            files.push(BundleFile {
                name: entry.file_name().to_string_lossy().into_owned(),
                text,
            });
        }
    }
    files.sort_by(|a, b| a.name.cmp(&b.name));
    if files.is_empty() || files.len() > MAX_BUNDLE_FILES {
        return Err(err(format!(
            "a bundle holds 1 to {MAX_BUNDLE_FILES} Markdown files; found {}",
            files.len()
        )));
    }
    Ok(files)
}

/// All cases under a corpus root, plus the ones that failed to load.
#[derive(Debug, Default)]
pub struct Corpus {
    /// The corpus root (`corpus/`).
    pub root: PathBuf,
    /// Cases that loaded, sorted by id.
    pub cases: Vec<Case>,
    /// Case directories that did not load.
    pub errors: Vec<CaseError>,
}

/// Which cases a command applies to.
#[derive(Debug, Clone, Default)]
pub struct Selection {
    /// Case ids or glob patterns over ids; empty means all.
    pub patterns: Vec<String>,
    /// Only this system.
    pub system: Option<String>,
    /// Only this category.
    pub category: Option<Category>,
    /// Only this tier.
    pub tier: Option<u8>,
    /// Only cases whose recorded scenario needs two or more nodes.
    pub multi_node: bool,
    /// Only cases whose recorded scenario reasons across this.
    pub across: Option<Reasoning>,
}

impl Corpus {
    /// Loads every `<system>/<case>/case.toml` under `root`.
    pub fn load(root: &Path) -> Result<Corpus, CaseError> {
        let read = |p: &Path| {
            fs::read_dir(p).map_err(|e| CaseError {
                path: p.to_owned(),
                message: format!("cannot read the corpus directory: {e}"),
            })
        };
        let mut corpus = Corpus {
            root: root.to_owned(),
            ..Corpus::default()
        };
        for system in read(root)? {
            let system = system.map_err(|e| CaseError {
                path: root.to_owned(),
                message: e.to_string(),
            })?;
            if !system.path().is_dir() {
                continue;
            }
            for case_dir in read(&system.path())? {
                let Ok(case_dir) = case_dir else { continue };
                let path = case_dir.path();
                if !path.join("case.toml").exists() {
                    continue;
                }
                match Case::load(&path) {
                    Ok(case) => corpus.cases.push(case),
                    Err(e) => corpus.errors.push(e),
                }
            }
        }
        corpus.cases.sort_by(|a, b| a.id().cmp(b.id()));
        let mut seen = std::collections::BTreeSet::new();
        for case in &corpus.cases {
            if !seen.insert(case.id().to_string()) {
                corpus.errors.push(CaseError {
                    path: case.dir.clone(),
                    message: format!("duplicate case id `{}`", case.id()),
                });
            }
        }
        Ok(corpus)
    }

    /// Finds one case by exact id.
    pub fn get(&self, id: &str) -> Option<&Case> {
        self.cases.iter().find(|c| c.id() == id)
    }

    /// The cases matching a selection; an id or pattern that matches nothing is an error.
    pub fn select(&self, sel: &Selection) -> Result<Vec<&Case>, String> {
        let mut matchers = Vec::new();
        for p in &sel.patterns {
            let glob = Glob::new(p).map_err(|e| format!("bad case pattern `{p}`: {e}"))?;
            matchers.push((p, glob.compile_matcher()));
        }
        for (p, m) in &matchers {
            if !self.cases.iter().any(|c| m.is_match(c.id())) {
                return Err(format!("no case matches `{p}`"));
            }
        }
        Ok(self
            .cases
            .iter()
            .filter(|c| matchers.is_empty() || matchers.iter().any(|(_, m)| m.is_match(c.id())))
            .filter(|c| sel.system.as_ref().is_none_or(|s| &c.manifest.system == s))
            .filter(|c| sel.category.is_none_or(|k| c.manifest.category == k))
            .filter(|c| sel.tier.is_none_or(|t| c.manifest.tier == t))
            .filter(|c| {
                let scenario = c.manifest.scenario.as_ref();
                (!sel.multi_node || scenario.is_some_and(|s| s.is_multi_node()))
                    && sel
                        .across
                        .is_none_or(|r| scenario.is_some_and(|s| s.across.contains(&r)))
            })
            .collect())
    }

    /// Reads a suite file (`corpus/suites/<name>.txt`: one case id per line, `#` comments).
    pub fn suite(&self, name: &str) -> Result<Vec<String>, CaseError> {
        let path = self.root.join("suites").join(format!("{name}.txt"));
        let text = fs::read_to_string(&path).map_err(|e| CaseError {
            path: path.clone(),
            message: format!("cannot read the suite: {e}"),
        })?;
        let ids: Vec<String> = text
            .lines()
            .map(|l| l.split('#').next().unwrap_or("").trim())
            .filter(|l| !l.is_empty())
            .map(str::to_string)
            .collect();
        for id in &ids {
            if self.get(id).is_none() {
                return Err(CaseError {
                    path: path.clone(),
                    message: format!("suite names unknown case `{id}`"),
                });
            }
        }
        Ok(ids)
    }
}
