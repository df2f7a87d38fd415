//! Presenting faultline's records: the same rows rendered for a terminal or as Markdown, so a
//! generated Markdown file shows exactly what the command printed.

pub mod corpus;
pub mod html;
pub mod leaderboard;
pub mod markdown;
pub mod plots;
pub mod summary;
pub mod svg;
pub mod synthetic;
pub mod table;
pub mod validation;
pub mod viewer;

pub use table::Table;
