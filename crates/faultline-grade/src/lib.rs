//! Running hidden oracles and regression tests on fresh copies of a case, to validate cases and
//! to grade what agents submit.

pub mod diagnosis;
pub mod grader;
pub mod legality;
pub mod libtest;
pub mod patch;
pub mod protections;
pub mod validate;
pub mod verdict;
pub mod workbench;

pub use grader::{GradeContext, GradeOptions, grade_diagnosis, grade_repair, grade_reproduction};
pub use validate::{ValidateOptions, validate_case};
pub use workbench::Workbench;
