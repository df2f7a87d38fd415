//! Schedules: a seed and the faults a run goes through, as data that can be written, read back
//! and replayed.
//!
//! Every time in a plan is simulated time in milliseconds from the start of the run. A schedule
//! says everything a run depends on: two runs of one schedule give the same history byte for
//! byte.

use serde::{Deserialize, Serialize};

use crate::api::{NodeId, Quorums};

/// The plan format this crate writes and reads; a plan of any other version is refused.
pub const PLAN_VERSION: u32 = 1;

/// One seeded run: the seed draws every choice the plan leaves open (which message is lost,
/// each latency, each client's operations).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Schedule {
    /// A name for reports, such as `hidden-017`.
    pub name: String,
    /// The seed of every random choice of the run.
    pub seed: u64,
    /// The faults and the workload.
    pub plan: FaultPlan,
}

/// What a run goes through: the cluster, the network's faults, partitions, crashes, clock skew,
/// the workload and the limits a server must keep to.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FaultPlan {
    /// Always [`PLAN_VERSION`].
    pub version: u32,
    /// Servers in the cluster, numbered `0..nodes`.
    pub nodes: u32,
    /// The quorum sizes servers are told to use; a majority each when absent (plans of tasks
    /// that do not vary them leave it out).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quorums: Option<Quorums>,
    /// Faults of every message, between servers and between clients and servers.
    pub network: NetworkFaults,
    /// Server groups cut from each other for a while.
    #[serde(default)]
    pub partitions: Vec<Partition>,
    /// Servers stopped for a while; each restarts from what it stored.
    #[serde(default)]
    pub crashes: Vec<Crash>,
    /// A stretch where the cluster shrinks to one replication quorum around the server that
    /// last answered a client.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub island: Option<Island>,
    /// Servers whose clock is off; a server not listed reads the true time.
    #[serde(default)]
    pub clock_skew: Vec<ClockSkew>,
    /// What the clients do.
    pub workload: Workload,
    /// What a server must keep to.
    pub limits: Limits,
}

/// Faults applied to each message on its own.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NetworkFaults {
    /// Chance that a message is lost, in `[0, 1)`.
    pub loss: f64,
    /// Chance that a message is delivered twice, in `[0, 1)`.
    pub duplicate: f64,
    /// Shortest latency of a message.
    pub min_delay_ms: u64,
    /// Longest latency of a message; messages of one link overtake each other within the range.
    pub max_delay_ms: u64,
    /// Chance that a message is held back longer, in `[0, 1)`, so that it arrives well after
    /// later ones.
    pub long_delay: f64,
    /// Longest extra time a held-back message waits.
    pub long_delay_max_ms: u64,
}

/// Servers split into groups that cannot reach each other from `at_ms` until `heal_ms`.
/// Clients reach every server throughout.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Partition {
    /// When the cut starts.
    pub at_ms: u64,
    /// When it heals; after `at_ms`.
    pub heal_ms: u64,
    /// Every server in exactly one group.
    pub groups: Vec<Vec<NodeId>>,
}

/// Until `heal_ms`, from the first moment at or after `at_ms` when some client has had an
/// answer, the server that gave the last answer and the fewest others it needs to commit (the
/// next ones by number, wrapping around: a replication quorum in all) form one group, and every
/// other server is alone. The group is chosen when the island forms because which server leads
/// depends on the servers, not on the plan: a cluster on flexible quorums keeps serving through
/// it, one that commits with a majority cannot.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Island {
    /// When the cut may start.
    pub at_ms: u64,
    /// When it heals; after `at_ms`.
    pub heal_ms: u64,
}

/// A server stopped at `at_ms`, losing everything it did not store, and started again at
/// `restart_ms` (or never).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Crash {
    /// Which server.
    pub node: NodeId,
    /// When it stops.
    pub at_ms: u64,
    /// When it starts again, after `at_ms`; `None` keeps it down to the end.
    pub restart_ms: Option<u64>,
}

