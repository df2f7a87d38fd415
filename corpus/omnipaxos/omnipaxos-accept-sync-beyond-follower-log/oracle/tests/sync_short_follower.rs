//! After a leader change, followers that accepted fewer entries of the previous round than the
//! new leader must end up with exactly the leader's decided log, for any cluster size, node ids,
//! priorities, log lengths and message order.

use std::collections::BTreeMap;

use omnipaxos::messages::Message;
use omnipaxos::storage::{Entry, NoSnapshot};
use omnipaxos::util::NodeId;
use omnipaxos::{ClusterConfig, OmniPaxos, OmniPaxosConfig, ServerConfig};
use omnipaxos_storage::memory_storage::MemoryStorage;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

#[derive(Clone, Debug, PartialEq)]
pub struct Cmd(pub u64);

impl Entry for Cmd {
    type Snapshot = NoSnapshot;
}

pub type Node = OmniPaxos<Cmd, MemoryStorage<Cmd>>;
type Filter<'a> = &'a dyn Fn(&Message<Cmd>) -> bool;

/// The cluster and the schedule of one run.
pub struct Params {
    /// (pid, leader priority); the highest priority leads first, the second highest next.
    pub priorities: Vec<(NodeId, u32)>,
    /// Followers that miss the middle commands (never the second highest priority).
    pub short: Vec<NodeId>,
    pub common: u64,
    pub missed: u64,
    pub after: u64,
    pub net_seed: u64,
    pub shuffle: bool,
}

impl Params {
    pub fn from_seed(seed: u64, n: usize) -> Self {
        let mut rng = ChaCha8Rng::seed_from_u64(seed * 10 + n as u64);
        // Sequence Paxos 0.2 numbers its servers 1..=n; the roles go to them at random.
        let mut pool: Vec<NodeId> = (1..=n as NodeId).collect();
        pool.shuffle(&mut rng);
        let mut prios: Vec<u32> = (1..20).map(|p| p * 5).collect();
        prios.shuffle(&mut rng);
        let mut priorities: Vec<(NodeId, u32)> = pool[..n].iter().copied().zip(prios).collect();
        priorities.sort_by(|a, b| b.1.cmp(&a.1));
        // The leader and the next leader hold every entry; enough others hold them too for a
        // majority, the rest miss the middle commands.
        let short = priorities[n / 2 + 1..].iter().map(|p| p.0).collect();
        priorities.shuffle(&mut rng);
        Params {
            priorities,
            short,
            common: rng.gen_range(1..4),
            missed: rng.gen_range(1..4),
            after: rng.gen_range(1..4),
            net_seed: rng.gen(),
            shuffle: true,
        }
    }

    fn ranked(&self) -> Vec<NodeId> {
        let mut p = self.priorities.clone();
        p.sort_by(|a, b| b.1.cmp(&a.1));
        p.into_iter().map(|p| p.0).collect()
    }
}

/// The points of a run an observer is told about.
pub enum Step {
    /// The first leader is elected everywhere; next it appends the common commands.
    Elected,
    /// The first leader decided the commands the short followers missed.
    Missed,
    /// The first leader has crashed; the others elect the next one.
    Crashed,
    /// The next leader has appended its commands; ticks follow.
    Appended,
    /// The run is over.
    End,
}

/// Sees the steps of a run and every delivered message.
pub trait Observer {
    fn step(&mut self, _c: &Cluster, _step: Step) {}
    fn message(&mut self, _m: &Message<Cmd>) {}
}

impl Observer for () {}

pub struct Cluster {
    pub nodes: BTreeMap<NodeId, Node>,
    rng: ChaCha8Rng,
    shuffle: bool,
    pub first: NodeId,
    pub next: NodeId,
    pub alive: Vec<NodeId>,
    /// Commands appended so far.
    pub cmds: u64,
}

impl Cluster {
    /// Delivers messages (those `keep` accepts; the rest are lost) in a seeded order until
    /// nobody sends anything.
    fn exchange(&mut self, keep: Filter, obs: &mut dyn Observer) {
        for _ in 0..1000 {
            let mut out = Vec::new();
            for node in self.nodes.values_mut() {
                out.extend(node.outgoing_messages());
            }
            if out.is_empty() {
                return;
            }
            if self.shuffle {
                out.shuffle(&mut self.rng);
            }
            for m in out {
                if keep(&m) {
                    obs.message(&m);
                    let to = m.get_receiver();
                    self.nodes.get_mut(&to).unwrap().handle_incoming(m);
                }
            }
        }
        panic!("the cluster never went quiet");
    }

    fn tick(&mut self, alive: &[NodeId], keep: Filter, obs: &mut dyn Observer) {
        for pid in alive {
            self.nodes.get_mut(pid).unwrap().tick();
        }
        self.exchange(keep, obs);
    }

