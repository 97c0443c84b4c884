//! `statek audit` on a real PostgreSQL: the report per tenant, exit 0 on
//! honest evidence and `AUDIT_FAILED` (16) on forged evidence, after the
//! report; bad spans are usage errors.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::process::Output;

use super::run_cli::{statek, text};

use std::time::Duration;

use statek_policy::SchedulerShardId;
use statek_store_pg::testing::{reserve_next_slots, TestDatabase};
use statek_store_pg::NewRun;

#[tokio::test]
async fn an_audit_reports_each_tenant_and_fails_on_forged_evidence() {
    let db = TestDatabase::create().await;
    let url = db.connection_string();
    let registered = statek(
        &[
            "register",
            "--durability",
            "none",
            "deploy/policies/two-tenants.toml",
        ],
        &url,
    );
    assert_eq!(
        registered.status.code(),
        Some(0),
        "{}",
        text(&registered.stderr)
    );
    let shard = SchedulerShardId::try_from("primary-v1").unwrap();
    let store = db.store();
    let policy = store.load_shard(&shard).await.unwrap().policy().clone();
    let a = policy.tenants()[0].tenant().clone();
    store
        .enqueue(&NewRun::new(a.clone(), vec![]))
        .await
        .unwrap();
    let slots = reserve_next_slots(&store, &policy, 8).await;
    let first_a: Vec<_> = slots
        .iter()
        .filter(|(_, t)| *t == a)
        .take(1)
        .cloned()
        .collect();
    let claims = store
        .claim_runs_for_slots(&first_a, &shard, Duration::from_secs(60))
        .await
        .unwrap();
    let [statek_store_pg::SlotClaim::Claimed(run)] = &claims[..] else {
        panic!("expected a claim, got {claims:?}");
    };
    // Its attempt cost 7 units (recorded with its finish, migration V18).
    store
        .finish_runs(&[statek_store_pg::FinishRun::complete(run.lease).with_cost(Some(7))])
        .await
        .unwrap();

    let audited = statek(&["audit", "--shard", "primary-v1"], &url);
    assert_eq!(audited.status.code(), Some(0), "{}", text(&audited.stderr));
    let out = text(&audited.stdout);
    let lines: Vec<&str> = out.lines().collect();
    assert!(
        lines[0].starts_with("audit of shard primary-v1, sequences 0..8: 8 slots with evidence; cycle L = 4, cycle digest "),
        "{out}"
    );
    let columns = |line: &str| {
        line.split_whitespace()
            .map(str::to_owned)
            .collect::<Vec<_>>()
    };
    // tenant weight bound entitled slots claimed idle known contended
    // limited debt unused unrecorded gap ...
    assert_eq!(
        columns(lines[2])[..14],
        ["tenant-a", "3", "2", "6.0", "6", "1", "0", "0", "0", "0", "0", "0", "5", "2"],
        "{out}"
    );
    assert_eq!(
        columns(lines[3])[..14],
        ["tenant-b", "1", "4", "2.0", "2", "0", "0", "0", "0", "0", "0", "0", "2", "4"],
        "{out}"
    );
    // Its run, enqueued before the range, was claimed by its first slot:
    // a service gap of 0 (column 15); tenant-b claimed nothing: none.
    assert_eq!(
        (&*columns(lines[2])[14], &*columns(lines[3])[14]),
        ("0", "-")
    );
    // ... and the cost its claims were served, last.
    assert_eq!(columns(lines[2]).last().map(String::as_str), Some("7"));
    assert_eq!(columns(lines[3]).last().map(String::as_str), Some("0"));
    assert!(out.contains("\nholes: none\n"), "{out}");
    assert!(
        out.ends_with("result: passed (every gap within its bound, the evidence consistent)\n"),
        "{out}"
    );
    let json = statek(
        &[
            "audit",
            "--shard",
            "primary-v1",
            "--sequences",
            "2..6",
            "--format",
            "json",
        ],
        &url,
    );
    assert_eq!(json.status.code(), Some(0));
    let doc: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(doc["audited"], serde_json::json!([2, 6]));
    assert_eq!(doc["audited_slots"], 4);
    assert_eq!(doc["passed"], true);

    // The claimed run moved to tenant-b behind the database's guards.
    let client = db.client().await;
    client
        .batch_execute(
            "SET session_replication_role = replica;
             UPDATE statek.runs SET tenant_id = 'tenant-b' WHERE claim_sequence IS NOT NULL;
             RESET session_replication_role;",
        )
        .await
        .unwrap();
    let failed = statek(&["audit", "--shard", "primary-v1"], &url);
    assert_eq!(failed.status.code(), Some(16), "{}", text(&failed.stderr));
    let out = text(&failed.stdout);
    assert!(
        out.ends_with(&format!(
            "result: FAILED, 1 finding:\n  sequence {}: the slot is tenant-a's, and claimed a run of \"tenant-b\" (claim_of_another_tenant)\n",
            first_a[0].0
        )),
        "{out}"
    );
    assert_eq!(
        text(&failed.stderr),
        "statek: error: the audit of shard primary-v1 found 1 problem\n"
    );

    for bad in ["6..2", "x..4", "4"] {
        let refused = statek(
            &["audit", "--shard", "primary-v1", "--sequences", bad],
            &url,
        );
        assert_eq!(
            refused.status.code(),
            Some(2),
            "{bad}: {}",
            text(&refused.stderr)
        );
    }
    for unknown in [
        &["audit", "--shard", "nope-v1"][..],
        &["audit", "--shard", "nope-v1", "--from", "1h", "--to", "now"][..],
    ] {
        let out = statek(unknown, &url);
        assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
        assert!(
            text(&out.stderr).contains("nope-v1"),
            "{}",
            text(&out.stderr)
        );
    }
    for bad in ["1000000000y", "1999-01-01T00:00:00Z"] {
        let out = statek(
            &[
                "audit",
                "--shard",
                "primary-v1",
                "--from",
                bad,
                "--to",
                "now",
            ],
            &url,
        );
        assert_eq!(out.status.code(), Some(2), "{bad}: {}", text(&out.stderr));
    }
    let past = statek(
        &[
            "audit",
            "--shard",
            "primary-v1",
            "--sequences",
            "9223372036854775808..",
        ],
        &url,
    );
    assert_eq!(past.status.code(), Some(2));
}