/// A server's clock: it reads `offset_ms + rate × true time`, and its sleeps last accordingly.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClockSkew {
    /// Which server.
    pub node: NodeId,
    /// What its clock reads at the start.
    pub offset_ms: u64,
    /// How fast its clock runs against true time, in `[0.5, 2]`.
    pub rate: f64,
}

/// The clients and their operations.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Workload {
    /// Clients; each has one operation outstanding at a time.
    pub clients: u32,
    /// Operations over all clients.
    pub operations: u32,
    /// Keys the operations spread over.
    pub keys: u32,
    /// How long a client waits for an answer before it tries another server.
    pub request_timeout_ms: u64,
}

/// What a server must keep to besides answering correctly.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    /// The run ends at this time; operations not answered by then fail the run on liveness.
    pub time_limit_ms: u64,
    /// Most bytes a server may hold in its storage at once (names and contents).
    pub storage_bytes: u64,
}

/// Why a plan cannot run.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PlanError {
    /// The plan is of another format version.
    #[error("plan version {found} is not supported (this harness reads version {PLAN_VERSION})")]
    Version {
        /// The version it says.
        found: u32,
    },
    /// A field is outside what the harness can run.
    #[error("invalid plan: {0}")]
    Invalid(String),
}

fn check(ok: bool, what: impl FnOnce() -> String) -> Result<(), PlanError> {
    if ok {
        Ok(())
    } else {
        Err(PlanError::Invalid(what()))
    }
}

fn check_chance(name: &str, value: f64) -> Result<(), PlanError> {
    check((0.0..1.0).contains(&value), || {
        format!("{name} is {value}, not a chance in [0, 1)")
    })
}

impl FaultPlan {
    /// Refuses a plan the harness cannot run, naming the first field at fault.
    pub fn validate(&self) -> Result<(), PlanError> {
        if self.version != PLAN_VERSION {
            return Err(PlanError::Version {
                found: self.version,
            });
        }
        check((1..=9).contains(&self.nodes), || {
            format!("{} nodes; a cluster has 1 to 9", self.nodes)
        })?;
        if let Some(q) = &self.quorums {
            q.check(self.nodes).map_err(PlanError::Invalid)?;
        }
        let net = &self.network;
        check_chance("network.loss", net.loss)?;
        check_chance("network.duplicate", net.duplicate)?;
        check_chance("network.long_delay", net.long_delay)?;
        check(net.min_delay_ms <= net.max_delay_ms, || {
            format!(
                "network.min_delay_ms {} is above max_delay_ms {}",
                net.min_delay_ms, net.max_delay_ms
            )
        })?;
        check(
            net.max_delay_ms <= 10_000 && net.long_delay_max_ms <= 60_000,
            || "network delays above 10 s (60 s held back) are not supported".into(),
        )?;
        for (i, p) in self.partitions.iter().enumerate() {
            self.check_partition(i, p)?;
        }
        self.check_crashes()?;
        if let Some(island) = &self.island {
            check(island.at_ms < island.heal_ms, || {
                format!(
                    "island heals at {} before it starts at {}",
                    island.heal_ms, island.at_ms
                )
            })?;
        }
        for s in &self.clock_skew {
            self.check_node(&format!("clock_skew of node {}", s.node), s.node)?;
            check((0.5..=2.0).contains(&s.rate), || {
                format!(
                    "clock_skew of node {}: rate {} outside [0.5, 2]",
                    s.node, s.rate
                )
            })?;
        }
        check(
            self.clock_skew
                .iter()
                .enumerate()
                .all(|(i, s)| self.clock_skew[..i].iter().all(|t| t.node != s.node)),
            || "clock_skew names a node twice".into(),
        )?;
        let w = &self.workload;
        check(w.clients >= 1 && w.keys >= 1 && w.operations >= 1, || {
            "workload needs at least one client, one key and one operation".into()
        })?;
        check(w.clients <= 1_000 && w.request_timeout_ms >= 1, || {
            "workload: at most 1000 clients and a request timeout of at least 1 ms".into()
        })?;
        check(self.limits.time_limit_ms >= 1, || {
            "limits.time_limit_ms must be positive".into()
        })
    }

