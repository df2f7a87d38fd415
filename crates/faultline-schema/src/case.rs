//! `case.toml`, format version 1: one real bug, how to fetch both versions of its code, how to
//! check a fix, and where the cause is.

mod regression;
mod scenario;
mod source;

pub use regression::{RegressionSpec, RegressionTarget};
pub use scenario::{Reasoning, Scenario};
pub use source::{GitSource, PathSource, Pin, RegistrySource, Source, Upstream};

use crate::diagnosis::DIAGNOSIS_LINE_BUDGET;
pub use crate::rate::FailureRate;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::fmt;

/// The only `case.toml` format version this build reads.
pub const CASE_SCHEMA_VERSION: u32 = 1;

/// A benchmark case as written in `corpus/<system>/<case-id>/case.toml`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CaseManifest {
    /// Format version of this file; must be 1.
    pub schema_version: u32,
    /// Unique case id: lowercase letters, digits and dashes; equals the directory name.
    pub id: String,
    /// The distributed system (usually the crate family), equals the parent directory name.
    pub system: String,
    /// One line for the corpus table, in a user's words; never shown to agents.
    pub summary: String,
    /// What the fix restores, beyond the symptom's one scenario (one or two sentences): the
    /// property the oracle checks, so that a patch which only hides the symptom fails it.
    /// Never shown to agents.
    #[serde(default)]
    pub property: Option<String>,
    /// What kind of failure this is.
    pub category: Category,
    /// Difficulty tier: 1 (hardest: spans nodes or needs an interleaving) to 3 (local, visible
    /// from the error itself). See the rubric in `corpus/README.md`.
    pub tier: u8,
    /// The nodes the scenario involves and what a diagnosis must reason across (absent in
    /// cases written before it was recorded).
    #[serde(default)]
    pub scenario: Option<Scenario>,
    /// Where the buggy and fixed code come from.
    pub source: Source,
    /// Where the fix was made upstream; for curators only, never shown to agents.
    pub upstream: Upstream,
    /// The hidden check that separates a fixed tree from a buggy one.
    pub oracle: OracleSpec,
    /// The crate's own tests that must keep passing.
    #[serde(default)]
    pub regression: RegressionSpec,
    /// Patches that hide the symptom without fixing its cause (`decoys/<name>.diff`), each of
    /// which the oracle or the regression tests must catch; never shown to agents.
    #[serde(default)]
    pub decoys: Vec<DecoySpec>,
    /// The labeled causal code blocks, in the buggy source.
    #[serde(default)]
    pub blocks: Vec<LabeledBlock>,
    /// Programs beyond the Rust toolchain that building the case needs on the machine (a C
    /// build tool a dependency's build script runs); preparation checks them first.
    #[serde(default)]
    pub requires: Vec<Requirement>,
}

/// A program a case's build runs, and where to get it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Requirement {
    /// The command, looked up on `PATH`.
    pub command: String,
    /// The Debian package that provides it.
    pub debian: String,
}

/// A symptom-suppressing patch kept with a case, to measure what its oracle can tell apart.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DecoySpec {
    /// Lowercase letters, digits and dashes, unique in the case; the patch is
    /// `decoys/<name>.diff`.
    pub name: String,
    /// The kind of shortcut the patch takes.
    pub class: DecoyClass,
    /// What the patch suppresses and which part of the property it still breaks.
    pub why: String,
}

/// The shortcuts a lazy repair takes instead of fixing a cause.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum DecoyClass {
    /// Deletes the assertion, validation or panic that reports the symptom.
    DropCheck,
    /// Catches the panic or error and falls back to a default.
    CatchAndFallback,
    /// Turns the final error into success.
    ErrorToSuccess,
    /// Reports completion (a handle, a future, an acknowledgement) without doing the work.
    ResolveEarly,
    /// Caps, trims or filters the input so the symptom's scenario fits.
    CapInput,
    /// Ignores a whole class of messages, updates or events.
    IgnoreUpdates,
    /// Recognises the symptom's exact schedule (node ids, message count, values) and behaves
    /// correctly only there.
    SpecialCaseSchedule,
    /// Any other shortcut; `why` says which.
    Other,
}

