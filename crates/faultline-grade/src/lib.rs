//! Running hidden oracles and regression tests on fresh copies of a case, to validate cases and
//! to grade what agents submit: grade construction, the dispatch by track ([`grader`]) and the
//! grade cache ([`cache`]) live here, so a run only hands over submissions.

pub mod cache;
pub mod diagnosis;
pub mod grader;
pub mod libtest;
pub mod patch;
pub mod protections;
pub mod seeds;
pub mod validate;
pub mod verdict;
pub mod workbench;

pub use cache::grade_submission;
pub use grader::{GradeContext, grade, grade_diagnosis, grade_repair, grade_reproduction};
pub use validate::{ValidateOptions, validate_case};
pub use workbench::Workbench;
