//! Per-grade randomness: the seed the operating system gives each grade, and every choice drawn
//! from it (names, canary messages, orders) through a stream per purpose, so that a recorded
//! seed replays the same grade.

use anyhow::{Context, Result};
use rand::rngs::ChaCha8Rng;
use rand::{Rng, SeedableRng, TryRng};
use sha2::{Digest, Sha256};
use std::collections::BTreeSet;

/// Length of the random identifiers (a letter, then letters and digits).
const NAME_LEN: usize = 12;

/// Length of a canary's random expected panic message.
pub(super) const EXPECTED_LEN: usize = 24;

/// Draws a per-grade seed from the operating system's random source.
pub fn fresh_seed() -> Result<u64> {
    rand::rngs::SysRng
        .try_next_u64()
        .context("the operating system's random source failed")
}

/// A ChaCha8 stream for one purpose of one grade, keyed by the SHA-256 of the seed and the
/// purpose, so that each derivation is independent of the order the others are drawn in.
pub(super) fn stream(seed: u64, purpose: &str) -> ChaCha8Rng {
    let mut h = Sha256::new();
    h.update(seed.to_le_bytes());
    h.update(purpose.as_bytes());
    ChaCha8Rng::from_seed(h.finalize().into())
}

/// A uniform index in `0..n` (multiply-shift with rejection, so a recorded seed replays the same
/// choices whatever a future `rand` does with ranges).
fn below(rng: &mut ChaCha8Rng, n: usize) -> usize {
    let n = u32::try_from(n).unwrap_or(u32::MAX).max(1);
    let threshold = n.wrapping_neg() % n;
    loop {
        let product = u64::from(rng.next_u32()) * u64::from(n);
        if (product as u32) >= threshold {
            return (product >> 32) as usize;
        }
    }
}

/// Shuffles in place (Fisher–Yates).
pub(super) fn shuffle<T>(rng: &mut ChaCha8Rng, items: &mut [T]) {
    for i in (1..items.len()).rev() {
        items.swap(i, below(rng, i + 1));
    }
}

const LETTERS: &[u8] = b"abcdefghijklmnopqrstuvwxyz";

const ALPHANUMERIC: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";

pub(super) fn random_text(rng: &mut ChaCha8Rng, len: usize) -> String {
    (0..len)
        .map(|_| ALPHANUMERIC[below(rng, ALPHANUMERIC.len())] as char)
        .collect()
}

/// Random identifiers, never the same twice within one grade.
pub(super) struct Names {
    pub(super) rng: ChaCha8Rng,
    pub(super) taken: BTreeSet<String>,
}

impl Names {
    pub(super) fn next(&mut self) -> String {
        loop {
            let mut name = String::with_capacity(NAME_LEN);
            name.push(LETTERS[below(&mut self.rng, LETTERS.len())] as char);
            name.push_str(&random_text(&mut self.rng, NAME_LEN - 1));
            if self.taken.insert(name.clone()) {
                return name;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_draws_the_same_names_and_order_every_time() {
        let draw = |seed| {
            let mut names = Names {
                rng: stream(seed, "names"),
                taken: BTreeSet::new(),
            };
            let mut v: Vec<String> = (0..5).map(|_| names.next()).collect();
            shuffle(&mut stream(seed, "order 1"), &mut v);
            v
        };
        assert_eq!(draw(7), draw(7));
        assert_ne!(draw(7), draw(8));
        for n in draw(7) {
            assert_eq!(n.len(), NAME_LEN);
            assert!(n.chars().next().unwrap().is_ascii_lowercase());
            assert!(
                n.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
            );
        }
        let mut rng = stream(1, "x");
        let mut counts = [0u32; 3];
        for _ in 0..3000 {
            counts[below(&mut rng, 3)] += 1;
        }
        assert!(counts.iter().all(|&c| c > 900), "{counts:?}");
    }
}
