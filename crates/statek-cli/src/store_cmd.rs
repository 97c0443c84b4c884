//! Commands that talk to PostgreSQL: verify, migrate, register, roles,
//! status, prune (rollout: `rollout_cmd.rs`).

use crate::out::{out, outln};
use std::path::Path;
use std::time::{Duration, SystemTime};

use anyhow::{anyhow, Result};
use serde::Serialize;
use statek_policy::{EchoedValue, SchedulerShardId};
use statek_store_pg::{Registration, RoleProfile, SchedulerFairnessRetentionPolicy, StoreError};

use crate::db::DbArgs;
use crate::exit::InvalidInput;
use crate::out::Format;
use crate::policy_cmd;

fn shard_id(text: &str) -> Result<SchedulerShardId> {
    SchedulerShardId::try_from(text)
        .map_err(|e| anyhow!(InvalidInput(format!("--shard {}: {e}", EchoedValue(text)))))
}

fn unix_seconds(t: SystemTime) -> f64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

fn rfc3339(t: SystemTime) -> String {
    humantime::format_rfc3339_millis(t).to_string()
}

#[derive(Serialize)]
struct VerifyReport {
    shard: String,
    file: String,
    matches: bool,
    file_digest: String,
    stored_digest: String,
    /// The digest of this build's compilation of the file's cycle.
    file_cycle_digest: String,
    /// The cycle digest stored at registration (`None` before V6).
    stored_cycle_digest: Option<String>,
    /// Whether this build compiles the stored cycle (true when none is
    /// stored).
    cycle_matches: bool,
}

/// `statek policy verify`: exit 4 when the shard holds another policy, or
/// stores the digest of another cycle than this build compiles from it.
pub async fn verify(file: &Path, shard: Option<&str>, format: Format, db: &DbArgs) -> Result<()> {
    let policy = policy_cmd::load(file)?;
    let shard = match shard {
        Some(s) => shard_id(s)?,
        None => policy.shard_id().clone(),
    };
    let store = db.store(1)?;
    let stored = store.load_shard(&shard).await?;
    let report = VerifyReport {
        shard: shard.to_string(),
        file: file.display().to_string(),
        matches: stored.policy().canonical_bytes() == policy.canonical_bytes(),
        file_digest: policy.digest().to_string(),
        stored_digest: stored.policy().digest().to_string(),
        file_cycle_digest: policy.cycle_digest().to_string(),
        stored_cycle_digest: stored.cycle_digest().map(|d| d.to_string()),
        cycle_matches: stored
            .cycle_digest()
            .is_none_or(|d| d == policy.cycle_digest()),
    };
    match format {
        Format::Json => outln!("{}", serde_json::to_string_pretty(&report)?)?,
        Format::Text if report.matches && report.cycle_matches => outln!(
            "ok: shard {} holds exactly {} (digest {})",
            report.shard,
            report.file,
            report.file_digest
        )?,
        Format::Text if report.matches => outln!(
            "MISMATCH: shard {} holds {}, but its cycle digest {} is not this build's {}",
            report.shard,
            report.file,
            report.stored_cycle_digest.as_deref().unwrap_or("-"),
            report.file_cycle_digest
        )?,
        Format::Text => outln!(
            "MISMATCH: shard {} holds policy {}, the file is {}",
            report.shard,
            report.stored_digest,
            report.file_digest
        )?,
    }
    if !report.matches {
        return Err(StoreError::PolicyConflict {
            shard,
            stored: stored.policy().digest(),
            offered: policy.digest(),
        }
        .into());
    }
    if let (false, Some(stored_cycle)) = (report.cycle_matches, stored.cycle_digest()) {
        return Err(statek_scheduler::SchedulerError::CycleMismatch {
            shard: shard.to_string(),
            stored: stored_cycle,
            local: policy.cycle_digest(),
        }
        .into());
    }
    Ok(())
}

/// `statek migrate`.
pub async fn migrate(db: &DbArgs) -> Result<()> {
    let store = db.store(1)?;
    let report = store.migrate().await?;
    for (version, name) in report.applied() {
        outln!("applied V{version}__{name}")?;
    }
    outln!(
        "schema statek is current on {} ({} migrations known, {} applied now)",
        db.redacted(),
        statek_store_pg::embedded_migrations().len(),
        report.applied().len()
    )?;
    Ok(())
}

