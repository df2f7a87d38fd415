//! Presenting faultline's records. [`summary::build`] turns a run's records into a
//! [`faultline_schema::Report`] (every statistic computed by `faultline-stats`); the same rows
//! then render for a terminal or as Markdown, so a generated Markdown file shows exactly what the
//! command printed, and [`html::render`] makes one self-contained HTML page of it.

pub mod build;
pub mod corpus;
pub mod html;
pub mod leaderboard;
pub mod markdown;
pub mod plots;
pub mod providers;
pub mod summary;
pub mod svg;
pub mod synthetic;
pub mod table;
pub mod validation;
pub mod viewer;

pub use table::Table;
