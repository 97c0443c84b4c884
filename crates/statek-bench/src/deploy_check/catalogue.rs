//! The catalogue deploy-check checks against: every metric statek emits,
//! with its kind and labels, read from its one place,
//! [`statek_scheduler::metrics::catalogue`] (statek-store-pg's metrics
//! included). No list is kept here.

use std::sync::LazyLock;

pub use statek_scheduler::metrics::{Metric, MetricKind};

/// Every metric statek emits, in catalogue order.
pub static METRICS: LazyLock<Vec<Metric>> =
    LazyLock::new(|| statek_scheduler::metrics::catalogue().copied().collect());

pub(crate) const HISTOGRAM_SUFFIXES: &[&str] = &["_bucket", "_sum", "_count"];
