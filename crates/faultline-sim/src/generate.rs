//! Schedules drawn from a seed: each seed picks a family of faults (calm, lossy, partitions,
//! crashes, whole-cluster crashes, churn, clock skew, frequent crashes, reordering, leader churn)
//! and draws its times, shapes and rates. A task keeps its hidden schedules as a list of seeds
//! for this generator.

use rand::rngs::ChaCha8Rng;
use rand::seq::{IndexedRandom, SliceRandom};
use rand::{RngExt, SeedableRng};
use serde::{Deserialize, Serialize};

use crate::api::{NodeId, Quorums};
use crate::plan::{
    ClockSkew, Crash, FaultPlan, Island, Limits, NetworkFaults, PLAN_VERSION, Partition, Schedule,
    Workload,
};

/// Everything of a schedule the generator does not draw.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Profile {
    /// Operations of every schedule.
    pub operations: u32,
    /// The storage limit of every schedule.
    pub storage_bytes: u64,
    /// Simulated time after the last fault before a run is stopped.
    pub recovery_ms: u64,
    /// Quorum sizes a schedule draws from, among those for its cluster's size; when empty the
    /// plan names none and servers use majorities.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub quorums: Vec<QuorumChoice>,
    /// Whether calm schedules shrink the cluster to an island for most of their run (see
    /// [`Island`]): the stretch lasts as long as other schedules leave for recovery and the
    /// workload, and the run ends [`ISLAND_SLACK_MS`] after it heals, so only a cluster that
    /// keeps serving on the island finishes in time.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub islands: bool,
}

/// Simulated time a run with an island goes on after it heals.
pub const ISLAND_SLACK_MS: u64 = 1_000;

impl Default for Profile {
    fn default() -> Self {
        Profile {
            operations: 1_000,
            storage_bytes: 16 * 1024,
            recovery_ms: 40_000,
            quorums: Vec::new(),
            islands: false,
        }
    }
}

/// Cluster sizes the generator draws (every family but frequent crashes picks one of them).
pub const CLUSTER_SIZES: [u32; 2] = [3, 5];

/// Quorum sizes a schedule of a cluster of `nodes` servers may get.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QuorumChoice {
    /// The cluster size it applies to.
    pub nodes: u32,
    /// Votes that elect a leader.
    pub election: u32,
    /// Servers that store an entry before it commits.
    pub replication: u32,
}

impl QuorumChoice {
    /// The quorums a server is given.
    pub fn quorums(&self) -> Quorums {
        Quorums {
            election: self.election,
            replication: self.replication,
        }
    }
}

impl Profile {
    /// Refuses quorum choices that are unsafe, are for a cluster size the generator never
    /// draws, or leave a size it draws without any: a schedule must never fall back to
    /// majorities unnoticed.
    pub fn check(&self) -> Result<(), String> {
        if self.quorums.is_empty() {
            return Ok(());
        }
        for c in &self.quorums {
            if !CLUSTER_SIZES.contains(&c.nodes) {
                return Err(format!(
                    "quorums for {} servers: the generator draws clusters of {CLUSTER_SIZES:?}",
                    c.nodes
                ));
            }
            c.quorums().check(c.nodes)?;
        }
        match CLUSTER_SIZES
            .iter()
            .find(|n| !self.quorums.iter().any(|c| c.nodes == **n))
        {
            Some(n) => Err(format!("no quorums for clusters of {n} servers")),
            None => Ok(()),
        }
    }
}

/// A family of faults; every schedule belongs to one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Family {
    /// Short delays only.
    Calm,
    /// Lost, duplicated and long-delayed messages.
    Lossy,
    /// Servers cut into groups and healed, again and again.
    Partitions,
    /// Single servers stopped and restarted.
    Crashes,
    /// Every server stopped at once and restarted.
    CrashAll,
    /// Partitions, crashes and an unreliable network together.
    Churn,
    /// Clocks far apart and running at different rates, with partitions.
    Skew,
    /// Many short crashes of a five-server cluster, two servers down at a time, over an
    /// unreliable network: the pattern where an entry of an earlier term gets overwritten.
    FrequentCrashes,
    /// Many messages held back for up to seconds while partitions move leadership around, so
    /// that messages of past terms keep arriving.
    Reordering,
    /// A long stretch of single crashes one after another, so that leadership keeps moving and
    /// every server leads at some point.
    LeaderChurn,
}

