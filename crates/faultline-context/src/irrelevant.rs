//! The `irrelevant` control: a true bundle of another case of the same system. It is the same
//! kind of text as the curated bundle (logs, traces and state of the same code) with no
//! information about this bug, so "context helps because of what it says" can be told apart
//! from "context helps because there is more of it".

use faultline_corpus::Case;

/// The case whose curated bundle stands in for `case`'s: the next case of the same system in id
/// order, wrapping around, so each case's control is fixed and no two neighbours swap. `None`
/// when the system has no other case with a bundle.
pub fn source_case<'a>(case: &Case, corpus: &'a [Case]) -> Option<&'a Case> {
    let mut same: Vec<&Case> = corpus
        .iter()
        .filter(|c| c.manifest.system == case.manifest.system && !c.bundle.is_empty())
        .collect();
    same.sort_by(|a, b| a.id().cmp(b.id()));
    let others: Vec<&Case> = same
        .iter()
        .copied()
        .filter(|c| c.id() != case.id())
        .collect();
    let after = others.iter().find(|c| c.id() > case.id());
    after.or(others.first()).copied()
}
