//! Mixed-effects logistic regression `pass ~ condition + (1|config) + (1|case)`
//! fitted by the Laplace approximation, matching lme4's `glmer(nAGQ = 1)`.
//!
//! `condition` is a factor with one level per condition present, baseline
//! (`symptom`) first and the others by name, coded as R codes a factor by
//! default: an intercept for the baseline and one coefficient
//! `condition<level>` per other level, its logit shift against the baseline.
//!
//! Why a GLMM: pass rates of different configurations on different cases are
//! not independent, so the condition effect must be estimated while
//! configuration strength and case difficulty are treated as random.
//!
//! Method, in lme4's terms: random effects are `b = Λu` with `u ~ N(0, I)` and
//! `Λ = diag(θ_config, θ_case)`. For given parameters, penalised iteratively
//! reweighted least squares (Newton on the penalised deviance) finds the mode
//! `ũ`; the Laplace deviance is `-2 log p(y | ũ) + |ũ|² + log det A`, with `A`
//! the Hessian of the penalised deviance in `u` (halved). Stage 1 optimises θ
//! with β profiled inside the Newton iteration (lme4's `nAGQ = 0`); stage 2
//! optimises θ and β jointly by Nelder–Mead. Standard errors come from a
//! finite-difference Hessian of the deviance in (θ, β), as lme4 does by default;
//! the deviance is summed with compensation (`sum.rs`) so that those
//! differences are not rounding noise.

use nalgebra::{DMatrix, DVector};

use crate::data::{Condition, ResultSet};
use crate::error::{Result, StatsError};
use crate::optimize::{Tolerance, nelder_mead};
use crate::sum::CompensatedSum;

/// Below this a standard deviation counts as zero: lme4's `isSingular` tolerance.
pub const SINGULAR_TOL: f64 = 1e-4;
/// Finite-difference step for the Hessian, as in lme4.
const HESSIAN_STEP: f64 = 1e-4;
/// Newton steps smaller than this (max-norm) end the mode search.
const MODE_TOL: f64 = 1e-10;
const MAX_NEWTON_ITERATIONS: usize = 200;
const MAX_EVALUATIONS: usize = 20_000;
/// Stage 1 only supplies starting values, so it may stop early.
const STAGE1_TOL: Tolerance = Tolerance { f: 1e-6, x: 1e-4 };
/// Stage 2 is the answer: converge far below the reported precision.
const STAGE2_TOL: Tolerance = Tolerance { f: 1e-9, x: 1e-7 };

/// One fixed-effect coefficient with its Wald test.
#[derive(Debug, Clone, PartialEq)]
pub struct FixedEffect {
    /// Coefficient name as lme4 prints it (`(Intercept)`, `conditioncontext`).
    pub name: String,
    /// Estimate on the logit scale.
    pub estimate: f64,
    /// Standard error from the Hessian of the Laplace deviance.
    pub std_error: f64,
    /// Wald statistic `estimate / std_error`.
    pub z: f64,
    /// Two-sided p-value of the Wald statistic under the normal distribution.
    pub p_value: f64,
}

/// Result of [`fit_glmm`].
#[derive(Debug, Clone, PartialEq)]
pub struct GlmmFit {
    /// The condition levels present, baseline first and then by name.
    pub levels: Vec<Condition>,
    /// Intercept (the baseline) first, then one effect per further level, in
    /// the order of [`GlmmFit::levels`].
    pub fixed: Vec<FixedEffect>,
    /// Standard deviation of the configuration random intercepts (logit scale).
    pub sd_config: f64,
    /// Standard deviation of the case random intercepts (logit scale).
    pub sd_case: f64,
    /// Laplace-approximated log-likelihood.
    pub log_likelihood: f64,
    /// `-2 * log_likelihood`.
    pub deviance: f64,
    /// Akaike information criterion, counting fixed effects and both SDs.
    pub aic: f64,
    /// Bayesian information criterion with the number of attempts as sample size.
    pub bic: f64,
    /// True when an SD is estimated at (practically) zero, where the Wald
    /// inference treats that SD as fixed and should be read with care.
    pub singular: bool,
    /// Number of attempts (Bernoulli observations).
    pub n_obs: usize,
    /// Number of configurations.
    pub n_configs: usize,
    /// Number of cases.
    pub n_cases: usize,
    /// Deviance evaluations used by the optimiser, for diagnosing hard fits.
    pub evaluations: usize,
}

