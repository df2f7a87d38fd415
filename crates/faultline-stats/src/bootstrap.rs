//! Case bootstrap: uncertainty of equal-weight case means and of paired differences.
//!
//! Cases are the unit of resampling (each keeps its attempt mean), because the
//! benchmark's claims generalise over cases, not over attempts.

use crate::data::CaseScores;
use crate::error::{Result, StatsError};
use crate::rng;

/// Settings of a bootstrap run; the seed is explicit so every published number can be reproduced.
///
/// Reusing one seed for groups over the same cases draws the same case
/// resamples for each (common random numbers), which keeps their intervals
/// comparable.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BootstrapOptions {
    /// Number of resamples (10,000 by default).
    pub resamples: usize,
    /// Coverage of the percentile interval, in `(0, 1)` (0.95 by default).
    pub level: f64,
    /// Seed of the ChaCha8 stream that draws the resamples.
    pub seed: u64,
}

impl BootstrapOptions {
    /// The protocol's defaults (10,000 resamples, 95 %) with the given seed.
    pub fn new(seed: u64) -> Self {
        Self {
            resamples: 10_000,
            level: 0.95,
            seed,
        }
    }

    fn validate(&self) -> Result<()> {
        if self.resamples < 2 {
            return Err(StatsError::InvalidOption(format!(
                "bootstrap needs at least 2 resamples, got {}",
                self.resamples
            )));
        }
        if !(self.level > 0.0 && self.level < 1.0) {
            return Err(StatsError::InvalidOption(format!(
                "confidence level must be in (0, 1), got {}",
                self.level
            )));
        }
        Ok(())
    }
}

/// A two-sided confidence interval.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Interval {
    /// Lower bound.
    pub lower: f64,
    /// Upper bound.
    pub upper: f64,
    /// Nominal coverage.
    pub level: f64,
}

impl Interval {
    /// Whether `x` lies in the closed interval; used for coverage checks.
    pub fn contains(&self, x: f64) -> bool {
        self.lower <= x && x <= self.upper
    }
}

/// Equal-weight case mean with its percentile bootstrap interval.
#[derive(Debug, Clone, PartialEq)]
pub struct BootstrapCi {
    /// Mean over cases of the observed data.
    pub estimate: f64,
    /// Number of cases resampled.
    pub n_cases: usize,
    /// Percentile interval of the resampled means.
    pub ci: Interval,
    /// Standard deviation of the resampled means.
    pub std_error: f64,
}

/// Paired case-bootstrap comparison of two samples over the same cases.
///
/// Keeps the whole resampled distribution, not only a p-value, so reports can
/// show how large and how certain a difference is.
#[derive(Debug, Clone, PartialEq)]
pub struct PairedBootstrap {
    /// Number of paired cases.
    pub n_cases: usize,
    /// Observed mean over cases of `first - second`.
    pub mean_diff: f64,
    /// Percentile interval of the resampled mean differences.
    pub ci: Interval,
    /// Standard deviation of the resampled mean differences.
    pub std_error: f64,
    /// Share of resampled mean differences above 0.
    pub share_positive: f64,
    /// Share of resampled mean differences below 0.
    pub share_negative: f64,
    /// One-sided bootstrap p-value for "first is better": the share of resamples at or below 0.
    pub p_one_sided: f64,
    distribution: Vec<f64>,
}

impl PairedBootstrap {
    /// The resampled mean differences, sorted ascending.
    pub fn distribution(&self) -> &[f64] {
        &self.distribution
    }

    /// Quantile `p` of the resampled mean differences (R's type 7), so a report can show the
    /// whole distribution and not only an interval; `p` must lie in `[0, 1]`.
    pub fn quantile(&self, p: f64) -> Result<f64> {
        if !(0.0..=1.0).contains(&p) {
            return Err(StatsError::InvalidOption(format!(
                "a quantile's probability must be in [0, 1], got {p}"
            )));
        }
        Ok(quantile(&self.distribution, p))
    }

    /// Equal-width histogram of the resampled mean differences, for plotting.
    pub fn histogram(&self, bins: usize) -> Result<Histogram> {
        Histogram::new(&self.distribution, bins)
    }
}

/// Equal-width histogram; `counts[i]` covers `[edges[i], edges[i + 1])`, the last bin also its upper edge.
#[derive(Debug, Clone, PartialEq)]
pub struct Histogram {
    /// Bin edges, one more than there are bins.
    pub edges: Vec<f64>,
    /// Number of values per bin.
    pub counts: Vec<usize>,
}

