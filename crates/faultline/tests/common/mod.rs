//! Helpers shared by the tests that drive the real binary on the fixture corpus.

use faultline_schema::ResultRecord;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The fixture corpus (one toy case).
pub fn corpus() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/corpus")
}

/// The binary, on the fixture corpus, with its own data directory.
pub fn faultline(data: &Path) -> Command {
    faultline_on(&corpus(), data)
}

/// The binary on another corpus (a changed copy of the fixtures), with its own data directory.
pub fn faultline_on(corpus: &Path, data: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_faultline"));
    c.arg("--corpus").arg(corpus).env("FAULTLINE_DATA", data);
    c
}

/// The records of a run directory, in file order.
pub fn records(run: &Path) -> Vec<ResultRecord> {
    let text = std::fs::read_to_string(run.join("results.jsonl")).unwrap_or_default();
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("corrupt line {l:?}: {e}")))
        .collect()
}
