//! Unbiased pass@k and pass^k estimators for one case.
//!
//! Both are ratios of binomial coefficients, computed as running products of
//! ratios in `[0, 1]` so that no huge intermediate number can overflow or lose
//! precision.

use crate::error::{Result, StatsError};

fn check(n: u32, c: u32, k: u32) -> Result<()> {
    if n == 0 || c > n {
        return Err(StatsError::InvalidCounts {
            attempts: n,
            passes: c,
        });
    }
    if k == 0 || k > n {
        return Err(StatsError::InvalidK { case: None, n, k });
    }
    Ok(())
}

/// `C(a, k) / C(n, k)` for `a <= n`, as a product of `k` ratios `(a - i) / (n - i)`.
fn binomial_ratio(a: u32, n: u32, k: u32) -> f64 {
    if a < k {
        return 0.0;
    }
    (0..k)
        .map(|i| f64::from(a - i) / f64::from(n - i))
        .product()
}

/// Probability that at least one of `k` attempts drawn without replacement
/// from `n` attempts with `c` passes passes: `1 - C(n-c, k) / C(n, k)`.
///
/// This is the unbiased estimator of pass@k from `n >= k` attempts; the naive
/// `1 - (1 - c/n)^k` is biased.
pub fn pass_at_k(n: u32, c: u32, k: u32) -> Result<f64> {
    check(n, c, k)?;
    Ok(1.0 - binomial_ratio(n - c, n, k))
}

/// Probability that all of `k` attempts drawn without replacement from `n`
/// attempts with `c` passes pass: `C(c, k) / C(n, k)`.
///
/// The unbiased estimator of pass^k, which measures reliability rather than
/// best-of-k capability.
pub fn pass_hat_k(n: u32, c: u32, k: u32) -> Result<f64> {
    check(n, c, k)?;
    Ok(binomial_ratio(c, n, k))
}
