//! What an agent is shown besides the repository and the symptom: the benchmark's experimental
//! factor, an open label so that a context provider is a new level rather than a code change.

use schemars::JsonSchema;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::borrow::Cow;
use std::fmt;

/// One condition: `symptom` (the baseline), or the name of the context provider that wrote the
/// bundle the agent is shown (`curated`, `irrelevant`, `static`, `model:NAME`, or an external
/// provider's name); on the build track, an [`Aid`] (`task`, `unit-tests`, `simulator`,
/// `simulator-checker`, `tla`), names no provider may take.
///
/// Names are lowercase ASCII letters, digits, `-`, `_` and one `:` after `model`, so a name is
/// safe as a path component, in tables, CSV files and R formulas. `context`, the name of the
/// curated bundle before providers existed, reads as `curated`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Condition(String);

/// Which provider a condition names; the runner dispatches on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConditionKind<'a> {
    /// No bundle: the symptom alone.
    Symptom,
    /// The case's own bundle.
    Curated,
    /// A true bundle of another case of the same system: the control for "more text".
    Irrelevant,
    /// The built-in static analysis of the buggy crate, led by the symptom's identifiers.
    Static,
    /// A model writes the bundle; the name is the model configuration's.
    Model(&'a str),
    /// A user's provider, declared by name with its program.
    External(&'a str),
    /// An aid of the build track (the agent writes code; nothing is diagnosed).
    Aid(Aid),
}

/// What an agent on the build track is given besides the task's text: the factor of that
/// track's experiment (does a simulator help more than unit tests?).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Aid {
    /// The task's text and the node API alone.
    Task,
    /// Plus unit tests of the API's happy path on a fault-free in-memory cluster.
    UnitTests,
    /// Plus the deterministic simulator with fault injection (no linearizability check).
    Simulator,
    /// Plus the simulator and the linearizability checker.
    SimulatorChecker,
    /// Plus a TLA+ model of the protocol, as text.
    Tla,
}

impl Aid {
    /// Every aid, from least to most given.
    pub const ALL: [Aid; 5] = [
        Aid::Task,
        Aid::UnitTests,
        Aid::Simulator,
        Aid::SimulatorChecker,
        Aid::Tla,
    ];

    /// The condition's name.
    pub fn as_str(self) -> &'static str {
        match self {
            Aid::Task => "task",
            Aid::UnitTests => "unit-tests",
            Aid::Simulator => "simulator",
            Aid::SimulatorChecker => "simulator-checker",
            Aid::Tla => "tla",
        }
    }

    /// Whether the agent's workspace links the simulator.
    pub fn has_simulator(self) -> bool {
        matches!(self, Aid::Simulator | Aid::SimulatorChecker)
    }

    /// The condition naming this aid.
    pub fn condition(self) -> Condition {
        Condition(self.as_str().to_string())
    }
}

/// The old name of `curated`, accepted on input.
const CURATED_ALIAS: &str = "context";

impl Condition {
    /// The baseline's name.
    pub const SYMPTOM: &'static str = "symptom";
    /// The case's own bundle.
    pub const CURATED: &'static str = "curated";
    /// Another case's bundle of the same system.
    pub const IRRELEVANT: &'static str = "irrelevant";
    /// The built-in static-analysis provider.
    pub const STATIC: &'static str = "static";
    /// The prefix of a model provider.
    pub const MODEL_PREFIX: &'static str = "model:";

