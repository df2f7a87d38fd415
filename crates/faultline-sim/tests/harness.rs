//! The harness on small servers whose behaviour is known: a single-copy store that is correct
//! only when it persists and deduplicates, and servers that panic, lie or hoard.

use std::collections::BTreeMap;
use std::time::Duration;

use faultline_sim::generate::calm_plan;
use faultline_sim::plan::{ClockSkew, Crash, Partition};
use faultline_sim::{
    ClientReply, ClientRequest, Clock, Env, Failure, FaultPlan, KvOp, Message, Network, Schedule,
    Server, Storage, judge, run,
};
use serde::{Deserialize, Serialize};

/// Server 0 holds the only copy; server 1 forwards requests to it; every other server sends
/// clients to server 1. With `PERSIST` the store and its table of answered requests survive a
/// crash; with `DEDUP` a request seen again is answered without applying it twice.
struct Primary<const PERSIST: bool, const DEDUP: bool>;

#[derive(Default, Serialize, Deserialize)]
struct State {
    kv: BTreeMap<String, String>,
    answered: BTreeMap<u64, (u64, ClientReply)>,
}

impl<const PERSIST: bool, const DEDUP: bool> Primary<PERSIST, DEDUP> {
    fn apply(state: &mut State, request: &ClientRequest, now: Duration) -> ClientReply {
        if DEDUP
            && let Some((seq, reply)) = state.answered.get(&request.client)
            && *seq >= request.seq
        {
            // An older request arriving late was answered long ago; its client ignores this.
            return reply.clone();
        }
        let reply = match &request.op {
            KvOp::Get { key } if key == "now" => ClientReply::Value {
                value: now.as_millis().to_string(),
            },
            KvOp::Get { key } => ClientReply::Value {
                value: state.kv.get(key).cloned().unwrap_or_default(),
            },
            KvOp::Put { key, value } => {
                state.kv.insert(key.clone(), value.clone());
                ClientReply::Done
            }
            KvOp::Append { key, value } => {
                state.kv.entry(key.clone()).or_default().push_str(value);
                ClientReply::Done
            }
        };
        state
            .answered
            .insert(request.client, (request.seq, reply.clone()));
        reply
    }
}

impl<const PERSIST: bool, const DEDUP: bool> Server for Primary<PERSIST, DEDUP> {
    async fn run<N: Network, S: Storage, C: Clock>(env: Env<N, S, C>) {
        let mut state: State = match env.storage.read("state") {
            Some(bytes) if PERSIST => serde_json::from_slice(&bytes).unwrap(),
            _ => State::default(),
        };
        loop {
            let request = match env.net.recv().await {
                Message::Client(request) if env.id == 1 => {
                    env.net.send(0, serde_json::to_vec(&request).unwrap());
                    continue;
                }
                Message::Client(request) if env.id != 0 => {
                    env.net
                        .reply(&request, ClientReply::NotLeader { leader: Some(1) });
                    continue;
                }
                Message::Client(request) => request,
                Message::Peer { payload, .. } => serde_json::from_slice(&payload).unwrap(),
            };
            let reply = Self::apply(&mut state, &request, env.clock.now());
            if PERSIST {
                env.storage
                    .write("state", &serde_json::to_vec(&state).unwrap());
            }
            env.net.reply(&request, reply);
        }
    }
}

type Correct = Primary<true, true>;

fn schedule(seed: u64, plan: FaultPlan) -> Schedule {
    Schedule {
        name: format!("test-{seed}"),
        seed,
        plan,
    }
}

fn failure_kind<S: Server>(s: &Schedule) -> Option<&'static str> {
    let report = run::<S>(s).unwrap();
    judge(s, &report).failure.map(|f| f.kind())
}

#[test]
fn a_correct_store_passes_a_calm_run_and_answers_every_operation() {
    let s = schedule(1, calm_plan(3));
    let report = run::<Correct>(&s).unwrap();
    let result = judge(&s, &report);
    assert_eq!(result.failure, None);
    assert_eq!(result.completed, 100);
    assert!(
        report.sim_ms > 0 && report.sim_ms < 30_000,
        "{}",
        report.sim_ms
    );
}

