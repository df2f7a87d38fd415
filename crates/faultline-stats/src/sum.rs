//! Accurate summation for the GLMM deviance.
//!
//! The deviance is a sum over every (config, case, condition) group and is
//! differenced at steps of 1e-4 for the standard errors, which divides its
//! rounding error by 1e-8: a plain sum's ~1e-11 of rounding moved the
//! standard errors by ~1e-5, the size of the tolerance against lme4.

/// Neumaier's compensated sum: the rounding error stays at a few ulps of the
/// total instead of growing with the number of terms.
#[derive(Default)]
pub(crate) struct CompensatedSum {
    sum: f64,
    compensation: f64,
}

impl CompensatedSum {
    pub(crate) fn add(&mut self, x: f64) {
        let t = self.sum + x;
        self.compensation += if self.sum.abs() >= x.abs() {
            (self.sum - t) + x
        } else {
            (x - t) + self.sum
        };
        self.sum = t;
    }

    pub(crate) fn value(&self) -> f64 {
        self.sum + self.compensation
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_small_terms_a_plain_sum_loses() {
        let mut sum = CompensatedSum::default();
        let terms = [1e16, 1.0, -1e16, 1.0];
        for t in terms {
            sum.add(t);
        }
        assert_eq!(sum.value(), 2.0);
        assert_ne!(terms.iter().sum::<f64>(), 2.0);
    }
}
