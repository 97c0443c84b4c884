//! `PgStore::audit_shard`: a shard's evidence (range rows, outcome
//! records, claims) counted per tenant and judged against its policy, with
//! exact counts; forged evidence and holes are found.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::{Duration, SystemTime};

use statek_core::{SlotClass, SlotOutcomes};
use statek_policy::{TenantId, WeightedFairnessPolicy};
use statek_store_pg::testing::{reserve_next_slots, TestDatabase};
use statek_store_pg::{AuditFinding, FinishOutcome, FinishRun, NewRun, SlotClaim, TenantAudit};

fn tenant(id: &str) -> TenantId {
    TenantId::try_from(id).unwrap()
}

/// `tenant-a:3, tenant-b:1`: L = 4; a's bound is 2, b's 4.
fn policy() -> WeightedFairnessPolicy {
    statek_store_pg::testing::policy("primary-v1", &[("tenant-a", 3), ("tenant-b", 1)])
}

const LEASE: Duration = Duration::from_secs(60);

/// (slots, claimed, idle, unrecorded, largest gap) of a tenant's audit.
fn counts(t: &TenantAudit) -> (u64, u64, u64, u64, u64) {
    (t.slots, t.claimed, t.idle, t.unrecorded, t.largest_gap)
}

#[tokio::test]
async fn an_audit_counts_each_tenants_slots_outcomes_and_claims_and_finds_forgeries() {
    let db = TestDatabase::create().await;
    let store = db.store();
    let p = policy();
    let shard = p.shard_id();
    store.register(&p).await.unwrap();
    let (a, b) = (tenant("tenant-a"), tenant("tenant-b"));
    for i in 0..3_u8 {
        store
            .enqueue(&NewRun::new(a.clone(), vec![i]))
            .await
            .unwrap();
    }
    // Range 0..8 claimed for and recorded; range 8..16 left unrecorded.
    let first = reserve_next_slots(&store, &p, 8).await;
    let claims = store
        .claim_runs_for_slots(&first, shard, LEASE)
        .await
        .unwrap();
    let mut outcomes = SlotOutcomes::new();
    let mut claimed_at = Vec::new();
    for ((sequence, _), claim) in first.iter().zip(&claims) {
        match claim {
            SlotClaim::Claimed(_) => {
                outcomes.push(SlotClass::Claimed, 1);
                claimed_at.push(*sequence);
            }
            SlotClaim::Idle => outcomes.push(SlotClass::Idle, 1),
            other => panic!("{other:?}"),
        }
    }
    store
        .record_slot_outcomes(shard, 0, &outcomes)
        .await
        .unwrap();
    reserve_next_slots(&store, &p, 8).await;
    // tenant-a has 6 of the first 8 slots: its first 3 claimed its 3 runs.
    assert_eq!(claimed_at.len(), 3);
    assert!(claimed_at
        .iter()
        .all(|s| p.tenant_for_slot(s % 4) == Some(&a)));

    let report = store.audit_shard(shard, 0..u64::MAX).await.unwrap();
    assert!(report.passed(), "{report:?}");
    assert_eq!((report.from, report.to, report.audited_slots), (0, 16, 16));
    assert_eq!((report.cycle_length, report.hole_count), (4, 0));
    assert_eq!(report.cycle_digest, p.cycle_digest().to_string());
    let (ta, tb) = (&report.tenants[0], &report.tenants[1]);
    assert_eq!((&ta.tenant, &tb.tenant), (&a, &b));
    assert_eq!((ta.bound, tb.bound), (2, 4));
    assert_eq!(counts(ta), (12, 3, 3, 6, 2));
    assert_eq!(counts(tb), (4, 0, 2, 2, 4));
    assert_eq!((ta.entitled, tb.entitled), (12.0, 4.0));
    assert_eq!(
        (ta.runs_open, ta.runs_completed, ta.retried_attempts),
        (3, 0, 0)
    );
    assert_eq!(ta.lag_samples, 3);
    assert!(ta.lag_p50_ms.is_some() && ta.lag_p99_ms >= ta.lag_p50_ms);
    assert_eq!((tb.lag_samples, tb.lag_p50_ms), (0, None));

    // A span inside a range: its part only, clipped to the cursor.
    let part = store.audit_shard(shard, 6..100).await.unwrap();
    assert_eq!((part.from, part.to, part.audited_slots), (6, 16, 10));
    let slots_of = |t: &TenantId| {
        (6..16)
            .filter(|s| p.tenant_for_slot(s % 4) == Some(t))
            .count()
    };
    assert_eq!(part.tenants[0].slots, slots_of(&a) as u64);
    assert_eq!(part.tenants[1].slots, slots_of(&b) as u64);
    assert!(part.passed());

    // The reservation times map to the whole span.
    let between = store
        .sequences_reserved_between(
            shard,
            SystemTime::now() - Duration::from_secs(3600),
            SystemTime::now() + Duration::from_secs(3600),
        )
        .await
        .unwrap();
    assert_eq!(between, 0..16);
    let none = store
        .sequences_reserved_between(
            shard,
            SystemTime::now() + Duration::from_secs(3600),
            SystemTime::now() + Duration::from_secs(7200),
        )
        .await
        .unwrap();
    assert_eq!(none, 0..0);

    // Forged evidence, with the database's own guards switched off (as a
    // superuser could): a's claimed run moved to tenant-b.
    let client = db.client().await;
    let forged = claimed_at[1];
    client
        .batch_execute(&format!(
            "SET session_replication_role = replica;
             UPDATE statek.runs SET tenant_id = 'tenant-b' WHERE claim_sequence = {forged};
             RESET session_replication_role;"
        ))
        .await
        .unwrap();
    let report = store.audit_shard(shard, 0..16).await.unwrap();
    assert!(!report.passed());
    assert_eq!(
        report.findings,
        [AuditFinding::ClaimOfAnotherTenant {
            sequence: forged,
            expected: a.clone(),
            found: "tenant-b".to_owned(),
        }]
    );

    // The first range row gone, as retention prunes it (run rows stay): a
    // hole, not judged; the claims in it are counted and their tenants
    // checked (the forged one is still found). A claim moved past the
    // cursor is a claim no range was ever reserved for.
    client
        .batch_execute(&format!(
            "SET session_replication_role = replica;
             DELETE FROM statek.scheduler_reservations WHERE sequence = 0;
             UPDATE statek.runs SET claim_sequence = 100 WHERE claim_sequence = {};
             RESET session_replication_role;",
            claimed_at[2]
        ))
        .await
        .unwrap();
    let report = store.audit_shard(shard, 0..u64::MAX).await.unwrap();
    assert_eq!(report.holes, vec![std::ops::Range { start: 0, end: 8 }]);
    assert_eq!((report.hole_count, report.audited_slots), (1, 8));
    assert_eq!(
        report.findings,
        [
            AuditFinding::ClaimOfAnotherTenant {
                sequence: forged,
                expected: a.clone(),
                found: "tenant-b".to_owned(),
            },
            AuditFinding::ClaimOutsideRanges { sequence: 100 },
        ]
    );
    assert_eq!(report.tenants[0].claims_in_holes, 1);
    assert_eq!(counts(&report.tenants[0]), (6, 0, 0, 6, 2));
    // Without the forgeries, pruning alone passes.
    client
        .batch_execute(&format!(
            "SET session_replication_role = replica;
             UPDATE statek.runs SET tenant_id = 'tenant-a' WHERE claim_sequence = {forged};
             UPDATE statek.runs SET claim_sequence = {} WHERE claim_sequence = 100;
             RESET session_replication_role;",
            claimed_at[2]
        ))
        .await
        .unwrap();
    let report = store.audit_shard(shard, 0..u64::MAX).await.unwrap();
    assert!(report.passed(), "{report:?}");
    assert_eq!(report.tenants[0].claims_in_holes, 3);
}