impl GlmmFit {
    /// Logit-scale effect of `level` against the baseline; `None` for the
    /// baseline itself (that is the intercept) and for levels not in the data.
    pub fn effect(&self, level: &Condition) -> Option<&FixedEffect> {
        let i = self.levels.iter().position(|l| l == level)?;
        (i > 0).then(|| &self.fixed[i])
    }

    /// The report's headline coefficient: context versus symptom-only, when the data has both.
    pub fn context_effect(&self) -> Option<&FixedEffect> {
        self.effect(&Condition::context())
    }
}

/// Fits `pass ~ condition + (1|config) + (1|case)` by Laplace approximation.
///
/// All values must be pass/fail. Errors if the baseline condition is missing,
/// if a factor has a single level, if a condition level is all-pass or
/// all-fail (separation), or if the fit breaks down numerically.
pub fn fit_glmm(results: &ResultSet) -> Result<GlmmFit> {
    let data = Data::from_results(results)?;
    let model = Model::new(&data);
    let mut mode = Mode::new(&model);

    let stage1 = nelder_mead(
        |t| model.deviance(t, None, &mut mode),
        &[1.0, 1.0],
        &[0.25, 0.25],
        STAGE1_TOL,
        MAX_EVALUATIONS,
    )?;
    model.deviance(&stage1.x, None, &mut mode)?;
    let start: Vec<f64> = stage1
        .x
        .iter()
        .map(|t| t.abs())
        .chain(mode.beta.iter().copied())
        .collect();
    let step = vec![0.05; start.len()];
    let stage2 = nelder_mead(
        |x| model.deviance(&x[..2], Some(&x[2..]), &mut mode),
        &start,
        &step,
        STAGE2_TOL,
        MAX_EVALUATIONS,
    )?;

    let theta = [stage2.x[0].abs(), stage2.x[1].abs()];
    let beta = &stage2.x[2..];
    let covariance = beta_covariance(&model, &theta, beta, &mut mode)?;

    let names = std::iter::once("(Intercept)".to_owned()).chain(
        data.levels[1..]
            .iter()
            .map(|level| format!("condition{level}")),
    );
    let fixed = names
        .zip(beta)
        .enumerate()
        .map(|(i, (name, &estimate))| {
            let std_error = covariance[(i, i)].sqrt();
            let z = estimate / std_error;
            let p_value = statrs::function::erf::erfc(z.abs() / std::f64::consts::SQRT_2);
            FixedEffect {
                name,
                estimate,
                std_error,
                z,
                p_value,
            }
        })
        .collect();
    let deviance = stage2.f;
    let n_params = (beta.len() + 2) as f64;
    let (sd_config, sd_case) = if model.big_is_case {
        (theta[1], theta[0])
    } else {
        (theta[0], theta[1])
    };
    Ok(GlmmFit {
        levels: data.levels,
        fixed,
        sd_config,
        sd_case,
        log_likelihood: -deviance / 2.0,
        deviance,
        aic: deviance + 2.0 * n_params,
        bic: deviance + (data.n_obs as f64).ln() * n_params,
        singular: theta.iter().any(|&t| t < SINGULAR_TOL),
        n_obs: data.n_obs,
        n_configs: data.n_configs,
        n_cases: data.n_cases,
        evaluations: stage1.evaluations + stage2.evaluations,
    })
}

/// Attempts pooled per (config, case, condition): binomial counts give the
/// same likelihood as the Bernoulli rows at a fraction of the cost.
struct Data {
    levels: Vec<Condition>,
    config: Vec<usize>,
    case: Vec<usize>,
    /// Index into `levels`; the design row is the indicator of this level (none for the baseline).
    level: Vec<usize>,
    passes: Vec<f64>,
    trials: Vec<f64>,
    n_obs: usize,
    n_configs: usize,
    n_cases: usize,
}

