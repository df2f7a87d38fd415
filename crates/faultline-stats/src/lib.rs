//! Statistics for faultline results.
//!
//! Pure computation, no I/O, every random choice seeded, so published numbers
//! can be reproduced exactly:
//! - [`ResultSet`] validates graded attempts and aggregates them per case
//!   (mean over attempts, cases weighted equally);
//! - [`pass_at_k`] / [`pass_hat_k`] are the unbiased per-case estimators;
//! - [`bootstrap_mean`] and [`paired_bootstrap`] give case-bootstrap
//!   intervals and paired comparisons;
//! - [`fit_glmm`] fits `pass ~ condition + (1|config) + (1|case)` like lme4's
//!   `glmer` with the Laplace approximation;
//! - [`simulate_sweep`] makes synthetic sweeps with known truth for validation.

mod bootstrap;
mod data;
mod error;
mod glmm;
mod optimize;
mod passk;
mod rng;
mod simulate;

pub use bootstrap::{
    BootstrapCi, BootstrapOptions, Histogram, Interval, PairedBootstrap, bootstrap_mean,
    paired_bootstrap,
};
pub use data::{Attribute, CaseInfo, CaseScores, Condition, Observation, ResultSet};
pub use error::{Result, StatsError};
pub use glmm::{FixedEffect, GlmmFit, fit_glmm};
pub use passk::{pass_at_k, pass_hat_k};
pub use simulate::{SweepSpec, simulate_sweep, to_csv};
