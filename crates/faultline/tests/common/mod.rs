//! Helpers shared by the tests that drive the real binary on the fixture corpus.
#![allow(dead_code)] // Each test binary uses its own share of these helpers.

use faultline_schema::ResultRecord;
use faultline_testkit::fixture_corpus;
use std::path::Path;
use std::process::Command;

/// The binary, on the fixture corpus, with its own data directory.
pub fn faultline(data: &Path) -> Command {
    faultline_on(&fixture_corpus(), data)
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
