//! Commands that talk to PostgreSQL: verify, migrate, register, roles,
//! status, prune (rollout: `rollout_cmd.rs`).

use statek_store_pg::RolloutError;
use std::fmt;
use std::path::Path;
use std::time::{Duration, SystemTime};

use anyhow::{anyhow, Result};
use serde::Serialize;
use statek_policy::{EchoedValue, SchedulerShardId};
use statek_scheduler::{check_cycle_digest, Registration};
use statek_store_pg::{RoleProfile, SchedulerFairnessRetentionPolicy, StoreError};

use crate::db::DbArgs;
use crate::exit::InvalidInput;
use crate::out::{count, Report};
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

/// What `policy verify` found. Written as the command's report, then
/// [`VerifyReport::into_result`] is how the command ends.
#[derive(Serialize)]
pub struct VerifyReport {
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
    /// The error the command ends with after the report: the shard holds
    /// another policy, or the digest of another cycle.
    #[serde(skip)]
    mismatch: Option<anyhow::Error>,
}

impl VerifyReport {
    /// `Ok` when the shard holds exactly the file's policy and cycle; else
    /// `RolloutError::PolicyConflict` (exit 4) or
    /// `SchedulerError::CycleMismatch` (exit 4).
    ///
    /// # Errors
    /// The mismatch, as above.
    pub fn into_result(self) -> Result<()> {
        self.mismatch.map_or(Ok(()), Err)
    }
}

impl Report for VerifyReport {
    fn write_text(&self, w: &mut dyn fmt::Write) -> fmt::Result {
        if self.matches && self.cycle_matches {
            writeln!(
                w,
                "ok: shard {} holds exactly {} (digest {})",
                self.shard, self.file, self.file_digest
            )
        } else if self.matches {
            writeln!(
                w,
                "MISMATCH: shard {} holds {}, but its cycle digest {} is not this build's {}",
                self.shard,
                self.file,
                self.stored_cycle_digest.as_deref().unwrap_or("-"),
                self.file_cycle_digest
            )
        } else {
            writeln!(
                w,
                "MISMATCH: shard {} holds policy {}, the file is {}",
                self.shard, self.stored_digest, self.file_digest
            )
        }
    }
}

/// `statek policy verify`: the report; it ends with exit 4
/// ([`VerifyReport::into_result`]) when the shard holds another policy, or
/// stores the digest of another cycle than this build compiles from it.
pub async fn verify(file: &Path, shard: Option<&str>, db: &DbArgs) -> Result<VerifyReport> {
    let policy = policy_cmd::load(file)?;
    let shard = match shard {
        Some(s) => shard_id(s)?,
        None => policy.shard_id().clone(),
    };
    let store = db.store(1)?;
    let stored = store.load_shard(&shard).await?;
    let matches = stored.policy().canonical_bytes() == policy.canonical_bytes();
    let cycle_check = check_cycle_digest(&policy, stored.cycle_digest());
    let cycle_matches = cycle_check.is_ok();
    let mismatch = if !matches {
        Some(
            StoreError::Rollout(RolloutError::PolicyConflict {
                shard: shard.clone(),
                stored: stored.policy().digest(),
                offered: policy.digest(),
            })
            .into(),
        )
    } else if let Err(mismatch) = cycle_check {
        Some(statek_scheduler::SchedulerError::from(mismatch).into())
    } else {
        None
    };
    Ok(VerifyReport {
        shard: shard.to_string(),
        file: file.display().to_string(),
        matches,
        file_digest: policy.digest().to_string(),
        stored_digest: stored.policy().digest().to_string(),
        file_cycle_digest: policy.cycle_digest().to_string(),
        stored_cycle_digest: stored.cycle_digest().map(|d| d.to_string()),
        cycle_matches,
        mismatch,
    })
}