#[tokio::test]
async fn a_whole_schedule_audit_shows_each_seam() {
    let db = TestDatabase::create().await;
    let url = db.connection_string();
    let store = db.store();
    let v1 = statek_store_pg::testing::policy("primary-v1", &[("tenant-a", 3), ("tenant-b", 1)]);
    let v2 = statek_store_pg::testing::policy("primary-v2", &[("tenant-a", 1), ("tenant-c", 1)]);
    store.register(&v1).await.unwrap();
    reserve_next_slots(&store, &v1, 8).await;
    store.rollout(&v1, &v2, None).await.unwrap();
    reserve_next_slots(&store, &v2, 2).await;
    let seam = store.load_seam(v1.shard_id()).await.unwrap();
    let bound = |tenant: &str| {
        seam.seam()
            .iter()
            .find(|b| b.tenant().as_str() == tenant)
            .unwrap()
            .reservations_across_seam()
    };

    let audited = statek(
        &["audit", "--shard", "primary-v2", "--whole-schedule"],
        &url,
    );
    assert_eq!(audited.status.code(), Some(0), "{}", text(&audited.stderr));
    let out = text(&audited.stdout);
    assert!(
        out.starts_with("audit of shard primary-v1, sequences 0..8: 8 slots"),
        "{out}"
    );
    assert!(
        out.contains("\nseam primary-v1 -> primary-v2 (sealed at sequence 8): gaps across it, in reservations\n"),
        "{out}"
    );
    let row = |tenant: &str| {
        out.lines()
            .find(|l| l.starts_with(tenant) && l.split_whitespace().count() == 5)
            .map(|l| l.split_whitespace().map(str::to_owned).collect::<Vec<_>>())
            .unwrap()
    };
    let a = bound("tenant-a").to_string();
    let c = bound("tenant-c").to_string();
    assert_eq!(
        row("tenant-a"),
        ["tenant-a", a.as_str(), a.as_str(), "no", "-"],
        "{out}"
    );
    assert_eq!(
        row("tenant-c"),
        ["tenant-c", c.as_str(), c.as_str(), "yes", "-"],
        "{out}"
    );
    assert!(
        out.contains("\naudit of shard primary-v2, sequences 0..2: 2 slots"),
        "{out}"
    );
    assert!(
        out.ends_with("\nschedule: passed (2 shards, 1 seam)\n"),
        "{out}"
    );
    let conflicting = statek(
        &[
            "audit",
            "--shard",
            "primary-v2",
            "--whole-schedule",
            "--sequences",
            "0..4",
        ],
        &url,
    );
    assert_eq!(conflicting.status.code(), Some(2));
}

