//! Derivative-free minimisation (Nelder–Mead), as lme4 uses for its final Laplace fit.

use crate::error::{Result, StatsError};

/// Where a minimisation ended.
pub(crate) struct Minimum {
    pub(crate) x: Vec<f64>,
    pub(crate) f: f64,
    pub(crate) evaluations: usize,
}

/// Stopping rule: the simplex's function spread and its extent around the
/// best vertex (max-norm) must both be at most these.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Tolerance {
    pub(crate) f: f64,
    pub(crate) x: f64,
}
/// A collapsed simplex can stall short of the minimum, so restart from the best point up to this often.
const MAX_RESTARTS: usize = 6;

/// Minimises `f` from `x0` with initial simplex edges `step`, restarting until
/// a restart no longer improves the value by more than the tolerance.
pub(crate) fn nelder_mead(
    mut f: impl FnMut(&[f64]) -> Result<f64>,
    x0: &[f64],
    step: &[f64],
    tol: Tolerance,
    max_evaluations: usize,
) -> Result<Minimum> {
    let mut best = simplex_search(&mut f, x0, step, tol, max_evaluations)?;
    for _ in 0..MAX_RESTARTS {
        let again = simplex_search(&mut f, &best.x, step, tol, max_evaluations)?;
        let improvement = best.f - again.f;
        let evaluations = best.evaluations + again.evaluations;
        if again.f < best.f {
            best = again;
        }
        best.evaluations = evaluations;
        if improvement <= tol.f {
            return Ok(best);
        }
    }
    Ok(best)
}

fn simplex_search(
    f: &mut impl FnMut(&[f64]) -> Result<f64>,
    x0: &[f64],
    step: &[f64],
    tol: Tolerance,
    max_evaluations: usize,
) -> Result<Minimum> {
    let n = x0.len();
    let mut evaluations = 0;
    let mut eval = |x: &[f64], evaluations: &mut usize| -> Result<f64> {
        *evaluations += 1;
        let value = f(x)?;
        if value.is_nan() {
            return Err(StatsError::GlmmFailed(format!("objective is NaN at {x:?}")));
        }
        Ok(value)
    };
    let mut simplex: Vec<(Vec<f64>, f64)> = Vec::with_capacity(n + 1);
    simplex.push((x0.to_vec(), eval(x0, &mut evaluations)?));
    for i in 0..n {
        let mut x = x0.to_vec();
        x[i] += step[i];
        let fx = eval(&x, &mut evaluations)?;
        simplex.push((x, fx));
    }
    loop {
        simplex.sort_by(|a, b| a.1.total_cmp(&b.1));
        let spread = simplex[n].1 - simplex[0].1;
        let extent = simplex[1..]
            .iter()
            .flat_map(|(x, _)| x.iter().zip(&simplex[0].0).map(|(a, b)| (a - b).abs()))
            .fold(0.0, f64::max);
        if spread <= tol.f && extent <= tol.x {
            break;
        }
        if evaluations >= max_evaluations {
            return Err(StatsError::GlmmFailed(format!(
                "Nelder-Mead did not converge in {max_evaluations} evaluations"
            )));
        }
        let centroid: Vec<f64> = (0..n)
            .map(|j| simplex[..n].iter().map(|(x, _)| x[j]).sum::<f64>() / n as f64)
            .collect();
        let worst = simplex[n].clone();
        let along = |t: f64| -> Vec<f64> {
            centroid
                .iter()
                .zip(&worst.0)
                .map(|(c, w)| c + t * (c - w))
                .collect()
        };
        let reflected = along(1.0);
        let f_reflected = eval(&reflected, &mut evaluations)?;
        if f_reflected < simplex[0].1 {
            let expanded = along(2.0);
            let f_expanded = eval(&expanded, &mut evaluations)?;
            simplex[n] = if f_expanded < f_reflected {
                (expanded, f_expanded)
            } else {
                (reflected, f_reflected)
            };
        } else if f_reflected < simplex[n - 1].1 {
            simplex[n] = (reflected, f_reflected);
        } else {
            let outside = f_reflected < worst.1;
            let contracted = along(if outside { 0.5 } else { -0.5 });
            let f_contracted = eval(&contracted, &mut evaluations)?;
            if f_contracted < f_reflected.min(worst.1) {
                simplex[n] = (contracted, f_contracted);
            } else {
                let best = simplex[0].0.clone();
                for vertex in simplex.iter_mut().skip(1) {
                    let x: Vec<f64> = vertex
                        .0
                        .iter()
                        .zip(&best)
                        .map(|(v, b)| b + 0.5 * (v - b))
                        .collect();
                    let fx = eval(&x, &mut evaluations)?;
                    *vertex = (x, fx);
                }
            }
        }
    }
    let (x, f) = simplex.swap_remove(0);
    Ok(Minimum { x, f, evaluations })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_rosenbrock_minimum() {
        let rosenbrock =
            |x: &[f64]| Ok((1.0 - x[0]).powi(2) + 100.0 * (x[1] - x[0] * x[0]).powi(2));
        let tol = Tolerance { f: 1e-12, x: 1e-8 };
        let m = nelder_mead(rosenbrock, &[-1.2, 1.0], &[0.1, 0.1], tol, 10_000).unwrap();
        assert!(
            (m.x[0] - 1.0).abs() < 1e-5 && (m.x[1] - 1.0).abs() < 1e-5,
            "{:?}",
            m.x
        );
    }

    #[test]
    fn reports_non_convergence() {
        let slope = |x: &[f64]| Ok(x[0]);
        assert!(matches!(
            nelder_mead(slope, &[0.0], &[1.0], Tolerance { f: 1e-9, x: 1e-9 }, 50),
            Err(StatsError::GlmmFailed(_))
        ));
    }
}