/// What `statek migrate` did.
#[derive(Serialize)]
pub struct Migrated {
    /// The migrations applied now, `(version, name)`, in order.
    applied: Vec<(u32, String)>,
    /// The database, its password redacted.
    database: String,
    /// How many migrations this build knows.
    known: usize,
}

impl Report for Migrated {
    fn write_text(&self, w: &mut dyn fmt::Write) -> fmt::Result {
        for (version, name) in &self.applied {
            writeln!(w, "applied V{version}__{name}")?;
        }
        writeln!(
            w,
            "schema statek is current on {} ({} migrations known, {} applied now)",
            self.database,
            self.known,
            self.applied.len()
        )
    }
}

/// `statek migrate`.
pub async fn migrate(db: &DbArgs) -> Result<Migrated> {
    let store = db.store(1)?;
    let report = store.migrate().await.map_err(|e| {
        crate::db::needs_role(
            e,
            "migrate needs the owner role: the role that owns (or may create) the statek schema",
        )
    })?;
    Ok(Migrated {
        applied: report.applied().to_vec(),
        database: db.redacted(),
        known: statek_store_pg::embedded_migrations().len(),
    })
}

/// What `statek register` did.
#[derive(Serialize)]
pub struct Registered {
    shard: String,
    /// `registered`, or `already registered with identical bytes`.
    how: &'static str,
    schedule: String,
    digest: String,
    cycle_length: u32,
    /// Set when the shard is sealed: where its chain goes on.
    sealed: Option<RegisteredSeal>,
}

/// The seal of a shard registered again after a rollout.
#[derive(Serialize)]
struct RegisteredSeal {
    sealed_at_sequence: u64,
    successor: String,
    live_shard: String,
}

impl Report for Registered {
    fn write_text(&self, w: &mut dyn fmt::Write) -> fmt::Result {
        writeln!(
            w,
            "shard {}: {} (schedule {}, policy {}, L = {})",
            self.shard, self.how, self.schedule, self.digest, self.cycle_length
        )?;
        if let Some(seal) = &self.sealed {
            writeln!(
                w,
                "shard {} is sealed at sequence {} (successor {}): the live shard of schedule {} is {}; \
                 replicas started with this file follow the chain to it",
                self.shard, seal.sealed_at_sequence, seal.successor, self.schedule, seal.live_shard
            )?;
        }
        Ok(())
    }
}

