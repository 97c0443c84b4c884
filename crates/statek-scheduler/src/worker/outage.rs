//! [`Outage`]: how long a [`crate::Worker`] has been failing, against its
//! outage budget ([`crate::WorkerOptions::outage_budget`]), and the capped
//! exponential pause between its attempts.
//!
//! Pure: the caller passes the time, so the rule is tested without a clock.

use std::time::{Duration, Instant};

/// The pause after the first failure of an outage.
pub(crate) const FIRST_PAUSE: Duration = Duration::from_millis(50);

/// The longest pause between two attempts during an outage.
pub(crate) const MAX_PAUSE: Duration = Duration::from_secs(1);

/// One kind of failure streak (reservations, or slot errors) of a Worker.
#[derive(Debug, Clone)]
pub(crate) struct Outage {
    budget: Duration,
    /// When the first failure of the current streak happened.
    since: Option<Instant>,
    /// The pause before the next attempt.
    pause: Duration,
    /// Streaks that ended with a success (ridden out).
    survived: u64,
}

/// What to do after a failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AfterFailure {
    /// Still within the budget: pause this long, then try again.
    Retry(Duration),
    /// Failing for the whole budget: give up with the last error.
    GiveUp {
        /// How long the streak lasted.
        failing_for: Duration,
    },
}

impl Outage {
    pub(crate) fn new(budget: Duration) -> Self {
        Self {
            budget,
            since: None,
            pause: FIRST_PAUSE,
            survived: 0,
        }
    }

    /// A failure at `now`: the streak starts (at its first failure) or
    /// goes on. Within the budget the answer is the pause (50 ms doubling
    /// to 1 s, never past the budget's end by more than one pause);
    /// once the streak has lasted the budget, give up.
    pub(crate) fn failed(&mut self, now: Instant) -> AfterFailure {
        let since = *self.since.get_or_insert(now);
        let failing_for = now.saturating_duration_since(since);
        if failing_for >= self.budget {
            return AfterFailure::GiveUp { failing_for };
        }
        let pause = self.pause;
        self.pause = (self.pause * 2).min(MAX_PAUSE);
        AfterFailure::Retry(pause)
    }

    /// A success: the streak (if any) ends and counts as ridden out.
    pub(crate) fn succeeded(&mut self) {
        if self.since.take().is_some() {
            self.survived += 1;
        }
        self.pause = FIRST_PAUSE;
    }

    /// Whether a streak is under way.
    pub(crate) fn is_failing(&self) -> bool {
        self.since.is_some()
    }

    /// Streaks ridden out so far.
    pub(crate) fn survived(&self) -> u64 {
        self.survived
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn pauses_double_from_50_ms_to_1_s_within_the_budget() {
        let t0 = Instant::now();
        let mut outage = Outage::new(Duration::from_secs(10));
        let pauses: Vec<AfterFailure> = [0, 50, 150, 350, 750, 1550, 2550, 3550]
            .into_iter()
            .map(|at| outage.failed(t0 + ms(at)))
            .collect();
        let expected: Vec<AfterFailure> = [50, 100, 200, 400, 800, 1000, 1000, 1000]
            .into_iter()
            .map(|p| AfterFailure::Retry(ms(p)))
            .collect();
        assert_eq!(pauses, expected);
        assert!(outage.is_failing());
    }

    #[test]
    fn gives_up_once_the_streak_lasted_the_budget() {
        let t0 = Instant::now();
        let mut outage = Outage::new(Duration::from_secs(1));
        assert_eq!(outage.failed(t0), AfterFailure::Retry(ms(50)));
        assert_eq!(outage.failed(t0 + ms(999)), AfterFailure::Retry(ms(100)));
        assert_eq!(
            outage.failed(t0 + ms(1000)),
            AfterFailure::GiveUp {
                failing_for: ms(1000)
            }
        );
    }

    #[test]
    fn a_success_ends_the_streak_and_the_next_starts_afresh() {
        let t0 = Instant::now();
        let mut outage = Outage::new(Duration::from_secs(1));
        assert_eq!(outage.failed(t0), AfterFailure::Retry(ms(50)));
        assert_eq!(outage.failed(t0 + ms(900)), AfterFailure::Retry(ms(100)));
        outage.succeeded();
        assert_eq!((outage.is_failing(), outage.survived()), (false, 1));
        // 1.5 s after the first failure, but the first of a new streak.
        assert_eq!(outage.failed(t0 + ms(1500)), AfterFailure::Retry(ms(50)));
        assert_eq!(
            outage.failed(t0 + ms(2500)),
            AfterFailure::GiveUp {
                failing_for: ms(1000)
            }
        );
        // A success without a streak counts nothing.
        outage.succeeded();
        outage.succeeded();
        assert_eq!(outage.survived(), 2);
    }
}