/// `statek register FILE`: into the file's `schedule` (`register_in`).
pub async fn register(file: &Path, db: &DbArgs) -> Result<()> {
    let policy_file = policy_cmd::load_file(file)?;
    let policy = policy_file.policy();
    let store = db.store(1)?;
    let how = match store.register_in(policy, policy_file.schedule()).await? {
        Registration::Registered { .. } => "registered",
        Registration::Idempotent { .. } => "already registered with identical bytes",
        _ => "registered",
    };
    // Identical bytes, but is it the cycle this build compiles? (As
    // `policy verify` and every replica's start check.)
    let stored = store.load_shard(policy.shard_id()).await?;
    if let Some(stored_cycle) = stored.cycle_digest() {
        if stored_cycle != policy.cycle_digest() {
            return Err(statek_scheduler::SchedulerError::CycleMismatch {
                shard: policy.shard_id().to_string(),
                stored: stored_cycle,
                local: policy.cycle_digest(),
            }
            .into());
        }
    }
    outln!(
        "shard {}: {how} (schedule {}, policy {}, L = {})",
        policy.shard_id(),
        stored.schedule(),
        policy.digest(),
        policy.cycle_length()
    )?;
    if let Some(seal) = stored.seal() {
        let live = store.live_shard(policy.shard_id()).await?;
        outln!(
            "shard {} is sealed at sequence {} (successor {}): the live shard of schedule {} is {}; \
             replicas started with this file follow the chain to it",
            policy.shard_id(),
            seal.sealed_at_sequence(),
            seal.successor(),
            stored.schedule(),
            live
        )?;
    }
    // What the durability check accepted by an explicit opt-in is said,
    // not only what it refused.
    let durability = store.durability_report().await?;
    let risks = durability.risks();
    if !risks.is_empty() {
        eprintln!(
            "statek: warning: the server can lose acknowledged reservations ({}), accepted by \
             --durability: {durability}",
            risks
                .iter()
                .map(statek_store_pg::DurabilityRisk::label)
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    Ok(())
}

/// `statek roles apply`.
pub async fn roles_apply(
    owner: &str,
    runtime: &str,
    retention: &str,
    print: bool,
    db: &DbArgs,
) -> Result<()> {
    let profile = RoleProfile::new(owner, runtime, retention)?;
    if print {
        out!("{}", profile.sql())?;
        return Ok(());
    }
    db.store(1)?.apply_role_profile(&profile).await?;
    outln!("applied role profile: owner {owner}, runtime {runtime}, retention {retention}")?;
    Ok(())
}

#[derive(Serialize)]
struct StatusReport {
    shard: String,
    /// The schedule (chain of shards) the shard belongs to.
    schedule: String,
    /// `N` of the seal (the shard's last sequence is `N - 1`); null while
    /// the shard is live.
    sealed_at_sequence: Option<u64>,
    /// When it was sealed; null while live.
    sealed_at: Option<String>,
    /// The shard that succeeds it; null while live.
    successor: Option<String>,
    /// The shard it succeeds; null for the first shard of its schedule.
    predecessor: Option<String>,
    /// The live shard of the chain (this shard while it is not sealed).
    live_shard: String,
    digest: String,
    algorithm: String,
    cycle_length: u32,
    tenants: usize,
    next_sequence: u64,
    next_slot: u32,
    registered_at: String,
    observed_at: String,
    reservations_last_minute: u64,
    reservations_per_second: f64,
    retained_reservations: u64,
    retained_rows: u64,
    oldest_retained: Option<String>,
    oldest_retained_age_seconds: Option<f64>,
    retention_seconds: u64,
    rows_past_retention: u64,
}

/// `statek status --shard S`.
pub async fn status(shard: &str, retain: Duration, format: Format, db: &DbArgs) -> Result<()> {
    let shard = shard_id(shard)?;
    // The same limits as `prune --retain` (1 hour..=366 days).
    let retain = SchedulerFairnessRetentionPolicy::new(retain, 1)?.retain_for();
    let store = db.store(1)?;
    let s = store.shard_status(&shard, retain).await?;
    let live_shard = store.live_shard(&shard).await?;
    let policy = s.stored.policy();
    let seal = s.stored.seal();
    let report = StatusReport {
        shard: shard.to_string(),
        schedule: s.stored.schedule().to_string(),
        sealed_at_sequence: seal.map(statek_store_pg::ShardSeal::sealed_at_sequence),
        sealed_at: seal.map(|seal| rfc3339(seal.sealed_at())),
        successor: seal.map(|seal| seal.successor().to_string()),
        predecessor: s.stored.predecessor().map(ToString::to_string),
        live_shard: live_shard.to_string(),
        digest: policy.digest().to_string(),
        algorithm: policy.algorithm().to_string(),
        cycle_length: policy.cycle_length(),
        tenants: policy.tenants().len(),
        next_sequence: s.stored.next_sequence(),
        next_slot: s.stored.next_slot(),
        registered_at: rfc3339(s.stored.registered_at()),
        observed_at: rfc3339(s.observed_at),
        reservations_last_minute: s.last_minute,
        reservations_per_second: s.last_minute as f64 / 60.0,
        retained_reservations: s.retained,
        retained_rows: s.retained_rows,
        oldest_retained: s.oldest.map(rfc3339),
        oldest_retained_age_seconds: s
            .oldest
            .map(|o| unix_seconds(s.observed_at) - unix_seconds(o)),
        retention_seconds: retain.as_secs(),
        rows_past_retention: s.past_retention,
    };
    match format {
        Format::Json => outln!("{}", serde_json::to_string_pretty(&report)?)?,
        Format::Text => {
            outln!("shard              {}", report.shard)?;
            outln!(
                "policy             {} ({}, L = {}, {} tenants)",
                report.digest,
                report.algorithm,
                report.cycle_length,
                report.tenants
            )?;
            outln!("registered at      {}", report.registered_at)?;
            outln!(
                "schedule           {} (predecessor {}, live shard {})",
                report.schedule,
                report.predecessor.as_deref().unwrap_or("none"),
                report.live_shard
            )?;
            match (report.sealed_at_sequence, &report.successor) {
                (Some(n), Some(successor)) => outln!(
                    "sealed             at sequence {n} ({}), successor {successor}: takes no new reservation",
                    report.sealed_at.as_deref().unwrap_or("-")
                )?,
                _ => outln!("sealed             no (live)")?,
            }
            outln!(
                "cursor             sequence {} (next slot {})",
                report.next_sequence,
                report.next_slot
            )?;
            outln!(
                "last minute        {} reservations ({:.2}/s)",
                report.reservations_last_minute,
                report.reservations_per_second
            )?;
            outln!(
                "retained           {} reservations in {} rows (a batch is one row)",
                report.retained_reservations,
                report.retained_rows
            )?;
            match (&report.oldest_retained, report.oldest_retained_age_seconds) {
                (Some(at), Some(age)) => outln!("oldest retained    {at} ({age:.0} s ago)")?,
                _ => outln!("oldest retained    none")?,
            }
            outln!(
                "past retention     {} rows older than {}",
                report.rows_past_retention,
                humantime::format_duration(retain)
            )?;
        }
    }
    Ok(())
}

#[derive(Serialize)]
struct PruneTotals {
    batches: u64,
    deleted: u64,
    last_cutoff: Option<String>,
    seconds: f64,
}

/// `statek prune --retain D --batch N [--until-empty]`.
pub async fn prune(
    retain: Duration,
    batch: u32,
    until_empty: bool,
    format: Format,
    db: &DbArgs,
) -> Result<()> {
    let policy = SchedulerFairnessRetentionPolicy::new(retain, batch)?;
    let store = db.store(1)?;
    let started = std::time::Instant::now();
    let mut totals = PruneTotals {
        batches: 0,
        deleted: 0,
        last_cutoff: None,
        seconds: 0.0,
    };
    loop {
        let report = store.prune_scheduler_fairness_reservations(&policy).await?;
        totals.batches += 1;
        totals.deleted += report.deleted;
        totals.last_cutoff = Some(rfc3339(report.cutoff));
        if format == Format::Text {
            // Progress on stderr, so stdout stays the totals.
            eprint!(
                "\rprune: batch {} deleted {} (total {}), cutoff {}    ",
                totals.batches,
                report.deleted,
                totals.deleted,
                rfc3339(report.cutoff)
            );
        }
        if !until_empty || report.deleted < u64::from(batch) {
            break;
        }
    }
    totals.seconds = started.elapsed().as_secs_f64();
    match format {
        Format::Json => outln!("{}", serde_json::to_string_pretty(&totals)?)?,
        Format::Text => {
            eprintln!();
            outln!(
                "pruned {} reservation rows in {} batches ({:.1} s); cutoff {}",
                totals.deleted,
                totals.batches,
                totals.seconds,
                totals.last_cutoff.as_deref().unwrap_or("-")
            )?;
        }
    }
    Ok(())
}