impl DecoyClass {
    /// The kebab-case name used in `case.toml` and reports.
    pub fn as_str(self) -> &'static str {
        match self {
            DecoyClass::DropCheck => "drop-check",
            DecoyClass::CatchAndFallback => "catch-and-fallback",
            DecoyClass::ErrorToSuccess => "error-to-success",
            DecoyClass::ResolveEarly => "resolve-early",
            DecoyClass::CapInput => "cap-input",
            DecoyClass::IgnoreUpdates => "ignore-updates",
            DecoyClass::SpecialCaseSchedule => "special-case-schedule",
            DecoyClass::Other => "other",
        }
    }
}

impl fmt::Display for DecoyClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The failure classes of the DDBench taxonomy.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
pub enum Category {
    /// Protocol steps, elections, membership, restart and recovery.
    ProtocolRecovery,
    /// Replicas diverge, lose or resurrect data.
    ReplicationConsistency,
    /// A race, a repeated or reordered event, a missing guard against an interleaving.
    ConcurrencyOrdering,
    /// A crafted or unexpected input crashes a node.
    InputCrash,
    /// Messages lost, oversized or never sent; resources exhausted or never freed.
    ResourceDelivery,
}

impl Category {
    /// Every category, in display order.
    pub const ALL: [Category; 5] = [
        Category::ProtocolRecovery,
        Category::ReplicationConsistency,
        Category::ConcurrencyOrdering,
        Category::InputCrash,
        Category::ResourceDelivery,
    ];

    /// The kebab-case name used in files and on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            Category::ProtocolRecovery => "protocol-recovery",
            Category::ReplicationConsistency => "replication-consistency",
            Category::ConcurrencyOrdering => "concurrency-ordering",
            Category::InputCrash => "input-crash",
            Category::ResourceDelivery => "resource-delivery",
        }
    }
}

impl fmt::Display for Category {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Category {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Category::ALL
            .into_iter()
            .find(|c| c.as_str() == s)
            .ok_or_else(|| {
                let names: Vec<_> = Category::ALL.iter().map(|c| c.as_str()).collect();
                format!(
                    "unknown category `{s}`; expected one of {}",
                    names.join(", ")
                )
            })
    }
}

/// How the hidden oracle attaches to the crate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum OracleKind {
    /// `oracle/` is a cargo package whose integration tests use the crate's public API.
    External,
    /// `oracle/oracle.rs` is compiled into the crate as a `#[cfg(test)]` module, for
    /// `pub(crate)` access.
    InCrate,
}

/// The hidden oracle of a case.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct OracleSpec {
    /// How the oracle attaches to the crate.
    pub kind: OracleKind,
    /// Whether the oracle reads `FAULTLINE_SEED` and explores a different schedule per seed.
    #[serde(default)]
    pub seeded: bool,
    /// Wall-clock limit for one run of the oracle's tests, in seconds.
    #[serde(default = "default_oracle_timeout")]
    pub timeout_secs: u64,
    /// For a looped or probabilistic oracle: the measured share of runs on the buggy version
    /// that fail, as recorded by the curator (for example `"1000/1000"`).
    #[serde(default)]
    pub buggy_failure_rate: Option<FailureRate>,
}

fn default_oracle_timeout() -> u64 {
    120
}

/// A labeled causal block: the lines whose behaviour causes the failure.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LabeledBlock {
    /// Path relative to the crate root, with `/` separators.
    pub file: String,
    /// First line, 1-based, inclusive.
    pub start: u32,
    /// Last line, 1-based, inclusive.
    pub end: u32,
    /// The enclosing function or item, as `Type::method` or `function`.
    #[serde(default)]
    pub symbol: Option<String>,
    /// Set when the block is causal but the fix did not touch it (validation then does not
    /// require it to overlap the gold diff).
    #[serde(default)]
    pub outside_diff: bool,
}