#[tokio::test]
async fn an_audit_refuses_an_empty_span_and_an_unknown_shard() {
    let db = TestDatabase::create().await;
    let store = db.store();
    let p = policy();
    assert!(matches!(
        store.audit_shard(p.shard_id(), 5..5).await,
        Err(statek_store_pg::StoreError::InvalidArgument(_))
    ));
    assert!(matches!(
        store.audit_shard(p.shard_id(), 0..5).await,
        Err(statek_store_pg::StoreError::Rollout(
            statek_store_pg::RolloutError::UnknownShard { .. }
        ))
    ));
    // A registered shard without reservations: nothing to audit.
    store.register(&p).await.unwrap();
    let report = store.audit_shard(p.shard_id(), 0..u64::MAX).await.unwrap();
    assert_eq!((report.from, report.to, report.audited_slots), (0, 0, 0));
    assert!(report.passed());
}

/// A chain of three shards: tenant-b leaves at the first seam and comes
/// back at the second. Each seam's observed gap is its stored bound, and
/// b's real wait since its last pick in the first shard is reported.
#[tokio::test]
async fn a_schedule_audit_judges_each_seam_and_tells_a_rejoining_tenants_real_wait() {
    let db = TestDatabase::create().await;
    let store = db.store();
    let pol = statek_store_pg::testing::policy;
    let v1 = pol("primary-v1", &[("tenant-a", 3), ("tenant-b", 1)]);
    let v2 = pol("primary-v2", &[("tenant-a", 1), ("tenant-c", 1)]);
    let v3 = pol("primary-v3", &[("tenant-a", 1), ("tenant-b", 1)]);
    store.register(&v1).await.unwrap();
    reserve_next_slots(&store, &v1, 10).await;
    store.rollout(&v1, &v2, None).await.unwrap();
    reserve_next_slots(&store, &v2, 6).await;
    // Before the second seal: b rejoins; it was last picked in v1.
    let rejoining = store
        .rejoining_tenants(v2.shard_id(), 6, &v3)
        .await
        .unwrap();
    assert_eq!(rejoining.len(), 1);
    assert_eq!(
        (
            rejoining[0].tenant.as_str(),
            rejoining[0].last_shard.as_str(),
            rejoining[0].last_pick
        ),
        ("tenant-b", "primary-v1", 6)
    );
    assert!(store
        .rejoining_tenants(v1.shard_id(), 10, &v2)
        .await
        .unwrap()
        .is_empty());
    store.rollout(&v2, &v3, None).await.unwrap();
    reserve_next_slots(&store, &v3, 4).await;

    let audit = store.audit_schedule(v3.shard_id()).await.unwrap();
    assert!(audit.passed(), "{audit:?}");
    let shards: Vec<(&str, u64, u64)> = audit
        .shards
        .iter()
        .map(|r| (r.shard.as_str(), r.to, r.audited_slots))
        .collect();
    assert_eq!(
        shards,
        [
            ("primary-v1", 10, 10),
            ("primary-v2", 6, 6),
            ("primary-v3", 4, 4)
        ]
    );
    assert_eq!(audit.seams.len(), 2);
    // Every observed gap is exactly the bound the rollout stored.
    for seam in &audit.seams {
        for t in &seam.tenants {
            assert_eq!(t.observed, Some(t.bound), "{seam:?}");
        }
    }
    let (first, second) = (&audit.seams[0], &audit.seams[1]);
    assert_eq!(
        (first.sealed_at_sequence, second.sealed_at_sequence),
        (10, 6)
    );
    let c = first
        .tenants
        .iter()
        .find(|t| t.tenant.as_str() == "tenant-c")
        .unwrap();
    assert!(c.joining);
    assert_eq!(c.waited_since_last_pick, None, "c was never in the chain");
    // b's last pick in v1 (cycle [a, a, b, a]) is sequence 6, global 6;
    // its first pick in v3 is q = bound - 1, global 10 + 6 + q.
    let b = second
        .tenants
        .iter()
        .find(|t| t.tenant.as_str() == "tenant-b")
        .unwrap();
    assert!(b.joining);
    assert_eq!(
        v1.tenant_for_slot(6 % 4).map(TenantId::as_str),
        Some("tenant-b")
    );
    assert_eq!(b.waited_since_last_pick, Some(16 + (b.bound - 1) - 6));
    // What the rollout was told before the seal is what the evidence shows.
    assert_eq!(b.waited_since_last_pick, Some(rejoining[0].waited));
    let a = second
        .tenants
        .iter()
        .find(|t| t.tenant.as_str() == "tenant-a")
        .unwrap();
    assert!(!a.joining);
    // Auditing from the first shard gives the same chain.
    assert_eq!(store.audit_schedule(v1.shard_id()).await.unwrap(), audit);
}