/// `statek register FILE`: into the file's `schedule` (`register_in`).
/// What the durability check accepted by `--durability` is a warning on
/// standard error.
pub async fn register(file: &Path, db: &DbArgs) -> Result<Registered> {
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
    check_cycle_digest(policy, stored.cycle_digest())
        .map_err(statek_scheduler::SchedulerError::from)?;
    let sealed = match stored.seal() {
        Some(seal) => Some(RegisteredSeal {
            sealed_at_sequence: seal.sealed_at_sequence(),
            successor: seal.successor().to_string(),
            live_shard: store.live_shard(policy.shard_id()).await?.to_string(),
        }),
        None => None,
    };
    // What the durability check accepted by an explicit opt-in is said,
    // not only what it refused.
    let durability = store.durability_report().await?;
    let risks = durability.risks();
    if !risks.is_empty() {
        crate::out::errln!(
            "statek: warning: the server can lose acknowledged reservations ({}), accepted by \
             --durability: {durability}",
            risks
                .iter()
                .map(statek_store_pg::DurabilityRisk::label)
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    Ok(Registered {
        shard: policy.shard_id().to_string(),
        how,
        schedule: stored.schedule().to_string(),
        digest: policy.digest().to_string(),
        cycle_length: policy.cycle_length(),
        sealed,
    })
}

/// What `statek roles apply` did, or the SQL it would run (`--print`).
#[derive(Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RolesApplied {
    /// `--print`: the SQL, nothing applied.
    Sql(String),
    /// The profile was applied.
    Applied {
        owner: String,
        runtime: String,
        retention: String,
        /// The runtime role's default `synchronous_commit`, when set.
        synchronous_commit: Option<&'static str>,
    },
}

impl Report for RolesApplied {
    fn write_text(&self, w: &mut dyn fmt::Write) -> fmt::Result {
        match self {
            RolesApplied::Sql(sql) => w.write_str(sql),
            RolesApplied::Applied {
                owner,
                runtime,
                retention,
                synchronous_commit,
            } => {
                writeln!(
                    w,
                    "applied role profile: owner {owner}, runtime {runtime}, retention {retention}"
                )?;
                if let Some(level) = synchronous_commit {
                    writeln!(
                        w,
                        "runtime role {runtime}: synchronous_commit = {level} by default"
                    )?;
                }
                Ok(())
            }
        }
    }
}

/// `statek roles apply`.
pub async fn roles_apply(
    owner: &str,
    runtime: &str,
    retention: &str,
    synchronous_commit: Option<statek_store_pg::SynchronousCommit>,
    print: bool,
    db: &DbArgs,
) -> Result<RolesApplied> {
    let mut profile = RoleProfile::new(owner, runtime, retention)?;
    if let Some(level) = synchronous_commit {
        profile = profile.runtime_synchronous_commit(level);
    }
    if print {
        return Ok(RolesApplied::Sql(profile.sql()));
    }
    db.store(1)?
        .apply_role_profile(&profile)
        .await
        .map_err(|e| {
            crate::db::needs_role(
                e,
                "roles apply needs the owner role (the --database-url of migrate): only the \
                 owner of the statek schema's objects may grant on them",
            )
        })?;
    Ok(RolesApplied::Applied {
        owner: owner.to_owned(),
        runtime: runtime.to_owned(),
        retention: retention.to_owned(),
        synchronous_commit: synchronous_commit.map(|level| level.as_str()),
    })
}

/// What `statek status` reports.
#[derive(Serialize)]
pub struct StatusReport {
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
    /// The retention as given (the text names it, not the seconds).
    #[serde(skip)]
    retain: Duration,
    /// Whether the shard is halted in the database (after a reservation
    /// loss); `open_halts` are the halts that hold it.
    halted: bool,
    open_halts: Vec<crate::shard_cmd::HaltLine>,
    /// Cost mode: the policy's parameters (null for a slot-mode shard).
    cost: Option<CostParameters>,
    /// Cost mode: each tenant's standing in the ledger of the shard's
    /// schedule, in cost units (empty for a slot-mode shard).
    cost_ledger: Vec<CostLine>,
}

/// A cost-mode policy's parameters, in cost units.
#[derive(Serialize)]
struct CostParameters {
    quantum: u64,
    max_cost: u64,
    default_cost: u64,
    balance_cap: u64,
}

/// One tenant's standing in the cost ledger.
#[derive(Serialize)]
struct CostLine {
    tenant: String,
    /// Credit minus charges; negative: in debt.
    balance: i128,
    /// Credit its slots granted (cut to the cap).
    credit: i128,
    /// Charged so far: its attempts' costs served (each cut to max_cost,
    /// the default for one that reported none).
    charged: i128,
}

impl Report for StatusReport {
    fn write_text(&self, w: &mut dyn fmt::Write) -> fmt::Result {
        writeln!(w, "shard              {}", self.shard)?;
        writeln!(
            w,
            "policy             {} ({}, L = {}, {})",
            self.digest,
            self.algorithm,
            self.cycle_length,
            crate::out::count(self.tenants as u64, "tenant", "tenants")
        )?;
        writeln!(w, "registered at      {}", self.registered_at)?;
        writeln!(
            w,
            "schedule           {} (predecessor {}, live shard {})",
            self.schedule,
            self.predecessor.as_deref().unwrap_or("none"),
            self.live_shard
        )?;
        if self.halted {
            writeln!(
                w,
                "halted             yes: no reservation until an owner runs `statek shard resume {} --acknowledge-loss`",
                self.shard
            )?;
            for halt in &self.open_halts {
                writeln!(w, "                   {}", halt.summary())?;
            }
        } else {
            writeln!(w, "halted             no")?;
        }
        match (self.sealed_at_sequence, &self.successor) {
            (Some(n), Some(successor)) => writeln!(
                w,
                "sealed             at sequence {n} ({}), successor {successor}: takes no new reservation",
                self.sealed_at.as_deref().unwrap_or("-")
            )?,
            _ => writeln!(w, "sealed             no (live)")?,
        }
        writeln!(
            w,
            "cursor             sequence {} (next slot {})",
            self.next_sequence, self.next_slot
        )?;
        writeln!(
            w,
            "last minute        {} reservations ({:.2}/s)",
            self.reservations_last_minute, self.reservations_per_second
        )?;
        writeln!(
            w,
            "retained           {} reservations in {} rows (a batch is one row)",
            self.retained_reservations, self.retained_rows
        )?;
        match (&self.oldest_retained, self.oldest_retained_age_seconds) {
            (Some(at), Some(age)) => writeln!(w, "oldest retained    {at} ({age:.0} s ago)")?,
            _ => writeln!(w, "oldest retained    none")?,
        }
        writeln!(
            w,
            "past retention     {} rows older than {}",
            self.rows_past_retention,
            humantime::format_duration(self.retain)
        )?;
        if let Some(c) = &self.cost {
            writeln!(
                w,
                "cost mode          quantum {}, max_cost {}, default_cost {}, balance_cap {} (ledger of schedule {})",
                c.quantum, c.max_cost, c.default_cost, c.balance_cap, self.schedule
            )?;
            if self.cost_ledger.is_empty() {
                writeln!(w, "cost ledger        empty (no slot decided yet)")?;
            }
            for line in &self.cost_ledger {
                writeln!(
                    w,
                    "  {:<24} balance {:>14}  credit {:>14}  charged {:>14}",
                    line.tenant, line.balance, line.credit, line.charged
                )?;
            }
        }
        Ok(())
    }
}

/// `statek status --shard S`.
pub async fn status(shard: &str, retain: Duration, db: &DbArgs) -> Result<StatusReport> {
    let shard = shard_id(shard)?;
    // The same limits as `prune --retain` (1 hour..=366 days).
    let retain = SchedulerFairnessRetentionPolicy::new(retain, 1)?.retain_for();
    let store = db.store(1)?;
    let s = store.shard_status(&shard, retain).await?;
    let live_shard = store.live_shard(&shard).await?;
    let open_halts: Vec<_> = store
        .shard_halts(&shard)
        .await?
        .iter()
        .filter(|h| h.is_open())
        .map(crate::shard_cmd::HaltLine::new)
        .collect();
    let policy = s.stored.policy();
    let seal = s.stored.seal();
    let cost = policy.fairness().cost().map(|c| CostParameters {
        quantum: c.quantum(),
        max_cost: c.max_cost(),
        default_cost: c.default_cost(),
        balance_cap: c.balance_cap(),
    });
    let cost_ledger = if cost.is_some() {
        store
            .cost_balances(&shard)
            .await?
            .into_iter()
            .map(|b| CostLine {
                tenant: b.tenant.to_string(),
                balance: b.balance,
                credit: b.credit,
                charged: b.charged,
            })
            .collect()
    } else {
        Vec::new()
    };
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
        retain,
        halted: !open_halts.is_empty(),
        open_halts,
        cost,
        cost_ledger,
    };
    Ok(report)
}