/// Why a `case.toml` was rejected.
#[derive(Debug, thiserror::Error)]
pub enum CaseParseError {
    /// Not valid TOML, or the values do not fit the format.
    #[error(transparent)]
    Toml(#[from] toml::de::Error),
    /// Parsed, but a value breaks a rule of the format.
    #[error("{0}")]
    Invalid(String),
}

impl CaseManifest {
    /// Parses and checks a `case.toml` text; errors carry the line and column.
    pub fn from_toml(text: &str) -> Result<Self, CaseParseError> {
        let manifest: CaseManifest = toml::from_str(text)?;
        manifest.check()?;
        Ok(manifest)
    }

    /// The rules serde cannot express.
    fn check(&self) -> Result<(), CaseParseError> {
        let bad = |msg: String| Err(CaseParseError::Invalid(msg));
        if self.schema_version != CASE_SCHEMA_VERSION {
            return bad(format!(
                "schema_version {} is not supported; this build reads version {CASE_SCHEMA_VERSION}",
                self.schema_version
            ));
        }
        if !is_slug(&self.id) {
            return bad(format!(
                "id `{}` must be lowercase letters, digits and dashes",
                self.id
            ));
        }
        if !is_slug(&self.system) {
            return bad(format!(
                "system `{}` must be lowercase letters, digits and dashes",
                self.system
            ));
        }
        if !(1..=3).contains(&self.tier) {
            return bad(format!("tier {} is out of range 1..=3", self.tier));
        }
        if let Some(problem) = self.scenario.as_ref().and_then(Scenario::problem) {
            return bad(problem);
        }
        if let Source::Registry(r) = &self.source
            && r.fixed <= r.buggy
        {
            return bad(format!(
                "fixed version {} must be newer than buggy version {}",
                r.fixed, r.buggy
            ));
        }
        if let Source::Git(g) = &self.source {
            for (name, commit) in [
                ("buggy_commit", &g.buggy_commit),
                ("fixed_commit", &g.fixed_commit),
            ] {
                if commit.len() != 40 || !commit.chars().all(|c| c.is_ascii_hexdigit()) {
                    return bad(format!(
                        "{name} `{commit}` must be a full 40-digit commit id"
                    ));
                }
            }
        }
        for target in &self.regression.targets {
            if target != "lib" && !target.starts_with("test:") {
                return bad(format!(
                    "regression target `{target}` must be `lib` or `test:<name>`"
                ));
            }
        }
        for (i, block) in self.blocks.iter().enumerate() {
            if block.start == 0 || block.end < block.start {
                return bad(format!(
                    "blocks[{i}] ({}): line range {}..{} must be 1-based with start <= end",
                    block.file, block.start, block.end
                ));
            }
            if block.file.starts_with('/') || block.file.split('/').any(|p| p == "..") {
                return bad(format!(
                    "blocks[{i}]: file `{}` must be relative to the crate root",
                    block.file
                ));
            }
        }
        if self
            .property
            .as_deref()
            .is_some_and(|p| p.trim().is_empty())
        {
            return bad(
                "property is empty; state what the fix restores or leave the key out".into(),
            );
        }
        let mut decoy_names = std::collections::BTreeSet::new();
        for (i, decoy) in self.decoys.iter().enumerate() {
            if !is_slug(&decoy.name) {
                return bad(format!(
                    "decoys[{i}]: name `{}` must be lowercase letters, digits and dashes",
                    decoy.name
                ));
            }
            if !decoy_names.insert(decoy.name.as_str()) {
                return bad(format!(
                    "decoys[{i}]: the name `{}` is used twice",
                    decoy.name
                ));
            }
            if decoy.why.trim().is_empty() {
                return bad(format!("decoys[{i}] ({}): `why` is empty", decoy.name));
            }
        }
        if self.blocks.is_empty() {
            return bad("a case needs at least one labeled block ([[blocks]])".into());
        }
        let labeled = self.labeled_line_count();
        if labeled > u64::from(DIAGNOSIS_LINE_BUDGET) {
            return bad(format!(
                "the labeled blocks name {labeled} lines, but a diagnosis is scored on its first \
                 {DIAGNOSIS_LINE_BUDGET} (docs/grading.md): the labels themselves must fit in them"
            ));
        }
        Ok(())
    }

