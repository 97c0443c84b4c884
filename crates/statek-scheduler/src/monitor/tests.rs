//! Unit tests of the fairness monitor.

use super::*;
use statek_policy::{SchedulerShardId, TenantFairnessWeight};

fn tenant(name: &str) -> TenantId {
    TenantId::try_from(name).unwrap()
}

/// Policy a:3 / b:1, cycle `a a b a`.
fn policy() -> WeightedFairnessPolicy {
    WeightedFairnessPolicy::new(
        SchedulerShardId::try_from("primary-v1").unwrap(),
        [
            TenantFairnessWeight::new(tenant("a"), 3).unwrap(),
            TenantFairnessWeight::new(tenant("b"), 1).unwrap(),
        ],
    )
    .unwrap()
}

fn at(secs: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000 + secs)
}

fn run(id: u128, available: u64, claimed: u64) -> ExecutedRun {
    ExecutedRun {
        run_id: Uuid::from_u128(id),
        attempt: 1,
        available_at: at(available),
        claimed_at: at(claimed),
    }
}

fn outcome(code: char) -> TenantTickOutcome {
    match code {
        'x' => TenantTickOutcome::Executed(run(0, 0, 0)),
        'f' => TenantTickOutcome::ExecutionFailed {
            run: run(0, 0, 0),
            error: "no".into(),
        },
        'i' => TenantTickOutcome::Idle,
        'c' => TenantTickOutcome::Contended,
        'z' => TenantTickOutcome::Cancelled,
        other => panic!("unknown outcome code {other}"),
    }
}

/// Feeds `(sequence, tenant, outcome code)` in the given order and
/// returns the report.
fn check(options: MonitorOptions, feed: &[(u64, &str, char)]) -> FairnessReport {
    let mut monitor = FairnessMonitor::with_options(&policy(), 0, options);
    for &(sequence, name, code) in feed {
        monitor.observe_parts(sequence, &tenant(name), &outcome(code));
    }
    monitor.report()
}

/// The cycle's tenant for each sequence, with one outcome code for all.
fn cycle_feed(order: &[u64], code: char) -> Vec<(u64, &'static str, char)> {
    order
        .iter()
        .map(|&s| (s, if s % 4 == 2 { "b" } else { "a" }, code))
        .collect()
}

fn row<'r>(report: &'r FairnessReport, name: &str) -> &'r TenantFairnessRow {
    report.tenant(&tenant(name)).unwrap()
}

#[test]
fn shuffled_sequences_give_the_cycle_gaps() {
    let report = check(
        MonitorOptions::new(),
        &cycle_feed(&[5, 2, 7, 0, 3, 6, 1, 4], 'x'),
    );
    assert_eq!(
        (report.watermark, report.observed, report.pending),
        (8, 8, 0)
    );
    let a = row(&report, "a");
    assert_eq!((a.bound, a.selections, a.executed), (2, 6, 6));
    assert_eq!((a.gaps.count, a.gaps.max), (5, 2));
    assert_eq!(a.gaps.histogram, vec![(1, 3), (2, 2)]);
    assert_eq!((a.gaps.p50, a.gaps.p99), (Some(1), Some(2)));
    let b = row(&report, "b");
    assert_eq!((b.bound, b.selections, b.executed), (4, 2, 2));
    assert_eq!((b.gaps.count, b.gaps.max), (1, 4));
    assert_eq!((b.gaps.p50, b.gaps.p99), (Some(4), Some(4)));
    assert!(report.is_fair());
}

#[test]
fn arrival_order_does_not_change_the_report() {
    let in_order = check(
        MonitorOptions::new(),
        &cycle_feed(&[0, 1, 2, 3, 4, 5, 6, 7], 'c'),
    );
    for order in [
        [7, 6, 5, 4, 3, 2, 1, 0],
        [1, 0, 3, 2, 5, 4, 7, 6],
        [4, 5, 6, 7, 0, 1, 2, 3],
        [6, 3, 0, 7, 4, 1, 2, 5],
    ] {
        assert_eq!(
            check(MonitorOptions::new(), &cycle_feed(&order, 'c')),
            in_order
        );
    }
}

#[test]
fn outcomes_are_counted_per_tenant() {
    let report = check(
        MonitorOptions::new(),
        &[
            (0, "a", 'x'),
            (1, "a", 'f'),
            (2, "b", 'i'),
            (3, "a", 'c'),
            (4, "a", 'z'),
            (5, "a", 'x'),
        ],
    );
    let a = row(&report, "a");
    let counts = (
        a.executed,
        a.execution_failed,
        a.idle,
        a.contended,
        a.cancelled,
    );
    assert_eq!(counts, (2, 1, 0, 1, 1));
    let b = row(&report, "b");
    assert_eq!((b.selections, b.idle, b.gaps.count), (1, 1, 0));
}

