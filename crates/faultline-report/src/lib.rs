//! Presenting faultline's records: the same rows rendered for a terminal or as Markdown, so a
//! generated Markdown file shows exactly what the command printed.

pub mod corpus;
pub mod leaderboard;
pub mod table;
pub mod validation;

pub use table::Table;