impl Data {
    fn from_results(results: &ResultSet) -> Result<Self> {
        let configs: Vec<&str> = results.configs().collect();
        let cases: Vec<&str> = results.cases().collect();
        let levels = results.conditions();
        if !levels.first().is_some_and(Condition::is_baseline) {
            let found: Vec<&str> = levels.iter().map(Condition::as_str).collect();
            return Err(StatsError::MissingBaseline {
                found: found.join(", "),
            });
        }
        for (factor, levels) in [
            ("condition", levels.len()),
            ("config", configs.len()),
            ("case", cases.len()),
        ] {
            if levels < 2 {
                return Err(StatsError::SingleLevel { factor, levels });
            }
        }
        // (passes, attempts) per level.
        let mut totals = vec![(0.0, 0.0); levels.len()];
        let mut data = Data {
            levels,
            config: Vec::new(),
            case: Vec::new(),
            level: Vec::new(),
            passes: Vec::new(),
            trials: Vec::new(),
            n_obs: results.len(),
            n_configs: configs.len(),
            n_cases: cases.len(),
        };
        let position = |names: &[&str], name: &str| {
            names.binary_search(&name).map_err(|_| {
                StatsError::GlmmFailed(format!("internal: level {name:?} missing from its factor"))
            })
        };
        for (config, condition, case, cell) in results.cells() {
            let (n, c) = cell.pass_counts(config, case)?;
            let level = data.levels.binary_search(condition).map_err(|_| {
                StatsError::GlmmFailed(format!("internal: condition {condition} missing"))
            })?;
            data.config.push(position(&configs, config)?);
            data.case.push(position(&cases, case)?);
            data.level.push(level);
            data.passes.push(f64::from(c));
            data.trials.push(f64::from(n));
            totals[level].0 += f64::from(c);
            totals[level].1 += f64::from(n);
        }
        for (condition, &(passes, trials)) in data.levels.iter().zip(&totals) {
            if passes == 0.0 || passes == trials {
                let outcome = if passes == 0.0 { "failed" } else { "passed" };
                return Err(StatsError::Separation {
                    condition: condition.clone(),
                    outcome,
                });
            }
        }
        Ok(data)
    }
}

/// The model in solver form. The factor with more levels ("big") is
/// eliminated through its diagonal block, so only a dense system of the
/// smaller factor's levels (plus β in stage 1) is ever factorised.
struct Model<'a> {
    data: &'a Data,
    big: &'a [usize],
    small: &'a [usize],
    q_big: usize,
    q_small: usize,
    big_is_case: bool,
}

/// Current mode (and β in stage 1); kept between evaluations as a warm start.
#[derive(Clone)]
struct Mode {
    u_big: Vec<f64>,
    u_small: Vec<f64>,
    beta: Vec<f64>,
}

impl Mode {
    fn new(model: &Model) -> Self {
        Self {
            u_big: vec![0.0; model.q_big],
            u_small: vec![0.0; model.q_small],
            beta: vec![0.0; model.data.levels.len()],
        }
    }
}

/// Newton system of the penalised deviance for one iterate, already reduced
/// to the dense block by eliminating the big factor.
struct Reduced {
    /// Cholesky factor of the reduced (Schur complement) matrix.
    chol: nalgebra::Cholesky<f64, nalgebra::Dyn>,
    /// Diagonal block of the big factor.
    diag: Vec<f64>,
    /// Coupling between big levels (rows) and dense unknowns (columns).
    coupling: DMatrix<f64>,
    r_big: Vec<f64>,
    r_dense: DVector<f64>,
}

impl<'a> Model<'a> {
    fn new(data: &'a Data) -> Self {
        let big_is_case = data.n_cases >= data.n_configs;
        let (big, small, q_big, q_small) = if big_is_case {
            (
                &data.case[..],
                &data.config[..],
                data.n_cases,
                data.n_configs,
            )
        } else {
            (
                &data.config[..],
                &data.case[..],
                data.n_configs,
                data.n_cases,
            )
        };
        Self {
            data,
            big,
            small,
            q_big,
            q_small,
            big_is_case,
        }
    }

    fn linear_predictor(&self, theta: &[f64; 2], mode: &Mode, g: usize) -> f64 {
        let level = self.data.level[g];
        let shift = if level > 0 { mode.beta[level] } else { 0.0 };
        mode.beta[0]
            + shift
            + theta[0] * mode.u_big[self.big[g]]
            + theta[1] * mode.u_small[self.small[g]]
    }