/// b's slot 6 goes to a (a custom pipeline routing wrongly): b waits
/// from 2 to 10, a gap of 8 over its bound of 4.
fn misrouted(b_at_2: char, b_at_10: char) -> FairnessReport {
    check(
        MonitorOptions::new(),
        &[
            (0, "a", 'x'),
            (1, "a", 'x'),
            (2, "b", b_at_2),
            (3, "a", 'x'),
            (4, "a", 'x'),
            (5, "a", 'x'),
            (6, "a", 'x'),
            (7, "a", 'x'),
            (8, "a", 'x'),
            (9, "a", 'x'),
            (10, "b", b_at_10),
        ],
    )
}

#[test]
fn a_gap_above_the_bound_is_a_violation_only_with_work_at_both_ends() {
    let with_work = misrouted('x', 'x');
    assert_eq!(
        with_work.violations,
        vec![GapViolation {
            tenant: tenant("b"),
            from_sequence: 2,
            to_sequence: 10,
            gap: 8,
            bound: 4,
        }]
    );
    assert!(!with_work.is_fair());
    let b = row(&with_work, "b");
    assert_eq!(
        (
            b.gaps.max,
            b.gaps.violations,
            b.gaps.above_bound_without_work
        ),
        (8, 1, 0)
    );
    // Contended and failed executions are work too.
    assert_eq!(misrouted('c', 'f').violations.len(), 1);
    // Idle or cancelled at either end: above the bound, but no violation.
    for (from, to) in [('i', 'x'), ('x', 'i'), ('z', 'x'), ('x', 'z'), ('i', 'i')] {
        let report = misrouted(from, to);
        assert!(report.is_fair(), "{from} {to}");
        let b = row(&report, "b");
        assert_eq!((b.gaps.violations, b.gaps.above_bound_without_work), (0, 1));
    }
    // a's gaps stay within its bound of 2.
    assert_eq!(row(&with_work, "a").gaps.max, 2);
}

#[test]
fn a_full_buffer_gives_up_on_unseen_sequences() {
    let options = MonitorOptions::new().max_pending(2).unwrap();
    // 2 (b) never arrives; 3, 4 wait; 5 overflows the buffer.
    let report = check(options, &cycle_feed(&[0, 1, 3, 4, 5], 'x'));
    assert_eq!(
        (report.watermark, report.missing, report.pending),
        (6, 1, 0)
    );
    let a = row(&report, "a");
    // 0→1 measured; 1→3 spans the missing 2; 3→4, 4→5 measured.
    assert_eq!((a.gaps.count, a.gaps.unmeasured), (3, 1));
    assert_eq!(a.gaps.histogram, vec![(1, 3)]);
    // The given-up sequence arriving now is late.
    let mut monitor = FairnessMonitor::with_options(&policy(), 0, options);
    for (s, name, code) in cycle_feed(&[0, 1, 3, 4, 5, 2], 'x') {
        monitor.observe_parts(s, &tenant(name), &outcome(code));
    }
    assert_eq!((monitor.report().late, monitor.report().missing), (1, 1));
}

#[test]
fn duplicates_and_early_sequences_are_late() {
    let report = check(MonitorOptions::new(), &cycle_feed(&[0, 0, 2, 2, 1], 'x'));
    assert_eq!((report.watermark, report.observed, report.late), (3, 3, 2));
    let mut monitor = FairnessMonitor::with_options(&policy(), 100, MonitorOptions::new());
    monitor.observe_parts(99, &tenant("a"), &outcome('x'));
    monitor.observe_parts(100, &tenant("a"), &outcome('x'));
    let report = monitor.report();
    assert_eq!(
        (report.watermark, report.observed, report.late),
        (101, 1, 1)
    );
}

#[test]
fn flush_gives_up_on_holes_and_processes_the_buffer() {
    let mut monitor = FairnessMonitor::new(&policy());
    for (s, name, code) in cycle_feed(&[0, 2, 5], 'x') {
        monitor.observe_parts(s, &tenant(name), &outcome(code));
    }
    assert_eq!((monitor.watermark(), monitor.report().pending), (1, 2));
    monitor.flush();
    let report = monitor.report();
    assert_eq!(
        (report.watermark, report.missing, report.observed),
        (6, 3, 3)
    );
}

#[test]
fn unknown_tenants_advance_the_watermark() {
    let report = check(
        MonitorOptions::new(),
        &[(0, "a", 'x'), (1, "zz", 'x'), (2, "b", 'x')],
    );
    assert_eq!((report.watermark, report.unknown_tenant), (3, 1));
    assert_eq!(row(&report, "a").selections, 1);
}

