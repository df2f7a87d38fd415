//! One run of a schedule: the cluster as turmoil hosts, the clients, and the plan's partitions,
//! crashes and restarts applied at their times.

use std::cell::{Cell, RefCell};
use std::collections::BTreeSet;
use std::rc::Rc;
use std::time::Duration;

use crate::api::{Env, NodeId, Server};
use crate::client::{self, Shared};
use crate::clock::SimClock;
use crate::disk::{Disk, SimStorage};
use crate::history::{KvHistory, Recorder};
use crate::plan::{FaultPlan, Partition, PlanError, Schedule};
use crate::relay::{self, Cut, RELAY_HOST};
use crate::seed::{Stream, derive};
use crate::transport::{CLIENTS_HOST, NetStats, SimNet, host_name};

/// The simulator's time step: every host runs this much simulated time per step.
const TICK: Duration = Duration::from_millis(1);

/// What one run produced.
#[derive(Debug, Clone, PartialEq)]
pub struct RunReport {
    /// The schedule's name.
    pub schedule: String,
    /// The schedule's seed.
    pub seed: u64,
    /// Every operation the clients called.
    pub history: KvHistory,
    /// Replies no correct server sends, as found.
    pub protocol_errors: Vec<String>,
    /// Set when a server panicked (or the simulation failed otherwise): what it said.
    pub crashed_with: Option<String>,
    /// Simulated time at the end of the run.
    pub sim_ms: u64,
    /// The most bytes each server held in its storage at once.
    pub peak_storage: Vec<u64>,
    /// What happened to messages.
    pub net: NetStats,
}

/// Something the plan does at a time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Event {
    /// The set of active partitions changes.
    Partitions,
    Crash(NodeId),
    Restart(NodeId),
    /// The island may form from now on (once a client has had an answer).
    Island,
    /// The island heals.
    IslandHeal,
}

/// The plan's events in time order (the plan's order among events of one time).
fn timeline(plan: &FaultPlan) -> Vec<(u64, Event)> {
    let mut events = Vec::new();
    for p in &plan.partitions {
        events.push((p.at_ms, Event::Partitions));
        events.push((p.heal_ms, Event::Partitions));
    }
    for c in &plan.crashes {
        events.push((c.at_ms, Event::Crash(c.node)));
        if let Some(at) = c.restart_ms {
            events.push((at, Event::Restart(c.node)));
        }
    }
    if let Some(island) = &plan.island {
        events.push((island.at_ms, Event::Island));
        events.push((island.heal_ms, Event::IslandHeal));
    }
    events.sort_by_key(|(at, _)| *at);
    events
}

/// The island's groups around `served`: it and the next servers by number up to a replication
/// quorum, then every other server alone.
fn island_groups(plan: &FaultPlan, served: NodeId) -> Vec<Vec<NodeId>> {
    let size = plan.quorums().replication.clamp(1, plan.nodes);
    let ring = |i: u32| (served + i) % plan.nodes;
    let mut groups = vec![(0..size).map(ring).collect::<Vec<_>>()];
    groups.extend((size..plan.nodes).map(|i| vec![ring(i)]));
    groups
}

/// The server pairs the partitions active at `now_ms` cut, with the island's while it lasts,
/// each pair low first.
fn cut_pairs(
    plan: &FaultPlan,
    now_ms: u64,
    island: Option<&Partition>,
) -> BTreeSet<(NodeId, NodeId)> {
    let mut cut = BTreeSet::new();
    let active = plan
        .partitions
        .iter()
        .filter(|p| p.at_ms <= now_ms && now_ms < p.heal_ms);
    for p in active.chain(island) {
        for (i, a) in p.groups.iter().enumerate() {
            for b in &p.groups[i + 1..] {
                for &x in a {
                    for &y in b {
                        cut.insert((x.min(y), x.max(y)));
                    }
                }
            }
        }
    }
    cut
}

