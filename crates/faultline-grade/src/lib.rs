//! Running hidden oracles and regression tests on fresh copies of a case, to validate cases and
//! to grade what agents submit.

pub mod libtest;
pub mod validate;
pub mod workbench;

pub use validate::{ValidateOptions, validate_case};
pub use workbench::Workbench;