    /// Validates a name (see the type's documentation).
    pub fn new(name: &str) -> Result<Condition, String> {
        let name = if name == CURATED_ALIAS {
            Condition::CURATED
        } else {
            name
        };
        let word_ok = |w: &str| {
            !w.is_empty()
                && w.len() <= 64
                && w.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '-' | '_'))
        };
        let valid = match name.strip_prefix(Condition::MODEL_PREFIX) {
            Some(model) => word_ok(model),
            None => word_ok(name),
        };
        if valid {
            Ok(Condition(name.to_string()))
        } else {
            Err(format!(
                "invalid condition `{name}`: expected symptom, curated, irrelevant, static, \
                 model:NAME or an external provider's name (lowercase letters, digits, `-`, `_`)"
            ))
        }
    }

    /// The baseline: the symptom alone.
    pub fn symptom() -> Condition {
        Condition(Condition::SYMPTOM.into())
    }

    /// The case's own curated bundle.
    pub fn curated() -> Condition {
        Condition(Condition::CURATED.into())
    }

    /// The baseline and the curated bundle, the benchmark's two original conditions.
    pub fn classic() -> Vec<Condition> {
        vec![Condition::symptom(), Condition::curated()]
    }

    /// Which provider this names.
    pub fn kind(&self) -> ConditionKind<'_> {
        match self.0.as_str() {
            Condition::SYMPTOM => ConditionKind::Symptom,
            Condition::CURATED => ConditionKind::Curated,
            Condition::IRRELEVANT => ConditionKind::Irrelevant,
            Condition::STATIC => ConditionKind::Static,
            other => match other.strip_prefix(Condition::MODEL_PREFIX) {
                Some(model) => ConditionKind::Model(model),
                None => match Aid::ALL.into_iter().find(|a| a.as_str() == other) {
                    Some(aid) => ConditionKind::Aid(aid),
                    None => ConditionKind::External(other),
                },
            },
        }
    }

    /// Whether the agent is shown a context provider's bundle in this condition (the aids of
    /// the build track are no provider's).
    pub fn has_bundle(&self) -> bool {
        !matches!(self.kind(), ConditionKind::Symptom | ConditionKind::Aid(_))
    }

    /// The build track's aid this names, if it names one.
    pub fn aid(&self) -> Option<Aid> {
        match self.kind() {
            ConditionKind::Aid(aid) => Some(aid),
            _ => None,
        }
    }

    /// Whether this condition belongs to `track`: the aids to the build track, every other
    /// condition to the tracks on bugs.
    pub fn applies_to(&self, track: crate::Track) -> bool {
        (track == crate::Track::Build) == self.aid().is_some()
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// The baseline first, then by name: tables, plots and the mixed model's coefficients share
/// one order.
impl Ord for Condition {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        let key = |c: &Condition| (c.has_bundle(), c.0.clone());
        key(self).cmp(&key(other))
    }
}

impl PartialOrd for Condition {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl fmt::Display for Condition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::str::FromStr for Condition {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Condition::new(s)
    }
}

impl Serialize for Condition {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for Condition {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = Cow::<str>::deserialize(d)?;
        Condition::new(&name).map_err(serde::de::Error::custom)
    }
}

impl JsonSchema for Condition {
    fn schema_name() -> Cow<'static, str> {
        "Condition".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "description": "symptom, curated (read from its old name context), irrelevant, static, model:NAME, or an external provider's name",
            "type": "string",
            "pattern": "^(model:)?[a-z0-9_-]{1,64}$"
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_to_their_provider() {
        let kind = |s: &str| Condition::new(s).unwrap();
        assert_eq!(kind("symptom").kind(), ConditionKind::Symptom);
        assert_eq!(kind("context"), Condition::curated());
        assert_eq!(kind("curated").kind(), ConditionKind::Curated);
        assert_eq!(kind("irrelevant").kind(), ConditionKind::Irrelevant);
        assert_eq!(kind("static").kind(), ConditionKind::Static);
        assert_eq!(kind("model:small").kind(), ConditionKind::Model("small"));
        assert_eq!(kind("my-tool").kind(), ConditionKind::External("my-tool"));
        assert!(!Condition::symptom().has_bundle());
        assert!(kind("my-tool").has_bundle());
        assert_eq!(kind("simulator").kind(), ConditionKind::Aid(Aid::Simulator));
        assert!(!kind("unit-tests").has_bundle());
        for aid in Aid::ALL {
            assert_eq!(aid.condition().aid(), Some(aid));
            assert!(aid.condition().applies_to(crate::Track::Build));
            assert!(!aid.condition().applies_to(crate::Track::Repair));
        }
        assert!(!Condition::symptom().applies_to(crate::Track::Build));
    }

    #[test]
    fn unsafe_names_are_refused() {
        for bad in [
            "",
            "Curated",
            "a/b",
            "..",
            "model:",
            "x:y",
            "a b",
            "model:a:b",
        ] {
            assert!(Condition::new(bad).is_err(), "{bad:?} was accepted");
        }
    }

    #[test]
    fn the_old_name_reads_as_curated_and_writes_as_curated() {
        let c: Condition = serde_json::from_str("\"context\"").unwrap();
        assert_eq!(serde_json::to_string(&c).unwrap(), "\"curated\"");
        assert!(serde_json::from_str::<Condition>("\"../x\"").is_err());
    }
}