const FAMILIES: [Family; 10] = [
    Family::Calm,
    Family::Lossy,
    Family::Partitions,
    Family::Crashes,
    Family::CrashAll,
    Family::Churn,
    Family::Skew,
    Family::FrequentCrashes,
    Family::Reordering,
    Family::LeaderChurn,
];

/// The family `seed` draws.
pub fn family_of(seed: u64) -> Family {
    FAMILIES[(seed % FAMILIES.len() as u64) as usize]
}

/// The plan of a 3-server cluster with short delays and no fault, for examples and tests.
pub fn calm_plan(nodes: u32) -> FaultPlan {
    FaultPlan {
        version: PLAN_VERSION,
        nodes,
        quorums: None,
        network: NetworkFaults {
            loss: 0.0,
            duplicate: 0.0,
            min_delay_ms: 1,
            max_delay_ms: 5,
            long_delay: 0.0,
            long_delay_max_ms: 0,
        },
        partitions: Vec::new(),
        crashes: Vec::new(),
        island: None,
        clock_skew: Vec::new(),
        workload: Workload {
            clients: 3,
            operations: 100,
            keys: 3,
            request_timeout_ms: 200,
        },
        limits: Limits {
            time_limit_ms: 30_000,
            storage_bytes: 1 << 20,
        },
    }
}

/// The schedule `seed` draws under `profile`, named `name`.
pub fn generate(name: &str, seed: u64, profile: &Profile) -> Schedule {
    let family = family_of(seed);
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let nodes = match family {
        Family::FrequentCrashes => 5,
        _ => *CLUSTER_SIZES.choose(&mut rng).expect("not empty"),
    };
    let window = match family {
        Family::LeaderChurn => rng.random_range(10_000..20_000),
        _ => rng.random_range(3_000..8_000),
    };
    let mut plan = calm_plan(nodes);
    plan.workload = Workload {
        clients: rng.random_range(3..=7),
        operations: profile.operations,
        keys: rng.random_range(2..=10),
        request_timeout_ms: rng.random_range(100..=300),
    };
    let min_delay = rng.random_range(0..=2);
    plan.network.min_delay_ms = min_delay;
    plan.network.max_delay_ms = min_delay + rng.random_range(1..=20);
    let net = |rng: &mut ChaCha8Rng, plan: &mut FaultPlan, loss: f64, dup: f64| {
        plan.network.loss = rng.random_range(0.0..loss);
        plan.network.duplicate = rng.random_range(0.0..dup);
        plan.network.long_delay = rng.random_range(0.0..0.1);
        plan.network.long_delay_max_ms = rng.random_range(50..=500);
    };
    match family {
        Family::Calm => {}
        Family::Lossy => net(&mut rng, &mut plan, 0.25, 0.2),
        Family::Partitions => {
            net(&mut rng, &mut plan, 0.05, 0.05);
            plan.partitions = partitions(&mut rng, nodes, window);
        }
        Family::Crashes => {
            net(&mut rng, &mut plan, 0.05, 0.05);
            plan.crashes = crashes(&mut rng, nodes, window, 100..2_000, 1);
        }
        Family::CrashAll => {
            net(&mut rng, &mut plan, 0.05, 0.05);
            plan.crashes = crash_all(&mut rng, nodes, window);
        }
        Family::Churn => {
            net(&mut rng, &mut plan, 0.15, 0.1);
            plan.partitions = partitions(&mut rng, nodes, window);
            plan.crashes = crashes(&mut rng, nodes, window, 100..1_500, 1);
            plan.clock_skew = skew(&mut rng, nodes, 0.95..1.05);
        }
        Family::Skew => {
            net(&mut rng, &mut plan, 0.05, 0.05);
            plan.partitions = partitions(&mut rng, nodes, window);
            plan.clock_skew = skew(&mut rng, nodes, 0.8..1.25);
        }
        Family::FrequentCrashes => {
            net(&mut rng, &mut plan, 0.1, 0.1);
            plan.network.long_delay = rng.random_range(0.05..0.2);
            plan.crashes = crashes(&mut rng, nodes, window, 20..400, 2);
        }
        Family::Reordering => {
            net(&mut rng, &mut plan, 0.05, 0.1);
            plan.network.long_delay = rng.random_range(0.05..0.2);
            plan.network.long_delay_max_ms = rng.random_range(300..=2_000);
            plan.partitions = partitions(&mut rng, nodes, window);
        }
        Family::LeaderChurn => {
            net(&mut rng, &mut plan, 0.05, 0.05);
            plan.crashes = crashes(&mut rng, nodes, window, 50..600, 1);
        }
    }
    // Time for the faults, for recovery, and for every client's share of the operations at three
    // request timeouts each: a correct store on a network losing a quarter of its messages needs
    // about one and a half, so a slower but correct design still has room.
    let per_client = u64::from(profile.operations.div_ceil(plan.workload.clients));
    plan.limits = Limits {
        time_limit_ms: plan.faults_end_ms().max(window)
            + profile.recovery_ms
            + 3 * per_client * plan.workload.request_timeout_ms,
        storage_bytes: profile.storage_bytes,
    };
    // Drawn last, so that a profile without quorum choices draws the same plans as before.
    let choices: Vec<&QuorumChoice> = profile
        .quorums
        .iter()
        .filter(|c| c.nodes == nodes)
        .collect();
    plan.quorums = choices.choose(&mut rng).map(|c| c.quorums());
    if profile.islands && family == Family::Calm {
        let at_ms = rng.random_range(0..300);
        let heal_ms =
            at_ms + profile.recovery_ms + 3 * per_client * plan.workload.request_timeout_ms;
        plan.island = Some(Island { at_ms, heal_ms });
        plan.limits.time_limit_ms = heal_ms + ISLAND_SLACK_MS;
    }
    Schedule {
        name: name.to_string(),
        seed,
        plan,
    }
}