impl Histogram {
    /// Bins `values` over their range; a distribution with a single distinct
    /// value becomes one zero-width bin, since any wider range would be invented.
    pub fn new(values: &[f64], bins: usize) -> Result<Self> {
        if bins == 0 {
            return Err(StatsError::InvalidOption(
                "a histogram needs at least one bin".to_owned(),
            ));
        }
        if values.is_empty() {
            return Err(StatsError::Empty {
                what: "histogram values",
            });
        }
        if values.iter().any(|v| !v.is_finite()) {
            return Err(StatsError::InvalidOption(
                "histogram values must be finite".to_owned(),
            ));
        }
        let min = values.iter().copied().fold(f64::INFINITY, f64::min);
        let max = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        if min == max {
            return Ok(Self {
                edges: vec![min, max],
                counts: vec![values.len()],
            });
        }
        if let Some(step) = lattice_step(values, min, max) {
            return Ok(Self::on_lattice(values, min, max, step, bins));
        }
        let width = (max - min) / bins as f64;
        let mut edges: Vec<f64> = (0..bins).map(|i| min + width * i as f64).collect();
        edges.push(max);
        let mut counts = vec![0; bins];
        for &v in values {
            let bin = (((v - min) / width) as usize).min(bins - 1);
            counts[bin] += 1;
        }
        Ok(Self { edges, counts })
    }

    /// Bins for values that all lie on a grid of `step` (a resampled mean of pass rates does):
    /// every bin holds the same number of grid points and its edges fall halfway between two,
    /// so the bars show the distribution, not how the grid happens to meet equal-width bins.
    fn on_lattice(values: &[f64], min: f64, max: f64, step: f64, bins: usize) -> Self {
        let points = ((max - min) / step).round() as usize + 1;
        let per_bin = points.div_ceil(bins);
        let used = points.div_ceil(per_bin);
        let width = step * per_bin as f64;
        // The grid points the last bin has room for beyond `max`, split between both ends.
        let spare = (used * per_bin - points) / 2;
        let start = min - step / 2.0 - step * spare as f64;
        let edges = (0..=used).map(|i| start + width * i as f64).collect();
        let mut counts = vec![0; used];
        for &v in values {
            let point = ((v - min) / step).round() as usize + spare;
            counts[(point / per_bin).min(used - 1)] += 1;
        }
        Self { edges, counts }
    }
}

/// The grid the values lie on, if they all do and it is coarse enough to matter: the smallest
/// gap between distinct values, when every value is a whole number of such gaps from `min`.
fn lattice_step(values: &[f64], min: f64, max: f64) -> Option<f64> {
    const MAX_POINTS: f64 = 100_000.0;
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let tolerance = (max - min) * 1e-9;
    let step = sorted
        .windows(2)
        .map(|w| w[1] - w[0])
        .filter(|&gap| gap > tolerance)
        .fold(f64::INFINITY, f64::min);
    if !step.is_finite() || (max - min) / step > MAX_POINTS {
        return None;
    }
    sorted
        .iter()
        .all(|v| {
            let k = (v - min) / step;
            (k - k.round()).abs() < 1e-6
        })
        .then_some(step)
}

/// Percentile bootstrap interval for the equal-weight mean of `scores`.
pub fn bootstrap_mean(scores: &CaseScores, options: &BootstrapOptions) -> Result<BootstrapCi> {
    let means = resampled_means(scores.scores(), options)?;
    Ok(BootstrapCi {
        estimate: scores.mean(),
        n_cases: scores.len(),
        ci: percentile_interval(&means, options.level),
        std_error: std_dev(&means),
    })
}

/// Paired bootstrap of `first - second` over cases both contain: resamples
/// cases and recomputes the mean difference, so case difficulty cancels out.
///
/// Errors if a case is present on one side only.
pub fn paired_bootstrap(
    first: &CaseScores,
    second: &CaseScores,
    options: &BootstrapOptions,
) -> Result<PairedBootstrap> {
    let diffs = first.paired_differences(second)?;
    let distribution = resampled_means(diffs.scores(), options)?;
    let b = distribution.len() as f64;
    let positive = distribution.iter().filter(|&&d| d > 0.0).count() as f64;
    let negative = distribution.iter().filter(|&&d| d < 0.0).count() as f64;
    Ok(PairedBootstrap {
        n_cases: diffs.len(),
        mean_diff: diffs.mean(),
        ci: percentile_interval(&distribution, options.level),
        std_error: std_dev(&distribution),
        share_positive: positive / b,
        share_negative: negative / b,
        p_one_sided: (b - positive) / b,
        distribution,
    })
}