    /// Penalised deviance `-2 log p(y | u) + |u|²` at `mode` and the reduced
    /// Newton system there, in one pass over the data. With `joint`, β is
    /// solved for alongside the modes (unpenalised), as in stage 1.
    fn evaluate(&self, theta: &[f64; 2], mode: &Mode, joint: bool) -> Result<(f64, Reduced)> {
        let d = self.data;
        let mut pdev = CompensatedSum::default();
        for u in mode.u_big.iter().chain(&mode.u_small) {
            pdev.add(u * u);
        }
        let p = d.levels.len();
        let k = self.q_small + if joint { p } else { 0 };
        let mut diag = vec![1.0; self.q_big];
        let mut coupling = DMatrix::zeros(self.q_big, k);
        let mut dense = DMatrix::zeros(k, k);
        let mut r_big: Vec<f64> = mode.u_big.iter().map(|u| -u).collect();
        let mut r_dense = DVector::zeros(k);
        for (j, u) in mode.u_small.iter().enumerate() {
            dense[(j, j)] = 1.0;
            r_dense[j] = -u;
        }
        let mut entries = [(0usize, 0.0f64); 3];
        for g in 0..d.passes.len() {
            let eta = self.linear_predictor(theta, mode, g);
            // log(1 + e^-η) and μ from one exponential, stable for any η.
            let e = (-eta.abs()).exp();
            let softplus_neg = (-eta).max(0.0) + e.ln_1p();
            pdev.add(
                2.0 * (d.passes[g] * softplus_neg
                    + (d.trials[g] - d.passes[g]) * (softplus_neg + eta)),
            );
            let mu = if eta >= 0.0 {
                1.0 / (1.0 + e)
            } else {
                e / (1.0 + e)
            };
            let resid = d.passes[g] - d.trials[g] * mu;
            let w = d.trials[g] * mu * (1.0 - mu);
            let l = self.big[g];
            diag[l] += theta[0] * theta[0] * w;
            r_big[l] += theta[0] * resid;
            // Non-zero columns of this row: its small level and, in stage 1,
            // the intercept and its condition's indicator.
            entries[0] = (self.small[g], theta[1]);
            entries[1] = (self.q_small, 1.0);
            entries[2] = (self.q_small + d.level[g], 1.0);
            let used = match (joint, d.level[g]) {
                (false, _) => &entries[..1],
                (true, 0) => &entries[..2],
                (true, _) => &entries[..],
            };
            for &(a, va) in used {
                coupling[(l, a)] += theta[0] * w * va;
                r_dense[a] += resid * va;
                for &(b, vb) in used {
                    dense[(a, b)] += w * va * vb;
                }
            }
        }
        let mut scaled = coupling.clone();
        for (l, d) in diag.iter().enumerate() {
            scaled.row_mut(l).scale_mut(d.sqrt().recip());
        }
        dense.gemm_tr(-1.0, &scaled, &scaled, 1.0);
        let chol = dense.cholesky().ok_or_else(|| {
            StatsError::GlmmFailed("penalised Newton system is not positive definite".to_owned())
        })?;
        Ok((
            pdev.value(),
            Reduced {
                chol,
                diag,
                coupling,
                r_big,
                r_dense,
            },
        ))
    }

    /// Laplace deviance at (θ, β). With `beta = None` (stage 1) β is
    /// estimated jointly with the modes and left in `mode.beta`.
    fn deviance(&self, theta: &[f64], beta: Option<&[f64]>, mode: &mut Mode) -> Result<f64> {
        let theta = [theta[0].abs(), theta[1].abs()];
        if let Some(beta) = beta {
            mode.beta.copy_from_slice(beta);
        }
        let joint = beta.is_none();
        let (mut pdev, mut sys) = self.evaluate(&theta, mode, joint)?;
        for _ in 0..MAX_NEWTON_ITERATIONS {
            let (delta_big, delta_dense) = sys.solve();
            let size = delta_big
                .iter()
                .chain(delta_dense.iter())
                .fold(0.0f64, |m, x| m.max(x.abs()));
            let start = mode.clone();
            let mut t = 1.0;
            loop {
                self.step(mode, &start, &delta_big, &delta_dense, t, joint);
                let (trial, trial_sys) = self.evaluate(&theta, mode, joint)?;
                // The slack lets converged steps through when rounding hides their tiny gain.
                if trial <= pdev + 1e-10 * (1.0 + pdev.abs()) {
                    (pdev, sys) = (trial, trial_sys);
                    break;
                }
                t /= 2.0;
                if t < 1e-9 {
                    return Err(StatsError::GlmmFailed(
                        "step halving in the mode search failed".to_owned(),
                    ));
                }
            }
            if size < MODE_TOL {
                return Ok(pdev + sys.log_det_modes(self.q_small));
            }
        }
        Err(StatsError::GlmmFailed(format!(
            "mode search did not converge in {MAX_NEWTON_ITERATIONS} Newton steps"
        )))
    }