/// What `statek prune` deleted, in all.
#[derive(Serialize)]
pub struct PruneTotals {
    batches: u64,
    deleted: u64,
    last_cutoff: Option<String>,
    seconds: f64,
}

impl Report for PruneTotals {
    fn write_text(&self, w: &mut dyn fmt::Write) -> fmt::Result {
        writeln!(
            w,
            "pruned {} in {} ({:.1} s); cutoff {}",
            count(self.deleted, "reservation row", "reservation rows"),
            count(self.batches, "batch", "batches"),
            self.seconds,
            self.last_cutoff.as_deref().unwrap_or("-")
        )
    }
}

/// Consecutive batches `statek prune --until-empty` waits behind rows
/// another transaction holds (50 ms apart: 10 s) before it stops.
const MAX_BLOCKED_BATCHES: u32 = 200;

/// `statek prune --retain D --batch N [--until-empty]`. With `progress`,
/// each batch is a line on standard error while it runs (the totals are
/// the report).
pub async fn prune(
    retain: Duration,
    batch: u32,
    until_empty: bool,
    progress: bool,
    db: &DbArgs,
) -> Result<PruneTotals> {
    let policy = SchedulerFairnessRetentionPolicy::new(retain, batch)?;
    let store = db.store(1)?;
    let started = std::time::Instant::now();
    let mut totals = PruneTotals {
        batches: 0,
        deleted: 0,
        last_cutoff: None,
        seconds: 0.0,
    };
    let mut blocked = 0_u32;
    loop {
        let report = store
            .prune_scheduler_fairness_reservations(&policy)
            .await
            .map_err(|e| {
                crate::db::needs_role(
                    e,
                    "prune needs the retention role's --database-url (or the owner's): the \
                     runtime role may not delete reservation rows",
                )
            })?;
        totals.batches += 1;
        totals.deleted += report.deleted;
        totals.last_cutoff = Some(rfc3339(report.cutoff));
        if progress {
            // Progress on stderr, so stdout stays the totals.
            crate::out::err!(
                "\rprune: batch {} deleted {} (total {}), cutoff {}    ",
                totals.batches,
                report.deleted,
                totals.deleted,
                rfc3339(report.cutoff)
            );
        }
        if !until_empty || report.drained() {
            break;
        }
        if report.blocked() {
            // A concurrent pruner holds the oldest due rows: let it commit.
            // A lock held far longer than a batch (a stuck transaction)
            // ends the run instead of waiting for it forever.
            blocked += 1;
            if blocked > MAX_BLOCKED_BATCHES {
                crate::out::errln!(
                    "prune: the oldest due rows stayed locked by another transaction for {} s; \
                     stopping (run it again later)",
                    (statek_store_pg::PruneReport::RETRY_PAUSE * MAX_BLOCKED_BATCHES).as_secs()
                );
                break;
            }
            tokio::time::sleep(statek_store_pg::PruneReport::RETRY_PAUSE).await;
        } else {
            blocked = 0;
        }
    }
    totals.seconds = started.elapsed().as_secs_f64();
    if progress {
        crate::out::errln!();
    }
    Ok(totals)
}

#[cfg(test)]
mod tests {
    use super::PruneTotals;
    use crate::out::{render, Format};

    fn check(batches: u64, deleted: u64, expected: &str) {
        let totals = PruneTotals {
            batches,
            deleted,
            last_cutoff: Some("2026-11-30T17:42:21.136Z".into()),
            seconds: 0.04,
        };
        assert_eq!(render(&totals, Format::Text).unwrap(), expected);
    }

    #[test]
    fn prune_totals_count_in_the_singular_and_plural() {
        check(
            1,
            0,
            "pruned 0 reservation rows in 1 batch (0.0 s); cutoff 2026-11-30T17:42:21.136Z\n",
        );
        check(
            1,
            1,
            "pruned 1 reservation row in 1 batch (0.0 s); cutoff 2026-11-30T17:42:21.136Z\n",
        );
        check(
            2,
            1000,
            "pruned 1000 reservation rows in 2 batches (0.0 s); cutoff 2026-11-30T17:42:21.136Z\n",
        );
    }
}
