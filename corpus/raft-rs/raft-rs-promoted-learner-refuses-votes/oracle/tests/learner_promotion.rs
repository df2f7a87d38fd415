//! A learner promoted to voter counts toward the new quorum as soon as the promotion is
//! committed. If the leader goes down before the promoted node has learnt that commit, the
//! running nodes, which need its vote, must still elect a leader; and a group of an even size
//! must still need a strict majority to elect or commit. For 3 and 5 voters plus the learner,
//! any node ids, whether or not the learner holds the promotion entry, with or without
//! check-quorum, and any message order.

use std::collections::{BTreeMap, BTreeSet};

use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use raft::eraftpb::{ConfChange, ConfChangeType, EntryType, Message};
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
    /// A message lost (its sender or receiver is down or cut off, or its link drops it).
    Lost(&'a Message),
    /// One tick of every running node is over (its number).
    Tick(usize),
    /// The nodes after a step of the schedule.
    Nodes(&'a Cluster),
}

/// One run's group and schedule.
#[derive(Clone, Debug)]
pub struct Params {
    /// The voters the group starts with.
    pub voters: Vec<u64>,
    /// The learner that gets promoted.
    pub learner: u64,
    /// The node that leads when the promotion is proposed.
    pub leader: u64,
    /// Voters down after the promotion is committed (the first is the leader).
    pub down: Vec<u64>,
    /// Whether the learner receives the promotion entry before its link to the leader drops
    /// everything; either way it never hears that the entry is committed.
    pub learner_has_entry: bool,
    /// Entries committed before the promotion.
    pub entries: usize,
    pub check_quorum: bool,
    pub net_seed: u64,
}

impl Params {
    /// The run `index` of a seed: odd runs have the learner miss the promotion entry too.
    pub fn from_seed(seed: u64, index: usize) -> Params {
        let mut rng = ChaCha8Rng::seed_from_u64(seed.wrapping_mul(104_729).wrapping_add(index as u64));
        let mut pool: Vec<u64> = (1..60).collect();
        pool.shuffle(&mut rng);
        let n = if rng.gen_bool(0.5) { 3 } else { 5 };
        let mut voters: Vec<u64> = pool[..n].to_vec();
        voters.sort_unstable();
        let learner = pool[n];
        let mut order = voters.clone();
        order.shuffle(&mut rng);
        let leader = order[0];
        // With n + 1 voters, the running ones must be exactly a quorum that includes the
        // promoted node: the leader and (n - 3) / 2 more voters are down.
        let mut down = vec![leader];
        down.extend(order[1..].iter().copied().take((n - 3) / 2));
        Params {
            voters,
            learner,
            leader,
            down,
            learner_has_entry: index % 2 == 0,
            entries: rng.gen_range(0..=3),
            check_quorum: rng.gen_bool(0.5),
            net_seed: rng.gen(),
        }
    }

    /// The run of the report: voters 1, 2, 3, learner 4, node 1 leads and goes down; node 4
    /// holds the promotion entry but never hears that it is committed.
    pub fn reported() -> Params {
        Params {
            voters: vec![1, 2, 3],
            learner: 4,
            leader: 1,
            down: vec![1],
            learner_has_entry: true,
            entries: 1,
            check_quorum: false,
            net_seed: 11,
        }
    }
}

pub struct Node {
    pub rn: Option<RawNode<MemStorage>>,
    pub store: MemStorage,
    /// The data of the normal entries applied, in order.
    pub applied: Vec<Vec<u8>>,
    pub applied_index: u64,
    /// The membership this node has applied (what it restarts with).
    pub voters: BTreeSet<u64>,
    pub learners: BTreeSet<u64>,
}

/// Drops a message on its way (a link that fails); returns true to drop.
pub type LinkFilter = Box<dyn FnMut(&Message) -> bool>;

pub struct Cluster {
    pub nodes: BTreeMap<u64, Node>,
    /// Groups of nodes that can talk to each other; empty: everyone can.
    pub sides: Vec<BTreeSet<u64>>,
    pub filter: Option<LinkFilter>,
    pub check_quorum: bool,
    pub ids: Vec<u64>,
    queue: Vec<Message>,
    rng: ChaCha8Rng,
    pub ticks: usize,
}

fn config(id: u64, voters: &BTreeSet<u64>, learners: &BTreeSet<u64>, check_quorum: bool, applied: u64) -> Config {
    Config {
        id,
        peers: voters.iter().copied().collect(),
        learners: learners.iter().copied().collect(),
        election_tick: 10,
        heartbeat_tick: 1,
        applied,
        max_size_per_msg: 1024 * 1024,
        max_inflight_msgs: 256,
        check_quorum,
        pre_vote: false,
        tag: format!("node {}", id),
        ..Default::default()
    }
}

impl Cluster {
    pub fn new(voters: &[u64], learners: &[u64], check_quorum: bool, seed: u64) -> Cluster {
        let vs: BTreeSet<u64> = voters.iter().copied().collect();
        let ls: BTreeSet<u64> = learners.iter().copied().collect();
        let mut ids: Vec<u64> = vs.union(&ls).copied().collect();
        ids.sort_unstable();
        let mut nodes = BTreeMap::new();
        for &id in &ids {
            let store = MemStorage::new();
            let rn = RawNode::new(&config(id, &vs, &ls, check_quorum, 0), store.clone(), &[]).expect("raw node");
            nodes.insert(
                id,
                Node { rn: Some(rn), store, applied: vec![], applied_index: 0, voters: vs.clone(), learners: ls.clone() },
            );
        }
        let mut c = Cluster {
            nodes,
            sides: vec![],
            filter: None,
            check_quorum,
            ids: ids.clone(),
            queue: vec![],
            rng: ChaCha8Rng::seed_from_u64(seed),
            ticks: 0,
        };
        for &id in &ids {
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

    /// Persists the node's Ready, applies its committed entries (membership changes included)
    /// and queues its messages.
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
                    match e.get_entry_type() {
                        EntryType::EntryNormal => {
                            if !e.get_data().is_empty() {
                                node.applied.push(e.get_data().to_vec());
                            }
                        }
                        EntryType::EntryConfChange => {
                            let cc: ConfChange = protobuf::parse_from_bytes(e.get_data()).expect("conf change");
                            rn.apply_conf_change(&cc);
                            let target = cc.get_node_id();
                            match cc.get_change_type() {
                                ConfChangeType::AddNode => {
                                    node.learners.remove(&target);
                                    node.voters.insert(target);
                                }
                                ConfChangeType::AddLearnerNode => {
                                    node.learners.insert(target);
                                }
                                ConfChangeType::RemoveNode => {
                                    node.voters.remove(&target);
                                    node.learners.remove(&target);
                                }
                            }
                        }
                    }
                    node.applied_index = e.get_index();
                }
            }
            rn.advance(rd);
        }
        self.settle_timeout(id);
    }

    fn connected(&self, a: u64, b: u64) -> bool {
        self.sides.is_empty() || self.sides.iter().any(|s| s.contains(&a) && s.contains(&b))
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
            let dropped = self.filter.as_mut().map_or(false, |f| f(&m));
            let up = |id: u64| self.nodes.get(&id).map_or(false, |n| n.rn.is_some());
            if dropped || !up(from) || !up(to) || !self.connected(from, to) {
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
        let _ = self.nodes.get_mut(&id).unwrap().rn.as_mut().unwrap().propose(data.to_vec(), false);
        self.process(id);
        self.deliver(obs);
    }

    /// Proposes to promote `learner` on the leader `id`; returns the index of the entry.
    pub fn propose_promotion(&mut self, id: u64, learner: u64) -> u64 {
        let mut cc = ConfChange::new();
        cc.set_change_type(ConfChangeType::AddNode);
        cc.set_node_id(learner);
        let rn = self.nodes.get_mut(&id).unwrap().rn.as_mut().unwrap();
        let _ = rn.propose_conf_change(cc);
        let index = rn.raft.raft_log.last_index();
        self.process(id);
        index
    }

    /// The node is stopped; its storage, applied state and membership survive.
    pub fn stop(&mut self, id: u64) {
        self.nodes.get_mut(&id).unwrap().rn = None;
    }

    /// The node is started again on its storage and the membership it had applied.
    pub fn start(&mut self, id: u64) {
        let cq = self.check_quorum;
        let node = self.nodes.get_mut(&id).unwrap();
        let cfg = config(id, &node.voters, &node.learners, cq, node.applied_index);
        node.rn = Some(RawNode::new(&cfg, node.store.clone(), &[]).expect("raw node"));
        self.process(id);
    }

    /// Running leaders, highest term first.
    pub fn leaders(&self) -> Vec<(u64, u64)> {
        let mut v: Vec<(u64, u64)> = self
            .running()
            .into_iter()
            .filter(|&id| self.raft(id).unwrap().state == StateRole::Leader)
            .map(|id| (self.raft(id).unwrap().term, id))
            .collect();
        v.sort_unstable_by(|a, b| b.cmp(a));
        v
    }

    /// The running leader with the highest term, if any.
    pub fn leader(&self) -> Option<u64> {
        self.leaders().first().map(|&(_, id)| id)
    }

    pub fn describe(&self) -> String {
        let mut out = vec![];
        for &id in &self.ids {
            match self.raft(id) {
                None => out.push(format!("node {} down", id)),
                Some(r) => out.push(format!(
                    "node {}: {:?} term {} last index {} commit {}{}",
                    id,
                    r.state,
                    r.term,
                    r.raft_log.last_index(),
                    r.raft_log.committed,
                    if r.is_learner { " (learner)" } else { "" }
                )),
            }
        }
        out.join("; ")
    }

    /// Ticks until a leader exists and has replicated `data`, proposed once it exists, to
    /// every running node.
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
    let learner = p.learner;
    let mut c = Cluster::new(&p.voters, &[learner], p.check_quorum, p.net_seed);
    obs(Event::Note("start: the voters and the learner; the leader campaigns and commits entries"));
    c.campaign(p.leader, obs);
    if c.leader() != Some(p.leader) {
        return Err(format!("setup: node {} did not become leader: {}", p.leader, c.describe()));
    }
    for i in 0..p.entries {
        c.propose(p.leader, format!("early-{}", i).as_bytes(), obs);
    }
    c.replicate(b"before", "setup", obs)?;
    obs(Event::Nodes(&c));

    obs(Event::Note("the leader proposes to promote the learner; no message telling the learner that it is committed gets through"));
    // The index of the promotion entry is known once it is proposed; messages are delivered
    // only after that.
    let promotion = std::rc::Rc::new(std::cell::Cell::new(u64::MAX));
    let seen = promotion.clone();
    let has_entry = p.learner_has_entry;
    c.filter = Some(Box::new(move |m: &Message| m.get_to() == learner && (!has_entry || m.get_commit() >= seen.get())));
    let index = c.propose_promotion(p.leader, learner);
    promotion.set(index);
    c.deliver(obs);
    for _ in 0..3 {
        c.tick(obs);
    }
    for &v in &p.voters {
        if c.nodes[&v].applied_index < index || !c.nodes[&v].voters.contains(&learner) {
            return Err(format!("setup: voter {} did not apply the promotion: {}", v, c.describe()));
        }
    }
    let learner_raft = c.raft(learner).unwrap();
    if learner_raft.raft_log.committed >= index || (p.learner_has_entry != (learner_raft.raft_log.last_index() >= index)) {
        return Err(format!("setup: the learner's log is not as planned: {}", c.describe()));
    }
    let committed: Vec<Vec<u8>> = c.nodes[&p.leader].applied.clone();
    obs(Event::Nodes(&c));

    obs(Event::Note("the leader goes down; the learner's link works again"));
    for &d in &p.down {
        c.stop(d);
    }
    c.filter = None;
    obs(Event::Nodes(&c));
    let result = c.replicate(b"after-leader-down", "with the leader down", obs);
    obs(Event::Nodes(&c));
    result?;
    if c.raft(learner).unwrap().is_learner {
        return Err(format!("node {} still acts as a learner after its promotion was applied", learner));
    }
    c.check_logs_agree()?;

    obs(Event::Note("the stopped voters start again"));
    for &d in &p.down {
        c.start(d);
    }
    c.replicate(b"all-back", "with every node back", obs)?;
    c.check_logs_agree()?;
    for (id, n) in &c.nodes {
        if n.applied.len() < committed.len() || n.applied[..committed.len()] != committed[..] {
            return Err(format!("node {} lost entries the group had committed", id));
        }
    }

    // The group now has an even number of voters: neither half may elect a leader or commit.
    obs(Event::Note("the group is split into two halves of the same size"));
    let mut all: Vec<u64> = c.ids.clone();
    let mut rng = ChaCha8Rng::seed_from_u64(p.net_seed ^ 0x5eed);
    all.shuffle(&mut rng);
    let half = all.len() / 2;
    let a: BTreeSet<u64> = all[..half].iter().copied().collect();
    let b: BTreeSet<u64> = all[half..].iter().copied().collect();
    let term = c.raft(c.leader().unwrap()).unwrap().term;
    c.sides = vec![a.clone(), b.clone()];
    for _ in 0..80 {
        c.tick(obs);
        for (t, l) in c.leaders() {
            if t > term {
                return Err(format!(
                    "node {} was elected at term {} by half of the {} voters ({:?} | {:?})",
                    l,
                    t,
                    c.ids.len(),
                    a,
                    b
                ));
            }
        }
        for l in c.leaders().into_iter().map(|(_, l)| l).collect::<Vec<_>>() {
            c.propose(l, format!("split-{}-{}", l, c.ticks).as_bytes(), obs);
        }
    }
    c.sides.clear();
    c.replicate(b"healed", "after the halves reconnect", obs)?;
    c.check_logs_agree()?;
    Ok(())
}

fn seed() -> u64 {
    std::env::var("FAULTLINE_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(1)
}

/// Runs per seed: half of them have the learner miss the promotion entry as well.
pub const RUNS: usize = 8;

#[test]
fn promoted_learner_counts_toward_elections() {
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
