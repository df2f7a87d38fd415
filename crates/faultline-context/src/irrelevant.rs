//! The `irrelevant` control: a true bundle of another case of the same system. It is the same
//! kind of text as the curated bundle (logs, traces and state of the same code) with no
//! information about this bug, so "context helps because of what it says" can be told apart
//! from "context helps because there is more of it".

use faultline_corpus::Case;

/// The cases whose curated bundle may stand in for `case`'s, in the order they are tried: the
/// other cases of the same system with a bundle, starting after `case` in id order and wrapping
/// around, so each case's control is fixed. The first whose bundle passes `case`'s gate is
/// shown (another case's bundle may name this case's fixed version, say).
pub fn candidates<'a>(case: &Case, corpus: &'a [Case]) -> Vec<&'a Case> {
    let mut same: Vec<&Case> = corpus
        .iter()
        .filter(|c| {
            c.manifest.system == case.manifest.system && c.id() != case.id() && !c.bundle.is_empty()
        })
        .collect();
    same.sort_by(|a, b| a.id().cmp(b.id()));
    let split = same.partition_point(|c| c.id() < case.id());
    same.rotate_left(split);
    same
}
