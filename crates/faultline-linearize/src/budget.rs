//! How much work a check may do before it answers `Unknown`: a count of search steps and a
//! wall-clock deadline, shared by every partition, and a separate one for minimizing a
//! counterexample.

use std::time::Instant;

/// Steps between two readings of the clock.
const CLOCK_EVERY: u64 = 1024;

/// Work left.
#[derive(Debug)]
pub(crate) struct Budget {
    steps: u64,
    max_steps: Option<u64>,
    deadline: Option<Instant>,
    late: bool,
}

impl Budget {
    pub(crate) fn new(max_steps: Option<u64>, deadline: Option<Instant>) -> Self {
        Budget {
            steps: 0,
            max_steps,
            deadline,
            late: false,
        }
    }

    /// Takes one step; `false` when none is left.
    pub(crate) fn step(&mut self) -> bool {
        self.steps += 1;
        if self.late || self.max_steps.is_some_and(|max| self.steps > max) {
            return false;
        }
        if self.steps.is_multiple_of(CLOCK_EVERY)
            && self.deadline.is_some_and(|d| Instant::now() >= d)
        {
            self.late = true;
            return false;
        }
        true
    }

    /// Whether the steps or the time are spent.
    pub(crate) fn exhausted(&self) -> bool {
        self.late || self.max_steps.is_some_and(|max| self.steps >= max)
    }

    /// Steps taken so far.
    pub(crate) fn steps(&self) -> u64 {
        self.steps
    }

    /// Runs `f` with at most `cap` more steps, for an attempt that may give up without
    /// spending the rest.
    pub(crate) fn capped<R>(&mut self, cap: u64, f: impl FnOnce(&mut Budget) -> R) -> R {
        let saved = self.max_steps;
        let capped = self.steps.saturating_add(cap);
        self.max_steps = Some(saved.map_or(capped, |max| max.min(capped)));
        let result = f(self);
        self.max_steps = saved;
        self.steps = self.steps.min(capped);
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn steps_run_out() {
        let mut b = Budget::new(Some(3), None);
        assert!(b.step() && b.step() && b.step());
        assert!(b.exhausted());
        assert!(!b.step());
        assert!(!b.step());
    }

    #[test]
    fn a_past_deadline_stops_within_one_clock_period() {
        let mut b = Budget::new(None, Some(Instant::now() - Duration::from_millis(1)));
        let taken = (0..10 * CLOCK_EVERY).take_while(|_| b.step()).count() as u64;
        assert_eq!(taken, CLOCK_EVERY - 1);
        assert!(b.exhausted());
    }

    #[test]
    fn a_cap_ends_an_attempt_but_not_the_budget() {
        let mut b = Budget::new(Some(100), None);
        let taken = b.capped(10, |b| (0..50).take_while(|_| b.step()).count());
        assert_eq!(taken, 10);
        assert!(!b.exhausted());
        assert_eq!(b.steps(), 10);
        assert_eq!((0..200).take_while(|_| b.step()).count(), 90);
    }
}