/// Sorted means of `options.resamples` case resamples of `values`.
fn resampled_means(values: &[f64], options: &BootstrapOptions) -> Result<Vec<f64>> {
    options.validate()?;
    if values.len() < 2 {
        return Err(StatsError::TooFewCases {
            needed: 2,
            found: values.len(),
        });
    }
    let n = u32::try_from(values.len())
        .map_err(|_| StatsError::InvalidOption("more than u32::MAX cases".to_owned()))?;
    let mut rng = rng::seeded(options.seed);
    let mut means: Vec<f64> = (0..options.resamples)
        .map(|_| (0..n).map(|_| values[rng::index(&mut rng, n)]).sum::<f64>() / f64::from(n))
        .collect();
    means.sort_by(f64::total_cmp);
    Ok(means)
}

/// Quantile of sorted data with linear interpolation between order statistics
/// (Hyndman–Fan type 7, R's default), so results match a quick check in R.
fn quantile(sorted: &[f64], p: f64) -> f64 {
    let h = (sorted.len() - 1) as f64 * p;
    let lo = h.floor() as usize;
    let hi = (lo + 1).min(sorted.len() - 1);
    sorted[lo] + (h - lo as f64) * (sorted[hi] - sorted[lo])
}

fn percentile_interval(sorted: &[f64], level: f64) -> Interval {
    let tail = (1.0 - level) / 2.0;
    Interval {
        lower: quantile(sorted, tail),
        upper: quantile(sorted, 1.0 - tail),
        level,
    }
}

fn std_dev(values: &[f64]) -> f64 {
    let n = values.len() as f64;
    let mean = values.iter().sum::<f64>() / n;
    (values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1.0)).sqrt()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantile_matches_r_type_7() {
        // R: quantile(c(1, 2, 4, 8), c(0.025, 0.5, 0.975)) -> 1.075, 3.000, 7.700
        let sorted = [1.0, 2.0, 4.0, 8.0];
        assert!((quantile(&sorted, 0.025) - 1.075).abs() < 1e-12);
        assert!((quantile(&sorted, 0.5) - 3.0).abs() < 1e-12);
        assert!((quantile(&sorted, 0.975) - 7.7).abs() < 1e-12);
    }

    #[test]
    fn histogram_counts_every_value_once() {
        // Off any grid: equal-width bins over the range.
        let h = Histogram::new(&[0.0, 0.13, 0.5, 0.9, 1.0], 2).unwrap();
        assert_eq!(h.edges, vec![0.0, 0.5, 1.0]);
        assert_eq!(h.counts, vec![2, 3]);
        let flat = Histogram::new(&[0.3; 4], 10).unwrap();
        assert_eq!(flat.counts, vec![4]);
        assert!(Histogram::new(&[1.0], 0).is_err());
    }

    /// Means of 12 cases with one attempt each lie on a grid of 1/12: each bin holds the same
    /// number of grid points, and no grid point sits on an edge.
    #[test]
    fn a_histogram_of_grid_values_bins_whole_grid_points() {
        let values: Vec<f64> = (0..=12)
            .flat_map(|k| std::iter::repeat_n(k as f64 / 12.0 - 0.5, 1 + k % 3))
            .collect();
        let h = Histogram::new(&values, 5).unwrap();
        assert_eq!(h.counts.len(), 5, "{h:?}");
        assert_eq!(h.counts.iter().sum::<usize>(), values.len());
        let width = h.edges[1] - h.edges[0];
        assert!((width - 3.0 / 12.0).abs() < 1e-12, "{h:?}");
        for k in 0..=12 {
            let v = k as f64 / 12.0 - 0.5;
            let from_edge = h
                .edges
                .iter()
                .map(|e| (e - v).abs())
                .fold(f64::INFINITY, f64::min);
            assert!(
                from_edge > 0.4 / 12.0,
                "grid point {v} is on an edge: {h:?}"
            );
        }
    }
}
