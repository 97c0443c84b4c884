//! Unit tests of `audit.rs`: the walk's judgement of gaps.

#![allow(clippy::unwrap_used)]

use super::cost::{picks_in, Context};
use super::*;
use statek_policy::TenantId;

fn tenant(id: &str) -> TenantId {
    TenantId::try_from(id).unwrap()
}

/// The walk judges each gap against the tally's bound: with a's bound
/// lowered to 1 (its true bound is 2), each gap of 2 is a finding.
#[test]
fn a_gap_above_the_bound_is_a_finding() {
    let policy = WeightedFairnessPolicy::new(
        SchedulerShardId::try_from("primary-v1").unwrap(),
        [
            statek_policy::TenantFairnessWeight::new(tenant("tenant-a"), 3).unwrap(),
            statek_policy::TenantFairnessWeight::new(tenant("tenant-b"), 1).unwrap(),
        ],
    )
    .unwrap();
    assert_eq!(policy.cycle_tenant_indexes(), [0, 0, 1, 0]);
    let mut walk = Walk {
        policy: &policy,
        indexes: policy.cycle_tenant_indexes(),
        cycle_length: 4,
        digest: Vec::new(),
        tallies: policy
            .starvation_bounds()
            .map(|b| {
                let mut tally = Tally::new(&b).unwrap();
                tally.audit.bound = 1;
                tally
            })
            .collect(),
        by_tenant: HashMap::new(),
        report: AuditReport {
            shard: policy.shard_id().clone(),
            cycle_digest: String::new(),
            cycle_length: 4,
            from: 0,
            to: 8,
            audited_slots: 0,
            holes: Vec::new(),
            hole_count: 0,
            tenants: Vec::new(),
            findings: Vec::new(),
            finding_count: 0,
            covered_to: 0,
            cost_parameters: None,
        },
        covered_to: 0,
    };
    walk.range(0..8, 0, std::time::SystemTime::UNIX_EPOCH, None, &[]);
    // The cycle is [a, a, b, a]: a's gaps of 2 end at 3 and 7, b's gap
    // of 4 at 6, all above the lowered bound of 1.
    let (a, b) = (tenant("tenant-a"), tenant("tenant-b"));
    let gap = |tenant: &TenantId, gap, at_sequence| AuditFinding::GapOverBound {
        tenant: tenant.clone(),
        gap,
        bound: 1,
        at_sequence,
    };
    assert_eq!(
        walk.report.findings,
        [gap(&a, 2, 3), gap(&b, 4, 6), gap(&a, 2, 7)]
    );
    assert_eq!(walk.report.finding_count, 3);
    assert_eq!(walk.tallies[0].audit.unrecorded, 6);
}

/// Cost mode's sides by hand: q = 2, C_max = 10, b_cap = 4, 8 slots,
/// D = 1: upper `2·7 + 10 + 4 = 28`, lower `2·8 − 10 − 4 = 2` (with the
/// schedule's largest C_max 10; 30 makes it `16 − 30 − 4 = −18`). Charged
/// 28 passes, 29 is above; 1 with nothing running is below when the lower
/// side may be judged (no hole, every slot credited, no cut credit), and
/// only then; with one attempt running (counted at C_max) it is not below;
/// without a D nothing is judged.
#[test]
fn cost_outside_either_side_is_a_finding() {
    let params = statek_policy::CostFairness::new(2, 10, 6, 4).unwrap();
    let audit = |charged, uncharged, clipped_through| TenantCostAudit {
        charged,
        uncharged,
        ended_without_finish: 0,
        entitled: 16.0,
        cap: None,
        concurrency: None,
        upper: None,
        lower: None,
        slots_in_span: 8,
        clipped_through,
        credited_through: Some(15),
        lower_judged: false,
        last_slot: Some(14),
    };
    // D, the schedule's largest C_max, no holes, the span from 0.
    let context = |concurrency, schedule_max_cost, no_holes| Context {
        params,
        concurrency,
        schedule_max_cost,
        no_holes,
        from: 0,
    };
    let d = Some(1);
    let mut within = audit(28, 0, None);
    assert_eq!(within.judge(&tenant("a"), &context(d, 10, true)), []);
    assert_eq!(
        (
            within.upper,
            within.lower,
            within.concurrency,
            within.lower_judged
        ),
        (Some(28), Some(2), Some(1), true)
    );
    assert_eq!(
        audit(29, 0, None).judge(&tenant("a"), &context(d, 10, true)),
        [AuditFinding::CostOverBound {
            tenant: tenant("a"),
            charged: 29,
            upper: 28,
            concurrency: 1
        }]
    );
    assert_eq!(
        audit(1, 0, None).judge(&tenant("a"), &context(d, 10, true)),
        [AuditFinding::CostUnderBound {
            tenant: tenant("a"),
            served_at_most: 1,
            lower: 2,
            concurrency: 1
        }]
    );
    // A debt from an earlier shard of C_max 30: the lower side is −18.
    let mut carried = audit(1, 0, None);
    assert_eq!(carried.judge(&tenant("a"), &context(d, 30, true)), []);
    assert_eq!(carried.lower, Some(-18));
    assert_eq!(
        audit(1, 1, None).judge(&tenant("a"), &context(d, 10, true)),
        []
    );
    // Without a D: nothing judged, even far above.
    let mut unjudged = audit(1_000, 0, None);
    assert_eq!(unjudged.judge(&tenant("a"), &context(None, 10, true)), []);
    assert_eq!(
        (unjudged.upper, unjudged.lower, unjudged.lower_judged),
        (None, None, false)
    );
    // A credit cut at 3 (inside the span), a hole, or slots not credited
    // yet: the lower side is not judged.
    let mut clipped = audit(1, 0, Some(3));
    assert_eq!(clipped.judge(&tenant("a"), &context(d, 10, true)), []);
    assert!(!clipped.lower_judged);
    assert_eq!(
        audit(1, 0, None).judge(&tenant("a"), &context(d, 10, false)),
        []
    );
    let mut behind = audit(1, 0, None);
    behind.credited_through = Some(12);
    assert_eq!(behind.judge(&tenant("a"), &context(d, 10, true)), []);
    // No slot in the span: S must be 0.
    let mut none = audit(1, 0, None);
    none.slots_in_span = 0;
    assert_eq!(
        none.judge(&tenant("a"), &context(Some(3), 10, true)).len(),
        1
    );
    assert_eq!(none.upper, Some(0));
}

/// The picks of a tenant in a span of sequences, from the cycle: a a b a.
#[test]
fn picks_in_a_span_count_whole_cycles_and_the_rest() {
    let cycle = [0_u16, 0, 1, 0];
    assert_eq!(picks_in(&cycle, 1, 0..16), (4, Some(14)));
    assert_eq!(picks_in(&cycle, 0, 1..7), (4, Some(5)));
    assert_eq!(picks_in(&cycle, 1, 3..6), (0, None));
    assert_eq!(picks_in(&cycle, 1, 5..5), (0, None));
}