    /// The distinct lines the labeled blocks name, counted over merged ranges so that an absurd
    /// range costs no memory.
    fn labeled_line_count(&self) -> u64 {
        let mut ranges: Vec<(&str, u64, u64)> = self
            .blocks
            .iter()
            .map(|b| (b.file.as_str(), u64::from(b.start), u64::from(b.end)))
            .collect();
        ranges.sort();
        let mut total = 0;
        let mut current: Option<(&str, u64, u64)> = None;
        for (file, start, end) in ranges {
            current = match current {
                Some((f, s, e)) if f == file && start <= e + 1 => Some((f, s, e.max(end))),
                Some((_, s, e)) => {
                    total += e + 1 - s;
                    Some((file, start, end))
                }
                None => Some((file, start, end)),
            };
        }
        total + current.map_or(0, |(_, s, e)| e + 1 - s)
    }
}

fn is_slug(s: &str) -> bool {
    !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

#[cfg(test)]
mod tests {
    use super::*;
    use semver::Version;

    const GOOD: &str = r##"
schema_version = 1
id = "toy-kv-lost-write"
system = "toy-kv"
summary = "a write acknowledged by the leader is gone after failover"
category = "replication-consistency"
tier = 2

[source]
kind = "registry"
crate = "toy-kv"
buggy = "0.3.1"
fixed = "0.3.2"
pins = [{ crate = "hexane", version = "0.1.5", reason = "0.1.7 changed its API" }]

[upstream]
repository = "https://example.org/toy-kv"
references = ["#12"]

[oracle]
kind = "external"
seeded = true

[[blocks]]
file = "src/replica.rs"
start = 10
end = 14
symbol = "Replica::apply"
"##;

    #[test]
    fn parses_a_complete_case() {
        let case = CaseManifest::from_toml(GOOD).unwrap();
        assert_eq!(case.id, "toy-kv-lost-write");
        assert_eq!(case.category, Category::ReplicationConsistency);
        assert_eq!(case.source.crate_name(), "toy-kv");
        assert_eq!(case.source.pins()[0].version, Version::new(0, 1, 5));
        assert_eq!(case.regression.targets, vec!["lib".to_string()]);
        assert_eq!(case.oracle.timeout_secs, 120);
        assert_eq!(case.source.fixed_markers(), vec!["0.3.2".to_string()]);
    }

    fn error_of(text: &str) -> String {
        CaseManifest::from_toml(text).unwrap_err().to_string()
    }

    #[test]
    fn missing_field_names_the_field_and_line() {
        let text = GOOD.replace("tier = 2\n", "");
        let msg = error_of(&text);
        assert!(msg.contains("missing field `tier`"), "{msg}");
        assert!(msg.contains("line"), "{msg}");
    }

    #[test]
    fn wrong_type_points_at_the_value() {
        let msg = error_of(&GOOD.replace("tier = 2", "tier = \"two\""));
        assert!(msg.contains("line 7"), "{msg}");
        assert!(msg.contains("invalid type"), "{msg}");
    }

    #[test]
    fn unknown_key_is_rejected() {
        let msg = error_of(&GOOD.replace("tier = 2", "tier = 2\nseverity = 3"));
        assert!(msg.contains("unknown field `severity`"), "{msg}");
        assert!(msg.contains("line 8"), "{msg}");
    }

    #[test]
    fn unknown_key_inside_a_tagged_source_is_rejected() {
        let msg = error_of(&GOOD.replace(
            "crate = \"toy-kv\"\nbuggy",
            "crate = \"toy-kv\"\nmirror = \"x\"\nbuggy",
        ));
        assert!(msg.contains("mirror"), "{msg}");
    }

    #[test]
    fn bad_version_string_is_rejected_with_its_line() {
        let msg = error_of(&GOOD.replace("buggy = \"0.3.1\"", "buggy = \"0.3\""));
        assert!(msg.contains("`0.3` is not an exact version"), "{msg}");
        assert!(msg.contains("line 9"), "{msg}");
    }

    #[test]
    fn rule_violations_are_explained() {
        assert!(error_of(&GOOD.replace("tier = 2", "tier = 4")).contains("tier 4"));
        assert!(
            error_of(&GOOD.replace("fixed = \"0.3.2\"", "fixed = \"0.3.0\"")).contains("newer")
        );
        assert!(error_of(&GOOD.replace("end = 14", "end = 9")).contains("start <= end"));
        assert!(
            error_of(&GOOD.replace("end = 14", "end = 4000000000"))
                .contains("the labeled blocks name 3999999991 lines")
        );
        assert!(
            error_of(&GOOD.replace("id = \"toy-kv-lost-write\"", "id = \"Toy KV\""))
                .contains("lowercase")
        );
        assert!(
            error_of(&GOOD.replace(
                "category = \"replication-consistency\"",
                "category = \"network\""
            ))
            .contains("unknown variant")
        );
    }

    #[test]
    fn labeled_blocks_must_fit_the_diagnosis_budget() {
        let with_blocks = |blocks: &[(&str, u32, u32)]| {
            let mut text = GOOD[..GOOD.find("[[blocks]]").unwrap()].to_string();
            for (file, start, end) in blocks {
                text.push_str(&format!(
                    "[[blocks]]\nfile = \"{file}\"\nstart = {start}\nend = {end}\n"
                ));
            }
            CaseManifest::from_toml(&text).map(|_| ())
        };
        let half = DIAGNOSIS_LINE_BUDGET / 2;
        // Two files, each half the budget: exactly the budget.
        assert!(with_blocks(&[("src/a.rs", 1, half), ("src/b.rs", 1, half)]).is_ok());
        // Overlapping ranges count their common lines once.
        assert!(with_blocks(&[("src/a.rs", 1, half + 5), ("src/a.rs", half, 2 * half)]).is_ok());
        let over = with_blocks(&[("src/a.rs", 1, half), ("src/a.rs", half + 1, 2 * half + 1)]);
        assert!(
            over.unwrap_err()
                .to_string()
                .contains(&format!("name {} lines", DIAGNOSIS_LINE_BUDGET + 1))
        );
    }

    #[test]
    fn git_and_path_sources_parse() {
        let git = GOOD.replace(
            "kind = \"registry\"\ncrate = \"toy-kv\"\nbuggy = \"0.3.1\"\nfixed = \"0.3.2\"",
            &format!("kind = \"git\"\ncrate = \"toy-kv\"\nrepository = \"https://example.org/r.git\"\nbuggy_commit = \"{}\"\nfixed_commit = \"{}\"\nsubdir = \"crates/kv\"", "a".repeat(40), "b".repeat(40)),
        );
        let case = CaseManifest::from_toml(&git).unwrap();
        assert!(
            matches!(case.source, Source::Git(ref g) if g.subdir.as_deref() == Some("crates/kv"))
        );
        let short = git.replace(&"a".repeat(40), "abc123");
        assert!(error_of(&short).contains("40-digit"));

        let path = GOOD.replace(
            "kind = \"registry\"\ncrate = \"toy-kv\"\nbuggy = \"0.3.1\"\nfixed = \"0.3.2\"",
            "kind = \"path\"\ncrate = \"toy-kv\"\nbuggy = \"buggy\"\nfixed = \"fixed\"",
        );
        let case = CaseManifest::from_toml(&path).unwrap();
        assert!(matches!(case.source, Source::Path(ref p) if p.buggy == "buggy"));
    }
}
