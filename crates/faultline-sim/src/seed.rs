//! Seeds of the independent random streams of one run, all drawn from the schedule's seed, so
//! that adding a draw to one stream (one more client, one more message) leaves the others as
//! they were.

/// The streams a run draws from.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Stream {
    /// turmoil's own choices (message latencies).
    Simulator = 1,
    /// A server incarnation's seed, given to the server.
    Server = 2,
    /// A server incarnation's message faults.
    ServerNet = 3,
    /// A client's operations and first server.
    Client = 4,
    /// A client's message faults.
    ClientNet = 5,
}

/// The seed of `stream` for `labels` (a server and its incarnation, a client) under `seed`.
pub(crate) fn derive(seed: u64, stream: Stream, labels: &[u64]) -> u64 {
    let mut state = mix(seed ^ mix(stream as u64));
    for &label in labels {
        state = mix(state ^ mix(label.wrapping_add(0x632b_e59b_d9b4_e019)));
    }
    state
}

/// One step of the splitmix64 finalizer: a bijection that spreads every input bit.
fn mix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streams_and_labels_give_different_seeds_and_the_same_inputs_the_same_seed() {
        let a = derive(7, Stream::Server, &[1, 0]);
        assert_eq!(a, derive(7, Stream::Server, &[1, 0]));
        assert_ne!(a, derive(7, Stream::Server, &[1, 1]));
        assert_ne!(a, derive(7, Stream::Server, &[0, 1]));
        assert_ne!(a, derive(7, Stream::ServerNet, &[1, 0]));
        assert_ne!(a, derive(8, Stream::Server, &[1, 0]));
    }
}
