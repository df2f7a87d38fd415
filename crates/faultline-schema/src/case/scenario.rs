//! Who takes part in a case's scenario and what a diagnosis has to reason across: the line
//! between bugs that need distributed reasoning and bugs a reader of one function could find.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::fmt;

/// The scenario the oracle and the bundle share, as a report groups cases by it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// Nodes, replicas or peers the scenario needs for the failure to show (1 when one
    /// process alone shows it).
    pub nodes: u32,
    /// What a correct diagnosis has to reason across, most important first; at least one.
    pub across: Vec<Reasoning>,
}

impl Scenario {
    /// Whether the failure needs two or more nodes, replicas or peers.
    pub fn is_multi_node(&self) -> bool {
        self.nodes >= 2
    }

    /// A reason the scenario is malformed, if it is.
    pub fn problem(&self) -> Option<String> {
        if self.nodes == 0 {
            return Some("scenario.nodes must be at least 1".to_string());
        }
        if self.across.is_empty() {
            return Some("scenario.across must name at least one thing to reason across".into());
        }
        let mut seen = std::collections::BTreeSet::new();
        self.across
            .iter()
            .find(|r| !seen.insert(**r))
            .map(|r| format!("scenario.across names `{r}` twice"))
    }

    /// `nodes` and the reasons, as one table cell.
    pub fn describe(&self) -> String {
        let across: Vec<_> = self.across.iter().map(|r| r.as_str()).collect();
        format!("{}: {}", self.nodes, across.join(", "))
    }
}

/// Something a diagnosis must connect that no single function shows.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
pub enum Reasoning {
    /// The order in which messages or updates arrive (reordered, duplicated, interleaved).
    MessageOrder,
    /// A message that arrives late, after the state it was about has moved on.
    DelayedMessage,
    /// A message or update that is dropped or never sent.
    LostMessage,
    /// Nodes cut off from each other for a while, then healed.
    Partition,
    /// A node that restarts, with its storage or under a new identity.
    Restart,
    /// Replicas that change state concurrently and later merge.
    ConcurrentEdits,
    /// Nodes that join, leave or are reconfigured.
    MembershipChange,
    /// An election or a change of leader.
    LeaderChange,
    /// Timers, timeouts and periodic work driving the protocol.
    Timers,
    /// Tasks of one process that interleave (async tasks, threads).
    TaskInterleaving,
    /// Log compaction, snapshots or garbage collection of history.
    Compaction,
    /// A malformed or unexpected input from a peer.
    MalformedInput,
}

impl Reasoning {
    /// Every reason, in display order.
    pub const ALL: [Reasoning; 12] = [
        Reasoning::MessageOrder,
        Reasoning::DelayedMessage,
        Reasoning::LostMessage,
        Reasoning::Partition,
        Reasoning::Restart,
        Reasoning::ConcurrentEdits,
        Reasoning::MembershipChange,
        Reasoning::LeaderChange,
        Reasoning::Timers,
        Reasoning::TaskInterleaving,
        Reasoning::Compaction,
        Reasoning::MalformedInput,
    ];

    /// The kebab-case name used in `case.toml` and reports.
    pub fn as_str(self) -> &'static str {
        match self {
            Reasoning::MessageOrder => "message-order",
            Reasoning::DelayedMessage => "delayed-message",
            Reasoning::LostMessage => "lost-message",
            Reasoning::Partition => "partition",
            Reasoning::Restart => "restart",
            Reasoning::ConcurrentEdits => "concurrent-edits",
            Reasoning::MembershipChange => "membership-change",
            Reasoning::LeaderChange => "leader-change",
            Reasoning::Timers => "timers",
            Reasoning::TaskInterleaving => "task-interleaving",
            Reasoning::Compaction => "compaction",
            Reasoning::MalformedInput => "malformed-input",
        }
    }
}

impl fmt::Display for Reasoning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Reasoning {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Reasoning::ALL
            .into_iter()
            .find(|r| r.as_str() == s)
            .ok_or_else(|| {
                let names: Vec<_> = Reasoning::ALL.iter().map(|r| r.as_str()).collect();
                format!("unknown reason `{s}`; expected one of {}", names.join(", "))
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scenario(nodes: u32, across: &[Reasoning]) -> Scenario {
        Scenario {
            nodes,
            across: across.to_vec(),
        }
    }

    #[test]
    fn every_reason_round_trips_through_its_name() {
        for r in Reasoning::ALL {
            let json = serde_json::to_string(&r).unwrap();
            assert_eq!(json, format!("\"{}\"", r.as_str()));
            assert_eq!(serde_json::from_str::<Reasoning>(&json).unwrap(), r);
            assert_eq!(r.as_str().parse::<Reasoning>().unwrap(), r);
        }
        let err = "reorder".parse::<Reasoning>().unwrap_err();
        assert!(err.contains("message-order"), "{err}");
    }

    #[test]
    fn malformed_scenarios_are_named() {
        assert!(
            scenario(0, &[Reasoning::Restart])
                .problem()
                .unwrap()
                .contains("nodes")
        );
        assert!(scenario(2, &[]).problem().unwrap().contains("at least one"));
        let twice = scenario(
            2,
            &[Reasoning::Restart, Reasoning::Timers, Reasoning::Restart],
        );
        assert!(twice.problem().unwrap().contains("`restart` twice"));
        let good = scenario(3, &[Reasoning::MessageOrder, Reasoning::Restart]);
        assert_eq!(good.problem(), None);
        assert!(good.is_multi_node());
        assert!(!scenario(1, &[Reasoning::MalformedInput]).is_multi_node());
        assert_eq!(good.describe(), "3: message-order, restart");
    }
}