/// Partitions one after another inside `[300, window)`: one server cut off, a minority cut from
/// a majority, or (five servers) three groups with no majority.
fn partitions(rng: &mut ChaCha8Rng, nodes: u32, window: u64) -> Vec<Partition> {
    let mut out = Vec::new();
    let mut t = 300;
    loop {
        let at = t + rng.random_range(100..800);
        let heal = at + rng.random_range(200..2_500);
        if heal > window {
            return out;
        }
        let mut order: Vec<NodeId> = (0..nodes).collect();
        order.shuffle(rng);
        let groups = match rng.random_range(0..3) {
            0 => vec![order[..1].to_vec(), order[1..].to_vec()],
            1 if nodes >= 5 => vec![
                order[..2].to_vec(),
                order[2..4].to_vec(),
                order[4..].to_vec(),
            ],
            _ => {
                let minority = (nodes / 2) as usize;
                vec![order[..minority].to_vec(), order[minority..].to_vec()]
            }
        };
        out.push(Partition {
            at_ms: at,
            heal_ms: heal,
            groups,
        });
        t = heal;
    }
}

/// Crashes inside `[200, window)`, each down for a time drawn from `down`, with at most
/// `at_once` servers down together; every server is up again by the end of the window.
fn crashes(
    rng: &mut ChaCha8Rng,
    nodes: u32,
    window: u64,
    down: std::ops::Range<u64>,
    at_once: usize,
) -> Vec<Crash> {
    let mut out: Vec<Crash> = Vec::new();
    let mut t = 200;
    loop {
        t += rng.random_range(down.start / 2 + 10..down.end);
        let restart = t + rng.random_range(down.clone());
        if restart > window {
            return out;
        }
        let busy = |c: &Crash| c.at_ms < restart && t < c.restart_ms.unwrap_or(u64::MAX);
        if out.iter().filter(|c| busy(c)).count() >= at_once {
            continue;
        }
        let free: Vec<NodeId> = (0..nodes)
            .filter(|&n| !out.iter().any(|c| c.node == n && busy(c)))
            .collect();
        if let Some(&node) = free.choose(rng) {
            out.push(Crash {
                node,
                at_ms: t,
                restart_ms: Some(restart),
            });
        }
    }
}

/// One to three moments where every server stops, each restarting on its own shortly after.
fn crash_all(rng: &mut ChaCha8Rng, nodes: u32, window: u64) -> Vec<Crash> {
    let times = rng.random_range(1..=3u64);
    (0..times)
        .flat_map(|i| {
            let gap = (window - 500) / times;
            let at = 500 + i * gap;
            let restarts: Vec<u64> = (0..nodes)
                .map(|_| at + rng.random_range(50..gap.min(1_000)))
                .collect();
            (0..nodes).map(move |node| Crash {
                node,
                at_ms: at,
                restart_ms: Some(restarts[node as usize]),
            })
        })
        .collect()
}

