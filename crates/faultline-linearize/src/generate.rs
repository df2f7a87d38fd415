//! Seeded random key-value histories that are linearizable by construction, for testing and
//! timing checkers.
//!
//! Clients run one operation at a time against a sequential key-value store; each operation
//! takes effect at a random instant inside its interval, and its output is what the store gave
//! at that instant. A client may crash during an operation: the operation never returns, takes
//! effect or not (a coin flip), and a fresh client takes the crashed one's place, as Jepsen
//! replaces a process whose operation is indeterminate.

use std::collections::HashMap;

use rand::rngs::ChaCha8Rng;
use rand::{RngExt, SeedableRng};

use crate::history::{History, Operation};
use crate::models::{KvInput, KvOutput};

/// The shape of a generated key-value history.
#[derive(Debug, Clone)]
pub struct KvWorkload {
    /// Clients running at once.
    pub clients: usize,
    /// Operations in the history.
    pub operations: usize,
    /// Keys `"0"`, `"1"`, ... the operations pick uniformly.
    pub keys: usize,
    /// Chance that an operation's client crashes during it.
    pub crash_chance: f64,
    /// Longest time from a call to its effect, and from the effect to the return.
    pub max_latency: u64,
}

impl Default for KvWorkload {
    /// Five clients, a thousand operations over ten keys, no crashes.
    fn default() -> Self {
        KvWorkload {
            clients: 5,
            operations: 1000,
            keys: 10,
            crash_chance: 0.0,
            max_latency: 10,
        }
    }
}

/// One generated operation before its output is known.
struct Planned {
    client: u64,
    call: u64,
    input: KvInput,
    /// When it takes effect; `None` for a crashed operation that never does.
    effect: Option<u64>,
    /// When it returns; `None` when its client crashed.
    ret: Option<u64>,
}

/// A linearizable history of `workload`, the same for the same `seed`.
pub fn kv_history(workload: &KvWorkload, seed: u64) -> History<KvInput, KvOutput> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let clients = workload.clients.max(1);
    let keys = workload.keys.max(1);
    // (client id, time it is free again)
    let mut running: Vec<(u64, u64)> = (0..clients as u64)
        .map(|c| (c, rng.random_range(0..=2)))
        .collect();
    let mut next_client = clients as u64;
    let mut planned = Vec::with_capacity(workload.operations);
    for n in 0..workload.operations {
        let slot = (0..running.len())
            .min_by_key(|&s| (running[s].1, s))
            .unwrap_or(0);
        let (client, free) = running[slot];
        let call = free + rng.random_range(0..=2);
        let key = rng.random_range(0..keys).to_string();
        let input = match rng.random_range(0..10) {
            0..5 => KvInput::Get { key },
            5..7 => KvInput::Put {
                key,
                value: format!("{n}."),
            },
            _ => KvInput::Append {
                key,
                value: format!("{n}."),
            },
        };
        let effect = call + rng.random_range(0..=workload.max_latency);
        let ret = effect + rng.random_range(0..=workload.max_latency);
        if rng.random_bool(workload.crash_chance.clamp(0.0, 1.0)) {
            planned.push(Planned {
                client,
                call,
                input,
                effect: rng.random_bool(0.5).then_some(effect),
                ret: None,
            });
            running[slot] = (next_client, call + 1);
            next_client += 1;
        } else {
            planned.push(Planned {
                client,
                call,
                input,
                effect: Some(effect),
                ret: Some(ret),
            });
            running[slot].1 = ret;
        }
    }
    let mut order: Vec<usize> = (0..planned.len())
        .filter(|&i| planned[i].effect.is_some())
        .collect();
    order.sort_by_key(|&i| (planned[i].effect, i));
    let mut store: HashMap<String, String> = HashMap::new();
    let mut outputs: Vec<Option<KvOutput>> = vec![None; planned.len()];
    for i in order {
        outputs[i] = Some(match &planned[i].input {
            KvInput::Get { key } => KvOutput::Get {
                value: store.get(key).cloned().unwrap_or_default(),
            },
            KvInput::Put { key, value } => {
                store.insert(key.clone(), value.clone());
                KvOutput::Put
            }
            KvInput::Append { key, value } => {
                store.entry(key.clone()).or_default().push_str(value);
                KvOutput::Append
            }
        });
    }
    let operations = planned
        .into_iter()
        .zip(outputs)
        .map(|(p, output)| match (p.ret, output) {
            (Some(ret), Some(output)) => {
                Operation::returned(p.client, p.call, p.input, ret, output)
            }
            _ => Operation::pending(p.client, p.call, p.input),
        })
        .collect();
    History::new(operations).unwrap_or_else(|_| unreachable!("every return follows its call"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_seed_gives_the_same_history() {
        let w = KvWorkload {
            operations: 50,
            crash_chance: 0.1,
            ..KvWorkload::default()
        };
        assert_eq!(kv_history(&w, 3), kv_history(&w, 3));
        assert_ne!(kv_history(&w, 3), kv_history(&w, 4));
    }

    #[test]
    fn clients_overlap_and_crashes_leave_pending_operations() {
        let w = KvWorkload {
            operations: 400,
            crash_chance: 0.05,
            ..KvWorkload::default()
        };
        let h = kv_history(&w, 1);
        let ops = h.operations();
        assert_eq!(ops.len(), 400);
        let pending = ops.iter().filter(|o| o.ret.is_none()).count();
        assert!((5..60).contains(&pending), "{pending}");
        let overlapping = ops
            .windows(2)
            .filter(|w| {
                w[0].client != w[1].client && w[1].call <= w[0].return_time().unwrap_or(u64::MAX)
            })
            .count();
        assert!(overlapping > 100, "{overlapping}");
    }
}