    fn step(
        &self,
        mode: &mut Mode,
        start: &Mode,
        delta_big: &[f64],
        delta_dense: &DVector<f64>,
        t: f64,
        joint: bool,
    ) {
        for (u, (s, d)) in mode.u_big.iter_mut().zip(start.u_big.iter().zip(delta_big)) {
            *u = s + t * d;
        }
        for (j, u) in mode.u_small.iter_mut().enumerate() {
            *u = start.u_small[j] + t * delta_dense[j];
        }
        if joint {
            for (j, b) in mode.beta.iter_mut().enumerate() {
                *b = start.beta[j] + t * delta_dense[self.q_small + j];
            }
        }
    }
}

impl Reduced {
    /// Newton step: dense unknowns from the Schur complement, then back-substitution for the big factor.
    fn solve(&self) -> (Vec<f64>, DVector<f64>) {
        let scaled_r = DVector::from_iterator(
            self.diag.len(),
            self.r_big.iter().zip(&self.diag).map(|(r, d)| r / d),
        );
        let delta_dense = self
            .chol
            .solve(&(&self.r_dense - self.coupling.tr_mul(&scaled_r)));
        let coupled = &self.coupling * &delta_dense;
        let delta_big = (0..self.diag.len())
            .map(|l| (self.r_big[l] - coupled[l]) / self.diag[l])
            .collect();
        (delta_big, delta_dense)
    }

    /// `log det A` of the random-effect block only: the β rows (stage 1) come
    /// last, so the leading block of the Cholesky factor belongs to the modes.
    fn log_det_modes(&self, q_small: usize) -> f64 {
        let l = self.chol.l_dirty();
        let mut sum = CompensatedSum::default();
        for d in &self.diag {
            sum.add(d.ln());
        }
        for j in 0..q_small {
            sum.add(2.0 * l[(j, j)].ln());
        }
        sum.value()
    }
}

/// Covariance of β as `2 H⁻¹` restricted to β, where `H` is the central
/// finite-difference Hessian of the deviance in (θ, β). An SD estimated at
/// zero is left out of `H`: the deviance is even in each θ, so its cross
/// terms with β vanish there, and its own curvature may be ~0, which would
/// only make `H` singular without changing the β block.
fn beta_covariance(
    model: &Model,
    theta: &[f64; 2],
    beta: &[f64],
    mode: &mut Mode,
) -> Result<DMatrix<f64>> {
    let mut x: Vec<f64> = theta.iter().chain(beta).copied().collect();
    let free: Vec<usize> = (0..x.len())
        .filter(|&i| i >= 2 || theta[i] >= SINGULAR_TOL)
        .collect();
    let mut f = |x: &[f64]| model.deviance(&x[..2], Some(&x[2..]), mode);
    let f0 = f(&x)?;
    let h = HESSIAN_STEP;
    let m = free.len();
    let mut hessian = DMatrix::zeros(m, m);
    for a in 0..m {
        let i = free[a];
        let xi = x[i];
        x[i] = xi + h;
        let plus = f(&x)?;
        x[i] = xi - h;
        let minus = f(&x)?;
        x[i] = xi;
        hessian[(a, a)] = (plus - 2.0 * f0 + minus) / (h * h);
        for b in 0..a {
            let j = free[b];
            let xj = x[j];
            let mut corner = |si: f64, sj: f64| -> Result<f64> {
                x[i] = xi + si * h;
                x[j] = xj + sj * h;
                let value = f(&x);
                x[i] = xi;
                x[j] = xj;
                value
            };
            let value = (corner(1.0, 1.0)? - corner(1.0, -1.0)? - corner(-1.0, 1.0)?
                + corner(-1.0, -1.0)?)
                / (4.0 * h * h);
            hessian[(a, b)] = value;
            hessian[(b, a)] = value;
        }
    }
    let inverse = hessian
        .cholesky()
        .ok_or_else(|| {
            StatsError::GlmmFailed(
                "Hessian of the deviance is not positive definite at the optimum".to_owned(),
            )
        })?
        .inverse();
    let p = beta.len();
    Ok(inverse.view((m - p, m - p), (p, p)) * 2.0)
}
