//! Live rollouts under load: four replica processes tick continuously
//! while the schedule is rolled out twice (v1 -> v2 -> v3). Needs feature
//! `test-support` (for the `statek-test-replica` binary); `cargo xtask
//! test` builds with all features.

#![cfg(feature = "test-support")]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stderr
)]

use std::collections::BTreeMap;
use std::process::Stdio;
use std::time::{Duration, Instant, SystemTime};

use statek_policy::{SchedulerShardId, TenantId, WeightedFairnessPolicy};
use statek_scheduler::Reservation;
use statek_scheduler::{FairnessMonitor, TenantTickOutcome};
use statek_store_pg::testing::{policy, TestDatabase};
use statek_store_pg::PgStore;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::mpsc;

/// What the replica binary registers (its policy file, so to speak).
fn v1() -> WeightedFairnessPolicy {
    policy("primary-v1", &[("tenant-a", 3), ("tenant-b", 1)])
}

fn v2() -> WeightedFairnessPolicy {
    policy(
        "primary-v2",
        &[("tenant-a", 1), ("tenant-b", 2), ("tenant-c", 1)],
    )
}

fn v3() -> WeightedFairnessPolicy {
    policy(
        "primary-v3",
        &[("tenant-b", 1), ("tenant-c", 2), ("tenant-d", 1)],
    )
}

/// One `tick` line of a replica.
#[derive(Debug, Clone)]
struct Tick {
    shard: String,
    sequence: u64,
    tenant: String,
    outcome: String,
}

fn spawn_replica(
    index: usize,
    url: &str,
    batch: u32,
    lines: mpsc::UnboundedSender<(usize, String)>,
) -> Child {
    let mut child = Command::new(env!("CARGO_BIN_EXE_statek-test-replica"))
        .args([url, "ticks", &batch.to_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    tokio::spawn(async move {
        let mut reader = BufReader::new(stdout).lines();
        while let Ok(Some(line)) = reader.next_line().await {
            let _ = lines.send((index, line));
        }
    });
    child
}

struct Replicas {
    lines: mpsc::UnboundedReceiver<(usize, String)>,
    ticks: BTreeMap<usize, Vec<Tick>>,
}

impl Replicas {
    fn take(&mut self, from: usize, line: &str) {
        let fields: Vec<&str> = line.split(' ').collect();
        match fields.as_slice() {
            ["tick", shard, sequence, tenant, outcome] => {
                self.ticks.entry(from).or_default().push(Tick {
                    shard: (*shard).to_string(),
                    sequence: sequence.parse().unwrap(),
                    tenant: (*tenant).to_string(),
                    outcome: (*outcome).to_string(),
                });
            }
            _ => panic!("replica {from}: unexpected line {line:?}"),
        }
    }

    /// Reads lines until each of `replicas` has ticked `n` times on `shard`.
    async fn until(&mut self, replicas: &[usize], shard: &str, n: usize) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let done = replicas.iter().all(|r| {
                self.ticks
                    .get(r)
                    .is_some_and(|t| t.iter().filter(|t| t.shard == shard).count() >= n)
            });
            if done {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "replicas {replicas:?} never reached {shard}"
            );
            let Ok(Some((from, line))) =
                tokio::time::timeout(Duration::from_millis(500), self.lines.recv()).await
            else {
                continue;
            };
            self.take(from, &line);
        }
    }
}

