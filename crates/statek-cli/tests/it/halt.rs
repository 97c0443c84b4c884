//! `statek status`, `statek shard halts` and `statek shard resume` on a
//! shard halted in a real PostgreSQL (migration V10), with exact lines and
//! exit codes.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use super::run_cli::{statek, text};

use statek_store_pg::DurabilityError;

use statek_policy::SchedulerShardId;
use statek_store_pg::testing::TestDatabase;
use statek_store_pg::StoreError;
use uuid::Uuid;

#[tokio::test]
async fn a_halted_shard_is_shown_listed_and_resumed_by_the_cli() {
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
    let digest = store.load_shard(&shard).await.unwrap().policy().digest();
    for _ in 0..6 {
        store
            .reserve(&shard, &digest, Uuid::now_v7())
            .await
            .unwrap();
    }
    let not_halted = statek(&["status", "--shard", "primary-v1"], &url);
    assert!(
        text(&not_halted.stdout).contains("\nhalted             no\n"),
        "{}",
        text(&not_halted.stdout)
    );
    let none = statek(&["shard", "halts", "primary-v1"], &url);
    assert_eq!(none.status.code(), Some(0));
    assert_eq!(
        text(&none.stdout),
        "shard primary-v1: no halt was ever recorded\n"
    );
    let nothing = statek(
        &["shard", "resume", "primary-v1", "--acknowledge-loss"],
        &url,
    );
    assert_eq!(nothing.status.code(), Some(0));
    assert_eq!(
        text(&nothing.stdout),
        "shard primary-v1 is not halted: nothing to resume, nothing written\n"
    );

    // A replica records a loss of sequences 4 and 5 (the database's own
    // function, as a store's failover check does).
    let client = db.client().await;
    let timeline: i32 = client
        .query_one("SELECT statek.server_timeline()", &[])
        .await
        .unwrap()
        .get(0);
    let lost = Uuid::now_v7();
    client
        .query(
            "SELECT * FROM statek.record_reservation_loss('primary-v1', true, $1, 6,
                 jsonb_build_array(jsonb_build_object('reservation_id', $2::uuid,
                     'sequence', 4, 'count', 2, 'evidence', 'missing')),
                 'replica-a pid 7', 'on')",
            &[&(timeline + 1), &lost],
        )
        .await
        .unwrap();
    assert!(matches!(
        store.reserve(&shard, &digest, Uuid::now_v7()).await,
        Err(StoreError::Durability(DurabilityError::ShardHalted(_)))
    ));

    let status = statek(&["status", "--shard", "primary-v1"], &url);
    assert_eq!(status.status.code(), Some(0), "{}", text(&status.stderr));
    let status_text = text(&status.stdout);
    assert!(
        status_text.contains(
            "\nhalted             yes: no reservation until an owner runs \
             `statek shard resume primary-v1 --acknowledge-loss`\n                   \
             halt 1 (lost, timeline "
        ),
        "{status_text}"
    );
    assert!(
        status_text.contains(": 1 lost reservation holding 2 sequences from 4; recorded at "),
        "{status_text}"
    );
    let json = statek(
        &["status", "--shard", "primary-v1", "--format", "json"],
        &url,
    );
    let s: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(s["halted"], true);
    assert_eq!(
        s["open_halts"][0]["lost"][0]["reservation_id"],
        lost.to_string()
    );
    assert_eq!(s["open_halts"][0]["lost"][0]["count"], 2);
    assert_eq!(s["open_halts"][0]["cursor_at_detection"], 6);

    let halts = statek(&["shard", "halts", "primary-v1"], &url);
    let halts_text = text(&halts.stdout);
    assert!(
        halts_text.starts_with(
            "shard primary-v1: halted (resume with `statek shard resume primary-v1 --acknowledge-loss`); 1 halt recorded\nhalt 1 (lost, "
        ),
        "{halts_text}"
    );
    assert!(
        halts_text.ends_with(&format!(
            "by replica-a pid 7 (role postgres) [open]\n  lost {lost} at sequence 4 (+1): missing\n"
        )),
        "{halts_text}"
    );

    // Without --acknowledge-loss: a usage error, nothing written.
    let bare = statek(&["shard", "resume", "primary-v1"], &url);
    assert_eq!(bare.status.code(), Some(2), "{}", text(&bare.stderr));
    assert!(store.shard_halts(&shard).await.unwrap()[0].is_open());
    // A note over 1,024 bytes: invalid input, nothing written.
    let long = "x".repeat(1025);
    let too_long = statek(
        &[
            "shard",
            "resume",
            "primary-v1",
            "--acknowledge-loss",
            "--note",
            &long,
        ],
        &url,
    );
    assert_eq!(
        too_long.status.code(),
        Some(3),
        "{}",
        text(&too_long.stderr)
    );
    assert!(store.shard_halts(&shard).await.unwrap()[0].is_open());
    let unknown = statek(&["shard", "resume", "ghost", "--acknowledge-loss"], &url);
    assert_eq!(unknown.status.code(), Some(1), "{}", text(&unknown.stderr));

    let resumed = statek(
        &[
            "shard",
            "resume",
            "primary-v1",
            "--acknowledge-loss",
            "--note",
            "INC-9",
        ],
        &url,
    );
    assert_eq!(resumed.status.code(), Some(0), "{}", text(&resumed.stderr));
    let resumed_text = text(&resumed.stdout);
    assert!(
        resumed_text.starts_with(
            "resumed shard primary-v1: 1 halt acknowledged; it accepts reservations again\nhalt 1 (lost, "
        ),
        "{resumed_text}"
    );
    assert!(
        resumed_text.contains(&format!(
            "\n  sequences 4..6 were acknowledged on timeline {} and are handed out again on \
             timeline {timeline}: their slots were decided twice, and readers accept them as \
             reissued by halt 1\n",
            timeline + 1
        )),
        "{resumed_text}"
    );
    let r = store
        .reserve(&shard, &digest, Uuid::now_v7())
        .await
        .unwrap();
    assert_eq!(r.sequence(), 6);
    let after = statek(&["shard", "halts", "primary-v1", "--format", "json"], &url);
    let a: serde_json::Value = serde_json::from_slice(&after.stdout).unwrap();
    assert_eq!(a["halted"], false);
    assert_eq!(a["halts"][0]["reissued_first"], 4);
    assert_eq!(a["halts"][0]["reissued_end"], 6);
    assert_eq!(a["halts"][0]["note"], "INC-9");
    let after_text = text(&statek(&["shard", "halts", "primary-v1"], &url).stdout);
    assert!(after_text.ends_with("  note: INC-9\n"), "{after_text}");
}
