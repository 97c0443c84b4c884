//! `metrics::describe_all` tells the recorder every catalogue metric's help
//! and unit, which an exporter writes as `# HELP` lines (to a recorder of
//! this test's thread).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use metrics_util::debugging::DebuggingRecorder;
use statek_scheduler::metrics::{catalogue, describe_all, MetricKind};

#[test]
fn every_catalogue_metric_is_described_with_its_help_and_unit() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let _local = metrics::set_default_local_recorder(&recorder);
    describe_all();
    for metric in catalogue() {
        match metric.kind {
            MetricKind::Counter => metrics::counter!(metric.name).increment(1),
            MetricKind::Gauge => metrics::gauge!(metric.name).set(1.0),
            MetricKind::Histogram => metrics::histogram!(metric.name).record(1.0),
            _ => panic!("a kind this test does not know: {:?}", metric.kind),
        }
    }
    let snapshot = snapshotter.snapshot().into_vec();
    assert_eq!(snapshot.len(), catalogue().count());
    for metric in catalogue() {
        let (_, unit, help, _) = snapshot
            .iter()
            .find(|(key, ..)| key.key().name() == metric.name)
            .unwrap_or_else(|| panic!("{} was not recorded", metric.name));
        assert_eq!(help.as_deref(), Some(metric.help), "{}", metric.name);
        let seconds = *unit == Some(metrics::Unit::Seconds);
        assert_eq!(seconds, metric.in_seconds(), "{}", metric.name);
        assert!(
            !metric.help.is_empty() && metric.help.ends_with('.'),
            "{}",
            metric.name
        );
    }
}