#[test]
fn claim_and_service_lag() {
    let mut monitor = FairnessMonitor::new(&policy());
    let (a, b) = (tenant("a"), tenant("b"));
    // Run 1 of a becomes runnable when the cursor is 1, at t = 10 s.
    monitor.record_runnable(Uuid::from_u128(1), &a, 1, at(10));
    // Run 2 is recorded for b but claimed in a's slot.
    monitor.record_runnable(Uuid::from_u128(2), &b, 0, at(0));
    monitor.observe_parts(0, &a, &TenantTickOutcome::Idle);
    monitor.observe_parts(1, &a, &TenantTickOutcome::Idle);
    monitor.observe_parts(2, &b, &TenantTickOutcome::Idle);
    // Claimed at sequence 3 (t = 15 s), available since t = 11 s.
    monitor.observe_parts(3, &a, &TenantTickOutcome::Executed(run(1, 11, 15)));
    monitor.observe_parts(
        4,
        &a,
        &TenantTickOutcome::ExecutionFailed {
            run: run(2, 0, 20),
            error: "no".into(),
        },
    );
    // A retry of run 1: service lag only (its record is used up).
    monitor.observe_parts(5, &a, &TenantTickOutcome::Executed(run(1, 20, 23)));
    let report = monitor.report();
    assert_eq!(report.isolation_violations, 1);
    let lag = row(&report, "a").claim_lag;
    // Run 1: 3 + 1 - 1 = 3 reservations, 5 s; run 2: 5 reservations, 20 s.
    assert_eq!(
        (lag.count, lag.max_reservations, lag.mean_reservations),
        (2, 5, 4)
    );
    assert_eq!(
        (lag.time.count, lag.time.max, lag.time.mean),
        (2, Duration::from_secs(20), Duration::from_millis(12_500))
    );
    let service = row(&report, "a").service_lag;
    // 4 s, 20 s, 3 s.
    assert_eq!(
        (service.count, service.max, service.mean),
        (3, Duration::from_secs(20), Duration::from_secs(9))
    );
    assert_eq!(row(&report, "b").claim_lag, ClaimLag::default());
}

#[test]
fn limits_bound_memory() {
    let options = MonitorOptions::new()
        .max_tracked_runs(2)
        .unwrap()
        .max_violations(1)
        .unwrap();
    let mut monitor = FairnessMonitor::with_options(&policy(), 0, options);
    for id in 1..=3 {
        monitor.record_runnable(Uuid::from_u128(id), &tenant("a"), 0, at(0));
    }
    // Run 1 was forgotten: its claim has no claim lag.
    monitor.observe_parts(0, &tenant("a"), &TenantTickOutcome::Executed(run(1, 0, 0)));
    monitor.observe_parts(1, &tenant("a"), &TenantTickOutcome::Executed(run(3, 0, 0)));
    // Two violations for b (gaps of 8 each), one kept.
    for s in 2..=18 {
        let name = if s % 8 == 2 { "b" } else { "a" };
        monitor.observe_parts(s, &tenant(name), &outcome('x'));
    }
    let report = monitor.report();
    assert_eq!(report.runnable_evicted, 1);
    assert_eq!(row(&report, "a").claim_lag.count, 1);
    assert_eq!((report.violations.len(), report.violations_dropped), (1, 1));
    assert_eq!(row(&report, "b").gaps.violations, 2);
    assert!(!report.is_fair());
}

#[test]
fn histogram_overflow_reports_the_max_as_the_percentile() {
    let mut monitor = FairnessMonitor::new(&policy());
    // a selected at the triangular numbers 0, 1, 3, 6, …, 4950: 99
    // distinct gaps 1..=99; b in every other slot.
    let mut next_a = 0;
    let mut gap = 1;
    for sequence in 0..=4950 {
        let name = if sequence == next_a { "a" } else { "b" };
        monitor.observe_parts(sequence, &tenant(name), &outcome('i'));
        if sequence == next_a {
            next_a += gap;
            gap += 1;
        }
    }
    let a = monitor.report().tenants[0].gaps.clone();
    assert_eq!((a.count, a.max, a.overflow), (99, 99, 35));
    assert_eq!(a.histogram.len(), 64);
    assert_eq!((a.p50, a.p99), (Some(50), Some(99)));
}

#[test]
fn option_limits() {
    assert!(MonitorOptions::new().max_pending(0).is_err());
    assert!(MonitorOptions::new().max_pending(1 << 24).is_ok());
    assert!(MonitorOptions::new()
        .max_tracked_runs((1 << 24) + 1)
        .is_err());
    assert!(MonitorOptions::new().max_violations(0).is_err());
}

