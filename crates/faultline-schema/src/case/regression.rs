//! The crate's own tests a case keeps as its regression set, and their typed view: the one
//! place that reads the `lib` / `test:<name>` form.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The crate's own tests that pass on both versions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RegressionSpec {
    /// Test targets to run: `lib`, or `test:<name>` for an integration test file.
    #[serde(default = "default_regression_targets")]
    pub targets: Vec<String>,
    /// Test names to skip (substring match, as libtest's `--skip`): tests that fail or hang
    /// on either version, or need the network.
    #[serde(default)]
    pub skip: Vec<String>,
}

fn default_regression_targets() -> Vec<String> {
    vec!["lib".to_string()]
}

impl Default for RegressionSpec {
    fn default() -> Self {
        RegressionSpec {
            targets: default_regression_targets(),
            skip: Vec::new(),
        }
    }
}

/// One declared regression target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RegressionTarget<'a> {
    /// The library's unit tests (`lib`).
    Lib,
    /// One integration test file, by its target name (`test:<name>`).
    Test(&'a str),
}

impl<'a> RegressionTarget<'a> {
    /// How cargo selects the target.
    pub fn cargo_args(self) -> Vec<&'a str> {
        match self {
            RegressionTarget::Lib => vec!["--lib"],
            RegressionTarget::Test(name) => vec!["--test", name],
        }
    }
}

impl RegressionSpec {
    /// The declared targets, typed (loading a case refuses any other form).
    pub fn declared(&self) -> impl Iterator<Item = RegressionTarget<'_>> {
        self.targets.iter().map(|t| match t.strip_prefix("test:") {
            Some(name) => RegressionTarget::Test(name),
            None => RegressionTarget::Lib,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn declared_targets_read_as_cargo_selects_them() {
        let spec = RegressionSpec {
            targets: vec!["lib".into(), "test:mergeable".into()],
            skip: Vec::new(),
        };
        let args: Vec<Vec<&str>> = spec.declared().map(|t| t.cargo_args()).collect();
        assert_eq!(args, [vec!["--lib"], vec!["--test", "mergeable"]]);
    }
}
