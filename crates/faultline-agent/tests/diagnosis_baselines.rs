//! The diagnosis score on the real corpus, from the buggy sources alone (fetched from the package
//! registry through cargo into a data directory; nothing is built): the labeled blocks score
//! exactly 1 on every case, and the shotguns, the 50 largest files named whole and the
//! `everything` baseline, earn full DistDebug block coverage on the smoke suite yet no more than
//! the BM25 localizer. Every test here needs the registry, hence `needs_registry`.

use faultline_agent::baselines::localize::FunctionIndex;
use faultline_agent::baselines::{self, LOCALIZER_TOP_K};
use faultline_corpus::{Case, Corpus, DataDir};
use faultline_grade::diagnosis::score;
use faultline_schema::diagnosis::MAX_DIAGNOSIS_BLOCKS;
use faultline_schema::grade::DiagnosisScores;
use faultline_schema::{Condition, DiagnosedBlock, Diagnosis, Source};
use faultline_testkit::needs::registry;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::LazyLock;

/// The corpus and the buggy tree of every case, fetched once for the whole file (the source
/// store is not meant for concurrent fetches of the same crate). `FAULTLINE_TEST_DATA` reuses a
/// data directory across runs; otherwise a fresh one is filled.
struct Sources {
    corpus: Corpus,
    buggy: BTreeMap<String, PathBuf>,
    _scratch: Option<faultline_testkit::ProcessDir>,
}

static SOURCES: LazyLock<Sources> = LazyLock::new(|| {
    let corpus = Corpus::load(&faultline_testkit::corpus_dir()).unwrap();
    assert!(corpus.errors.is_empty(), "{:?}", corpus.errors);
    let (data, scratch) = match registry::reused_data_dir() {
        Some(d) => (d, None),
        None => {
            let t = faultline_testkit::ProcessDir::new().unwrap();
            (t.path().to_path_buf(), Some(t))
        }
    };
    let store = DataDir::new(data).store();
    let buggy = corpus
        .cases
        .iter()
        .map(|case| {
            let tree = match &case.manifest.source {
                Source::Registry(r) => store.registry_crate(&r.crate_name, &r.buggy, &r.pins),
                _ => store
                    .case_sources(&case.manifest, &case.dir)
                    .map(|s| s.buggy),
            };
            let tree = registry::fetched(case.id(), tree);
            (case.id().to_string(), tree)
        })
        .collect();
    Sources {
        corpus,
        buggy,
        _scratch: scratch,
    }
});

fn scores(case: &Case, blocks: Vec<DiagnosedBlock>) -> DiagnosisScores {
    let diagnosis = Diagnosis {
        schema_version: 1,
        blocks,
        summary: None,
    };
    score(&diagnosis, &case.manifest.blocks, &SOURCES.buggy[case.id()])
}

/// Every `.rs` file of a crate, with its line count.
fn rust_files(root: &Path, dir: &Path, out: &mut Vec<(u32, String)>) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(root, &path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let lines = std::fs::read_to_string(&path).unwrap().lines().count() as u32;
            let rel = path
                .strip_prefix(root)
                .unwrap()
                .to_string_lossy()
                .into_owned();
            out.push((lines, rel));
        }
    }
}

/// The crate's 50 largest source files, each named from its first line to its last.
fn largest_files_whole(root: &Path) -> Vec<DiagnosedBlock> {
    let mut files = Vec::new();
    rust_files(root, root, &mut files);
    files.retain(|(lines, _)| *lines > 0);
    files.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
    files
        .into_iter()
        .take(MAX_DIAGNOSIS_BLOCKS)
        .map(|(lines, file)| DiagnosedBlock {
            file,
            start_line: 1,
            end_line: lines,
            symbol: None,
            explanation: None,
        })
        .collect()
}

/// Scores on sources fetched from the package registry.
mod needs_registry {
    use super::*;

    #[test]
    fn the_labeled_blocks_score_exactly_one_on_every_case() {
        let corpus = &SOURCES.corpus;
        assert!(corpus.cases.len() >= 31, "{} cases", corpus.cases.len());
        for case in &corpus.cases {
            let s = scores(case, baselines::gold_blocks(case));
            assert!(
                s.rejected_blocks.is_empty(),
                "{}: {:?}",
                case.id(),
                s.rejected_blocks
            );
            assert_eq!(
                (s.budgeted_coverage, s.block_coverage, s.block_precision),
                (1.0, 1.0, 1.0),
                "{}",
                case.id()
            );
        }
    }

    #[test]
    fn naming_everything_earns_no_more_than_bm25_on_the_smoke_suite() {
        let corpus = &SOURCES.corpus;
        for id in corpus.suite("smoke").unwrap() {
            let case = corpus.get(&id).unwrap();
            let root = &SOURCES.buggy[case.id()];
            let index = FunctionIndex::build(root).unwrap();
            assert_eq!(
                scores(case, baselines::gold_blocks(case)).budgeted_coverage,
                1.0
            );
            let largest = scores(case, largest_files_whole(root));
            for condition in Condition::classic() {
                let bundle = if condition.has_bundle() {
                    &case.bundle[..]
                } else {
                    &[]
                };
                let report = baselines::report_text(&case.symptom, bundle);
                let bm25 = scores(case, index.bm25(&report, LOCALIZER_TOP_K));
                let everything = scores(case, index.everything(&report, LOCALIZER_TOP_K));
                // The shotguns find every labeled block by DistDebug's measure...
                assert_eq!(largest.block_coverage, 1.0, "{id}");
                assert_eq!(everything.block_coverage, 1.0, "{id} {condition}");
                // ...and earn no more than the localizer by the score that ranks.
                for (name, shotgun) in [("50 largest files", &largest), ("everything", &everything)]
                {
                    assert!(
                        shotgun.budgeted_coverage <= bm25.budgeted_coverage,
                        "{id} {condition}: {name} scores {} and BM25 {}",
                        shotgun.budgeted_coverage,
                        bm25.budgeted_coverage
                    );
                }
            }
        }
    }
}
