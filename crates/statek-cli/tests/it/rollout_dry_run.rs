//! `statek rollout --dry-run` in both of its modes, with exact output:
//! without a database (worst case over every seal point, FROM counted from
//! its own start; a `DATABASE_URL` in the environment does not change it)
//! and with `--at-cursor` (exact at the live cursor, with the gaps carried
//! from the shard before FROM), against a real PostgreSQL.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use statek_policy::policy_file::PolicyFile;
use statek_policy::WeightedFairnessPolicy;
use statek_store_pg::testing::TestDatabase;
use uuid::Uuid;

fn statek(args: &[&str], database_url: Option<&str>) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_statek"));
    cmd.args(args).env_remove("DATABASE_URL");
    if let Some(url) = database_url {
        cmd.env("DATABASE_URL", url);
    }
    cmd.output().unwrap()
}

fn stdout(o: &Output) -> String {
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout.clone()).unwrap()
}

fn json(o: &Output) -> serde_json::Value {
    serde_json::from_str(&stdout(o)).unwrap()
}

/// Three policies of schedule `primary`: v1 = a:3, b:1 (cycle a a b a);
/// v2 = a:1, b:1, c:2 (cycle c a b c); v3 = a:1, b:1, c:6.
/// Writes a policy file of schedule `primary` into `dir`: `shard`, the
/// tables in `extra` (empty, or a `[fairness]` table), then `tenants`.
fn write_policy(
    dir: &Path,
    name: &str,
    shard: &str,
    tenants: &[(&str, u32)],
    extra: &str,
) -> PathBuf {
    let mut text = format!("shard = \"{shard}\"\nschedule = \"primary\"\n{extra}\n");
    for (id, weight) in tenants {
        text.push_str(&format!("[[tenants]]\nid = \"{id}\"\nweight = {weight}\n"));
    }
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

fn files() -> [PathBuf; 3] {
    let dir = std::env::temp_dir().join(format!("statek-dry-run-{}", Uuid::now_v7().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    let write = |name: &str, shard: &str, tenants: &[(&str, u32)]| {
        write_policy(&dir, name, shard, tenants, "")
    };
    [
        write("v1.toml", "primary-v1", &[("tenant-a", 3), ("tenant-b", 1)]),
        write(
            "v2.toml",
            "primary-v2",
            &[("tenant-a", 1), ("tenant-b", 1), ("tenant-c", 2)],
        ),
        write(
            "v3.toml",
            "primary-v3",
            &[("tenant-a", 1), ("tenant-b", 1), ("tenant-c", 6)],
        ),
    ]
}

fn parsed(path: &Path) -> WeightedFairnessPolicy {
    PolicyFile::parse("f.toml", &std::fs::read_to_string(path).unwrap())
        .unwrap()
        .into_policy()
}

/// (tenant, seal at N, reservations across the seam) of each seam row.
fn gaps(report: &serde_json::Value) -> Vec<(String, u64, u64)> {
    report["seam"]
        .as_array()
        .unwrap()
        .iter()
        .map(|row| {
            (
                row["tenant"].as_str().unwrap().to_owned(),
                row["seal_sequence"].as_u64().unwrap(),
                row["reservations_across_seam"].as_u64().unwrap(),
            )
        })
        .collect()
}

#[tokio::test]
async fn a_dry_run_reads_the_chain_only_with_at_cursor_and_then_is_exact() {
    let db = TestDatabase::create().await;
    let url = db.connection_string();
    let store = db.store();
    let [v1, v2, v3] = files();
    let p1 = parsed(&v1);
    let none = ["--durability", "none"];
    let v1s = v1.to_str().unwrap();
    stdout(&statek(
        &[&["register", v1s][..], &none].concat(),
        Some(&url),
    ));
    for _ in 0..9 {
        store
            .reserve(p1.shard_id(), &p1.digest(), Uuid::now_v7())
            .await
            .unwrap();
    }
    // v1 sealed at 9: tenant-b's last pick in v1 was 6, its first in v2 is
    // 2: a gap of 5, open by 3 at v2's sequence 0.
    stdout(&statek(
        &[&["rollout", v1s, v2.to_str().unwrap()][..], &none].concat(),
        Some(&url),
    ));
    let (from, to) = (v2.to_str().unwrap(), v3.to_str().unwrap());

    // Without --at-cursor: no database, though DATABASE_URL is set (to a
    // port where nothing listens: a connection would fail the command).
    let nowhere = Some("postgres://statek@127.0.0.1:1/statek");
    let worst = json(&statek(
        &["rollout", from, to, "--dry-run", "--format", "json"],
        nowhere,
    ));
    assert_eq!(
        [&worst["seam_at"], &worst["cursor"], &worst["carried_from"]],
        [
            &serde_json::json!("worst"),
            &serde_json::Value::Null,
            &serde_json::Value::Null
        ]
    );
    // By hand: b is picked at 2 in v2 (c a b c) and first at 5 in v3; its
    // worst, counting v2 from its start, is v2's bound 4 plus 5 at N = 6.
    assert_eq!(
        gaps(&worst),
        [
            ("tenant-a".into(), 5, 6),
            ("tenant-b".into(), 6, 9),
            ("tenant-c".into(), 3, 3)
        ]
    );
    let text = stdout(&statek(&["rollout", from, to, "--dry-run"], nowhere));
    assert_eq!(
        text.lines().take(2).collect::<Vec<_>>(),
        [
            "dry run (nothing written, no database asked): primary-v2 -> primary-v3, schedule primary",
            "seam: worst case over every seal point N, primary-v2 counted from its own start",
        ]
    );

    // Two reservations on v2: its cursor is 2 and it has not picked b yet.
    let p2 = parsed(&v2);
    for _ in 0..2 {
        store
            .reserve(p2.shard_id(), &p2.digest(), Uuid::now_v7())
            .await
            .unwrap();
    }
    let at_cursor = ["rollout", from, to, "--dry-run", "--at-cursor"];
    let exact = json(&statek(
        &[&at_cursor[..], &["--format", "json"]].concat(),
        Some(&url),
    ));
    assert_eq!(
        [&exact["seam_at"], &exact["cursor"], &exact["carried_from"]],
        [
            &serde_json::json!("cursor"),
            &serde_json::json!(2),
            &serde_json::json!("primary-v1")
        ]
    );
    // By hand: a last picked at 1 in v2, (2 - 1) + 2 = 3; b carries 3 from
    // v1 (last pick 6, sealed at 9) through v2's 2 sequences to its first
    // pick 5 in v3: 3 + 2 + 5 = 10, above the worst case's 9, which
    // counts v2 from its start; c last picked at 0, (2 - 0) + 0 = 2.
    assert_eq!(
        gaps(&exact),
        [
            ("tenant-a".into(), 2, 3),
            ("tenant-b".into(), 2, 10),
            ("tenant-c".into(), 2, 2)
        ]
    );
    let text = stdout(&statek(&at_cursor, Some(&url)));
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines[..2],
        [
            "dry run (nothing written, read the database): primary-v2 -> primary-v3, schedule primary",
            "seam: exact for a seal at cursor N = 2, with the gaps carried from primary-v1",
        ]
    );
    assert!(
        lines.contains(&"tenant-b          2           -           5          10  4 -> 8"),
        "{text}"
    );
    // Nothing was written: v2 is still live at 2, and the rollout seals
    // there with exactly the bounds the dry run printed.
    assert_eq!(store.next_sequence(p2.shard_id()).await.unwrap(), 2);
    let rollout = json(&statek(
        &[
            "rollout",
            from,
            to,
            "--format",
            "json",
            "--durability",
            "none",
        ],
        Some(&url),
    ));
    assert_eq!(rollout["sealed_at_sequence"], 2);
    assert_eq!(rollout["seam_at"], "sealed");
    assert_eq!(rollout["seam"], exact["seam"]);
}

/// A dry run between two cost-mode policies prints the ledger across the
/// seam: the successor's cap positive balances are cut to, and each
/// tenant's cost bound across the seam, `q₁·Δ₁ + q₂·Δ₂ + max b_cap` plus
/// `D × max C_max`, as computed by hand below. No database.
#[test]
fn a_dry_run_between_cost_policies_prints_the_cost_bound_across_the_seam() {
    let dir = std::env::temp_dir().join(format!("statek-cost-seam-{}", Uuid::now_v7().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    let write = |name: &str, shard: &str, tenants: &[(&str, u32)], cost: &str| {
        write_policy(&dir, name, shard, tenants, cost)
    };
    let v1 = write(
        "v1.toml",
        "primary-v1",
        &[("tenant-a", 3), ("tenant-b", 1)],
        "[fairness]\nunit = \"cost\"\nquantum = 4\nmax_cost = 40\nbalance_cap = 80",
    );
    let v2 = write(
        "v2.toml",
        "primary-v2",
        &[("tenant-a", 1), ("tenant-b", 1), ("tenant-c", 2)],
        "[fairness]\nunit = \"cost\"\nquantum = 2\nmax_cost = 60\nbalance_cap = 30",
    );
    let (from, to) = (v1.to_str().unwrap(), v2.to_str().unwrap());
    let report = json(&statek(
        &["rollout", from, to, "--dry-run", "--format", "json"],
        None,
    ));
    // v1 (a a b a): Δ₁·L₁ = 3 for a and for b, q₁ = 4: q₁·Δ₁ = 3. v2
    // (c a b c): Δ₂·L₂ = 3 for a and b, 4 for c, q₂ = 2: 1.5 and 2. c
    // joins (Δ₁ = 0). max b_cap = 80, max C_max = 60.
    assert_eq!(
        report["cost_seam"],
        serde_json::json!({
            "balance_cut_to": 30,
            "bounds": [
                {"tenant": "tenant-a", "fixed": 84.5, "per_concurrency": 60},
                {"tenant": "tenant-b", "fixed": 84.5, "per_concurrency": 60},
                {"tenant": "tenant-c", "fixed": 82.0, "per_concurrency": 60},
            ]
        })
    );
    let text = stdout(&statek(&["rollout", from, to, "--dry-run"], None));
    assert!(
        text.contains(
            "cost ledger: kept across the seal; positive balances are cut to b_cap = 30 of \
             primary-v2, debts kept\n  tenant-a  cost bound across the seam 84.500 + D×60\n"
        ),
        "{text}"
    );
    // A slot-mode seam has none.
    let [s1, s2, _] = files();
    let slots = json(&statek(
        &[
            "rollout",
            s1.to_str().unwrap(),
            s2.to_str().unwrap(),
            "--dry-run",
            "--format",
            "json",
        ],
        None,
    ));
    assert_eq!(slots["cost_seam"], serde_json::Value::Null);
}
