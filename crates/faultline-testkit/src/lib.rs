//! Helpers the workspace's tests share, so that no test crate keeps its own copy of a fixture
//! builder or of the rule for what a test may skip.
//!
//! A dev-only crate: crates list it under `[dev-dependencies]` only, so nothing here is part of
//! any library's API. See `docs/testing.md` for how tests are grouped by what they need.

pub mod fixtures;
pub mod needs;
pub mod process_dir;

pub use fixtures::{
    Prepared, Shared, corpus_dir, fixture_case, fixture_corpus, fixture_gold, fixture_tree, patch,
};
pub use needs::{protected, registry, required};
pub use process_dir::ProcessDir;
