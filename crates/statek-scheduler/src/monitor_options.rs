//! [`MonitorOptions`]: the validated memory limits of a
//! [`crate::FairnessMonitor`].

use crate::SchedulerError;

/// Default [`MonitorOptions::max_pending`]: 4,096 buffered outcomes.
pub const DEFAULT_MAX_PENDING: usize = 4096;
/// Default [`MonitorOptions::max_tracked_runs`]: 65,536 runnable runs.
pub const DEFAULT_MAX_TRACKED_RUNS: usize = 65_536;
/// Default [`MonitorOptions::max_violations`]: 1,024 kept violations.
pub const DEFAULT_MAX_VIOLATIONS: usize = 1024;
/// Memory limits of a [`crate::FairnessMonitor`].
///
/// Defaults: [`DEFAULT_MAX_PENDING`], [`DEFAULT_MAX_TRACKED_RUNS`],
/// [`DEFAULT_MAX_VIOLATIONS`]. Each limit is 1..=16,777,216.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MonitorOptions {
    pub(crate) max_pending: usize,
    pub(crate) max_tracked_runs: usize,
    pub(crate) max_violations: usize,
}

impl Default for MonitorOptions {
    fn default() -> Self {
        Self {
            max_pending: DEFAULT_MAX_PENDING,
            max_tracked_runs: DEFAULT_MAX_TRACKED_RUNS,
            max_violations: DEFAULT_MAX_VIOLATIONS,
        }
    }
}

fn check_limit(what: &str, value: usize) -> Result<usize, SchedulerError> {
    if !(1..=1 << 24).contains(&value) {
        return Err(SchedulerError::InvalidOption(format!(
            "{what} must be 1..=16777216, got {value}"
        )));
    }
    Ok(value)
}

impl MonitorOptions {
    /// The defaults.
    pub fn new() -> Self {
        Self::default()
    }

    /// Outcomes buffered ahead of the first unseen sequence. When one more
    /// arrives, the monitor gives up on the unseen sequences below the
    /// oldest buffered one: they are counted as
    /// [`missing`](crate::FairnessReport::missing) (a replica that reserved them
    /// crashed, or its outcome was never fed) and the watermark moves on.
    pub fn max_pending(mut self, limit: usize) -> Result<Self, SchedulerError> {
        self.max_pending = check_limit("max pending", limit)?;
        Ok(self)
    }

    /// Runs remembered from [`crate::FairnessMonitor::record_runnable`] until their
    /// first claim; when full, the oldest record is forgotten (counted in
    /// [`FairnessReport::runnable_evicted`](crate::FairnessReport::runnable_evicted)).
    pub fn max_tracked_runs(mut self, limit: usize) -> Result<Self, SchedulerError> {
        self.max_tracked_runs = check_limit("max tracked runs", limit)?;
        Ok(self)
    }

    /// Gap violations kept in the report; later ones are only counted.
    pub fn max_violations(mut self, limit: usize) -> Result<Self, SchedulerError> {
        self.max_violations = check_limit("max violations", limit)?;
        Ok(self)
    }
}
