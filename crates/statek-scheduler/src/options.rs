//! Validated options of [`crate::DurableFairScheduler`].

use std::time::Duration;

use crate::SchedulerError;

/// How a scheduler retries reservations.
///
/// A tick reserves with one new reservation id; a transient source error
/// ([`SourceError::is_retryable`](crate::SourceError::is_retryable)) retries the *same* id, so
/// a commit whose acknowledgement was lost is found again instead of
/// reserving twice. Attempts 1..=10 (default 3); backoff starts at
/// `initial_backoff` (more than 0, at most 1 s; default 50 ms), doubles per
/// retry and is capped at `max_backoff` (at least `initial_backoff`, at most
/// 30 s; default 1 s).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SchedulerOptions {
    reserve_attempts: u32,
    initial_backoff: Duration,
    max_backoff: Duration,
}

impl Default for SchedulerOptions {
    fn default() -> Self {
        Self {
            reserve_attempts: 3,
            initial_backoff: Duration::from_millis(50),
            max_backoff: Duration::from_secs(1),
        }
    }
}

impl SchedulerOptions {
    /// The defaults.
    pub fn new() -> Self {
        Self::default()
    }

    /// Total reservation attempts per tick, 1..=10.
    pub fn reserve_attempts(mut self, attempts: u32) -> Result<Self, SchedulerError> {
        if !(1..=10).contains(&attempts) {
            return Err(SchedulerError::InvalidOption(format!(
                "reserve attempts must be 1..=10, got {attempts}"
            )));
        }
        self.reserve_attempts = attempts;
        Ok(self)
    }

    /// Backoff before the first retry: more than 0, at most 1 s.
    pub fn initial_backoff(mut self, backoff: Duration) -> Result<Self, SchedulerError> {
        if backoff.is_zero() || backoff > Duration::from_secs(1) {
            return Err(SchedulerError::InvalidOption(format!(
                "initial backoff must be > 0 and <= 1 s, got {backoff:?}"
            )));
        }
        self.initial_backoff = backoff;
        self.max_backoff = self.max_backoff.max(backoff);
        Ok(self)
    }

    /// Largest backoff between retries: at least the initial backoff, at
    /// most 30 s.
    pub fn max_backoff(mut self, backoff: Duration) -> Result<Self, SchedulerError> {
        if backoff < self.initial_backoff || backoff > Duration::from_secs(30) {
            return Err(SchedulerError::InvalidOption(format!(
                "max backoff must be >= the initial backoff ({:?}) and <= 30 s, got {backoff:?}",
                self.initial_backoff
            )));
        }
        self.max_backoff = backoff;
        Ok(self)
    }

    /// Total reservation attempts per tick.
    pub fn attempts(&self) -> u32 {
        self.reserve_attempts
    }

    /// The backoff before retry number `retry` (0-based).
    pub fn backoff(&self, retry: u32) -> Duration {
        let factor = 1u32.checked_shl(retry.min(16)).unwrap_or(u32::MAX);
        self.initial_backoff
            .checked_mul(factor)
            .unwrap_or(self.max_backoff)
            .min(self.max_backoff)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attempts_limits() {
        let ok = |n| SchedulerOptions::new().reserve_attempts(n).is_ok();
        assert!(!ok(0));
        assert!(ok(1));
        assert!(ok(10));
        assert!(!ok(11));
    }

    #[test]
    fn backoff_limits_and_growth() {
        let o = SchedulerOptions::new();
        assert!(o.initial_backoff(Duration::ZERO).is_err());
        assert!(o.initial_backoff(Duration::from_millis(1001)).is_err());
        assert!(o.max_backoff(Duration::from_millis(10)).is_err());
        assert!(o.max_backoff(Duration::from_secs(31)).is_err());
        assert_eq!(o.backoff(0), Duration::from_millis(50));
        assert_eq!(o.backoff(1), Duration::from_millis(100));
        assert_eq!(o.backoff(4), Duration::from_millis(800));
        assert_eq!(o.backoff(5), Duration::from_secs(1));
        assert_eq!(o.backoff(40), Duration::from_secs(1));
        let big = o.initial_backoff(Duration::from_secs(1)).unwrap();
        assert_eq!(big.backoff(0), Duration::from_secs(1));
    }
}
