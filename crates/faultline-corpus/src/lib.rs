//! Cases: loading and checking them, fetching their sources through cargo, computing the gold
//! patch, and preparing the offline workspaces agents and graders work in.

pub mod cargo;
pub mod case;
pub mod checks;
pub mod confined;
pub mod curated;
pub mod gold;
pub mod leak;
pub mod manifest;
pub mod store;
pub mod tokens;
pub mod workspace;

pub use case::{BundleFile, Case, CaseError, Corpus, Selection};
pub use gold::TreeDiff;
pub use workspace::layout::{DataDir, Template, TemplateKind};
pub use workspace::prepared::{PreparedCase, TemplateDamaged};
pub use workspace::{PrepareOptions, prepare};