/// Policy a:1 / b:1 / c:2, cycle `c a b c`: the successor in the seam
/// tests (v1 is [`policy`], `a a b a`).
fn successor() -> WeightedFairnessPolicy {
    WeightedFairnessPolicy::new(
        SchedulerShardId::try_from("primary-v2").unwrap(),
        [
            TenantFairnessWeight::new(tenant("a"), 1).unwrap(),
            TenantFairnessWeight::new(tenant("b"), 1).unwrap(),
            TenantFairnessWeight::new(tenant("c"), 2).unwrap(),
        ],
    )
    .unwrap()
}

/// Feeds v1's sequences `0..n` and v2's `0..m` (each slot's own tenant,
/// all contended), with `swap` replacing v2's tenant at some sequences,
/// in reverse order so that everything is buffered first.
fn seam_report(n: u64, m: u64, swap: &[(u64, &str)]) -> FairnessReport {
    let (v1, v2) = (policy(), successor());
    let mut monitor = FairnessMonitor::new(&v1);
    monitor.follow_rollout(&v2, n).unwrap();
    for s in (0..m).rev() {
        let own = v2
            .tenant_for_slot(u64::from(v2.slot_for_sequence(s)))
            .unwrap()
            .clone();
        let name = swap
            .iter()
            .find(|(at, _)| *at == s)
            .map_or(own, |(_, t)| tenant(t));
        monitor.observe_on(v2.shard_id(), s, &name, &outcome('c'));
    }
    for s in (0..n).rev() {
        let own = v1
            .tenant_for_slot(u64::from(v1.slot_for_sequence(s)))
            .unwrap()
            .clone();
        monitor.observe_on(v1.shard_id(), s, &own, &outcome('c'));
    }
    monitor.report()
}

#[test]
fn gaps_across_a_seam_are_judged_against_the_seam_bound() {
    // v1 0..5 = a a b a a, then v2 (numbered from 5) = c a b c c a b c.
    // a: picks 0 1 3 4 | 6 10 -> gaps 1 2 1 | 2 (seam bound 2) 4 (bound 4).
    // b: picks 2 | 7 11 -> seam gap 5 (seam bound 5), then 4.
    // c joins: picks 5 8 9 12 -> gaps 3 1 3.
    let report = seam_report(5, 8, &[]);
    assert_eq!(report.watermark, 13);
    assert_eq!(
        (report.observed, report.unknown_shard, report.late),
        (13, 0, 0)
    );
    assert!(report.is_fair(), "{:?}", report.violations);
    let row = |t: &str| report.tenant(&tenant(t)).unwrap().clone();
    assert_eq!(
        (row("a").selections, row("a").gaps.max, row("a").bound),
        (6, 4, 4)
    );
    assert_eq!(
        (row("b").selections, row("b").gaps.max, row("b").bound),
        (3, 5, 4)
    );
    assert_eq!(
        (row("c").selections, row("c").gaps.max, row("c").weight),
        (4, 3, 2)
    );
    assert_eq!(
        report
            .tenants
            .iter()
            .map(|r| r.tenant.as_str())
            .collect::<Vec<_>>(),
        ["a", "b", "c"]
    );
}

#[test]
fn a_slot_misrouted_after_the_seam_is_a_violation_of_the_seam_bound() {
    // v2's sequence 2 (b's) given to a: b's gap runs from 2 (v1) to 11, 9 > 5.
    let report = seam_report(5, 8, &[(2, "a")]);
    assert_eq!(
        report.violations,
        [GapViolation {
            tenant: tenant("b"),
            from_sequence: 2,
            to_sequence: 11,
            gap: 9,
            bound: 5,
        }]
    );
}

#[test]
fn following_a_rollout_is_checked() {
    let (v1, v2) = (policy(), successor());
    let mut monitor = FairnessMonitor::new(&v1);
    // v2's outcomes before the seal is known are counted, not processed.
    monitor.observe_on(v2.shard_id(), 0, &tenant("c"), &outcome('c'));
    monitor.observe_parts(6, &tenant("b"), &outcome('c'));
    assert_eq!(monitor.report().unknown_shard, 1);
    // v1's sequence 6 was observed: it cannot be sealed at 5.
    assert!(monitor.follow_rollout(&v2, 5).is_err());
    monitor.follow_rollout(&v2, 7).unwrap();
    assert!(monitor.follow_rollout(&v2, 9).is_err(), "followed already");
    // v1 at or after its seal is not v1's.
    monitor.observe_on(v1.shard_id(), 7, &tenant("a"), &outcome('c'));
    assert_eq!(monitor.report().unknown_shard, 2);
}
