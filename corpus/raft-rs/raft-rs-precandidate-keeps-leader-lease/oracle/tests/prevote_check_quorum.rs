//! With pre-vote and check-quorum on, the survivors of a group whose leader is cut off must elect
//! one of themselves when they campaign, while a follower campaigning against a healthy leader
//! must not depose it; for any group size, node ids, campaign order and message order.

use std::collections::{BTreeMap, BTreeSet};

use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use raft::eraftpb::Message;
use raft::storage::MemStorage;
use raft::{Config, RawNode, ReadOnlyOption, StateRole};

/// What the scenario reports to an observer (the bundle generator prints these).
pub enum Event<'a> {
    Note(&'a str),
    /// A message delivered.
    Sent(&'a Message),
    /// A message lost because its sender or receiver is cut off.
    Lost(&'a Message),
    /// A survivor's failure detector makes it campaign.
    Campaign(u64),
    /// The nodes after a step of the schedule.
    Roles(&'a BTreeMap<u64, RawNode<MemStorage>>),
}

/// What a run leaves for the checks.
pub struct Outcome {
    /// The old leader's term before it was cut off.
    pub term: u64,
    /// The survivor elected after the old leader was cut off, with its term.
    pub elected: Option<(u64, u64)>,
    /// The survivors' roles when the campaigns ended.
    pub roles: Vec<(u64, StateRole)>,
    /// Each node's commit index and leader after the heal (empty when nobody was elected).
    pub after: BTreeMap<u64, (u64, u64)>,
}

/// The group and the schedule of one run.
pub struct Params {
    pub ids: Vec<u64>,
    pub leader: u64,
    /// A follower that campaigns while the leader is healthy (none in the reported run).
    pub disruptor: Option<u64>,
    /// Entries the leader replicates before it is cut off.
    pub entries: usize,
    /// The order in which the survivors' failure detectors make them campaign.
    pub campaigns: Vec<u64>,
    pub net_seed: u64,
    pub shuffle: bool,
}

impl Params {
    pub fn from_seed(seed: u64) -> Self {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut pool: Vec<u64> = (10..100).collect();
        pool.shuffle(&mut rng);
        let n = if rng.gen_bool(0.5) { 3 } else { 5 };
        let mut ids: Vec<u64> = pool[..n].to_vec();
        ids.sort_unstable();
        let leader = ids[rng.gen_range(0..n)];
        let mut campaigns: Vec<u64> = ids.iter().copied().filter(|&i| i != leader).collect();
        campaigns.shuffle(&mut rng);
        let disruptor = Some(campaigns[rng.gen_range(0..campaigns.len())]);
        Params { ids, leader, disruptor, entries: rng.gen_range(0..4), campaigns, net_seed: rng.gen(), shuffle: true }
    }
}

fn config(id: u64, ids: &[u64]) -> Config {
    Config {
        id,
        peers: ids.to_vec(),
        learners: vec![],
        election_tick: 10,
        heartbeat_tick: 1,
        applied: 0,
        max_size_per_msg: 1024 * 1024,
        max_inflight_msgs: 256,
        check_quorum: true,
        pre_vote: true,
        min_election_tick: 0,
        max_election_tick: 0,
        read_only_option: ReadOnlyOption::Safe,
        skip_bcast_commit: false,
        tag: format!("node {}", id),
    }
}

struct Cluster<'o> {
    nodes: BTreeMap<u64, RawNode<MemStorage>>,
    /// Nodes whose links are all down.
    isolated: BTreeSet<u64>,
    rng: ChaCha8Rng,
    shuffle: bool,
    observer: &'o mut dyn FnMut(Event),
}

impl Cluster<'_> {
    /// Persists and sends whatever each node has ready, in a seeded order and sometimes twice,
    /// until nothing is left.
    fn settle(&mut self) {
        for _ in 0..1000 {
            let mut out: Vec<Message> = Vec::new();
            for node in self.nodes.values_mut() {
                if !node.has_ready() {
                    continue;
                }
                let mut rd = node.ready();
                if let Some(hs) = rd.hs.clone() {
                    node.mut_store().wl().set_hardstate(hs);
                }
                if !rd.entries.is_empty() {
                    node.mut_store().wl().append(&rd.entries).expect("append");
                }
                out.append(&mut rd.messages);
                node.advance(rd);
            }
            if out.is_empty() {
                return;
            }
            if self.shuffle {
                out.shuffle(&mut self.rng);
                let dups: Vec<Message> = out.iter().filter(|_| self.rng.gen_bool(0.1)).cloned().collect();
                out.extend(dups);
            }
            for m in out {
                if self.isolated.contains(&m.get_from()) || self.isolated.contains(&m.get_to()) {
                    (self.observer)(Event::Lost(&m));
                    continue;
                }
                (self.observer)(Event::Sent(&m));
                let to = m.get_to();
                self.nodes.get_mut(&to).unwrap().step(m).expect("step");
            }
        }
        panic!("the group never went quiet");
    }

    fn role(&self, id: u64) -> StateRole {
        self.nodes[&id].raft.state
    }

    fn term(&self, id: u64) -> u64 {
        self.nodes[&id].raft.term
    }

    fn report(&mut self) {
        (self.observer)(Event::Roles(&self.nodes));
    }

    fn propose(&mut self, on: u64, data: &[u8]) {
        self.nodes.get_mut(&on).unwrap().propose(vec![], data.to_vec()).expect("propose");
        self.settle();
    }
}

/// Runs the schedule of `p`: the leader is elected and replicates, the disruptor campaigns
/// against it (checked right away: the healthy leader must stay), the leader is cut off and the
/// survivors campaign in order, two rounds at most, until one is leader; that one replicates and
/// the old leader comes back.
pub fn run(p: &Params, observer: &mut dyn FnMut(Event)) -> Outcome {
    let mut c = Cluster {
        nodes: BTreeMap::new(),
        isolated: BTreeSet::new(),
        rng: ChaCha8Rng::seed_from_u64(p.net_seed),
        shuffle: p.shuffle,
        observer,
    };
    for &id in &p.ids {
        let cfg = config(id, &p.ids);
        cfg.validate().expect("valid config");
        c.nodes.insert(id, RawNode::new(&cfg, MemStorage::new(), vec![]).expect("node"));
    }
    c.nodes.get_mut(&p.leader).unwrap().campaign().expect("campaign");
    c.settle();
    assert_eq!(c.role(p.leader), StateRole::Leader);
    for k in 0..p.entries {
        c.propose(p.leader, format!("entry {}", k).as_bytes());
    }
    c.report();
    let term = c.term(p.leader);

    if let Some(d) = p.disruptor {
        (c.observer)(Event::Note("a follower campaigns while the leader is healthy"));
        c.nodes.get_mut(&d).unwrap().campaign().expect("campaign");
        c.settle();
        c.nodes.get_mut(&p.leader).unwrap().raft.bcast_heartbeat();
        c.settle();
        c.report();
        assert_eq!(c.role(p.leader), StateRole::Leader, "node {} campaigning deposed the healthy leader", d);
        assert_eq!(c.term(p.leader), term, "node {} campaigning moved the healthy leader's term", d);
    }

    (c.observer)(Event::Note("the leader loses every link; the survivors campaign"));
    c.isolated.insert(p.leader);
    let mut elected = None;
    'rounds: for _ in 0..2 {
        for &id in &p.campaigns {
            (c.observer)(Event::Campaign(id));
            c.nodes.get_mut(&id).unwrap().campaign().expect("campaign");
            c.settle();
            c.report();
            let leaders: Vec<u64> = p.campaigns.iter().copied().filter(|&i| c.role(i) == StateRole::Leader).collect();
            assert!(leaders.len() <= 1, "two leaders among the survivors: {:?}", leaders);
            if let Some(&l) = leaders.first() {
                elected = Some(l);
                break 'rounds;
            }
        }
    }
    let roles: Vec<(u64, StateRole)> = p.campaigns.iter().map(|&id| (id, c.role(id))).collect();
    let mut outcome = Outcome { term, elected: elected.map(|l| (l, c.term(l))), roles, after: BTreeMap::new() };
    let Some(new_leader) = elected else {
        return outcome;
    };

    // The new leader replicates; the old one comes back and follows.
    c.propose(new_leader, b"after the election");
    c.isolated.clear();
    c.nodes.get_mut(&new_leader).unwrap().raft.bcast_heartbeat();
    c.settle();
    c.propose(new_leader, b"after the heal");
    c.report();
    outcome.after = c.nodes.iter().map(|(&id, n)| (id, (n.raft.raft_log.committed, n.raft.leader_id))).collect();
    outcome
}

/// The survivors elected one of themselves at a higher term, and after the heal every node
/// follows it with its whole log committed.
fn check(o: &Outcome) {
    let (new_leader, new_term) = o.elected.unwrap_or_else(|| panic!("the survivors elected no leader: {:?}", o.roles));
    assert!(new_term > o.term, "the new leader's term did not move past {}", o.term);
    let commit = o.after[&new_leader].0;
    for (&id, &(committed, leader)) in &o.after {
        assert_eq!(committed, commit, "node {} did not catch up", id);
        assert_eq!(leader, new_leader, "node {} does not follow the new leader", id);
    }
}

fn seed() -> u64 {
    std::env::var("FAULTLINE_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(1)
}

#[test]
fn survivors_elect_a_leader_after_leader_is_cut_off() {
    check(&run(&Params::from_seed(seed()), &mut |_| {}));
}