#[test]
fn the_same_schedule_gives_the_same_history_and_another_seed_another() {
    let mut plan = calm_plan(3);
    plan.network.loss = 0.1;
    plan.network.duplicate = 0.1;
    plan.network.long_delay = 0.05;
    plan.network.long_delay_max_ms = 200;
    let a = run::<Correct>(&schedule(5, plan.clone())).unwrap();
    let b = run::<Correct>(&schedule(5, plan.clone())).unwrap();
    let c = run::<Correct>(&schedule(6, plan)).unwrap();
    assert_eq!(a.history, b.history);
    assert_eq!(a.net, b.net);
    assert_ne!(a.history, c.history);
}

#[test]
fn lost_and_duplicated_messages_break_a_store_without_deduplication_only() {
    let mut plan = calm_plan(3);
    plan.network.loss = 0.2;
    plan.network.duplicate = 0.3;
    plan.workload.operations = 200;
    let s = schedule(11, plan);
    let report = run::<Correct>(&s).unwrap();
    assert!(
        report.net.lost > 0 && report.net.duplicated > 0,
        "{:?}",
        report.net
    );
    assert_eq!(judge(&s, &report).failure, None);
    assert_eq!(
        failure_kind::<Primary<true, false>>(&s),
        Some("linearizability")
    );
}

#[test]
fn a_crash_loses_only_what_was_not_stored() {
    let mut plan = calm_plan(3);
    plan.workload.operations = 300;
    plan.crashes = vec![Crash {
        node: 0,
        at_ms: 400,
        restart_ms: Some(900),
    }];
    let s = schedule(3, plan);
    let report = run::<Correct>(&s).unwrap();
    assert!(report.sim_ms > 900, "the run ended at {} ms", report.sim_ms);
    assert_eq!(judge(&s, &report).failure, None);
    assert_eq!(
        failure_kind::<Primary<false, true>>(&s),
        Some("linearizability")
    );
}

#[test]
fn a_server_down_to_the_end_fails_on_liveness() {
    let mut plan = calm_plan(3);
    plan.limits.time_limit_ms = 5_000;
    plan.crashes = vec![Crash {
        node: 0,
        at_ms: 50,
        restart_ms: None,
    }];
    let s = schedule(3, plan);
    let report = run::<Correct>(&s).unwrap();
    let result = judge(&s, &report);
    assert_eq!(report.sim_ms, 5_000);
    assert!(
        matches!(result.failure, Some(Failure::Liveness { completed, operations: 100 }) if completed < 100),
        "{:?}",
        result.failure
    );
}

#[test]
fn a_partition_stops_forwarding_until_it_heals() {
    let cut = |heal_ms| {
        let mut plan = calm_plan(3);
        plan.limits.time_limit_ms = 10_000;
        plan.partitions = vec![Partition {
            at_ms: 0,
            heal_ms,
            groups: vec![vec![0], vec![1, 2]],
        }];
        schedule(4, plan)
    };
    // Requests reach server 0 only through server 1 (or directly, for a client that happens to
    // start there): cut off, most clients wait; healed, they all finish.
    let whole = cut(20_000);
    let result = judge(&whole, &run::<Correct>(&whole).unwrap());
    assert!(
        matches!(result.failure, Some(Failure::Liveness { .. })),
        "{:?}",
        result.failure
    );
    let healed = cut(2_000);
    let report = run::<Correct>(&healed).unwrap();
    assert_eq!(judge(&healed, &report).failure, None);
    assert!(report.sim_ms > 2_000, "{}", report.sim_ms);
}

#[test]
fn a_skewed_clock_reads_its_offset_and_rate() {
    let mut plan = calm_plan(1);
    plan.workload.clients = 1;
    plan.workload.keys = 1;
    plan.workload.operations = 60;
    plan.clock_skew = vec![ClockSkew {
        node: 0,
        offset_ms: 50_000,
        rate: 1.5,
    }];
    // A server that answers every get with its clock's reading.
    struct ClockServer;
    impl Server for ClockServer {
        async fn run<N: Network, S: Storage, C: Clock>(env: Env<N, S, C>) {
            loop {
                if let Message::Client(request) = env.net.recv().await {
                    let reply = match request.op {
                        KvOp::Get { .. } => ClientReply::Value {
                            value: env.clock.now().as_millis().to_string(),
                        },
                        _ => ClientReply::Done,
                    };
                    env.net.reply(&request, reply);
                }
            }
        }
    }
    let report = run::<ClockServer>(&schedule(2, plan)).unwrap();
    let mut reads = 0;
    for op in report.history.operations() {
        let Some(r) = &op.ret else { continue };
        if let faultline_linearize::models::KvOutput::Get { value } = &r.output {
            let read: f64 = value.parse().unwrap();
            let (call_ms, ret_ms) = (op.call as f64 / 1e3, r.time as f64 / 1e3);
            assert!(
                read >= 50_000.0 + 1.5 * call_ms - 1.0 && read <= 50_000.0 + 1.5 * ret_ms + 1.0,
                "read {read} outside [{call_ms}, {ret_ms}] skewed"
            );
            reads += 1;
        }
    }
    assert!(reads > 5);
}

