//! A node that raised its term on its own while it was cut off, and that comes back with pre-vote
//! switched on (a rolling upgrade that turns pre-vote on), must not keep the group from electing
//! a leader or from bringing that node's log up to date; pre-vote must still keep a node that is
//! cut off from raising its term. For 3 and 5 nodes, any node ids, any number of lonely
//! elections, with or without check-quorum, and any message order.

use std::collections::{BTreeMap, BTreeSet};

use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use raft::eraftpb::{EntryType, Message};
use raft::storage::MemStorage;
use raft::{Config, RawNode, StateRole};

/// Ticks a phase may take before the run counts as stuck.
pub const PHASE_TICKS: usize = 300;

/// What a run reports to an observer (the bundle generator prints these).
pub enum Event<'a> {
    /// A step of the schedule.
    Note(&'a str),
    /// A message delivered to its receiver.
    Delivered(&'a Message),
    /// A message lost because its sender or receiver is down or cut off.
    Lost(&'a Message),
    /// One tick of every running node is over (its number).
    Tick(usize),
    /// The running nodes after a step of the schedule.
    Nodes(&'a Cluster),
}

/// One run's group and schedule.
#[derive(Clone, Debug)]
pub struct Params {
    pub ids: Vec<u64>,
    /// The node that leads first.
    pub leader: u64,
    /// The node that is cut off, runs elections on its own (pre-vote off), and comes back with
    /// pre-vote on.
    pub stray: u64,
    /// How many elections the stray runs while it is cut off (each one raises its term).
    pub campaigns: u64,
    /// Entries the group commits while the stray is away.
    pub entries: usize,
    /// Nodes that are down when the stray comes back (the first is the leader); empty: none.
    pub down: Vec<u64>,
    pub check_quorum: bool,
    pub net_seed: u64,
}

impl Params {
    /// The run `index` of a seed. Every third run keeps every node up (three or five nodes),
    /// the others are three nodes and take the leader down when the stray comes back.
    pub fn from_seed(seed: u64, index: usize) -> Params {
        let mut rng = ChaCha8Rng::seed_from_u64(seed.wrapping_mul(7919).wrapping_add(index as u64));
        let mut pool: Vec<u64> = (1..60).collect();
        pool.shuffle(&mut rng);
        let variant = index % 3;
        // A group that loses its leader is three nodes: in a five-node group that loses two,
        // the three left split their votes now and then, and this version's pre-candidates keep
        // the votes of their last campaign, which can stall that group for another reason.
        let n = if variant != 2 || rng.gen_bool(0.5) { 3 } else { 5 };
        let mut ids: Vec<u64> = pool[..n].to_vec();
        ids.sort_unstable();
        let mut order = ids.clone();
        order.shuffle(&mut rng);
        let leader = order[0];
        let stray = order[1];
        let down = if variant == 2 {
            vec![]
        } else {
            let mut d = vec![leader];
            d.extend(order[2..].iter().copied().take((n - 1) / 2 - 1));
            d
        };
        let check_quorum = match variant {
            0 => false,
            1 => true,
            _ => rng.gen_bool(0.25),
        };
        let campaigns = if index == 0 { rng.gen_range(3..=5) } else { rng.gen_range(2..=5) };
        Params {
            ids,
            leader,
            stray,
            campaigns,
            entries: rng.gen_range(1..=3),
            down,
            check_quorum,
            net_seed: rng.gen(),
        }
    }

    /// The run of the report: three nodes, node 1 leads, node 3 runs two elections on its own,
    /// node 1 goes down when node 3 comes back.
    pub fn reported() -> Params {
        Params {
            ids: vec![1, 2, 3],
            leader: 1,
            stray: 3,
            campaigns: 2,
            entries: 1,
            down: vec![1],
            check_quorum: false,
            net_seed: 7,
        }
    }
}

pub struct Node {
    pub rn: Option<RawNode<MemStorage>>,
    pub store: MemStorage,
    /// The data of the normal entries applied, in order.
    pub applied: Vec<Vec<u8>>,
    pub applied_index: u64,
    pub pre_vote: bool,
}

pub struct Cluster {
    pub nodes: BTreeMap<u64, Node>,
    /// Nodes whose every link is down.
    pub cut: BTreeSet<u64>,
    pub check_quorum: bool,
    pub ids: Vec<u64>,
    queue: Vec<Message>,
    rng: ChaCha8Rng,
    pub ticks: usize,
}

fn config(id: u64, ids: &[u64], pre_vote: bool, check_quorum: bool, applied: u64) -> Config {
    Config {
        id,
        peers: ids.to_vec(),
        learners: vec![],
        election_tick: 10,
        heartbeat_tick: 1,
        applied,
        max_size_per_msg: 1024 * 1024,
        max_inflight_msgs: 256,
        check_quorum,
        pre_vote,
        tag: format!("node {}", id),
        ..Default::default()
    }
}

impl Cluster {
    pub fn new(ids: &[u64], pre_vote: impl Fn(u64) -> bool, check_quorum: bool, seed: u64) -> Cluster {
        let mut nodes = BTreeMap::new();
        for &id in ids {
            let store = MemStorage::new();
            let pv = pre_vote(id);
            let rn = RawNode::new(&config(id, ids, pv, check_quorum, 0), store.clone(), vec![])
                .expect("raw node");
            nodes.insert(
                id,
                Node { rn: Some(rn), store, applied: vec![], applied_index: 0, pre_vote: pv },
            );
        }
        let mut c = Cluster {
            nodes,
            cut: BTreeSet::new(),
            check_quorum,
            ids: ids.to_vec(),
            queue: vec![],
            rng: ChaCha8Rng::seed_from_u64(seed),
            ticks: 0,
        };
        for &id in ids {
            c.settle_timeout(id);
        }
        c
    }

    pub fn raft(&self, id: u64) -> Option<&raft::Raft<MemStorage>> {
        self.nodes[&id].rn.as_ref().map(|rn| &rn.raft)
    }

    pub fn running(&self) -> Vec<u64> {
        self.ids.iter().copied().filter(|id| self.nodes[id].rn.is_some()).collect()
    }

    /// Draws the node's election timeout from the run's own generator whenever its election
    /// clock restarts, so that a run is the same every time.
    fn settle_timeout(&mut self, id: u64) {
        let t = self.rng.gen_range(10..20);
        if let Some(rn) = self.nodes.get_mut(&id).unwrap().rn.as_mut() {
            if rn.raft.election_elapsed == 0 {
                rn.raft.set_randomized_election_timeout(t);
            }
        }
    }

    /// Persists the node's Ready, applies its committed entries and queues its messages.
    fn process(&mut self, id: u64) {
        let node = self.nodes.get_mut(&id).unwrap();
        let rn = match node.rn.as_mut() {
            Some(rn) => rn,
            None => return,
        };
        while rn.has_ready() {
            let mut rd = rn.ready();
            if !rd.entries.is_empty() {
                node.store.wl().append(&rd.entries).expect("append");
            }
            if let Some(hs) = rd.hs.clone() {
                node.store.wl().set_hardstate(hs);
            }
            self.queue.extend(std::mem::take(&mut rd.messages));
            if let Some(ents) = rd.committed_entries.take() {
                for e in ents {
                    if e.get_index() <= node.applied_index {
                        continue;
                    }
                    if e.get_entry_type() == EntryType::EntryNormal && !e.get_data().is_empty() {
                        node.applied.push(e.get_data().to_vec());
                    }
                    node.applied_index = e.get_index();
                }
            }
            rn.advance(rd);
        }
        self.settle_timeout(id);
    }

    fn reachable(&self, id: u64) -> bool {
        self.nodes[&id].rn.is_some() && !self.cut.contains(&id)
    }

    /// Delivers queued messages in an order drawn from the run's generator until none is left.
    pub fn deliver(&mut self, obs: &mut dyn FnMut(Event)) {
        let mut budget = 200_000;
        while !self.queue.is_empty() {
            budget -= 1;
            assert!(budget > 0, "messages never stop flowing");
            let i = self.rng.gen_range(0..self.queue.len());
            let m = self.queue.swap_remove(i);
            let (from, to) = (m.get_from(), m.get_to());
            if !self.reachable(from) || !self.nodes.contains_key(&to) || !self.reachable(to) {
                obs(Event::Lost(&m));
                continue;
            }
            obs(Event::Delivered(&m));
            let rn = self.nodes.get_mut(&to).unwrap().rn.as_mut().unwrap();
            let _ = rn.step(m);
            self.process(to);
        }
    }

    /// One tick of every running node, in an order drawn from the run's generator, then
    /// delivery.
    pub fn tick(&mut self, obs: &mut dyn FnMut(Event)) {
        let mut order = self.running();
        order.shuffle(&mut self.rng);
        for id in order {
            self.nodes.get_mut(&id).unwrap().rn.as_mut().unwrap().tick();
            self.process(id);
        }
        self.deliver(obs);
        self.ticks += 1;
        obs(Event::Tick(self.ticks));
    }

    pub fn campaign(&mut self, id: u64, obs: &mut dyn FnMut(Event)) {
        let _ = self.nodes.get_mut(&id).unwrap().rn.as_mut().unwrap().campaign();
        self.process(id);
        self.deliver(obs);
    }

    pub fn propose(&mut self, id: u64, data: &[u8], obs: &mut dyn FnMut(Event)) {
        let _ = self.nodes.get_mut(&id).unwrap().rn.as_mut().unwrap().propose(vec![], data.to_vec());
        self.process(id);
        self.deliver(obs);
    }

    /// The node is stopped; its storage and applied state survive.
    pub fn stop(&mut self, id: u64) {
        self.nodes.get_mut(&id).unwrap().rn = None;
    }

    /// The node is started again on its storage, with the given pre-vote setting.
    pub fn start(&mut self, id: u64, pre_vote: bool) {
        let ids = self.ids.clone();
        let cq = self.check_quorum;
        let node = self.nodes.get_mut(&id).unwrap();
        let cfg = config(id, &ids, pre_vote, cq, node.applied_index);
        node.rn = Some(RawNode::new(&cfg, node.store.clone(), vec![]).expect("raw node"));
        node.pre_vote = pre_vote;
        self.process(id);
    }

    /// The running, reachable leader with the highest term, if any.
    pub fn leader(&self) -> Option<u64> {
        self.running()
            .into_iter()
            .filter(|&id| self.reachable(id))
            .filter(|&id| self.raft(id).unwrap().state == StateRole::Leader)
            .max_by_key(|&id| self.raft(id).unwrap().term)
    }

    pub fn describe(&self) -> String {
        let mut out = vec![];
        for &id in &self.ids {
            match self.raft(id) {
                None => out.push(format!("node {} down", id)),
                Some(r) => out.push(format!(
                    "node {}: {:?} term {} last index {} commit {} applied entries {}{}",
                    id,
                    r.state,
                    r.term,
                    r.raft_log.last_index(),
                    r.raft_log.committed,
                    self.nodes[&id].applied.len(),
                    if self.cut.contains(&id) { " (cut off)" } else { "" }
                )),
            }
        }
        out.join("; ")
    }

    /// Ticks until a reachable leader exists and has replicated `data`, proposed once it
    /// exists, to every running, reachable node.
    pub fn replicate(&mut self, data: &[u8], what: &str, obs: &mut dyn FnMut(Event)) -> Result<u64, String> {
        let mut proposed_by: Option<(u64, u64)> = None;
        for _ in 0..PHASE_TICKS {
            if let Some(l) = self.leader() {
                let term = self.raft(l).unwrap().term;
                if proposed_by != Some((l, term)) {
                    self.propose(l, data, obs);
                    proposed_by = Some((l, term));
                }
            }
            let everyone = self
                .running()
                .into_iter()
                .filter(|&id| self.reachable(id))
                .all(|id| self.nodes[&id].applied.iter().any(|d| d.as_slice() == data));
            if everyone && self.leader().is_some() {
                return Ok(self.leader().unwrap());
            }
            self.tick(obs);
        }
        Err(match self.leader() {
            None => format!("{}: no leader was elected within {} ticks: {}", what, PHASE_TICKS, self.describe()),
            Some(l) => format!(
                "{}: node {} leads but an entry it proposed did not reach every running node within {} ticks: {}",
                what,
                l,
                PHASE_TICKS,
                self.describe()
            ),
        })
    }

    /// Every applied log is a prefix of the longest one.
    pub fn check_logs_agree(&self) -> Result<(), String> {
        let longest = self.nodes.values().map(|n| &n.applied).max_by_key(|a| a.len()).unwrap();
        for (id, n) in &self.nodes {
            if longest[..n.applied.len()] != n.applied[..] {
                return Err(format!("node {} applied entries that differ from another node's", id));
            }
        }
        Ok(())
    }
}

/// Runs one schedule; Err names the property it broke.
pub fn run(p: &Params, obs: &mut dyn FnMut(Event)) -> Result<(), String> {
    let stray = p.stray;
    let mut c = Cluster::new(&p.ids, |id| id != stray, p.check_quorum, p.net_seed);
    obs(Event::Note("start: every node but the stray has pre_vote on; the leader campaigns"));
    c.campaign(p.leader, obs);
    if c.leader() != Some(p.leader) {
        return Err(format!("setup: node {} did not become leader: {}", p.leader, c.describe()));
    }
    c.replicate(b"before", "setup", obs)?;
    obs(Event::Nodes(&c));

    obs(Event::Note("the stray is cut off; the group commits entries; the stray runs elections alone"));
    c.cut.insert(stray);
    for i in 0..p.entries {
        c.propose(p.leader, format!("while-away-{}", i).as_bytes(), obs);
    }
    let start_term = c.raft(stray).unwrap().term;
    let mut guard = 0;
    while c.raft(stray).unwrap().term < start_term + p.campaigns {
        c.tick(obs);
        guard += 1;
        if guard > 2000 {
            return Err("setup: the stray never campaigned".to_string());
        }
    }
    let committed: Vec<Vec<u8>> = c.nodes[&p.leader].applied.clone();
    if committed.len() != 1 + p.entries {
        return Err(format!("setup: the group did not commit its entries: {}", c.describe()));
    }
    obs(Event::Nodes(&c));

    if p.down.is_empty() {
        obs(Event::Note("the stray restarts with pre_vote on and its links come back"));
    } else {
        obs(Event::Note("the leader goes down; the stray restarts with pre_vote on and its links come back"));
    }
    for &d in &p.down {
        c.stop(d);
    }
    c.stop(stray);
    c.start(stray, true);
    c.cut.remove(&stray);
    obs(Event::Nodes(&c));
    let result = c.replicate(b"after-return", "with the stray back", obs);
    obs(Event::Nodes(&c));
    result?;
    c.check_logs_agree()?;

    obs(Event::Note("the stopped nodes start again with pre_vote on"));
    for &d in &p.down {
        c.start(d, true);
    }
    let leader = c.replicate(b"all-back", "with every node back", obs)?;
    c.check_logs_agree()?;
    for (id, n) in &c.nodes {
        if n.applied.len() < committed.len() || n.applied[..committed.len()] != committed[..] {
            return Err(format!("node {} lost entries the group had committed", id));
        }
    }

    // Pre-vote must still do its job: a node that is cut off does not raise its term, and it
    // does not disturb the leader when it comes back.
    obs(Event::Note("a follower is cut off for a while and comes back"));
    let mut rng = ChaCha8Rng::seed_from_u64(p.net_seed ^ 0x5eed);
    let followers: Vec<u64> = p.ids.iter().copied().filter(|&id| id != leader).collect();
    let quiet = *followers.choose(&mut rng).unwrap();
    let term = c.raft(leader).unwrap().term;
    let quiet_term = c.raft(quiet).unwrap().term;
    c.cut.insert(quiet);
    c.propose(leader, b"while-cut", obs);
    for _ in 0..60 {
        c.tick(obs);
    }
    if c.raft(quiet).unwrap().term != quiet_term {
        return Err(format!(
            "node {} with pre_vote on raised its term from {} to {} while it was cut off",
            quiet,
            quiet_term,
            c.raft(quiet).unwrap().term
        ));
    }
    c.cut.remove(&quiet);
    for _ in 0..40 {
        c.tick(obs);
    }
    if c.leader() != Some(leader) || c.raft(leader).unwrap().term != term {
        return Err(format!(
            "node {} (pre_vote on) coming back deposed leader {} at term {}: {}",
            quiet,
            leader,
            term,
            c.describe()
        ));
    }
    c.replicate(b"last", "after the cut follower came back", obs)?;
    c.check_logs_agree()?;
    Ok(())
}

fn seed() -> u64 {
    std::env::var("FAULTLINE_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(1)
}

/// Runs per seed: a third keep every node up, the others lose the leader when the stray returns.
pub const RUNS: usize = 9;

#[test]
fn group_recovers_from_a_node_that_returns_with_a_higher_term() {
    let seed = seed();
    for i in 0..RUNS {
        let p = Params::from_seed(seed, i);
        if let Err(e) = run(&p, &mut |_| {}) {
            panic!("seed {} run {} {:?}: {}", seed, i, p, e);
        }
    }
}

#[test]
fn reported_run_elects_a_leader() {
    let p = Params::reported();
    if let Err(e) = run(&p, &mut |_| {}) {
        panic!("{:?}: {}", p, e);
    }
}
