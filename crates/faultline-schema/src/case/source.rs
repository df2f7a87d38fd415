//! Where a case's two versions of the code come from (a registry, the case directory, a git
//! repository), the dependency pins that keep old releases building, and where the fix was made
//! upstream. These name the fixed version, so none of it is ever shown to an agent.

use schemars::JsonSchema;
use semver::Version;
use serde::{Deserialize, Serialize};

/// Where the two versions of the code come from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Source {
    /// Two published versions of a crate, fetched by cargo from the package registry.
    Registry(RegistrySource),
    /// Both trees live in the case directory (systems written for faultline itself).
    Path(PathSource),
    /// Two commits of a git repository (needs network access at prepare time).
    Git(GitSource),
}

impl Source {
    /// The name of the crate whose code the agent works on.
    pub fn crate_name(&self) -> &str {
        match self {
            Source::Registry(s) => &s.crate_name,
            Source::Path(s) => &s.crate_name,
            Source::Git(s) => &s.crate_name,
        }
    }

    /// Dependency pins applied whenever the lockfile is resolved.
    pub fn pins(&self) -> &[Pin] {
        match self {
            Source::Registry(s) => &s.pins,
            Source::Path(s) => &s.pins,
            Source::Git(s) => &s.pins,
        }
    }

    /// The strings that identify the fixed version and must never reach an agent.
    pub fn fixed_markers(&self) -> Vec<String> {
        match self {
            Source::Registry(s) => vec![s.fixed.to_string()],
            Source::Path(_) => Vec::new(),
            Source::Git(s) => vec![s.fixed_commit.clone()],
        }
    }
}

/// Two published versions of one crate.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RegistrySource {
    /// The crate's name on the registry.
    #[serde(rename = "crate")]
    pub crate_name: String,
    /// The published version that has the bug.
    #[schemars(with = "String")]
    #[serde(deserialize_with = "exact_version")]
    pub buggy: Version,
    /// The next published version, which holds the fix.
    #[schemars(with = "String")]
    #[serde(deserialize_with = "exact_version")]
    pub fixed: Version,
    /// Exact versions of dependencies that old releases need to build today.
    #[serde(default)]
    pub pins: Vec<Pin>,
}

/// Two source trees kept inside the case directory.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PathSource {
    /// The crate's package name.
    #[serde(rename = "crate")]
    pub crate_name: String,
    /// Directory of the buggy tree, relative to the case directory.
    pub buggy: String,
    /// Directory of the fixed tree, relative to the case directory.
    pub fixed: String,
    /// Exact versions of dependencies to use when resolving.
    #[serde(default)]
    pub pins: Vec<Pin>,
}

/// Two commits of a git repository.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GitSource {
    /// The crate's package name.
    #[serde(rename = "crate")]
    pub crate_name: String,
    /// Clone URL of the repository.
    pub repository: String,
    /// Full commit id with the bug.
    pub buggy_commit: String,
    /// Full commit id with the fix.
    pub fixed_commit: String,
    /// Directory of the crate inside the repository; the root when absent.
    #[serde(default)]
    pub subdir: Option<String>,
    /// Exact versions of dependencies to use when resolving.
    #[serde(default)]
    pub pins: Vec<Pin>,
}

/// One dependency held at an exact version, because a newer one breaks the old release.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Pin {
    /// The dependency's crate name.
    #[serde(rename = "crate")]
    pub crate_name: String,
    /// The exact version to hold it at.
    #[schemars(with = "String")]
    #[serde(deserialize_with = "exact_version")]
    pub version: Version,
    /// Why the pin is needed, for the next curator.
    #[serde(default)]
    pub reason: Option<String>,
}

/// Where the bug was reported and fixed; never shown to an agent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Upstream {
    /// The upstream repository's URL.
    pub repository: String,
    /// Issue, pull request and commit references (`#123`, `PR #45`, a commit id).
    #[serde(default)]
    pub references: Vec<String>,
    /// Free-form curator notes: what else the fixed release changed, pitfalls.
    #[serde(default)]
    pub notes: Option<String>,
}

/// Reads a version string, with an error that quotes the bad value (the TOML error adds where).
fn exact_version<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Version, D::Error> {
    let text = String::deserialize(d)?;
    Version::parse(&text).map_err(|e| {
        serde::de::Error::custom(format!(
            "`{text}` is not an exact version such as 1.2.3 ({e})"
        ))
    })
}
