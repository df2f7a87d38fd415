//! Baselines: agents that need no model. They bound what a score means: `null` submits nothing,
//! `gold` submits the answer, the two lexical localizers measure how much a report gives away on
//! its own (a diagnosis score they reach is not evidence of reasoning), and `everything` names
//! whole files and all their functions, to show what naming code without choosing earns.
//!
//! The lexical localizers' index of a crate's functions is [`localize`].

pub mod localize;

use anyhow::Result;
use faultline_corpus::gold::TreeDiff;
use faultline_corpus::{BundleFile, Case};
use faultline_schema::Submission;
use faultline_schema::{DiagnosedBlock, Diagnosis, OracleKind, Track};
use localize::FunctionIndex;
use regex::Regex;
use std::fmt;
use std::path::Path;
use std::sync::LazyLock;

/// The baselines.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Baseline {
    /// Submits nothing (an empty diagnosis, an empty patch, no reproducer).
    Null,
    /// Submits the answer: the labeled blocks, the upstream fix, the hidden oracle's test.
    Gold,
    /// Names the functions whose text best matches the report (BM25).
    Bm25,
    /// Names the functions that stack traces and panic locations in the report point at.
    StackTrace,
    /// Names the files holding BM25's best matches, whole, and then every function in them: the
    /// shotgun diagnosis that DistDebug's block coverage rewards without any localization.
    Everything,
}

impl Baseline {
    /// Every baseline.
    pub const ALL: [Baseline; 5] = [
        Baseline::Null,
        Baseline::Gold,
        Baseline::Bm25,
        Baseline::StackTrace,
        Baseline::Everything,
    ];

    /// The name used on the command line and in results.
    pub fn name(self) -> &'static str {
        match self {
            Baseline::Null => "null",
            Baseline::Gold => "gold",
            Baseline::Bm25 => "bm25",
            Baseline::StackTrace => "stacktrace",
            Baseline::Everything => "everything",
        }
    }

    /// Whether the baseline has something to submit on a track.
    pub fn supports(self, track: Track) -> bool {
        match self {
            Baseline::Null | Baseline::Gold => true,
            Baseline::Bm25 | Baseline::StackTrace | Baseline::Everything => {
                track == Track::Diagnose
            }
        }
    }
}

impl fmt::Display for Baseline {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Baseline {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Baseline::ALL
            .into_iter()
            .find(|b| b.name() == s)
            .ok_or_else(|| {
                let names: Vec<&str> = Baseline::ALL.iter().map(|b| b.name()).collect();
                format!(
                    "unknown baseline `{s}`; expected one of {}",
                    names.join(", ")
                )
            })
    }
}

/// Blocks the localizers name, and files the `everything` baseline names.
pub const LOCALIZER_TOP_K: usize = 3;

/// The text a baseline localizes from: what an agent is shown, the symptom and then every
/// file of the condition's bundle (none in `symptom`).
pub fn report_text(symptom: &str, bundle: &[BundleFile]) -> String {
    let mut report = symptom.to_string();
    for f in bundle {
        report.push('\n');
        report.push_str(&f.text);
    }
    report
}

/// The gold diagnosis: the case's labeled blocks, in the order the case lists them.
pub fn gold_blocks(case: &Case) -> Vec<DiagnosedBlock> {
    case.manifest
        .blocks
        .iter()
        .map(|b| DiagnosedBlock {
            file: b.file.clone(),
            start_line: b.start,
            end_line: b.end,
            symbol: b.symbol.clone(),
            explanation: None,
        })
        .collect()
}