    fn tick_until(
        &mut self,
        alive: &[NodeId],
        keep: Filter,
        obs: &mut dyn Observer,
        done: &dyn Fn(&Cluster) -> bool,
    ) {
        for _ in 0..10_000 {
            if done(self) {
                return;
            }
            self.tick(alive, keep, obs);
        }
        panic!("condition never reached");
    }

    fn log(&self, pid: NodeId) -> Vec<String> {
        let node = &self.nodes[&pid];
        (0..node.get_decided_idx()).map(|i| format!("{:?}", node.read(i))).collect()
    }
}

/// Runs the schedule of `p`: the first leader decides `common` commands everywhere and `missed`
/// more without the short followers, crashes, and the next leader appends `after` commands and
/// ticks 200 times; `obs` sees every delivered message and the steps.
pub fn run(p: &Params, obs: &mut dyn Observer) -> Cluster {
    let pids: Vec<NodeId> = p.priorities.iter().map(|(p, _)| *p).collect();
    let mut nodes = BTreeMap::new();
    for &(pid, prio) in &p.priorities {
        let config = OmniPaxosConfig {
            cluster_config: ClusterConfig { configuration_id: 1, nodes: pids.clone(), ..Default::default() },
            server_config: ServerConfig { pid, leader_priority: prio, ..Default::default() },
        };
        nodes.insert(pid, config.build(MemoryStorage::default()).expect("valid config"));
    }
    let ranked = p.ranked();
    let (first, next) = (ranked[0], ranked[1]);
    let alive: Vec<NodeId> = pids.iter().copied().filter(|&x| x != first).collect();
    let mut c = Cluster {
        nodes,
        rng: ChaCha8Rng::seed_from_u64(p.net_seed),
        shuffle: p.shuffle,
        first,
        next,
        alive: alive.clone(),
        cmds: 0,
    };
    let all: Filter = &|_| true;
    c.tick_until(&pids, all, obs, &|c| c.nodes.values().all(|n| n.get_current_leader() == Some(first)));
    obs.step(&c, Step::Elected);

    for _ in 0..p.common {
        c.cmds += 1;
        let cmd = c.cmds;
        c.nodes.get_mut(&first).unwrap().append(Cmd(cmd)).unwrap();
    }
    c.exchange(all, obs);
    let short = p.short.clone();
    let cut_short = move |m: &Message<Cmd>| !short.contains(&m.get_receiver()) && !short.contains(&m.get_sender());
    for _ in 0..p.missed {
        c.cmds += 1;
        let cmd = c.cmds;
        c.nodes.get_mut(&first).unwrap().append(Cmd(cmd)).unwrap();
    }
    c.exchange(&cut_short, obs);
    assert_eq!(c.nodes[&first].get_decided_idx(), c.cmds, "the first leader decided every command");
    obs.step(&c, Step::Missed);

    // The first leader is gone; the others elect the next one and carry on.
    obs.step(&c, Step::Crashed);
    let without_first = move |m: &Message<Cmd>| m.get_receiver() != first && m.get_sender() != first;
    c.tick_until(&alive, &without_first, obs, &|c| {
        alive.iter().all(|x| c.nodes[x].get_current_leader() == Some(next))
    });
    for _ in 0..p.after {
        c.cmds += 1;
        let cmd = c.cmds;
        c.nodes.get_mut(&next).unwrap().append(Cmd(cmd)).unwrap();
    }
    obs.step(&c, Step::Appended);
    for _ in 0..200 {
        c.tick(&alive, &without_first, obs);
    }
    obs.step(&c, Step::End);
    c
}

/// The survivors' decided logs agree with the next leader's wherever both decided an index, and
/// every command is decided on every survivor.
fn check(c: &Cluster) {
    let leader = c.log(c.next);
    let mut logs = BTreeMap::new();
    for &pid in &c.alive {
        let log = c.log(pid);
        // Safety: wherever both consider an index decided, they hold the same entry.
        for (i, (f, l)) in log.iter().zip(leader.iter()).enumerate() {
            assert_eq!(f, l, "index {} is decided on node {} as {} but on the leader as {}", i, pid, f, l);
        }
        logs.insert(pid, log);
    }
    // Liveness: every command gets decided on every survivor.
    assert_eq!(leader.len() as u64, c.cmds, "leader's decided log: {:?}", leader);
    for (pid, log) in &logs {
        assert_eq!(log, &leader, "node {} does not hold the leader's decided log", pid);
    }
}

fn seed() -> u64 {
    std::env::var("FAULTLINE_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(1)
}

#[test]
fn followers_with_shorter_logs_of_previous_round_converge() {
    // Every seed runs a three-node and a five-node cluster (two short followers).
    check(&run(&Params::from_seed(seed(), 3), &mut ()));
    check(&run(&Params::from_seed(seed(), 5), &mut ()));
}