    fn check_node(&self, what: &str, node: NodeId) -> Result<(), PlanError> {
        check(node < self.nodes, || {
            format!("{what}: node {node} is not in a cluster of {}", self.nodes)
        })
    }

    fn check_partition(&self, index: usize, p: &Partition) -> Result<(), PlanError> {
        check(p.at_ms < p.heal_ms, || {
            format!(
                "partition {index} heals at {} before it starts at {}",
                p.heal_ms, p.at_ms
            )
        })?;
        let mut seen = vec![false; self.nodes as usize];
        for &node in p.groups.iter().flatten() {
            self.check_node(&format!("partition {index}"), node)?;
            check(!seen[node as usize], || {
                format!("partition {index} puts node {node} in two groups")
            })?;
            seen[node as usize] = true;
        }
        check(seen.iter().all(|s| *s), || {
            format!("partition {index} leaves a node out of every group")
        })
    }

    fn check_crashes(&self) -> Result<(), PlanError> {
        for (i, c) in self.crashes.iter().enumerate() {
            self.check_node(&format!("crash {i}"), c.node)?;
            let end = c.restart_ms.unwrap_or(u64::MAX);
            check(end > c.at_ms, || {
                format!("crash {i} restarts node {} before it stops", c.node)
            })?;
            for (j, d) in self.crashes[..i].iter().enumerate() {
                let other_end = d.restart_ms.unwrap_or(u64::MAX);
                check(
                    d.node != c.node || other_end <= c.at_ms || end <= d.at_ms,
                    || format!("crashes {j} and {i} of node {} overlap", c.node),
                )?;
            }
        }
        Ok(())
    }

    /// The clock of `node`: its offset and rate (the true clock when the plan names none).
    pub fn skew_of(&self, node: NodeId) -> (u64, f64) {
        self.clock_skew
            .iter()
            .find(|s| s.node == node)
            .map_or((0, 1.0), |s| (s.offset_ms, s.rate))
    }

    /// The quorums the servers get: the plan's, or a majority each.
    pub fn quorums(&self) -> Quorums {
        self.quorums
            .unwrap_or_else(|| Quorums::majority(self.nodes))
    }

    /// The time of the last partition heal or restart: after it the cluster is whole.
    pub fn faults_end_ms(&self) -> u64 {
        let heals = self.partitions.iter().map(|p| p.heal_ms);
        let restarts = self.crashes.iter().filter_map(|c| c.restart_ms);
        let island = self.island.iter().map(|i| i.heal_ms);
        heals.chain(restarts).chain(island).max().unwrap_or(0)
    }
}

impl Schedule {
    /// Reads a schedule from JSON, refusing a plan that cannot run.
    pub fn from_json(text: &str) -> Result<Self, PlanError> {
        let schedule: Schedule = serde_json::from_str(text)
            .map_err(|e| PlanError::Invalid(format!("not a schedule: {e}")))?;
        schedule.plan.validate()?;
        Ok(schedule)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quorums_that_need_not_intersect_and_backwards_islands_are_refused() {
        let mut plan = crate::generate::calm_plan(5);
        assert_eq!(plan.quorums(), Quorums::majority(5));
        plan.quorums = Some(Quorums {
            election: 4,
            replication: 2,
        });
        plan.validate().unwrap();
        for (election, replication) in [(2, 4), (3, 2), (6, 1), (4, 0)] {
            plan.quorums = Some(Quorums {
                election,
                replication,
            });
            assert!(plan.validate().is_err(), "{election} and {replication}");
        }
        plan.quorums = None;
        plan.island = Some(Island {
            at_ms: 9,
            heal_ms: 9,
        });
        let err = plan.validate().unwrap_err().to_string();
        assert!(err.contains("island"), "{err}");
    }
}