/// A clock for every server: an offset of up to a minute and a rate from `rates`.
fn skew(rng: &mut ChaCha8Rng, nodes: u32, rates: std::ops::Range<f64>) -> Vec<ClockSkew> {
    (0..nodes)
        .map(|node| ClockSkew {
            node,
            offset_ms: rng.random_range(0..60_000),
            rate: rng.random_range(rates.clone()),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_generated_schedule_is_valid_and_seeds_cover_every_family() {
        let profile = Profile::default();
        let mut seen = Vec::new();
        for seed in 0..200 {
            let s = generate("g", seed, &profile);
            s.plan
                .validate()
                .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
            assert_eq!(s.plan.workload.operations, profile.operations);
            assert!(s.plan.limits.time_limit_ms > s.plan.faults_end_ms());
            if !seen.contains(&family_of(seed)) {
                seen.push(family_of(seed));
            }
        }
        assert_eq!(seen.len(), FAMILIES.len());
        assert_eq!(generate("g", 9, &profile), generate("g", 9, &profile));
        assert_ne!(generate("g", 9, &profile), generate("g", 17, &profile));
    }

    #[test]
    fn fault_families_draw_their_faults() {
        let profile = Profile::default();
        let of = |family| {
            (0..64)
                .filter(|s| family_of(*s) == family)
                .map(|s| generate("g", s, &profile).plan)
                .collect::<Vec<_>>()
        };
        assert!(
            of(Family::Partitions)
                .iter()
                .all(|p| !p.partitions.is_empty())
        );
        assert!(of(Family::Crashes).iter().all(|p| !p.crashes.is_empty()));
        assert!(
            of(Family::CrashAll)
                .iter()
                .all(|p| p.crashes.len() as u32 >= p.nodes)
        );
        assert!(
            of(Family::Skew)
                .iter()
                .all(|p| p.clock_skew.len() as u32 == p.nodes)
        );
        assert!(of(Family::Calm).iter().all(|p| p.network.loss == 0.0));
        assert!(
            of(Family::Reordering)
                .iter()
                .all(|p| p.network.long_delay >= 0.05 && p.network.long_delay_max_ms >= 300)
        );
        assert!(
            of(Family::LeaderChurn)
                .iter()
                .all(|p| p.crashes.len() >= 10)
        );
        for p in of(Family::FrequentCrashes) {
            let most_down = p
                .crashes
                .iter()
                .map(|c| {
                    p.crashes
                        .iter()
                        .filter(|d| d.at_ms <= c.at_ms && c.at_ms < d.restart_ms.unwrap())
                        .count()
                })
                .max()
                .unwrap();
            assert!((1..=2).contains(&most_down), "{most_down} down at once");
        }
    }

    #[test]
    fn quorum_choices_are_drawn_per_cluster_size_and_islands_end_calm_runs() {
        let plain = Profile::default();
        let choice = |nodes, election, replication| QuorumChoice {
            nodes,
            election,
            replication,
        };
        let flex = Profile {
            quorums: vec![choice(3, 3, 1), choice(5, 4, 2), choice(5, 5, 1)],
            islands: true,
            ..Profile::default()
        };
        flex.check().unwrap();
        for seed in 0..60 {
            let (a, b) = (generate("g", seed, &plain), generate("g", seed, &flex));
            assert_eq!(a.plan.quorums, None);
            assert_eq!(a.plan.island, None);
            let q = b.plan.quorums.expect("a choice for every size");
            assert!(
                flex.quorums
                    .contains(&choice(b.plan.nodes, q.election, q.replication))
            );
            // The flexible profile draws the same faults, after them.
            assert_eq!(
                (&a.plan.partitions, &a.plan.crashes, a.plan.nodes),
                (&b.plan.partitions, &b.plan.crashes, b.plan.nodes)
            );
            let island = b.plan.island;
            assert_eq!(
                island.is_some(),
                family_of(seed) == Family::Calm,
                "seed {seed}"
            );
            if let Some(island) = island {
                assert_eq!(
                    b.plan.limits.time_limit_ms,
                    island.heal_ms + ISLAND_SLACK_MS
                );
            }
            b.plan.validate().unwrap();
        }
        let unsafe_choice = Profile {
            quorums: vec![choice(3, 2, 1), choice(5, 3, 3)],
            ..Profile::default()
        };
        assert!(
            unsafe_choice
                .check()
                .unwrap_err()
                .contains("need not share")
        );
        let missing = Profile {
            quorums: vec![choice(5, 4, 2)],
            ..Profile::default()
        };
        assert!(missing.check().unwrap_err().contains("3 servers"));
        let odd_size = Profile {
            quorums: vec![choice(4, 3, 2)],
            ..Profile::default()
        };
        assert!(odd_size.check().is_err());
    }
}
