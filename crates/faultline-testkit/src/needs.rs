//! What a test needs of the machine, and what happens when the machine lacks it.
//!
//! A test whose sandbox protection (or other host facility) is missing is skipped with a message,
//! except where `FAULTLINE_REQUIRE_PROTECTIONS` is set, as `.ci/run` sets it: there a test that
//! does not run is a protection that does not hold, so it fails. Tests that need the package
//! registry or Chromium never skip: they fail saying what they need (see `docs/testing.md`).

use faultline_sandbox::Protection;
use std::fmt::Display;
use std::path::PathBuf;

/// The variable that turns a missing protection from a skipped test into a failed one.
pub const REQUIRE_PROTECTIONS: &str = "FAULTLINE_REQUIRE_PROTECTIONS";

/// Whether the test that needs `what` may go on: `lacking` says why the machine cannot provide
/// it, if it cannot. A lacking test is skipped (`false`, after a message), or fails when
/// [`REQUIRE_PROTECTIONS`] is set.
pub fn required(what: &str, lacking: Option<impl Display>) -> bool {
    go_on(
        std::env::var_os(REQUIRE_PROTECTIONS).is_some(),
        what,
        lacking,
    )
}

/// [`required`], with whether the machine must provide everything given.
fn go_on(must: bool, what: &str, lacking: Option<impl Display>) -> bool {
    let Some(why) = lacking else {
        return true;
    };
    assert!(
        !must,
        "{what} is required here ({REQUIRE_PROTECTIONS} is set) but unavailable: {why}"
    );
    eprintln!("skipping what needs {what}: {why}");
    false
}

/// Whether to run the test of protection `p` (named `what`): [`required`] when it is not active.
pub fn protected(p: &Protection, what: &str) -> bool {
    required(what, (!p.is_active()).then_some(p))
}

/// Tests that fetch crates from the package registry (through cargo).
pub mod registry {
    use super::*;

    /// A data directory to fetch the registry's crates into and reuse across runs, when
    /// `FAULTLINE_TEST_DATA` names one; tests otherwise start from an empty one of their own.
    pub fn reused_data_dir() -> Option<PathBuf> {
        std::env::var_os("FAULTLINE_TEST_DATA")
            .filter(|d| !d.is_empty())
            .map(PathBuf::from)
    }

    /// Unwraps the result of a step that needs the registry, failing with what it needs.
    pub fn fetched<T>(what: &str, result: anyhow::Result<T>) -> T {
        result.unwrap_or_else(|e| panic!("{what}: {e:#}\n{}", note()))
    }

    /// What to say when a test that needs the registry fails.
    pub fn note() -> &'static str {
        "(this test fetches crates from the package registry through cargo, and fails without \
         it; `cargo test -- --skip needs_registry::` leaves such tests out, see docs/testing.md)"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_the_machine_provides_runs() {
        assert!(go_on(false, "x", None::<&str>));
        assert!(go_on(true, "x", None::<&str>));
    }

    #[test]
    fn what_it_lacks_is_skipped_where_it_is_not_required() {
        assert!(!go_on(false, "x", Some("no cgroup")));
    }

    #[test]
    #[should_panic(expected = "x is required here")]
    fn what_it_lacks_fails_where_it_is_required() {
        go_on(true, "x", Some("no cgroup"));
    }
}
