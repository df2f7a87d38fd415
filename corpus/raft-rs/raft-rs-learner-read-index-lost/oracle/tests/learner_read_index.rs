//! A read-index request must be answered on the node that made it, with an index at least the
//! leader's commit index when the request was made, whatever the node ids, the number of
//! learners, the message order, duplicates and delays, also when the group has a single voter.

use std::collections::{BTreeMap, BTreeSet};

use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use raft::eraftpb::Message;
use raft::storage::MemStorage;
use raft::{Config, RawNode, ReadOnlyOption, StateRole};

/// What the scenario reports to an observer (the bundle generator prints these).
pub enum Event<'a> {
    Sent(&'a Message),
    Read { node: u64, index: u64, ctx: &'a [u8] },
    /// The leader is elected and its first entry replicated; the reads follow.
    Ready(&'a BTreeMap<u64, RawNode<MemStorage>>),
    /// `node` is about to ask for a read index with the context `ctx`.
    Reading { node: u64, ctx: &'a [u8] },
    /// Every read has been taken; next 100 ticks, then the leader proposes one more entry.
    ReadsDone,
    /// The run is over.
    End(&'a BTreeMap<u64, RawNode<MemStorage>>),
}

/// What a run leaves for the checks.
pub struct Outcome {
    /// Every read taken: (context, node, the leader's commit index when it was taken).
    pub issued: Vec<(Vec<u8>, u64, u64)>,
    /// Read states each node's application received: (index, context).
    pub reads: BTreeMap<u64, Vec<(u64, Vec<u8>)>>,
    /// The leader's commit index once every read was taken.
    pub commit_after_reads: u64,
    /// The leader's commit index at the end and every node's.
    pub leader_commit: u64,
    pub committed: BTreeMap<u64, u64>,
}

/// The group and the schedule of one run.
pub struct Params {
    pub voter: u64,
    pub learners: Vec<u64>,
    /// Each read: the node that takes it and how many entries the leader proposes just before,
    /// which that node does not receive until after its request has been sent.
    pub reads: Vec<(u64, usize)>,
    /// Message scheduling: shuffle, duplicate and delay, derived from this seed.
    pub net_seed: u64,
    pub shuffle: bool,
}

impl Params {
    /// A single voter, one to three learners and every id drawn from the seed.
    pub fn from_seed(seed: u64) -> Self {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut ids: Vec<u64> = (10..100).collect();
        ids.shuffle(&mut rng);
        let nlearners = rng.gen_range(1..=3);
        let voter = ids[0];
        let learners: Vec<u64> = ids[1..=nlearners].to_vec();
        let mut reads = Vec::new();
        // Every learner reads at least once while it lags behind the leader.
        for &l in &learners {
            reads.push((l, rng.gen_range(1..=3)));
        }
        for _ in 0..rng.gen_range(0..4) {
            let who = if rng.gen_bool(0.3) { voter } else { learners[rng.gen_range(0..nlearners)] };
            reads.push((who, rng.gen_range(0..=2)));
        }
        reads.shuffle(&mut rng);
        Params { voter, learners, reads, net_seed: rng.gen(), shuffle: true }
    }
}

fn config(id: u64, voters: &[u64], learners: &[u64]) -> Config {
    Config {
        id,
        peers: voters.to_vec(),
        learners: learners.to_vec(),
        election_tick: 10,
        heartbeat_tick: 1,
        applied: 0,
        max_size_per_msg: 1024 * 1024,
        max_inflight_msgs: 256,
        check_quorum: false,
        pre_vote: false,
        min_election_tick: 0,
        max_election_tick: 0,
        read_only_option: ReadOnlyOption::Safe,
        skip_bcast_commit: false,
        tag: format!("node {}", id),
    }
}

struct Cluster<'o> {
    nodes: BTreeMap<u64, RawNode<MemStorage>>,
    /// Read states each node's application received: (index, context).
    reads: BTreeMap<u64, Vec<(u64, Vec<u8>)>>,
    /// Messages sent and not delivered yet.
    wire: Vec<Message>,
    /// Messages to these nodes stay on the wire.
    slow: BTreeSet<u64>,
    rng: ChaCha8Rng,
    shuffle: bool,
    observer: &'o mut dyn FnMut(Event),
}

impl Cluster<'_> {
    fn collect(&mut self) -> bool {
        let mut any = false;
        for (id, node) in self.nodes.iter_mut() {
            if !node.has_ready() {
                continue;
            }
            any = true;
            let mut rd = node.ready();
            if let Some(hs) = rd.hs.clone() {
                node.mut_store().wl().set_hardstate(hs);
            }
            if !rd.entries.is_empty() {
                node.mut_store().wl().append(&rd.entries).expect("append");
            }
            for rs in &rd.read_states {
                (self.observer)(Event::Read { node: *id, index: rs.index, ctx: &rs.request_ctx });
                self.reads.get_mut(id).unwrap().push((rs.index, rs.request_ctx.clone()));
            }
            for m in &rd.messages {
                (self.observer)(Event::Sent(m));
            }
            self.wire.append(&mut rd.messages);
            node.advance(rd);
        }
        any
    }

    /// Delivers everything not held back, in a seeded order, sometimes twice, until quiet.
    fn settle(&mut self) {
        for _ in 0..1000 {
            let busy = self.collect();
            let (mut now, later): (Vec<Message>, Vec<Message>) =
                std::mem::take(&mut self.wire).into_iter().partition(|m| !self.slow.contains(&m.get_to()));
            self.wire = later;
            if now.is_empty() && !busy {
                return;
            }
            if self.shuffle {
                now.shuffle(&mut self.rng);
            }
            for m in now {
                if self.shuffle && self.rng.gen_bool(0.1) {
                    self.wire.push(m.clone());
                }
                let to = m.get_to();
                self.nodes.get_mut(&to).unwrap().step(m).expect("step");
            }
        }
        panic!("the group never went quiet");
    }

    fn committed(&self, id: u64) -> u64 {
        self.nodes[&id].raft.raft_log.committed
    }
}

/// Runs the group through the reads of `p`, then has the leader propose one more entry.
pub fn run(p: &Params, observer: &mut dyn FnMut(Event)) -> Outcome {
    let mut all = vec![p.voter];
    all.extend(&p.learners);
    let mut c = Cluster {
        nodes: BTreeMap::new(),
        reads: all.iter().map(|&id| (id, Vec::new())).collect(),
        wire: Vec::new(),
        slow: BTreeSet::new(),
        rng: ChaCha8Rng::seed_from_u64(p.net_seed),
        shuffle: p.shuffle,
        observer,
    };
    for &id in &all {
        let cfg = config(id, &[p.voter], &p.learners);
        cfg.validate().expect("valid config");
        c.nodes.insert(id, RawNode::new(&cfg, MemStorage::new(), vec![]).expect("node"));
    }
    c.nodes.get_mut(&p.voter).unwrap().campaign().expect("campaign");
    c.settle();
    assert_eq!(c.nodes[&p.voter].raft.state, StateRole::Leader);
    c.nodes.get_mut(&p.voter).unwrap().propose(vec![], b"x".to_vec()).expect("propose");
    c.settle();
    for &l in &p.learners {
        assert_eq!(c.nodes[&l].raft.leader_id, p.voter, "learner {} knows the leader", l);
    }
    (c.observer)(Event::Ready(&c.nodes));

    // (context, node, lowest acceptable index)
    let mut issued: Vec<(Vec<u8>, u64, u64)> = Vec::new();
    for (k, &(who, lag)) in p.reads.iter().enumerate() {
        if who != p.voter {
            c.slow.insert(who);
        }
        for e in 0..lag {
            let data = format!("entry {}.{}", k, e).into_bytes();
            c.nodes.get_mut(&p.voter).unwrap().propose(vec![], data).expect("propose");
        }
        c.collect();
        c.slow.remove(&who);
        let ctx = format!("read {} on node {}", k, who).into_bytes();
        issued.push((ctx.clone(), who, c.committed(p.voter)));
        (c.observer)(Event::Reading { node: who, ctx: &ctx });
        c.nodes.get_mut(&who).unwrap().read_index(ctx);
        // The request goes out; the reader's own traffic from the leader is still in flight.
        c.collect();
        let reader_held: Vec<Message> = {
            let (to_reader, rest): (Vec<Message>, Vec<Message>) =
                std::mem::take(&mut c.wire).into_iter().partition(|m| m.get_to() == who && who != p.voter);
            c.wire = rest;
            to_reader
        };
        c.slow.insert(who);
        c.settle();
        c.slow.remove(&who);
        c.wire.extend(reader_held);
        c.settle();
    }

    (c.observer)(Event::ReadsDone);
    let commit_after_reads = c.committed(p.voter);
    // Heartbeats answer no read a second time, and the group keeps replicating after the reads.
    for _ in 0..100 {
        for node in c.nodes.values_mut() {
            node.tick();
        }
        c.settle();
    }
    c.nodes.get_mut(&p.voter).unwrap().propose(vec![], b"last".to_vec()).expect("propose");
    c.settle();
    (c.observer)(Event::End(&c.nodes));
    Outcome {
        issued,
        commit_after_reads,
        leader_commit: c.committed(p.voter),
        committed: all.iter().map(|&id| (id, c.committed(id))).collect(),
        reads: c.reads,
    }
}

/// Every read is answered on the node that took it, with an index between the leader's commit
/// index when it was taken and when all reads were done; no node gets a read state it did not
/// ask for; every node catches up with the leader afterwards.
fn check(o: &Outcome) {
    for (ctx, who, low) in &o.issued {
        let got: Vec<u64> = o.reads[who].iter().filter(|(_, x)| x == ctx).map(|(i, _)| *i).collect();
        assert!(
            !got.is_empty(),
            "the read {:?} taken on node {} was never answered there",
            String::from_utf8_lossy(ctx),
            who
        );
        for index in got {
            assert!(
                index >= *low,
                "read {:?} on node {} got index {}, below the leader's commit index {} when it was taken",
                String::from_utf8_lossy(ctx),
                who,
                index,
                low
            );
            assert!(index <= o.commit_after_reads, "read index {} beyond the leader's commit index", index);
        }
    }
    for (&id, got) in &o.reads {
        for (_, ctx) in got {
            assert!(
                o.issued.iter().any(|(x, who, _)| x == ctx && *who == id),
                "node {} got a read state {:?} it never asked for",
                id,
                String::from_utf8_lossy(ctx)
            );
        }
    }
    for (&id, &committed) in &o.committed {
        assert_eq!(committed, o.leader_commit, "node {} did not catch up", id);
    }
}

fn seed() -> u64 {
    std::env::var("FAULTLINE_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(1)
}

#[test]
fn reads_are_answered_on_the_node_that_took_them() {
    check(&run(&Params::from_seed(seed()), &mut |_| {}));
}
