//! Unit tests of `audit.rs`: the walk's judgement of gaps.

#![allow(clippy::unwrap_used)]

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

/// Cost mode's upper side, `q·(n − 1) + D·C_max + b_cap`, by hand: q = 2,
/// C_max = 10, b_cap = 4, 8 slots, D = 1: 28. Charged 28 passes, 29 is a
/// finding; the lower side is `2·8 − 10 − 4 = 2`; no slot: S must be 0.
#[test]
fn cost_above_the_upper_side_is_a_finding() {
    let params = statek_policy::CostFairness::new(2, 10, 6, 4).unwrap();
    let audit = |charged| TenantCostAudit {
        charged,
        uncharged: 0,
        ended_without_finish: 0,
        entitled: 16.0,
        cap: None,
        concurrency: None,
        upper: None,
        lower: None,
    };
    let mut within = audit(28);
    assert_eq!(within.judge(&tenant("a"), 8, 1, &params), None);
    assert_eq!(
        (within.upper, within.lower, within.concurrency),
        (Some(28), Some(2), Some(1))
    );
    let mut over = audit(29);
    assert_eq!(
        over.judge(&tenant("a"), 8, 1, &params),
        Some(AuditFinding::CostOverBound {
            tenant: tenant("a"),
            charged: 29,
            upper: 28,
            concurrency: 1
        })
    );
    let mut none = audit(1);
    assert!(none.judge(&tenant("a"), 0, 3, &params).is_some());
    assert_eq!(none.upper, Some(0));
}
