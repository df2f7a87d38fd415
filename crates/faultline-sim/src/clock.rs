//! Each server's clock: true simulated time, shifted by an offset and scaled by a rate.

use std::time::Duration;

use crate::api::Clock;

/// The [`Clock`] the simulator gives a server.
#[derive(Debug, Clone)]
pub struct SimClock {
    offset: Duration,
    rate: f64,
}

impl SimClock {
    pub(crate) fn new(offset_ms: u64, rate: f64) -> Self {
        SimClock {
            offset: Duration::from_millis(offset_ms),
            rate,
        }
    }

    fn read(&self, true_time: Duration) -> Duration {
        self.offset + true_time.mul_f64(self.rate)
    }
}

impl Clock for SimClock {
    fn now(&self) -> Duration {
        self.read(turmoil::elapsed())
    }

    async fn sleep_until(&self, deadline: Duration) {
        loop {
            let now = self.now();
            if now >= deadline {
                return;
            }
            // The simulator advances time in whole ticks, so a wait never ends early by more
            // than rounding; loop until this clock has really passed the deadline.
            let wait = (deadline - now).div_f64(self.rate);
            tokio::time::sleep(wait.max(Duration::from_micros(1))).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_skewed_clock_reads_offset_plus_scaled_time() {
        let c = SimClock::new(5_000, 1.1);
        assert_eq!(
            c.read(Duration::from_secs(10)),
            Duration::from_millis(16_000)
        );
        let slow = SimClock::new(0, 0.5);
        assert_eq!(slow.read(Duration::from_secs(10)), Duration::from_secs(5));
    }
}
