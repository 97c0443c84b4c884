//! Reservation throughput and latency: statek's `reserve` and
//! `reserve_batch` against `pgbench` running the equivalent SQL transaction
//! on the same server, at the same client counts.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use statek_policy::WeightedFairnessPolicy;
use statek_store_pg::{PgStore, StoreConfig};
use uuid::Uuid;

use super::load::{self, closed_loop, Measured, Until};

/// statek `reserve` with `clients` concurrent callers (one pooled
/// connection each).
pub async fn statek_single(
    url: &str,
    policy: &WeightedFairnessPolicy,
    clients: usize,
    until: Until,
) -> Result<Measured> {
    let store = store(url, clients)?;
    let policy = Arc::new(policy.clone());
    closed_loop(clients, 1, until, move |_| {
        let store = store.clone();
        let policy = Arc::clone(&policy);
        async move {
            store
                .reserve(policy.shard_id(), &policy.digest(), Uuid::now_v7())
                .await?;
            Ok(())
        }
    })
    .await
}

/// statek `reserve_batch` of `k` with `clients` concurrent callers.
pub async fn statek_batch(
    url: &str,
    policy: &WeightedFairnessPolicy,
    clients: usize,
    k: u32,
    duration: Duration,
) -> Result<Measured> {
    let store = store(url, clients)?;
    let policy = Arc::new(policy.clone());
    closed_loop(clients, u64::from(k), Until::Elapsed(duration), move |_| {
        let store = store.clone();
        let policy = Arc::clone(&policy);
        async move {
            store
                .reserve_batch(policy.shard_id(), &policy.digest(), Uuid::now_v7(), k)
                .await?;
            Ok(())
        }
    })
    .await
}

/// A store whose pool has one connection per client, opened before the
/// measurement starts. Its durability check reports without refusing: the
/// bench measures fast and durable servers alike.
pub fn store(url: &str, clients: usize) -> Result<PgStore> {
    Ok(PgStore::new(
        StoreConfig::from_url(url)?
            .pool_size(clients)?
            .durability_policy(statek_store_pg::DurabilityPolicy::AllowNoDurability),
    )?)
}

/// The pgbench script: the same transaction as statek's reserve, in plain
/// SQL (lock the cursor row, insert a reservation at it, advance it).
pub fn pgbench_script(policy: &WeightedFairnessPolicy) -> String {
    let digest: String = policy
        .digest()
        .as_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!(
        "BEGIN;\n\
         SELECT next_sequence FROM statek.scheduler_shards WHERE shard_id = '{shard}' FOR UPDATE \\gset\n\
         INSERT INTO statek.scheduler_reservations (reservation_id, shard_id, sequence, slot, policy_digest) \
         VALUES (gen_random_uuid(), '{shard}', :next_sequence, :next_sequence % {length}, '\\x{digest}'::bytea);\n\
         UPDATE statek.scheduler_shards SET next_sequence = :next_sequence + 1 WHERE shard_id = '{shard}';\n\
         END;\n",
        shard = policy.shard_id(),
        length = policy.cycle_length(),
    )
}

/// The pgbench binary: `STATEK_PGBENCH`, else `pgbench` on `PATH`.
pub fn pgbench_binary() -> Result<PathBuf> {
    if let Some(path) = std::env::var_os("STATEK_PGBENCH") {
        return Ok(PathBuf::from(path));
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    for dir in std::env::split_paths(&path) {
        let candidate = dir.join("pgbench");
        if candidate.is_file() {
            return Ok(candidate);
        }
    }
    bail!(
        "pgbench was not found on PATH. Install it (Debian/Ubuntu: `apt-get install \
         postgresql-client`; any version >= 13 works against PostgreSQL 17) or set \
         STATEK_PGBENCH to its path"
    )
}

/// `pgbench --version`, e.g. `pgbench (PostgreSQL) 15.18`.
pub fn pgbench_version(pgbench: &Path) -> Result<String> {
    let output = Command::new(pgbench)
        .arg("--version")
        .output()
        .with_context(|| format!("running {} --version", pgbench.display()))?;
    let version = String::from_utf8_lossy(&output.stdout).trim().to_owned();
    if !output.status.success() || !version.starts_with("pgbench") {
        bail!(
            "{} does not look like pgbench (`--version` printed {version:?}, {})",
            pgbench.display(),
            output.status
        );
    }
    Ok(version)
}

/// Runs the script with `clients` clients for `duration` and reads every
/// transaction's latency from pgbench's per-transaction log.
pub fn pgbench(
    pgbench: &Path,
    url: &str,
    work_dir: &Path,
    script: &Path,
    clients: usize,
    duration: Duration,
) -> Result<Measured> {
    let logs = work_dir.join(format!("log-c{clients}"));
    if logs.exists() {
        std::fs::remove_dir_all(&logs).with_context(|| format!("removing {}", logs.display()))?;
    }
    std::fs::create_dir_all(&logs).with_context(|| format!("creating {}", logs.display()))?;
    let threads = clients.min(2);
    let mut command = Command::new(pgbench);
    command
        .args(["-n", "-M", "prepared", "-f"])
        .arg(script)
        .args(["-c", &clients.to_string(), "-j", &threads.to_string()])
        .args(["-T", &duration.as_secs().max(1).to_string(), "-l"])
        .arg(format!("--log-prefix={}", logs.join("tx").display()))
        .arg(url);
    let output = command
        .output()
        .with_context(|| format!("running {}", pgbench.display()))?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    if !output.status.success() {
        bail!(
            "pgbench failed ({}):\n{}\n{}",
            output.status,
            stdout,
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let mut histogram = load::histogram()?;
    for entry in std::fs::read_dir(&logs).with_context(|| format!("reading {}", logs.display()))? {
        let text = std::fs::read_to_string(entry?.path())?;
        for line in text.lines() {
            // client_id transaction_no time script_no time_epoch time_us
            let latency_us: u64 = line
                .split_whitespace()
                .nth(2)
                .and_then(|field| field.parse().ok())
                .with_context(|| format!("unexpected pgbench log line {line:?}"))?;
            load::record(&mut histogram, Duration::from_micros(latency_us));
        }
    }
    let seconds = duration.as_secs_f64();
    let mut measured = Measured::from_histogram(clients, 1, seconds, &histogram);
    // pgbench's own rate excludes its connection set-up, like ours.
    if let Some(tps) = stdout
        .lines()
        .find_map(|l| l.strip_prefix("tps = "))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse::<f64>().ok())
    {
        measured.units_per_second = tps;
    }
    std::fs::remove_dir_all(&logs).ok();
    Ok(measured)
}
