//! The `FAULTLINE_SEED`s oracle and regression runs are given, in one place because grading and
//! validation must agree on them: a repair is decided on the primary seed (validation's first),
//! and its robustness is checked on seeds far from validation's k seeds, on which validation also
//! runs the gold patch (a correct repair must pass them).

/// The seed of the oracle run that decides a repair, and of every regression run (the agent
/// never sees any seed).
pub const PRIMARY_SEED: u64 = 1;

/// Robustness seeds start here, well away from validation's k seeds.
pub const ROBUSTNESS_SEED_BASE: u64 = 1_000;

/// The `count` seeds a repair's robustness is checked on, in order; grading and validation both
/// take them from here.
pub fn robustness_seeds(count: u32) -> impl Iterator<Item = u64> {
    (0..u64::from(count)).map(|i| ROBUSTNESS_SEED_BASE + i)
}