#[test]
fn panics_wrong_answers_hoarding_and_silence_are_each_named() {
    struct Panics;
    impl Server for Panics {
        async fn run<N: Network, S: Storage, C: Clock>(env: Env<N, S, C>) {
            env.net.recv().await;
            panic!("server {} gave up", env.id);
        }
    }
    struct AlwaysDone;
    impl Server for AlwaysDone {
        async fn run<N: Network, S: Storage, C: Clock>(env: Env<N, S, C>) {
            loop {
                if let Message::Client(request) = env.net.recv().await {
                    env.net.reply(&request, ClientReply::Done);
                }
            }
        }
    }
    struct Hoards;
    impl Server for Hoards {
        async fn run<N: Network, S: Storage, C: Clock>(env: Env<N, S, C>) {
            env.storage.write("big", &vec![0; 2 << 20]);
            Correct::run(env).await;
        }
    }
    struct Silent;
    impl Server for Silent {
        async fn run<N: Network, S: Storage, C: Clock>(env: Env<N, S, C>) {
            loop {
                env.net.recv().await;
            }
        }
    }
    let mut plan = calm_plan(3);
    plan.limits.time_limit_ms = 3_000;
    let s = schedule(8, plan);
    let report = run::<Panics>(&s).unwrap();
    assert!(
        report
            .crashed_with
            .as_deref()
            .unwrap_or("")
            .contains("gave up"),
        "{:?}",
        report.crashed_with
    );
    assert_eq!(judge(&s, &report).failure.unwrap().kind(), "panic");
    assert_eq!(failure_kind::<AlwaysDone>(&s), Some("protocol"));
    assert_eq!(failure_kind::<Hoards>(&s), Some("storage"));
    assert_eq!(failure_kind::<Silent>(&s), Some("liveness"));
}

#[test]
fn a_plan_the_harness_cannot_run_is_an_error() {
    let mut plan = calm_plan(3);
    plan.crashes = vec![Crash {
        node: 7,
        at_ms: 1,
        restart_ms: None,
    }];
    let err = run::<Correct>(&schedule(1, plan)).unwrap_err();
    assert!(err.to_string().contains("node 7"), "{err}");
}

/// Set in a child process: the schedule seed whose history digest the child prints.
const CHILD_SEED: &str = "FAULTLINE_SIM_CHILD_SEED";

/// The first seed of the churn family: partitions, crashes, loss, duplication and skew at once.
fn churn_seed() -> u64 {
    (0..)
        .find(|&s| faultline_sim::generate::family_of(s) == faultline_sim::generate::Family::Churn)
        .unwrap()
}

fn churn_schedule(seed: u64) -> Schedule {
    let profile = faultline_sim::generate::Profile {
        operations: 150,
        ..Default::default()
    };
    faultline_sim::generate::generate("churn", seed, &profile)
}

fn churn_digest(seed: u64) -> String {
    let s = churn_schedule(seed);
    faultline_sim::history::digest(&run::<Correct>(&s).unwrap().history)
}

/// Does nothing unless a parent test started this process to print a run's digest.
#[test]
fn child_prints_the_digest_of_a_run() {
    if let Ok(seed) = std::env::var(CHILD_SEED) {
        println!("digest={}", churn_digest(seed.parse().unwrap()));
    }
}

#[test]
fn runs_in_two_other_processes_give_the_same_history_byte_for_byte() {
    let seed = churn_seed();
    let here = churn_digest(seed);
    assert_eq!(here, churn_digest(seed), "a second run in this process");
    for _ in 0..2 {
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "child_prints_the_digest_of_a_run", "--nocapture"])
            .env(CHILD_SEED, seed.to_string())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let stdout = String::from_utf8_lossy(&out.stdout);
        let digest = stdout
            .lines()
            .find_map(|l| l.strip_prefix("digest="))
            .unwrap_or_else(|| panic!("no digest in {stdout}"));
        assert_eq!(digest, here);
    }
}