/// A tenant dropped by one rollout and re-added by the next: the second
/// rollout (and its `--at-cursor` dry run) says where it was last picked
/// and what it waits from there, which the audit of the schedule then
/// shows from the evidence.
#[tokio::test]
async fn a_rollout_that_re_adds_a_tenant_tells_its_real_wait() {
    let db = TestDatabase::create().await;
    let url = db.connection_string();
    let dir = std::env::temp_dir().join(format!("statek-audit-{}", uuid::Uuid::now_v7().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = |name: &str, body: &str| {
        let path = dir.join(name);
        std::fs::write(&path, body).unwrap();
        path.to_str().unwrap().to_owned()
    };
    let v1 = file(
        "v1.toml",
        "shard = \"primary-v1\"\nschedule = \"primary\"\n[[tenants]]\nid = \"tenant-a\"\nweight = 3\n[[tenants]]\nid = \"tenant-b\"\nweight = 1\n",
    );
    let v2 = file(
        "v2.toml",
        "shard = \"primary-v2\"\nschedule = \"primary\"\n[[tenants]]\nid = \"tenant-a\"\nweight = 1\n",
    );
    let v3 = file(
        "v3.toml",
        "shard = \"primary-v3\"\nschedule = \"primary\"\n[[tenants]]\nid = \"tenant-a\"\nweight = 1\n[[tenants]]\nid = \"tenant-b\"\nweight = 1\n",
    );
    let none = ["--durability", "none"];
    let ok = |out: Output| {
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        text(&out.stdout)
    };
    ok(statek(
        &[&["register"][..], &none, &[v1.as_str()]].concat(),
        &url,
    ));
    let store = db.store();
    let policy_of = |id: &str| {
        let store = store.clone();
        let id = SchedulerShardId::try_from(id).unwrap();
        async move { store.load_shard(&id).await.unwrap().policy().clone() }
    };
    reserve_next_slots(&store, &policy_of("primary-v1").await, 10).await;
    ok(statek(
        &[&["rollout"][..], &none, &[v1.as_str(), v2.as_str()]].concat(),
        &url,
    ));
    reserve_next_slots(&store, &policy_of("primary-v2").await, 5).await;
    // b was last picked in v1 (cycle [a, a, b, a]) at 6: 4 reservations to
    // the seal at 10, 5 in v2, and its first pick in v3 (slot 1 of [a, b]
    // or 0 of [b, a]).
    let v3_policy =
        statek_store_pg::testing::policy("primary-v3", &[("tenant-a", 1), ("tenant-b", 1)]);
    let q = (0..2)
        .find(|&s| v3_policy.tenant_for_slot(s).map(|t| t.as_str()) == Some("tenant-b"))
        .unwrap();
    let expected = format!(
        "rejoining: tenant-b was last picked in primary-v1 at sequence 6: {} reservations from there to its first pick in primary-v3 (its joining bound counts from the seal only)",
        4 + 5 + q
    );
    let preview = ok(statek(
        &[
            &["rollout"][..],
            &[v2.as_str(), v3.as_str(), "--dry-run", "--at-cursor"],
        ]
        .concat(),
        &url,
    ));
    assert!(preview.lines().any(|l| l == expected), "{preview}");
    let rolled = ok(statek(
        &[&["rollout"][..], &none, &[v2.as_str(), v3.as_str()]].concat(),
        &url,
    ));
    assert!(rolled.lines().any(|l| l == expected), "{rolled}");
    reserve_next_slots(&store, &v3_policy, 2).await;
    let audit = ok(statek(
        &[
            "audit",
            "--shard",
            "primary-v1",
            "--whole-schedule",
            "--format",
            "json",
        ],
        &url,
    ));
    let doc: serde_json::Value = serde_json::from_str(&audit).unwrap();
    let b = doc["seams"][1]["tenants"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["tenant"] == "tenant-b")
        .unwrap()
        .clone();
    assert_eq!(b["waited_since_last_pick"], 4 + 5 + q);
    assert_eq!(doc["passed"], true);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A cost shard's audit: per tenant the cost charged against both sides
/// of the bound, by hand. Policy a:1, b:1 (cycle a b), q = 2, C_max = 10,
/// default 6, b_cap = 4. Slots 0..4 claimed in two cost-mode claims: a
/// claims its run at 0 (credit 2) and reports 30 (charged 10: balance
/// −8); b is idle at 1 (2); a owes at 2 (−6, a debt slot); b is idle at 3
/// (4, not cut). With `--concurrency 2`: upper `2·1 + 2·10 + 4 = 26`,
/// lower `2·2 − 20 − 4 = −20`, both judged (no cut credit, every slot
/// credited).
#[tokio::test]
async fn a_cost_shard_audit_judges_served_cost_against_the_bound() {
    use statek_policy::{CostFairness, FairnessUnit};
    use statek_store_pg::{SlotClaim, SlotClaimRequest};

    let db = TestDatabase::create().await;
    let url = db.connection_string();
    let store = db.store();
    let policy = statek_store_pg::testing::policy("cost-v1", &[("tenant-a", 1), ("tenant-b", 1)])
        .with_fairness(FairnessUnit::Cost(CostFairness::new(2, 10, 6, 4).unwrap()));
    store.register(&policy).await.unwrap();
    let a = policy.tenants()[0].tenant().clone();
    store
        .enqueue(&NewRun::new(a.clone(), vec![]))
        .await
        .unwrap();
    let slots = reserve_next_slots(&store, &policy, 4).await;
    let claim = |slots: &[(u64, statek_policy::TenantId)]| {
        SlotClaimRequest::new(policy.shard_id(), slots, Duration::from_secs(60), 4)
            .unwrap()
            .in_cost_mode()
    };
    let first = store.claim_slots(&claim(&slots[..2])).await.unwrap();
    let [SlotClaim::Claimed(run), SlotClaim::Idle] = &first[..] else {
        panic!("expected a claim and an idle slot, got {first:?}");
    };
    store
        .finish_runs(&[statek_store_pg::FinishRun::complete(run.lease).with_cost(Some(30))])
        .await
        .unwrap();
    let second = store.claim_slots(&claim(&slots[2..])).await.unwrap();
    assert!(
        matches!(
            &second[..],
            [SlotClaim::Debt | SlotClaim::Idle, SlotClaim::Idle]
        ),
        "{second:?}"
    );

    let json = statek(
        &[
            "audit",
            "--shard",
            "cost-v1",
            "--concurrency",
            "2",
            "--format",
            "json",
        ],
        &url,
    );
    assert_eq!(json.status.code(), Some(0), "{}", text(&json.stderr));
    let report: serde_json::Value = serde_json::from_str(&text(&json.stdout)).unwrap();
    assert_eq!(report["max_cost"], 10);
    let cost = |i: usize| report["tenants"][i]["cost_mode"].clone();
    assert_eq!(
        cost(0),
        serde_json::json!({
            "charged": 10, "uncharged": 0, "ended_without_finish": 0, "entitled": 4.0,
            "cap": null, "concurrency": 2, "upper": 26, "lower": -20, "lower_judged": true,
            "slots_in_span": 2, "clipped_through": null
        })
    );
    assert_eq!(
        cost(1),
        serde_json::json!({
            "charged": 0, "uncharged": 0, "ended_without_finish": 0, "entitled": 4.0,
            "cap": null, "concurrency": 2, "upper": 26, "lower": -20, "lower_judged": true,
            "slots_in_span": 2, "clipped_through": null
        })
    );
    // A concurrency out of range is invalid input (3), as for `policy
    // compile`.
    let zero = statek(&["audit", "--shard", "cost-v1", "--concurrency", "0"], &url);
    assert_eq!(zero.status.code(), Some(3), "{}", text(&zero.stderr));
    assert_eq!(
        text(&zero.stderr),
        "statek: error: --concurrency 0 is not in 1..=1000000\n"
    );
    // Without --concurrency and without a cap: reported, not judged.
    let plain = statek(&["audit", "--shard", "cost-v1"], &url);
    assert_eq!(plain.status.code(), Some(0), "{}", text(&plain.stderr));
    let out = text(&plain.stdout);
    let row = out
        .lines()
        .find(|l| l.starts_with("tenant-a") && l.split_whitespace().count() == 9)
        .unwrap_or_else(|| panic!("{out}"));
    assert_eq!(
        row.split_whitespace().collect::<Vec<_>>(),
        ["tenant-a", "4.0", "10", "0", "-", "-", "-", "-", "no"],
        "{out}"
    );
}