/// Runs `schedule` with server `S` and reports what happened. Only a plan the harness cannot run
/// is an error; everything a server does wrong is in the report.
pub fn run<S: Server>(schedule: &Schedule) -> Result<RunReport, PlanError> {
    let plan = Rc::new(schedule.plan.clone());
    plan.validate()?;
    let seed = schedule.seed;
    let limit = Duration::from_millis(plan.limits.time_limit_ms);
    let mut sim = turmoil::Builder::new()
        .rng_seed(derive(seed, Stream::Simulator, &[]))
        .tick_duration(TICK)
        .simulation_duration(limit + Duration::from_secs(1))
        .min_message_latency(Duration::from_millis(plan.network.min_delay_ms))
        .max_message_latency(Duration::from_millis(plan.network.max_delay_ms))
        .udp_capacity(16 * 1024)
        .build();
    let stats = Rc::new(RefCell::new(NetStats::default()));
    let cut: Cut = Rc::default();
    let relay_cut = cut.clone();
    sim.host(RELAY_HOST, move || relay::run(relay_cut.clone()));
    let disks: Vec<Rc<RefCell<Disk>>> = (0..plan.nodes).map(|_| Rc::default()).collect();
    for node in 0..plan.nodes {
        add_server::<S>(
            &mut sim,
            node,
            &plan,
            seed,
            disks[node as usize].clone(),
            &stats,
        );
    }
    let recorder = Rc::new(RefCell::new(Recorder::default()));
    let served = Rc::new(Cell::new(None));
    sim.client(
        CLIENTS_HOST,
        client::run_all(Shared {
            plan: plan.clone(),
            seed,
            stats: stats.clone(),
            recorder: recorder.clone(),
            served: served.clone(),
        }),
    );

    let events = timeline(&plan);
    let mut next = 0;
    let mut crashed_with = None;
    // The island is due from its start until its heal, and forms at the first step of that
    // stretch after some client has had an answer: then it is known which server serves.
    let mut island_due = false;
    let mut island: Option<Partition> = None;
    loop {
        let now = sim.elapsed();
        let now_ms = u64::try_from(now.as_millis()).unwrap_or(u64::MAX);
        let mut cut_changed = false;
        while let Some(&(at, event)) = events.get(next) {
            if at > now_ms {
                break;
            }
            next += 1;
            match event {
                Event::Partitions => cut_changed = true,
                Event::Island => island_due = true,
                Event::IslandHeal => {
                    island_due = false;
                    cut_changed |= island.take().is_some();
                }
                Event::Crash(node) => sim.crash(host_name(node)),
                Event::Restart(node) => sim.bounce(host_name(node)),
            }
        }
        if island_due && let Some(server) = served.get() {
            island_due = false;
            island = Some(Partition {
                at_ms: now_ms,
                heal_ms: u64::MAX,
                groups: island_groups(&plan, server),
            });
            cut_changed = true;
        }
        if cut_changed {
            let want = cut_pairs(&plan, now_ms, island.as_ref());
            let now_cut = cut.borrow().clone();
            for &(a, b) in want.difference(&now_cut) {
                sim.partition(host_name(a), host_name(b));
            }
            for &(a, b) in now_cut.difference(&want) {
                sim.repair(host_name(a), host_name(b));
            }
            *cut.borrow_mut() = want;
        }
        if now >= limit {
            break;
        }
        match sim.step() {
            Ok(true) => break,
            Ok(false) => {}
            Err(e) => {
                crashed_with = Some(e.to_string());
                break;
            }
        }
    }
    let sim_ms = u64::try_from(sim.elapsed().as_millis()).unwrap_or(u64::MAX);
    drop(sim);
    let (history, protocol_errors) = std::mem::take(&mut *recorder.borrow_mut()).finish();
    let net = stats.borrow().clone();
    Ok(RunReport {
        schedule: schedule.name.clone(),
        seed,
        history,
        protocol_errors,
        crashed_with,
        sim_ms,
        peak_storage: disks.iter().map(|d| d.borrow().peak_bytes()).collect(),
        net,
    })
}

/// Adds server `node` as a host whose software is `S`; each start (the first and every restart)
/// is a new incarnation with its own seeds over the same disk.
fn add_server<S: Server>(
    sim: &mut turmoil::Sim<'_>,
    node: NodeId,
    plan: &Rc<FaultPlan>,
    seed: u64,
    disk: Rc<RefCell<Disk>>,
    stats: &Rc<RefCell<NetStats>>,
) {
    let incarnation = Cell::new(0u64);
    let (offset_ms, rate) = plan.skew_of(node);
    let plan = plan.clone();
    let stats = stats.clone();
    sim.host(host_name(node), move || {
        let n = incarnation.get();
        incarnation.set(n + 1);
        let labels = [u64::from(node), n];
        let storage = SimStorage::new(disk.clone());
        let clock = SimClock::new(offset_ms, rate);
        let faults = plan.network.clone();
        let nodes = plan.nodes;
        let quorums = plan.quorums();
        let stats = stats.clone();
        async move {
            let net = SimNet::bind(
                node,
                nodes,
                faults,
                derive(seed, Stream::ServerNet, &labels),
                stats,
            )
            .await?;
            S::run(Env {
                id: node,
                nodes: (0..nodes).collect(),
                quorums,
                net,
                storage,
                clock,
                seed: derive(seed, Stream::Server, &labels),
            })
            .await;
            Ok(())
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::Partition;

    #[test]
    fn overlapping_partitions_cut_the_union_of_their_pairs() {
        let mut plan = crate::generate::calm_plan(3);
        plan.partitions = vec![
            Partition {
                at_ms: 0,
                heal_ms: 100,
                groups: vec![vec![0], vec![1, 2]],
            },
            Partition {
                at_ms: 50,
                heal_ms: 150,
                groups: vec![vec![0, 1], vec![2]],
            },
        ];
        let pairs = |t| cut_pairs(&plan, t, None).into_iter().collect::<Vec<_>>();
        assert_eq!(pairs(10), vec![(0, 1), (0, 2)]);
        assert_eq!(pairs(60), vec![(0, 1), (0, 2), (1, 2)]);
        assert_eq!(pairs(120), vec![(0, 2), (1, 2)]);
        assert_eq!(pairs(150), vec![]);
        let times: Vec<u64> = timeline(&plan).iter().map(|(t, _)| *t).collect();
        assert_eq!(times, vec![0, 50, 100, 150]);
    }

    #[test]
    fn an_island_keeps_a_replication_quorum_around_the_serving_server() {
        let mut plan = crate::generate::calm_plan(5);
        plan.quorums = Some(crate::api::Quorums {
            election: 4,
            replication: 2,
        });
        assert_eq!(
            island_groups(&plan, 4),
            vec![vec![4, 0], vec![1], vec![2], vec![3]]
        );
        plan.quorums = None;
        assert_eq!(
            island_groups(&plan, 1),
            vec![vec![1, 2, 3], vec![4], vec![0]]
        );
        let island = Partition {
            at_ms: 0,
            heal_ms: u64::MAX,
            groups: vec![vec![0, 1], vec![2]],
        };
        let mut three = crate::generate::calm_plan(3);
        three.island = Some(crate::plan::Island {
            at_ms: 5,
            heal_ms: 10,
        });
        let pairs: Vec<_> = cut_pairs(&three, 7, Some(&island)).into_iter().collect();
        assert_eq!(pairs, vec![(0, 2), (1, 2)]);
        assert_eq!(three.faults_end_ms(), 10);
    }
}