/// Overlapping ranges are found wherever the audit's pages end: a row at
/// 999 (the last of the first page of 1,000 rows) widened to 3 slots
/// overlaps the rows at 1000 and 1001, and so does one at 500.
#[tokio::test]
async fn overlapping_ranges_are_found_across_a_page_edge() {
    let db = TestDatabase::create().await;
    let store = db.store();
    let p = policy();
    store.register(&p).await.unwrap();
    let client = db.client().await;
    client
        .batch_execute(
            "SET session_replication_role = replica;
             INSERT INTO statek.scheduler_reservations
                 (reservation_id, shard_id, sequence, slot, policy_digest, timeline)
             SELECT gen_random_uuid(), 'primary-v1', g, g % 4, s.policy_digest, 1
             FROM generate_series(0, 2499) AS g, statek.scheduler_shards AS s
             WHERE s.shard_id = 'primary-v1';
             UPDATE statek.scheduler_shards SET next_sequence = 2500 WHERE shard_id = 'primary-v1';
             RESET session_replication_role;",
        )
        .await
        .unwrap();
    let honest = store.audit_shard(p.shard_id(), 0..u64::MAX).await.unwrap();
    assert!(honest.passed(), "{honest:?}");
    assert_eq!(
        (honest.audited_slots, honest.tenants[0].unrecorded),
        (2500, 1875)
    );
    client
        .batch_execute(
            "SET session_replication_role = replica;
             UPDATE statek.scheduler_reservations
             SET sequence_count = 3, batch_id = reservation_id
             WHERE shard_id = 'primary-v1' AND sequence IN (500, 999);
             RESET session_replication_role;",
        )
        .await
        .unwrap();
    let report = store.audit_shard(p.shard_id(), 0..u64::MAX).await.unwrap();
    let overlaps: Vec<u64> = report
        .findings
        .iter()
        .map(|f| match f {
            AuditFinding::OverlappingRanges { sequence } => *sequence,
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(overlaps, [501, 502, 1000, 1001]);
    assert_eq!(report.audited_slots, 2500);
}

/// The cost a tenant was served in a span: the costs recorded with the
/// finishes of the attempts its slots claimed (migration V18), a retried
/// run's first attempt (moved into the history by its second claim)
/// included; attempts that recorded none are counted apart.
#[tokio::test]
async fn an_audit_sums_the_cost_recorded_for_each_tenants_claims() {
    let db = TestDatabase::create().await;
    let store = db.store();
    let p = policy();
    let shard = p.shard_id();
    store.register(&p).await.unwrap();
    let (a, b) = (tenant("tenant-a"), tenant("tenant-b"));
    for i in 0..3_u8 {
        store
            .enqueue(&NewRun::new(a.clone(), vec![i]).max_attempts(2))
            .await
            .unwrap();
    }
    store
        .enqueue(&NewRun::new(b.clone(), vec![9]))
        .await
        .unwrap();
    // Slots 0..4 are a, a, b, a: each claims a run.
    let first = reserve_next_slots(&store, &p, 4).await;
    let leases: Vec<_> = store
        .claim_runs_for_slots(&first, shard, LEASE)
        .await
        .unwrap()
        .into_iter()
        .map(|claim| match claim {
            SlotClaim::Claimed(run) => run.lease,
            other => panic!("{other:?}"),
        })
        .collect();
    let outcomes = store
        .finish_runs(&[
            FinishRun::complete(leases[0]).with_cost(Some(5)),
            FinishRun::fail(leases[1], "again", Duration::ZERO).with_cost(Some(2)),
            FinishRun::complete(leases[2]).with_cost(Some(40)),
            FinishRun::complete(leases[3]),
        ])
        .await
        .unwrap();
    assert!(matches!(outcomes[1], FinishOutcome::Retrying { .. }));
    // Slot 4 (a) claims the failed run again; its first attempt moves into
    // the history with its cost.
    let second = reserve_next_slots(&store, &p, 1).await;
    let [SlotClaim::Claimed(again)] = &store
        .claim_runs_for_slots(&second, shard, LEASE)
        .await
        .unwrap()[..]
    else {
        panic!("expected a claim");
    };
    assert_eq!(again.lease.run_id(), leases[1].run_id());
    store
        .finish_runs(&[FinishRun::complete(again.lease).with_cost(Some(3))])
        .await
        .unwrap();

    let report = store.audit_shard(shard, 0..5).await.unwrap();
    let (ta, tb) = (&report.tenants[0], &report.tenants[1]);
    assert_eq!((ta.claimed, tb.claimed), (4, 1));
    assert_eq!((ta.cost_served, ta.attempts_without_cost), (5 + 2 + 3, 1));
    assert_eq!((tb.cost_served, tb.attempts_without_cost), (40, 0));
    // The retried run's second claim alone (slot 4).
    let last = store.audit_shard(shard, 4..5).await.unwrap();
    assert_eq!(
        (
            last.tenants[0].cost_served,
            last.tenants[0].attempts_without_cost
        ),
        (3, 0)
    );
}

/// A run's service gap: counted from its tenant's first slot reserved
/// after it became runnable (slots reserved before it do not count) to
/// the slot that claimed it, with the tenant's slots that passed it.
#[tokio::test]
async fn an_audit_reports_the_longest_wait_of_a_run_for_its_claim() {
    let db = TestDatabase::create().await;
    let store = db.store();
    let p = policy();
    let shard = p.shard_id();
    store.register(&p).await.unwrap();
    let b = tenant("tenant-b");
    // Slots 0..8 reserved before tenant-b's run existed (its slots 2 and
    // 6 do not count), then 8..16: slot 10 passes it as idle (recorded
    // so), slot 14 claims it. The cycle is a, a, b, a.
    reserve_next_slots(&store, &p, 8).await;
    let run = store
        .enqueue(&NewRun::new(b.clone(), vec![1]))
        .await
        .unwrap()
        .run_id;
    let slots = reserve_next_slots(&store, &p, 8).await;
    assert_eq!((slots[2].0, &slots[2].1, slots[6].0), (10, &b, 14));
    let claims = store
        .claim_runs_for_slots(&slots[6..7], shard, LEASE)
        .await
        .unwrap();
    assert!(matches!(&claims[..], [SlotClaim::Claimed(c)] if c.lease.run_id() == run));
    let mut outcomes = SlotOutcomes::new();
    outcomes.push(SlotClass::Idle, 6);
    outcomes.push(SlotClass::Claimed, 1);
    outcomes.push(SlotClass::Idle, 1);
    store
        .record_slot_outcomes(shard, 8, &outcomes)
        .await
        .unwrap();

    let report = store.audit_shard(shard, 0..16).await.unwrap();
    let gap = |t: &TenantAudit| {
        t.largest_service_gap.map_or((0, None, 0, 0, false), |g| {
            (
                g.reservations,
                Some(g.at),
                g.slots_passed,
                g.idle,
                g.at_least,
            )
        })
    };
    assert_eq!(gap(&report.tenants[1]), (4, Some(14), 1, 1, false));
    assert_eq!(gap(&report.tenants[0]), (0, None, 0, 0, false));
    // A span that starts after the run became runnable: its look back
    // sees none of the slots before, so the claim ends a gap of at least
    // 0 (a lower bound, said so).
    let late = store.audit_shard(shard, 12..16).await.unwrap();
    assert_eq!(gap(&late.tenants[1]), (0, Some(14), 0, 0, true));
    assert!(report.passed() && late.passed());
}
