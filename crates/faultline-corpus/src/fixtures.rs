//! The repository's own fixture case (`fixtures/corpus/toy/toy-double-merge`, a small crate with
//! a real bug of our own), copied so tests can change it freely.

use crate::case::Case;
use anyhow::{Context, Result};
use std::path::{Path, PathBuf};

/// The fixture corpus in the source tree.
pub fn fixture_corpus() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/corpus")
}

/// Copies the fixture case to `<root>/toy/<id>` with its path sources made absolute, lets `edit`
/// change its files, and loads it.
pub fn fixture_case(root: &Path, id: &str, edit: impl FnOnce(&Path)) -> Result<Case> {
    let from = fixture_corpus().join("toy/toy-double-merge");
    let dir = root.join("toy").join(id);
    crate::store::copy_tree(&from, &dir, &|_| true)?;
    let tree = fixture_corpus()
        .join("../toy-tree")
        .canonicalize()
        .context("locating the fixture tree")?;
    let manifest = std::fs::read_to_string(dir.join("case.toml"))?
        .replace("toy-double-merge", id)
        .replace("../../../toy-tree", &tree.display().to_string());
    std::fs::write(dir.join("case.toml"), manifest)?;
    edit(&dir);
    Ok(Case::load(&dir)?)
}
