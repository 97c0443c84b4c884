//! The metric catalogue's shape: [`Metric`] (name, kind, labels, unit,
//! help) and [`MetricKind`]. statek-store-pg lists the metrics it records
//! in this shape, and statek-scheduler's `metrics::catalogue()` adds its
//! own: that one list is what the exporter is told (HELP lines), what
//! deploy-check checks alerts and dashboards against, and what
//! docs/operations.md's table is checked against.

/// What a metric is, as Prometheus sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum MetricKind {
    /// Exposed as `NAME` (a `_total` name by convention).
    Counter,
    /// Exposed as `NAME`.
    Gauge,
    /// Exposed as `NAME_bucket{le}`, `NAME_sum` and `NAME_count`.
    Histogram,
}

impl MetricKind {
    /// `counter`, `gauge` or `histogram`, as Prometheus' `# TYPE` line and
    /// docs/operations.md write it.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            MetricKind::Counter => "counter",
            MetricKind::Gauge => "gauge",
            MetricKind::Histogram => "histogram",
        }
    }
}

/// One metric statek emits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct Metric {
    /// The exposed name (for a histogram, without `_bucket`/`_sum`/`_count`).
    pub name: &'static str,
    /// Counter, gauge or histogram.
    pub kind: MetricKind,
    /// Its labels, in the order the code sets them.
    pub labels: &'static [&'static str],
    /// What one unit of its value is (`seconds`, `Unix seconds`,
    /// `reservations`, `runs`, `1` for a flag), as docs/operations.md
    /// writes it.
    pub unit: &'static str,
    /// One line for the exporter's `# HELP`.
    pub help: &'static str,
}

impl Metric {
    /// A catalogue entry.
    #[must_use]
    pub const fn new(
        name: &'static str,
        kind: MetricKind,
        labels: &'static [&'static str],
        unit: &'static str,
        help: &'static str,
    ) -> Self {
        Metric {
            name,
            kind,
            labels,
            unit,
            help,
        }
    }

    /// Whether the unit is seconds (a duration or a Unix time), which the
    /// exporter is told as such.
    #[must_use]
    pub fn in_seconds(&self) -> bool {
        self.unit == "seconds" || self.unit == "Unix seconds"
    }
}
