//! The `statek` binary: golden output, errors and exit codes, and the
//! database commands against a real PostgreSQL.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::PathBuf;
use std::process::{Command, Output};

use statek_policy::SchedulerShardId;
use statek_store_pg::testing::TestDatabase;
use uuid::Uuid;

pub(crate) fn workspace() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}

pub(crate) fn statek(args: &[&str], database_url: Option<&str>) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_statek"));
    cmd.args(args)
        .current_dir(workspace())
        .env_remove("DATABASE_URL");
    if let Some(url) = database_url {
        cmd.env("DATABASE_URL", url);
    }
    cmd.output().unwrap()
}

pub(crate) fn stdout(o: &Output) -> String {
    String::from_utf8(o.stdout.clone()).unwrap()
}

pub(crate) fn stderr(o: &Output) -> String {
    String::from_utf8(o.stderr.clone()).unwrap()
}

#[test]
fn policy_compile_golden() {
    let out = statek(
        &[
            "policy",
            "compile",
            "deploy/policies/two-tenants.toml",
            "--show-cycle",
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        stdout(&out),
        "policy       deploy/policies/two-tenants.toml
shard        primary-v1
algorithm    swrr-v1
fairness     slots
cycle length 4 slots
digest       6acf11c1d16fcb2ec8754466b5d93ff654598189fbddce650b94514f19aa7965
optimality   ideal
tenants      2

tenant    weight    share  bound  ideal  discrepancy
tenant-a       3   75.00%      2      2        0.750
tenant-b       1   25.00%      4      4        0.750

share = weight / L of all slots (scheduling opportunities, not CPU time or runs)
bound = most consecutive reservations until the tenant is selected, measured on the cycle; ideal = ceil(L / weight)
discrepancy = in any run of consecutive slots, the tenant is picked within this many slots of weight / L of them, either way (exact on the cycle)
optimality = ideal: every bound is its ideal; proven-optimal: no cycle of these weights has a smaller largest bound / ideal (min-gap-v2's exhaustive search, L <= 16); unproven: not searched, or the search could not decide

cycle (slot: tenant)
    0: tenant-a
    1: tenant-a
    2: tenant-b
    3: tenant-a
"
    );
    let json = statek(
        &[
            "policy",
            "compile",
            "deploy/policies/two-tenants.toml",
            "--format",
            "json",
        ],
        None,
    );
    let value: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(value["cycle_length"], 4);
    assert_eq!(value["tenants"][1]["bound"], 4);
    assert_eq!(value["tenants"][0]["bound"], 2);
    assert_eq!(value["tenants"][0]["discrepancy_scaled"], 3);
    assert_eq!(value["tenants"][1]["discrepancy"], 0.75);
    assert_eq!(value["optimality"], "ideal");
    assert_eq!(value["fairness"], serde_json::json!({"unit": "slots"}));
    assert!(value.get("optimality_reason").is_none(), "{value}");
}

/// A cost-mode policy compiles and says what it shares, with its
/// parameters and that this version does not enforce them; its digest is
/// not the slot-mode policy's.
#[test]
fn policy_compile_shows_cost_mode() {
    let dir = std::env::temp_dir().join(format!("statek-cli-{}", Uuid::now_v7().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("cost.toml");
    std::fs::write(
        &file,
        "shard = \"primary-v1\"\n[fairness]\nunit = \"cost\"\nquantum = 1\nmax_cost = 40\nbalance_cap = 80\n\
         [[tenants]]\nid = \"tenant-a\"\nweight = 3\n[[tenants]]\nid = \"tenant-b\"\nweight = 1\n",
    )
    .unwrap();
    let out = statek(&["policy", "compile", file.to_str().unwrap()], None);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.lines().any(|line| line
            == "fairness     cost (quantum 1, max_cost 40, default_cost 40, balance_cap 80)"),
        "{text}"
    );
    assert!(
        !text.contains("6acf11c1d16fcb2ec8754466b5d93ff654598189fbddce650b94514f19aa7965"),
        "{text}"
    );
    // Δ = 3/4 for both; q·Δ + b_cap = 80.75, plus D×40.
    assert!(
        text.contains(
            "tenant-a       3   75.00%      2      2        0.750  cost bound 80.750 + D×40\n"
        ),
        "{text}"
    );
    let at = statek(
        &[
            "policy",
            "compile",
            file.to_str().unwrap(),
            "--concurrency",
            "16",
        ],
        None,
    );
    assert!(
        stdout(&at)
            .contains("tenant-b       1   25.00%      4      4        0.750  cost bound 720.750\n"),
        "{}",
        stdout(&at)
    );
    let json = statek(
        &[
            "policy",
            "compile",
            file.to_str().unwrap(),
            "--concurrency",
            "2",
            "--format",
            "json",
        ],
        None,
    );
    let value: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(
        value["tenants"][0]["cost_bound"],
        serde_json::json!({"fixed": 80.75, "per_concurrency": 40, "at_concurrency": 160.75, "scaled_at_concurrency": 643})
    );
    assert_eq!(value["concurrency"], 2);
    // b_cap 80 ≥ (2 − 1)·1: no warning; at D = 100, 80 < 99: one.
    assert_eq!(value.get("warnings"), None);
    let many = statek(
        &[
            "policy",
            "compile",
            file.to_str().unwrap(),
            "--concurrency",
            "100",
        ],
        None,
    );
    assert!(
        stdout(&many).contains(
            "warning: balance_cap 80 is below (D − 1)·quantum = 99: with 100 attempts of a tenant \
             uncharged at once, a tenant whose runs cost at most the quantum can owe"
        ),
        "{}",
        stdout(&many)
    );
    // A rollout to it is refused, and the diff says so.
    let slots = dir.join("slots.toml");
    std::fs::write(
        &slots,
        "shard = \"primary-v0\"\n[[tenants]]\nid = \"tenant-a\"\nweight = 3\n[[tenants]]\nid = \"tenant-b\"\nweight = 1\n",
    )
    .unwrap();
    let diff = statek(
        &[
            "policy",
            "diff",
            slots.to_str().unwrap(),
            file.to_str().unwrap(),
        ],
        None,
    );
    assert_eq!(diff.status.code(), Some(0), "{}", stderr(&diff));
    assert!(
        stdout(&diff).contains("fairness     slots -> cost (quantum 1, max_cost 40, default_cost 40, balance_cap 80)\n"),
        "{}",
        stdout(&diff)
    );
    // A cost-mode successor is a rollout like any other (migration V19).
    assert!(
        !stdout(&diff).contains("REFUSED BY ROLLOUT"),
        "{}",
        stdout(&diff)
    );
    let zero = statek(
        &[
            "policy",
            "compile",
            file.to_str().unwrap(),
            "--concurrency",
            "-1",
        ],
        None,
    );
    assert_eq!(zero.status.code(), Some(3));
    assert_eq!(
        stderr(&zero),
        "statek: error: --concurrency -1 is not in 1..=1000000\n"
    );
    assert_eq!(
        value["fairness"],
        serde_json::json!({"unit": "cost", "quantum": 1, "max_cost": 40, "default_cost": 40, "balance_cap": 80})
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// A one-slot cycle is "1 slot".
#[test]
fn policy_compile_names_one_slot_in_the_singular() {
    let dir = std::env::temp_dir().join(format!("statek-cli-{}", Uuid::now_v7().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("one.toml");
    std::fs::write(
        &file,
        "shard = \"primary-v1\"\n[[tenants]]\nid = \"a\"\nweight = 1\n",
    )
    .unwrap();
    let out = statek(&["policy", "compile", file.to_str().unwrap()], None);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.lines().any(|line| line == "cycle length 1 slot"),
        "{text}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `policy compile` says what is proven about a cycle: `{3, 2, 1}` is 4/3
/// at best; min-gap-v2 proves it, swrr-v1 (3/2) does not search.
#[test]
fn policy_compile_reports_optimality() {
    let dir = std::env::temp_dir().join(format!("statek-cli-{}", Uuid::now_v7().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    let toml = |algorithm: &str| {
        format!(
            "shard = \"primary-v1\"\nalgorithm = \"{algorithm}\"\n\
             [[tenants]]\nid = \"a\"\nweight = 3\n\
             [[tenants]]\nid = \"b\"\nweight = 2\n\
             [[tenants]]\nid = \"c\"\nweight = 1\n"
        )
    };
    for (algorithm, label, reason) in [
        ("min-gap-v2", "proven-optimal", None),
        (
            "swrr-v1",
            "unproven",
            Some("the algorithm does not search for the optimum"),
        ),
    ] {
        let file = dir.join(format!("{algorithm}.toml"));
        std::fs::write(&file, toml(algorithm)).unwrap();
        let out = statek(
            &[
                "policy",
                "compile",
                file.to_str().unwrap(),
                "--format",
                "json",
            ],
            None,
        );
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        let value: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(value["optimality"], label, "{algorithm}");
        assert_eq!(
            value.get("optimality_reason").and_then(|r| r.as_str()),
            reason,
            "{algorithm}"
        );
        let text = statek(&["policy", "compile", file.to_str().unwrap()], None);
        let expected = match reason {
            Some(reason) => format!("optimality   {label} ({reason})\n"),
            None => format!("optimality   {label}\n"),
        };
        assert!(stdout(&text).contains(&expected), "{}", stdout(&text));
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn policy_diff_golden() {
    let dir = std::env::temp_dir().join(format!("statek-cli-{}", Uuid::now_v7().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    let new = dir.join("new.toml");
    std::fs::write(
        &new,
        "shard = \"primary-v2\"\n[[tenants]]\nid = \"tenant-a\"\nweight = 3\n[[tenants]]\nid = \"tenant-c\"\nweight = 2\n",
    )
    .unwrap();
    let out = statek(
        &[
            "policy",
            "diff",
            "deploy/policies/two-tenants.toml",
            new.to_str().unwrap(),
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(
        stdout(&out),
        "shard        primary-v1 -> primary-v2
algorithm    swrr-v1 (unchanged)
fairness     slots (unchanged)
cycle length 4 -> 5
digest       6acf11c1d16fcb2ec8754466b5d93ff654598189fbddce650b94514f19aa7965 -> 0ead388daa777f2eb8aaec1f691abed7a8cdc2fceb104da1e1e2e0f0fcea5a59
cycle digest a5a5191ce4f82986fe7436c460c864b50e409714c9ad442ee03a7a80d900b440 -> 712da18b73dc50b3a04d7b8e26520bfafac43b7269e933e8059b0690cf69350d
worst ratio  2/2 = 1.000, excess 0 slots (unchanged)
tenants
  + tenant-c: weight 2, bound 3 (added)
  - tenant-b: weight 1, bound 4 (removed)
  = 1 tenant unchanged (weight and bound)

seam of a rollout primary-v1 -> primary-v2: each tenant's gap at its worst over every seal point N
tenant    seal at N   last pick  first pick  seam bound  bound old -> new
tenant-a          3           1           0           2  2 -> 2
tenant-c          0     joining           1           2  - -> 3
leaving: tenant-b (no slot after the seal)
worst seam bound: 2 reservations (tenant-a, at N = 3); the rollout prints the exact bound for its N

rollout: statek rollout OLD.toml NEW.toml seals primary-v1 at its cursor and registers primary-v2 as its successor in one transaction; replicas follow within one tick, no drain (statek rollout --dry-run shows the seam).
"
    );
}

#[test]
fn policy_diff_compares_two_algorithms_on_one_file() {
    let dir = std::env::temp_dir().join(format!("statek-cli-{}", Uuid::now_v7().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("five-two-one.toml");
    std::fs::write(
        &file,
        "shard = \"primary-v1\"\n[[tenants]]\nid = \"a\"\nweight = 5\n[[tenants]]\nid = \"b\"\nweight = 2\n[[tenants]]\nid = \"c\"\nweight = 1\n",
    )
    .unwrap();
    let file = file.to_str().unwrap();
    let out = statek(
        &[
            "policy",
            "diff",
            file,
            "--algorithm",
            "min-gap-v1",
            "--against",
            "min-gap-v2",
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(
        stdout(&out),
        "shard        primary-v1 (unchanged)
algorithm    min-gap-v1 -> min-gap-v2
fairness     slots (unchanged)
cycle length 8 (unchanged)
digest       7216207c83f168069a9167d580f027d653498d97aab08daa0be3a0e8d5778f4d -> 3b1b98ffaeab088617a26f5ef0e4a05b8b60768495567b80c626cbd190aee2d6
cycle digest 4afb00a49c1897d2eaa1d2e486c093b25f035511d2707880a26fb0ce30ec110a -> b77f1756cc60ddad5732be2b7b9c419878a3daa8899b1446a585f10eab6c7aa2
worst ratio  5/4 = 1.250, excess 1 slots -> 2/2 = 1.000, excess 0 slots
tenants
  ~ b: weight 2 -> 2, bound 5 -> 4
  = 2 tenants unchanged (weight and bound)

algorithms compared on one policy: bound = most consecutive reservations until the tenant is selected, measured on each cycle; worst ratio = largest bound / ceil(L / weight). Switching the algorithm of shard primary-v1 is a policy change: it needs a new shard id.
"
    );
    // An unknown algorithm is a usage error (exit 2, see
    // tests/it/exit_codes.rs); so is neither a second file nor --against (a
    // missing argument).
    let args = ["policy", "diff", file];
    let missing = statek(&args, None);
    assert_eq!(missing.status.code(), Some(2), "{args:?}");
    // Its usage line shows both ways to finish the command.
    let stderr = String::from_utf8_lossy(&missing.stderr);
    assert!(
        stderr.contains(
            "Usage: statek policy diff [OPTIONS] <OLD> <NEW>\n       \
             statek policy diff [OPTIONS] <OLD> --against <AGAINST>\n"
        ),
        "{stderr}"
    );
    // A policy file may name min-gap-v2 itself.
    let v2 = dir.join("v2.toml");
    std::fs::write(
        &v2,
        "shard = \"primary-v1\"\nalgorithm = \"min-gap-v2\"\n[[tenants]]\nid = \"a\"\nweight = 5\n[[tenants]]\nid = \"b\"\nweight = 2\n[[tenants]]\nid = \"c\"\nweight = 1\n",
    )
    .unwrap();
    let compiled = statek(
        &[
            "policy",
            "compile",
            v2.to_str().unwrap(),
            "--format",
            "json",
        ],
        None,
    );
    assert_eq!(compiled.status.code(), Some(0));
    let value: serde_json::Value = serde_json::from_slice(&compiled.stdout).unwrap();
    assert_eq!(value["algorithm"], "min-gap-v2");
    assert_eq!(value["tenants"][1]["bound"], 4);
}

#[test]
fn every_invalid_file_names_file_line_and_field() {
    let dir = std::env::temp_dir().join(format!("statek-cli-{}", Uuid::now_v7().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    let cases: &[(&str, &str, &str)] = &[
        ("weight0.toml", "shard = \"s\"\n[[tenants]]\nid = \"a\"\nweight = 0\n", ":4:10: tenants[1].weight:"),
        ("weight1025.toml", "shard = \"s\"\n[[tenants]]\nid = \"a\"\nweight = 1025\n", ":4:10: tenants[1].weight:"),
        ("badid.toml", "shard = \"s\"\n[[tenants]]\nid = \"a/b\"\nweight = 1\n", ":3:6: tenants[1].id:"),
        ("badshard.toml", "shard = \"..\"\n[[tenants]]\nid = \"a\"\nweight = 1\n", ":1:9: shard:"),
        ("dup.toml", "shard = \"s\"\n[[tenants]]\nid = \"a\"\nweight = 1\n[[tenants]]\nid = \"a\"\nweight = 2\n", ":6:6: tenants[2].id:"),
        ("unknown.toml", "shard = \"s\"\ncolour = \"red\"\n[[tenants]]\nid = \"a\"\nweight = 1\n", ":2:"),
        ("noshard.toml", "[[tenants]]\nid = \"a\"\nweight = 1\n", ":1:1: shard: missing required key"),
        ("syntax.toml", "shard = \"s\n", ":1:"),
    ];
    for (name, text, expected) in cases {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        let out = statek(&["policy", "compile", path.to_str().unwrap()], None);
        assert_eq!(out.status.code(), Some(3), "{name}: {}", stderr(&out));
        let err = stderr(&out);
        assert!(
            err.contains(&format!("{}{expected}", path.display())),
            "{name}: {err}"
        );
        assert!(!err.contains("panicked"), "{name}: {err}");
        assert!(stdout(&out).is_empty());
    }
    let missing = statek(&["policy", "compile", "no/such/file.toml"], None);
    assert_eq!(missing.status.code(), Some(3));
    assert!(stderr(&missing).contains("no/such/file.toml: cannot read"));
    // An endless input is refused after 4 MiB, not read into memory.
    let endless = statek(&["policy", "compile", "/dev/zero"], None);
    assert_eq!(endless.status.code(), Some(3));
    assert!(
        stderr(&endless).contains("/dev/zero: larger than 4194304 bytes: not a policy file"),
        "{}",
        stderr(&endless)
    );
    let no_db = statek(&["status", "--shard", "primary-v1"], None);
    assert_eq!(no_db.status.code(), Some(9));
    assert!(stderr(&no_db).contains("DATABASE_URL"));
}

#[tokio::test]
async fn status_register_verify_and_prune_against_postgres() {
    let db = TestDatabase::create().await;
    let url = db.connection_string();
    // The test server runs with fsync and full_page_writes off: refused by
    // default (exit 10), nothing registered.
    let refused = statek(
        &["register", "deploy/policies/two-tenants.toml"],
        Some(&url),
    );
    assert_eq!(refused.status.code(), Some(10), "{}", stderr(&refused));
    assert!(
        stderr(&refused).contains("fsync is off"),
        "{}",
        stderr(&refused)
    );
    assert!(db
        .store()
        .load_shard(&SchedulerShardId::try_from("primary-v1").unwrap())
        .await
        .is_err());
    let out = statek(
        &[
            "register",
            "--durability",
            "none",
            "deploy/policies/two-tenants.toml",
        ],
        Some(&url),
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stderr(&out).contains(
            "statek: warning: the server can lose acknowledged reservations (fsync, \
             full_page_writes), accepted by --durability: fsync=off full_page_writes=off"
        ),
        "{}",
        stderr(&out)
    );
    let again = statek(
        &[
            "register",
            "--durability",
            "none",
            "deploy/policies/two-tenants.toml",
        ],
        Some(&url),
    );
    assert!(stdout(&again).contains("already registered with identical bytes"));

    // Ten reservations, four of them back-dated two days.
    let store = db.store();
    let shard = SchedulerShardId::try_from("primary-v1").unwrap();
    let loaded = store.load_shard(&shard).await.unwrap();
    for _ in 0..10 {
        store
            .reserve(&shard, &loaded.policy().digest(), Uuid::now_v7())
            .await
            .unwrap();
    }
    db.client()
        .await
        .batch_execute(
            "ALTER TABLE statek.scheduler_reservations DISABLE TRIGGER scheduler_reservations_immutable;
             UPDATE statek.scheduler_reservations SET reserved_at = now() - interval '2 days' WHERE sequence < 4;
             ALTER TABLE statek.scheduler_reservations ENABLE TRIGGER scheduler_reservations_immutable;",
        )
        .await
        .unwrap();

    let status = statek(
        &["status", "--shard", "primary-v1", "--format", "json"],
        Some(&url),
    );
    assert_eq!(status.status.code(), Some(0), "{}", stderr(&status));
    let s: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    assert_eq!(s["next_sequence"], 10);
    assert_eq!(s["next_slot"], 2);
    assert_eq!(s["reservations_last_minute"], 6);
    assert_eq!(s["retained_reservations"], 10);
    assert_eq!(s["rows_past_retention"], 4);
    assert_eq!(s["cycle_length"], 4);

    let pruned = statek(
        &[
            "prune",
            "--retain",
            "24h",
            "--batch",
            "3",
            "--until-empty",
            "--format",
            "json",
        ],
        Some(&url),
    );
    assert_eq!(pruned.status.code(), Some(0), "{}", stderr(&pruned));
    let p: serde_json::Value = serde_json::from_slice(&pruned.stdout).unwrap();
    assert_eq!(p["deleted"], 4);
    assert_eq!(p["batches"], 2);
    let after = statek(
        &["status", "--shard", "primary-v1", "--format", "json"],
        Some(&url),
    );
    let s: serde_json::Value = serde_json::from_slice(&after.stdout).unwrap();
    assert_eq!(
        (
            s["retained_reservations"].clone(),
            s["rows_past_retention"].clone()
        ),
        (6.into(), 0.into())
    );
    assert_eq!(s["next_sequence"], 10);

    let verify = statek(
        &["policy", "verify", "deploy/policies/two-tenants.toml"],
        Some(&url),
    );
    assert_eq!(verify.status.code(), Some(0), "{}", stderr(&verify));
    let bad = statek(
        &[
            "policy",
            "verify",
            "deploy/policies/noisy-neighbour.toml",
            "--shard",
            "primary-v1",
        ],
        Some(&url),
    );
    assert_eq!(bad.status.code(), Some(4));
    // A stored cycle digest that this build does not compile: exit 4.
    db.client()
        .await
        .batch_execute(
            "SET session_replication_role = replica;
             UPDATE statek.scheduler_shards SET cycle_digest = sha256('another build')
             WHERE shard_id = 'primary-v1'",
        )
        .await
        .unwrap();
    let other_cycle = statek(
        &["policy", "verify", "deploy/policies/two-tenants.toml"],
        Some(&url),
    );
    assert_eq!(
        other_cycle.status.code(),
        Some(4),
        "{}",
        stderr(&other_cycle)
    );
    assert!(
        stdout(&other_cycle).starts_with(
            "MISMATCH: shard primary-v1 holds deploy/policies/two-tenants.toml, but its cycle digest \
             db45811d226b12d0521bc4af42bb9b0167446da3f240e3c704475ba1cecb3288 is not this build's \
             a5a5191ce4f82986fe7436c460c864b50e409714c9ad442ee03a7a80d900b440"
        ),
        "{}",
        stdout(&other_cycle)
    );
    // Passwords are never printed.
    let secret = format!("{url} password=hunter2");
    let out = statek(&["migrate"], Some(&secret));
    assert!(!stdout(&out).contains("hunter2") && !stderr(&out).contains("hunter2"));
}

/// Two policy files of one schedule, `primary`: v1 = tenant-a:3,
/// tenant-b:1 (cycle a a b a) and v2 = tenant-a:1, tenant-b:1, tenant-c:2
/// (cycle c a b c), the example of statek-policy's `PolicySeam`.
fn rollout_files() -> (PathBuf, PathBuf) {
    let dir = std::env::temp_dir().join(format!("statek-cli-{}", Uuid::now_v7().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    let (v1, v2) = (dir.join("v1.toml"), dir.join("v2.toml"));
    std::fs::write(
        &v1,
        "shard = \"primary-v1\"\nschedule = \"primary\"\n[[tenants]]\nid = \"tenant-a\"\nweight = 3\n[[tenants]]\nid = \"tenant-b\"\nweight = 1\n",
    )
    .unwrap();
    std::fs::write(
        &v2,
        "shard = \"primary-v2\"\nschedule = \"primary\"\n[[tenants]]\nid = \"tenant-a\"\nweight = 1\n[[tenants]]\nid = \"tenant-b\"\nweight = 1\n[[tenants]]\nid = \"tenant-c\"\nweight = 2\n",
    )
    .unwrap();
    (v1, v2)
}

fn parsed(path: &std::path::Path) -> statek_policy::WeightedFairnessPolicy {
    statek_policy::policy_file::PolicyFile::parse("f.toml", &std::fs::read_to_string(path).unwrap())
        .unwrap()
        .into_policy()
}

/// The `seam` rows `rollout` and `policy diff` print for `bounds`.
fn seam_json(
    old: &statek_policy::WeightedFairnessPolicy,
    new: &statek_policy::WeightedFairnessPolicy,
    bounds: &[statek_policy::SeamBound],
) -> serde_json::Value {
    let bound = |p: &statek_policy::WeightedFairnessPolicy, t| {
        p.starvation_bound(t)
            .map(|b| b.maximum_reservations_until_selection())
    };
    bounds
        .iter()
        .map(|b| {
            serde_json::json!({
                "tenant": b.tenant().as_str(),
                "seal_sequence": b.seal_sequence(),
                "last_pick_before_seal": b.last_pick_before_seal(),
                "first_pick_after_seal": b.first_pick_after_seal(),
                "reservations_across_seam": b.reservations_across_seam(),
                "joining": b.joining(),
                "bound": [bound(old, b.tenant()), bound(new, b.tenant()).unwrap()],
            })
        })
        .collect()
}

fn json_of(o: &Output) -> serde_json::Value {
    assert_eq!(o.status.code(), Some(0), "{}", stderr(o));
    serde_json::from_slice(&o.stdout).unwrap()
}

#[test]
fn rollout_dry_run_and_policy_diff_print_the_worst_seam_without_a_database() {
    let (v1, v2) = rollout_files();
    let (from, to) = (v1.to_str().unwrap(), v2.to_str().unwrap());
    let (old, new) = (parsed(&v1), parsed(&v2));
    let worst = statek_policy::PolicySeam::new(&old, &new).worst();
    // By hand: a's worst is 3 at N = 3 (last pick 1, first pick 1),
    // b's 6 at N = 6, joining c's q + 1 = 1.
    assert_eq!(
        worst
            .iter()
            .map(|b| (b.seal_sequence(), b.reservations_across_seam()))
            .collect::<Vec<_>>(),
        [(3, 3), (6, 6), (0, 1)]
    );
    let dry = json_of(&statek(
        &["rollout", from, to, "--dry-run", "--format", "json"],
        None,
    ));
    assert_eq!(
        dry,
        serde_json::json!({
            "dry_run": true,
            "seam_at": "worst",
            "cursor": null,
            "carried_from": null,
            "schedule": "primary",
            "predecessor": "primary-v1",
            "successor": "primary-v2",
            "sealed_at_sequence": null,
            "sealed_at": null,
            "replayed": false,
            "seam": seam_json(&old, &new, &worst),
            "leaving": [],
            "rejoining": [],
            "cost_seam": null,
        })
    );
    assert_eq!(
        dry["seam"][1],
        serde_json::json!({
            "tenant": "tenant-b", "seal_sequence": 6, "last_pick_before_seal": 2,
            "first_pick_after_seal": 2, "reservations_across_seam": 6, "joining": false,
            "bound": [4, 4],
        })
    );
    let text = statek(&["rollout", from, to, "--dry-run"], None);
    assert_eq!(text.status.code(), Some(0), "{}", stderr(&text));
    assert!(stdout(&text).contains(
        "tenant    seal at N   last pick  first pick  seam bound  bound old -> new
tenant-a          3           1           1           3  2 -> 4
tenant-b          6           2           2           6  4 -> 4
tenant-c          0     joining           0           1  - -> 3
"
    ));

    let diff = json_of(&statek(
        &["policy", "diff", from, to, "--format", "json"],
        None,
    ));
    assert_eq!(diff["schedule"], serde_json::json!(["primary", "primary"]));
    assert_eq!(diff["added"], serde_json::json!([["tenant-c", 2, 3]]));
    assert_eq!(diff["removed"], serde_json::json!([]));
    assert_eq!(diff["reweighted"], serde_json::json!(["tenant-a"]));
    assert_eq!(
        diff["kept"],
        serde_json::json!([
            {"id": "tenant-a", "weight": [3, 1], "bound": [2, 4]},
            {"id": "tenant-b", "weight": [1, 1], "bound": [4, 4]},
        ])
    );
    assert_eq!(diff["cycle_length"], serde_json::json!([4, 4]));
    assert_eq!(diff["algorithm"], serde_json::json!(["swrr-v1", "swrr-v1"]));
    assert_eq!(diff["seam"], seam_json(&old, &new, &worst));
    assert_eq!(diff["worst_seam"], seam_json(&old, &new, &worst)[1]);
    assert_eq!(diff["changed"], true);
}

#[tokio::test]
async fn rollout_register_and_status_against_postgres() {
    let db = TestDatabase::create().await;
    let url = db.connection_string();
    let (v1, v2) = rollout_files();
    let (from, to) = (v1.to_str().unwrap(), v2.to_str().unwrap());
    let (old, new) = (parsed(&v1), parsed(&v2));
    let none = ["--durability", "none"];
    let register = statek(&[&["register", from][..], &none].concat(), Some(&url));
    assert_eq!(register.status.code(), Some(0), "{}", stderr(&register));
    assert!(
        stdout(&register).starts_with("shard primary-v1: registered (schedule primary, policy "),
        "{}",
        stdout(&register)
    );
    let status = |shard: &str| {
        json_of(&statek(
            &["status", "--shard", shard, "--format", "json"],
            Some(&url),
        ))
    };
    let chain = |s: &serde_json::Value| {
        [
            "schedule",
            "sealed_at_sequence",
            "successor",
            "predecessor",
            "live_shard",
        ]
        .map(|k| s[k].clone())
    };
    let before = status("primary-v1");
    assert_eq!(
        chain(&before),
        [
            "primary".into(),
            serde_json::Value::Null,
            serde_json::Value::Null,
            serde_json::Value::Null,
            "primary-v1".into()
        ]
    );
    assert_eq!(before["sealed_at"], serde_json::Value::Null);

    // Nine reservations: sealed at N = 9.
    let store = db.store();
    for _ in 0..9 {
        store
            .reserve(old.shard_id(), &old.digest(), Uuid::now_v7())
            .await
            .unwrap();
    }
    let rollout = json_of(&statek(
        &[&["rollout", from, to, "--format", "json"][..], &none].concat(),
        Some(&url),
    ));
    let at_nine = statek_policy::PolicySeam::new(&old, &new).at(9);
    // By hand (statek-policy's example): (9 - 8) + 1, (9 - 6) + 2, 0 + 1.
    assert_eq!(
        at_nine
            .iter()
            .map(statek_policy::SeamBound::reservations_across_seam)
            .collect::<Vec<_>>(),
        [2, 5, 1]
    );
    assert_eq!(rollout["dry_run"], false);
    assert_eq!(rollout["schedule"], "primary");
    assert_eq!(rollout["predecessor"], "primary-v1");
    assert_eq!(rollout["successor"], "primary-v2");
    assert_eq!(rollout["sealed_at_sequence"], 9);
    assert_eq!(rollout["replayed"], false);
    assert_eq!(rollout["seam"], seam_json(&old, &new, &at_nine));
    assert_eq!(rollout["leaving"], serde_json::json!([]));
    assert!(rollout["sealed_at"].as_str().unwrap().ends_with('Z'));

    // A retry (a lost acknowledgement): replayed, the same seal.
    let replay = statek(&[&["rollout", from, to][..], &none].concat(), Some(&url));
    assert_eq!(replay.status.code(), Some(0), "{}", stderr(&replay));
    assert!(
        stdout(&replay).starts_with(
            "replayed (already rolled out, nothing written): schedule primary: sealed primary-v1 at \
             sequence 9 (it handed out sequences 0 to 8); primary-v2 goes on from sequence 0\n"
        ),
        "{}",
        stdout(&replay)
    );
    let replay = json_of(&statek(
        &[&["rollout", from, to, "--format", "json"][..], &none].concat(),
        Some(&url),
    ));
    assert_eq!(replay["replayed"], true);
    assert_eq!(replay["sealed_at_sequence"], 9);
    assert_eq!(replay["seam"], rollout["seam"]);
    assert_eq!(replay["sealed_at"], rollout["sealed_at"]);

    let sealed = status("primary-v1");
    assert_eq!(
        chain(&sealed),
        [
            "primary".into(),
            9.into(),
            "primary-v2".into(),
            serde_json::Value::Null,
            "primary-v2".into()
        ]
    );
    assert_eq!(sealed["sealed_at"], rollout["sealed_at"]);
    assert_eq!(sealed["next_sequence"], 9);
    let live = status("primary-v2");
    assert_eq!(
        chain(&live),
        [
            "primary".into(),
            serde_json::Value::Null,
            serde_json::Value::Null,
            "primary-v1".into(),
            "primary-v2".into()
        ]
    );
    assert_eq!(live["next_sequence"], 0);
    let text = statek(&["status", "--shard", "primary-v1"], Some(&url));
    assert!(
        stdout(&text)
            .contains("schedule           primary (predecessor none, live shard primary-v2)\n"),
        "{}",
        stdout(&text)
    );

    // Registering the sealed shard's file again is idempotent and says
    // where the schedule went.
    let again = statek(&[&["register", from][..], &none].concat(), Some(&url));
    assert_eq!(again.status.code(), Some(0), "{}", stderr(&again));
    assert!(
        stdout(&again).contains(
            "shard primary-v1 is sealed at sequence 9 (successor primary-v2): the live shard of \
             schedule primary is primary-v2"
        ),
        "{}",
        stdout(&again)
    );
}

#[tokio::test]
async fn limits_set_show_and_clear_against_postgres() {
    let db = TestDatabase::create().await;
    let url = db.connection_string();
    let url = Some(url.as_str());

    let out = statek(
        &[
            "limits",
            "set",
            "--tenant",
            "tenant-a",
            "--max-running",
            "2",
            "--format",
            "json",
        ],
        url,
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let set: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(set[0]["tenant"], "tenant-a");
    assert_eq!(set[0]["max_running"], 2);
    assert_eq!(set[0]["rate"], serde_json::Value::Null);

    // A rate added later keeps the cap.
    let out = statek(
        &[
            "limits", "set", "--tenant", "tenant-a", "--rate", "10/s", "--format", "json",
        ],
        url,
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let out = statek(&["limits", "show", "--format", "json"], url);
    let shown: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(shown.as_array().unwrap().len(), 1);
    assert_eq!(shown[0]["max_running"], 2);
    assert_eq!(shown[0]["rate"], "10/s");
    assert_eq!(shown[0]["rate_claims"], 10);
    assert_eq!(shown[0]["rate_window_ms"], 1000);
    let out = statek(&["limits", "show", "--tenant", "tenant-a"], url);
    let text = stdout(&out);
    assert!(
        text.starts_with("tenant                   max running         rate  updated at\n"),
        "{text}"
    );
    assert!(
        text.contains("tenant-a                           2         10/s  "),
        "{text}"
    );

    // Bad values: typed errors, exit 3, nothing written.
    for (args, message) in [
        (
            vec!["--max-running", "0"],
            "invalid tenant limit: max running must be 1..=100000, got 0",
        ),
        (
            vec!["--max-running", "-5"],
            "invalid tenant limit: max running must be 1..=100000, got -5\n",
        ),
        (
            vec!["--max-running", "99999999999999999999"],
            "invalid tenant limit: max running must be 1..=100000, got 99999999999999999999\n",
        ),
        (
            vec!["--rate", "0/s"],
            "invalid tenant limit: a rate must allow 1..=1000000 claims, got 0",
        ),
        (
            vec!["--rate", "10/d"],
            "invalid tenant limit: rate \"10/d\": expected CLAIMS/WINDOW",
        ),
    ] {
        let mut full = vec!["limits", "set", "--tenant", "tenant-a"];
        full.extend(args.iter().copied());
        let out = statek(&full, url);
        assert_eq!(out.status.code(), Some(3), "{args:?}: {}", stderr(&out));
        assert!(stderr(&out).contains(message), "{args:?}: {}", stderr(&out));
    }
    // Neither limit: a missing argument, a usage error.
    let out = statek(&["limits", "set", "--tenant", "tenant-a"], url);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("required arguments were not provided"),
        "{}",
        stderr(&out)
    );
    let out = statek(
        &["limits", "set", "--tenant", "../x", "--max-running", "1"],
        url,
    );
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("--tenant \"../x\""),
        "{}",
        stderr(&out)
    );
    let out = statek(
        &["limits", "show", "--tenant", "tenant-a", "--format", "json"],
        url,
    );
    let shown: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(shown[0]["max_running"], 2, "unchanged by the refused calls");

    let out = statek(&["limits", "clear", "--tenant", "tenant-a"], url);
    assert_eq!(stdout(&out), "cleared the limits of tenant-a\n");
    let out = statek(&["limits", "clear", "--tenant", "tenant-a"], url);
    assert_eq!(stdout(&out), "tenant-a had no limits\n");
    let out = statek(&["limits", "show", "--format", "json"], url);
    assert_eq!(stdout(&out), "[]\n");
}

#[tokio::test]
async fn runs_list_cancel_retry_and_prune_against_postgres() {
    let db = TestDatabase::create().await;
    let url = db.connection_string();
    let url = Some(url.as_str());
    let store = db.store();
    let a = statek_policy::TenantId::try_from("tenant-a").unwrap();
    let mut ids = Vec::new();
    for i in 0..3 {
        ids.push(
            store
                .enqueue(&statek_store_pg::NewRun::new(a.clone(), format!("r{i}")).priority(i))
                .await
                .unwrap()
                .run_id,
        );
    }

    // Pages of 2, newest first, then the rest after the cursor.
    let out = statek(
        &[
            "runs", "list", "--tenant", "tenant-a", "--limit", "2", "--format", "json",
        ],
        url,
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let page: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    let listed: Vec<&str> = page["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["run_id"].as_str().unwrap())
        .collect();
    assert_eq!(listed, [ids[2].to_string(), ids[1].to_string()]);
    assert_eq!(page["runs"][0]["priority"], 2);
    assert_eq!(page["runs"][0]["state"], "available");
    let next = page["next"].as_u64().unwrap();
    let out = statek(
        &[
            "runs",
            "list",
            "--after",
            &next.to_string(),
            "--format",
            "json",
        ],
        url,
    );
    let page: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(page["runs"][0]["run_id"], ids[0].to_string());
    assert_eq!(page["next"], serde_json::Value::Null);
    let out = statek(&["runs", "list", "--limit", "2"], url);
    let text = stdout(&out);
    assert!(text.starts_with("run                                   tenant               state     prio  attempts  enqueued at              last error\n"), "{text}");
    assert!(text.ends_with(&format!("more: --after {next}\n")), "{text}");

    // Cancel, cancel again (refused), retry.
    let id = ids[0].to_string();
    let out = statek(&["runs", "cancel", &id], url);
    assert_eq!(
        stdout(&out),
        format!("cancelled run {id} of tenant-a (now cancelled)\n"),
        "{}",
        stderr(&out)
    );
    let out = statek(&["runs", "cancel", &id], url);
    assert_eq!(out.status.code(), Some(3));
    assert!(
        stderr(&out).contains(&format!(
            "run {id} is cancelled: cancel needs a run that is available or running"
        )),
        "{}",
        stderr(&out)
    );
    let out = statek(
        &["runs", "list", "--state", "cancelled", "--format", "json"],
        url,
    );
    let page: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(page["runs"].as_array().unwrap().len(), 1);
    let out = statek(&["runs", "retry", &id, "--format", "json"], url);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let retried: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(retried["state"], "available");
    let out = statek(&["runs", "retry", &id], url);
    assert_eq!(out.status.code(), Some(3));
    let unknown = Uuid::now_v7().to_string();
    let out = statek(&["runs", "retry", &unknown], url);
    assert_eq!(out.status.code(), Some(3));
    assert!(
        stderr(&out).contains(&format!("run {unknown} does not exist")),
        "{}",
        stderr(&out)
    );
    // (A run id that is not a UUID or an unknown state is a usage error,
    // exit 2: tests/it/exit_codes.rs.)
    for bad in [
        vec!["runs", "list", "--limit", "0"],
        vec!["runs", "list", "--tenant", ".."],
        vec!["runs", "prune", "--retain", "10m"],
    ] {
        let out = statek(&bad, url);
        assert_eq!(out.status.code(), Some(3), "{bad:?}: {}", stderr(&out));
    }
    // A negative count is out of range too (clap would call `-1` an
    // unexpected argument): exit 3, naming the option's range.
    for (bad, message) in [
        (
            vec!["runs", "list", "--limit", "-1"],
            "--limit -1 is not in 1..=10000",
        ),
        (
            vec!["runs", "prune", "--retain", "24h", "--batch", "-5"],
            "--batch -5 is not in 1..=10000",
        ),
    ] {
        let out = statek(&bad, url);
        assert_eq!(out.status.code(), Some(3), "{bad:?}: {}", stderr(&out));
        assert!(stderr(&out).contains(message), "{bad:?}: {}", stderr(&out));
    }

    // Nothing finished long enough ago: nothing pruned.
    let out = statek(
        &[
            "runs",
            "prune",
            "--retain",
            "1h",
            "--until-empty",
            "--format",
            "json",
        ],
        url,
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let totals: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(
        (totals["runs"].as_u64(), totals["batches"].as_u64()),
        (Some(0), Some(1))
    );
}

/// `statek register` of a cost-mode policy file (migration V19), then
/// `statek status`: the policy's parameters and each tenant's standing in
/// the ledger, written out by hand after one claim and its finish.
#[tokio::test]
async fn status_shows_a_cost_shards_ledger() {
    let db = TestDatabase::create().await;
    let url = db.connection_string();
    let dir = std::env::temp_dir().join(format!("statek-cost-status-{}", Uuid::now_v7().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("cost.toml");
    std::fs::write(
        &file,
        "shard = \"cost-v1\"\n[fairness]\nunit = \"cost\"\nquantum = 2\nmax_cost = 10\n\
         default_cost = 6\nbalance_cap = 4\n[[tenants]]\nid = \"tenant-a\"\nweight = 1\n\
         [[tenants]]\nid = \"tenant-b\"\nweight = 1\n",
    )
    .unwrap();
    let out = statek(
        &["register", "--durability", "none", file.to_str().unwrap()],
        Some(&url),
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let status = |format: &str| {
        statek(
            &["status", "--shard", "cost-v1", "--format", format],
            Some(&url),
        )
    };
    let empty = stdout(&status("text"));
    assert!(
        empty.contains(
            "cost mode          quantum 2, max_cost 10, default_cost 6, balance_cap 4 (ledger of schedule cost-v1)\n\
             cost ledger        empty (no slot decided yet)\n"
        ),
        "{empty}"
    );
    // tenant-a's slot 0 claims its run, which reports 7: 0 + 2 − 7; slot 1
    // of tenant-b, which has no run, is idle and credited 2.
    let store = db.store();
    let p = parsed(&file);
    let a = statek_policy::TenantId::try_from("tenant-a").unwrap();
    let b = statek_policy::TenantId::try_from("tenant-b").unwrap();
    store
        .enqueue(&statek_store_pg::NewRun::new(a.clone(), b"x".to_vec()))
        .await
        .unwrap();
    store
        .reserve_batch(p.shard_id(), &p.digest(), Uuid::now_v7(), 2)
        .await
        .unwrap();
    let request = statek_store_pg::SlotClaimRequest::new(
        p.shard_id(),
        &[(0, a.clone()), (1, b.clone())],
        std::time::Duration::from_secs(60),
        2,
    )
    .unwrap()
    .in_cost_mode();
    let claims = store.claim_slots(&request).await.unwrap();
    let statek_store_pg::SlotClaim::Claimed(run) = &claims[0] else {
        panic!("expected a claim: {claims:?}");
    };
    assert_eq!(claims[1], statek_store_pg::SlotClaim::Idle);
    store
        .finish_runs(&[statek_store_pg::FinishRun::complete(run.lease).with_cost(Some(7))])
        .await
        .unwrap();
    let text = stdout(&status("text"));
    assert!(
        text.contains(
            "  tenant-a                 balance             -5  credit              2  charged              7\n\
             \x20 tenant-b                 balance              2  credit              2  charged              0\n"
        ),
        "{text}"
    );
    let json = json_of(&status("json"));
    assert_eq!(
        json["cost_ledger"],
        serde_json::json!([
            {"tenant": "tenant-a", "balance": -5, "credit": 2, "charged": 7},
            {"tenant": "tenant-b", "balance": 2, "credit": 2, "charged": 0},
        ])
    );
    assert_eq!(json["cost"]["quantum"], 2);
    let _ = std::fs::remove_dir_all(&dir);
}
