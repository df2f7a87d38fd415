//! Statistics for faultline results.
//!
//! Pure computation, no I/O, every random choice seeded, so published numbers
//! can be reproduced exactly:
//! - [`ResultSet`] validates graded attempts and aggregates them per case
//!   (mean over attempts, cases weighted equally);
//! - [`pass_at_k`] / [`pass_hat_k`] are the unbiased per-case estimators;
//! - [`bootstrap_mean`] and [`paired_bootstrap`] give case-bootstrap
//!   intervals and paired comparisons;
//! - [`Condition`] is an open label: `symptom` is the baseline, any other
//!   validated name (`context`, `static`, `model:small`, ...) is a further level;
//! - [`fit_glmm`] fits `pass ~ condition + (1|config) + (1|case)` like lme4's
//!   `glmer` with the Laplace approximation, one coefficient per non-baseline level;
//! - [`simulate_sweep`] makes synthetic sweeps with known truth for validation.
//!
//! ```
//! use faultline_stats::{BootstrapOptions, Condition, ResultSet, SweepSpec};
//!
//! let spec = SweepSpec {
//!     configs: 2,
//!     cases: 20,
//!     attempts: 3,
//!     intercept: 0.0,
//!     effects: vec![(Condition::context(), 1.0)],
//!     sd_config: 0.5,
//!     sd_case: 1.0,
//! };
//! let results = ResultSet::new(faultline_stats::simulate_sweep(&spec, 1)?)?;
//! let context = results.case_means("config-000", &Condition::context())?;
//! let symptom = results.case_means("config-000", &Condition::symptom())?;
//! let options = BootstrapOptions::new(42);
//! let ci = faultline_stats::bootstrap_mean(&context, &options)?;
//! assert!(ci.ci.lower <= ci.estimate && ci.estimate <= ci.ci.upper);
//! let gain = faultline_stats::paired_bootstrap(&context, &symptom, &options)?;
//! println!("context gain {:.3}, 95% CI [{:.3}, {:.3}], P(gain > 0) = {:.3}",
//!     gain.mean_diff, gain.ci.lower, gain.ci.upper, gain.share_positive);
//! let pass_at_3 = results.case_pass_at_k("config-000", &Condition::context(), 3)?.mean();
//! assert!(pass_at_3 >= context.mean());
//! # Ok::<(), faultline_stats::StatsError>(())
//! ```

mod bootstrap;
mod condition;
mod data;
mod error;
mod glmm;
mod optimize;
mod passk;
mod rng;
mod simulate;
mod sum;

pub use bootstrap::{
    BootstrapCi, BootstrapOptions, Histogram, Interval, PairedBootstrap, bootstrap_mean,
    paired_bootstrap,
};
pub use condition::InvalidConditionName;
pub use data::{Attribute, CaseInfo, CaseScores, Condition, Observation, PassKPoint, ResultSet};
pub use error::{Result, StatsError};
pub use glmm::{FixedEffect, GlmmFit, SINGULAR_TOL, fit_glmm};
pub use passk::{pass_at_k, pass_hat_k};
pub use simulate::{SweepSpec, simulate_sweep, to_csv};