/// What a baseline submits for one trial. `report` is what the agent would be shown (the symptom,
/// plus the bundle in the `context` condition); `workspace` the buggy crate.
pub fn submit(
    baseline: Baseline,
    track: Track,
    case: &Case,
    gold: &TreeDiff,
    report: &str,
    workspace: &Path,
) -> Result<Submission> {
    let diagnosis = |blocks: Vec<DiagnosedBlock>| -> Result<Submission> {
        let d = Diagnosis {
            schema_version: 1,
            blocks,
            summary: None,
        };
        Ok(Submission::Diagnosis(serde_json::to_string_pretty(&d)?))
    };
    match (baseline, track) {
        (Baseline::Null, Track::Diagnose) => diagnosis(Vec::new()),
        (Baseline::Null, Track::Repair) => Ok(Submission::Patch(String::new())),
        (Baseline::Null, Track::Reproduce) => Ok(Submission::Reproducer(String::new())),
        (Baseline::Gold, Track::Diagnose) => diagnosis(gold_blocks(case)),
        (Baseline::Gold, Track::Repair) => Ok(Submission::Patch(gold.unified())),
        (Baseline::Gold, Track::Reproduce) => Ok(match case.manifest.oracle.kind {
            // An in-crate oracle uses private items, so it cannot be an integration test.
            OracleKind::InCrate => Submission::None,
            OracleKind::External => first_oracle_test(case)?.map_or(Submission::None, |test| {
                Submission::Reproducer(with_fixed_seed(&test))
            }),
        }),
        (Baseline::Bm25, Track::Diagnose) => {
            let index = FunctionIndex::build(workspace)?;
            diagnosis(index.bm25(report, LOCALIZER_TOP_K))
        }
        (Baseline::StackTrace, Track::Diagnose) => {
            let index = FunctionIndex::build(workspace)?;
            diagnosis(index.from_traces(report, LOCALIZER_TOP_K))
        }
        (Baseline::Everything, Track::Diagnose) => {
            let index = FunctionIndex::build(workspace)?;
            diagnosis(index.everything(report, LOCALIZER_TOP_K))
        }
        _ => Ok(Submission::None),
    }
}

/// The seed the gold reproducer fixes: the one every validation run and every repair's grade
/// starts with, so the oracle is known to fail on the buggy version under it.
const GOLD_REPRODUCER_SEED: u64 = 1;

/// An oracle's test as a legal reproducer. An oracle reads its seed from `FAULTLINE_SEED`, and a
/// reproducer may not read the environment (nor is the variable set where reproducers run), so
/// the read is replaced by a value of the same shape holding [`GOLD_REPRODUCER_SEED`].
fn with_fixed_seed(test: &str) -> String {
    static SEED_READ: LazyLock<Regex> = LazyLock::new(|| {
        Regex::new(r#"(?:::\s*)?std\s*::\s*env\s*::\s*var\s*\(\s*"FAULTLINE_SEED"\s*\)"#)
            .expect("valid regex")
    });
    SEED_READ
        .replace_all(
            test,
            format!("Ok::<String, ()>(String::from(\"{GOLD_REPRODUCER_SEED}\"))").as_str(),
        )
        .into_owned()
}

fn first_oracle_test(case: &Case) -> Result<Option<String>> {
    let dir = case.oracle_dir().join("tests");
    let mut files: Vec<_> = std::fs::read_dir(&dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "rs"))
        .collect();
    files.sort();
    Ok(match files.first() {
        Some(f) => Some(std::fs::read_to_string(f)?),
        None => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gold_reproducer_fixes_the_seed_it_would_read() {
        let oracle = "fn seed() -> u64 {\n    std::env::var(\"FAULTLINE_SEED\").ok().and_then(|s| s.parse().ok()).unwrap_or(7)\n}\nfn other() -> u64 {\n    match :: std :: env :: var ( \"FAULTLINE_SEED\" ) { Ok(s) => s.parse().unwrap(), Err(_) => 7 }\n}\nfn main() { assert_eq!((seed(), other()), (1, 1)); }\n";
        let fixed = with_fixed_seed(oracle);
        assert!(!fixed.contains("env"), "{fixed}");
        // The rewritten reads compile and hold the seed.
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("seed.rs"), &fixed).unwrap();
        let built = std::process::Command::new("rustc")
            .args(["--edition", "2021", "-o"])
            .arg(dir.path().join("seed"))
            .arg(dir.path().join("seed.rs"))
            .output()
            .unwrap();
        assert!(
            built.status.success(),
            "{}",
            String::from_utf8_lossy(&built.stderr)
        );
        let ran = std::process::Command::new(dir.path().join("seed"))
            .status()
            .unwrap();
        assert!(ran.success());
        let other = "fn f() { let _ = std::env::var(\"HOME\"); }";
        assert_eq!(with_fixed_seed(other), other);
    }
}