async fn all_reservations(store: &PgStore, shard: &SchedulerShardId) -> Vec<Reservation> {
    let next = store.next_sequence(shard).await.unwrap();
    let mut rows = Vec::new();
    while (rows.len() as u64) < next {
        let page = store
            .reservations(shard, rows.len() as u64, 10_000)
            .await
            .unwrap();
        assert!(!page.is_empty());
        rows.extend(page);
    }
    rows
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_replicas_follow_two_live_rollouts_with_exact_seam_bounds() {
    let started = Instant::now();
    let db = TestDatabase::create().await;
    let store = db.store();
    let (v1, v2, v3) = (v1(), v2(), v3());
    store.register(&v1).await.unwrap();
    // Every tenant backlogged for the whole test, so every selection has
    // work and every gap is judged.
    db.client()
        .await
        .batch_execute(
            "INSERT INTO statek.runs (run_id, tenant_id, payload)
             SELECT gen_random_uuid(), t, ''::bytea
             FROM unnest(ARRAY['tenant-a', 'tenant-b', 'tenant-c', 'tenant-d']) AS t,
                  generate_series(1, 20000)",
        )
        .await
        .unwrap();

    let url = db.connection_string();
    let (tx, lines) = mpsc::unbounded_channel();
    // Two replicas tick one slot at a time, one in batches of 8; the
    // fourth starts after the first rollout, with v1's policy.
    let mut children = vec![
        spawn_replica(0, &url, 1, tx.clone()),
        spawn_replica(1, &url, 1, tx.clone()),
        spawn_replica(2, &url, 8, tx.clone()),
    ];
    let mut replicas = Replicas {
        lines,
        ticks: BTreeMap::new(),
    };
    replicas.until(&[0, 1, 2], "primary-v1", 30).await;
    let first = store.rollout(&v1, &v2, None).await.unwrap();
    replicas.until(&[0, 1, 2], "primary-v2", 30).await;
    // A replica started with the sealed shard's policy follows the chain.
    children.push(spawn_replica(3, &url, 4, tx.clone()));
    drop(tx);
    replicas.until(&[3], "primary-v2", 10).await;
    let second = store.rollout(&v2, &v3, None).await.unwrap();
    replicas.until(&[0, 1, 2, 3], "primary-v3", 30).await;
    for child in &mut children {
        drop(child.stdin.take());
    }
    for child in &mut children {
        let status = tokio::time::timeout(Duration::from_secs(30), child.wait())
            .await
            .unwrap()
            .unwrap();
        assert!(status.success(), "{status}");
    }
    while let Some((from, line)) = replicas.lines.recv().await {
        replicas.take(from, &line);
    }

    // The database: v1 holds exactly 0..N1, v2 exactly 0..N2, v3 goes on.
    let (n1, n2) = (first.sealed_at_sequence(), second.sealed_at_sequence());
    let chain = [(&v1, Some(n1)), (&v2, Some(n2)), (&v3, None)];
    let mut evidence = Vec::new();
    for (p, sealed) in chain {
        let rows = all_reservations(&store, p.shard_id()).await;
        let cursor = store.next_sequence(p.shard_id()).await.unwrap();
        if let Some(n) = sealed {
            assert_eq!(cursor, n, "{}: nothing after the seal", p.shard_id());
        }
        assert_eq!(
            rows.iter().map(Reservation::sequence).collect::<Vec<_>>(),
            (0..cursor).collect::<Vec<_>>(),
            "{}: contiguous",
            p.shard_id()
        );
        evidence.push(rows);
    }
    // Nothing on a successor before its predecessor's seal committed.
    for (rows, seal) in [(&evidence[1], &first), (&evidence[2], &second)] {
        let earliest: SystemTime = rows.iter().map(Reservation::reserved_at).min().unwrap();
        assert!(earliest >= seal.sealed_at(), "{}", seal.successor());
    }

    // Each replica: every tick succeeded, and its shards follow the chain
    // (all of v1, then v2, then v3): the tick that met a seal reserved on
    // the successor.
    let order = ["primary-v1", "primary-v2", "primary-v3"];
    for (replica, ticks) in &replicas.ticks {
        let ranks: Vec<usize> = ticks
            .iter()
            .map(|t| order.iter().position(|s| *s == t.shard).unwrap())
            .collect();
        assert!(
            ranks.windows(2).all(|w| w[0] <= w[1]),
            "replica {replica} went back"
        );
        if *replica == 3 {
            assert_eq!(
                ranks.first(),
                Some(&1),
                "replica 3 started on the live shard"
            );
        }
    }

    // Each seam: the tenants' observed gaps equal the stored seam bounds.
    for (index, seal) in [(0usize, &first), (1usize, &second)] {
        let (old, new) = (chain[index].0, chain[index + 1].0);
        let n = seal.sealed_at_sequence();
        let tenant_at = |p: &WeightedFairnessPolicy, r: &Reservation| {
            p.tenant_for_slot(u64::from(r.slot())).unwrap().clone()
        };
        for bound in seal.seam() {
            let p = evidence[index]
                .iter()
                .rev()
                .find(|r| tenant_at(old, r) == *bound.tenant())
                .map(Reservation::sequence);
            let q = evidence[index + 1]
                .iter()
                .find(|r| tenant_at(new, r) == *bound.tenant())
                .map(Reservation::sequence)
                .unwrap();
            let observed = match p {
                Some(p) if old.tenant_index(bound.tenant()).is_some() => (n - p) + q,
                _ => q + 1,
            };
            assert_eq!(
                observed,
                bound.reservations_across_seam(),
                "{} across {}",
                bound.tenant(),
                seal.successor()
            );
        }
        assert_eq!(
            store.load_seam(old.shard_id()).await.unwrap().seam(),
            seal.seam()
        );
    }

    // The fairness monitor, fed every replica's outcomes merged in chain
    // and sequence order, judges all gaps, the seams included, and finds
    // none above its bound. (Fed replica by replica, one replica's lines
    // could run past the monitor's pending window on a loaded machine.)
    let chain = [
        v1.shard_id().as_str(),
        v2.shard_id().as_str(),
        v3.shard_id().as_str(),
    ];
    let mut merged: Vec<_> = replicas.ticks.values().flatten().collect();
    merged.sort_unstable_by_key(|tick| {
        let shard = chain.iter().position(|s| *s == tick.shard);
        (shard, tick.sequence)
    });
    let mut monitor = FairnessMonitor::new(&v1);
    monitor.follow_rollout(&v2, n1).unwrap();
    monitor.follow_rollout(&v3, n2).unwrap();
    let mut fed = 0u64;
    for tick in merged {
        // The monitor judges gaps by whether both ends had work; an
        // executed slot had work like a contended one (the line does not
        // carry the run's times, which only the lag figures use).
        let outcome = match tick.outcome.as_str() {
            "executed" => TenantTickOutcome::Contended,
            "contended" => TenantTickOutcome::Contended,
            "idle" => TenantTickOutcome::Idle,
            other => panic!("unexpected outcome {other}"),
        };
        monitor.observe_on(
            &SchedulerShardId::try_from(tick.shard.as_str()).unwrap(),
            tick.sequence,
            &TenantId::try_from(tick.tenant.as_str()).unwrap(),
            &outcome,
        );
        fed += 1;
    }
    monitor.flush();
    let report = monitor.report();
    let total: u64 = evidence.iter().map(|rows| rows.len() as u64).sum();
    assert_eq!(fed, total, "one outcome per reserved slot");
    assert_eq!(
        (
            report.watermark,
            report.missing,
            report.late,
            report.unknown_shard
        ),
        (total, 0, 0, 0)
    );
    assert!(report.is_fair(), "{:?}", report.violations);
    let idle: u64 = report.tenants.iter().map(|row| row.idle).sum();
    assert_eq!(idle, 0, "every tenant stayed backlogged");
    eprintln!(
        "v1 sealed at {n1}, v2 at {n2}, v3 at {}; {total} slots by 4 processes in {:?}",
        evidence[2].len(),
        started.elapsed()
    );
}
