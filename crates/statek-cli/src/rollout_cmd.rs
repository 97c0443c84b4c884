//! `statek rollout FROM.toml TO.toml [--dry-run [--at-cursor]]`: change a
//! schedule's policy live. The real rollout seals FROM's shard at its
//! cursor and registers TO's shard as its successor in one transaction
//! (`PgStore::rollout`, owner role) and prints the exact seam bounds. A
//! dry run needs no database and prints each tenant's seam bound at its
//! worst over every seal point, for FROM counted from its own start; with
//! `--at-cursor` it reads the chain instead (`PgStore::preview_rollout`:
//! the live cursor and the gaps carried into FROM from the seam before it)
//! and prints the exact bounds for a seal at that cursor. Only the flag
//! switches modes: a `DATABASE_URL` in the environment never makes a dry
//! run connect.

use std::fmt;
use std::path::Path;

use anyhow::Result;
use serde::Serialize;
use statek_policy::policy_file::PolicyFile;
use statek_policy::{PolicySeam, ScheduleId};

use crate::db::DbArgs;
use crate::out::Report;
use crate::policy_cmd::{self, SeamRow};

/// What `statek rollout` reports, dry run or not.
#[derive(Debug, Serialize)]
pub struct RolloutReport {
    /// True for `--dry-run`: nothing was written (no database was asked,
    /// unless `--at-cursor`).
    dry_run: bool,
    /// How the seam was judged: `worst` (a dry run without a database: at
    /// its worst over every seal point N, FROM counted from its start),
    /// `cursor` (a dry run with `--at-cursor`: exact for a seal at the
    /// cursor read), `sealed` (the rollout: exact for its seal).
    seam_at: &'static str,
    /// `--at-cursor`: the live shard's cursor read, where a rollout now
    /// would seal it. Null otherwise.
    cursor: Option<u64>,
    /// The shard FROM succeeded, whose carried gaps the exact bounds
    /// include (null for a schedule's first shard, and without a
    /// database).
    carried_from: Option<String>,
    /// The schedule: the sealed shard's (as stored) for a rollout; for a
    /// dry run the one the files name, or null when neither names one.
    schedule: Option<String>,
    /// The shard sealed (FROM's).
    predecessor: String,
    /// The new live shard (TO's).
    successor: String,
    /// `N`, the predecessor's cursor at the seal (its last sequence is
    /// `N - 1`; the successor starts at 0). Null for a dry run.
    sealed_at_sequence: Option<u64>,
    /// Database time of the seal (RFC 3339). Null for a dry run.
    sealed_at: Option<String>,
    /// True when the shard was already sealed to this successor with these
    /// policies (a retry after a lost acknowledgement): nothing was written.
    replayed: bool,
    /// Each tenant of the successor, in its tenant order: for a rollout
    /// its exact seam bound at `sealed_at_sequence`; for a dry run its
    /// worst over every seal point, with the smallest `N` reaching it.
    seam: Vec<SeamRow>,
    /// Tenants of FROM that TO does not schedule (no bound after the seal).
    leaving: Vec<String>,
    /// Tenants that join but were in an earlier shard of the chain: where
    /// they were last picked and what they wait from there (not known
    /// without a database: empty for a plain dry run).
    rejoining: Vec<RejoinLine>,
    /// Both policies share cost: the ledger across the seam. Null
    /// otherwise.
    cost_seam: Option<CostSeam>,
}

/// The cost ledger across a seam between two cost-mode policies
/// (docs/guarantees.md, "Across a rollout's seam").
#[derive(Debug, Serialize)]
pub struct CostSeam {
    /// The successor's `b_cap`: positive balances above it are cut to it
    /// (at the tenant's first slot after the seal); debts are kept.
    balance_cut_to: u64,
    /// Per tenant of either policy (the successor's, then the leaving
    /// ones): `B = fixed + D × per_concurrency`, in cost units.
    bounds: Vec<CostSeamRow>,
}

/// One tenant's cost bound across the seam.
#[derive(Debug, Serialize)]
pub struct CostSeamRow {
    tenant: String,
    /// `q₁·Δ₁ + q₂·Δ₂ + max(b_cap₁, b_cap₂)`.
    fixed: f64,
    /// `max(C_max₁, C_max₂)`: what each of the tenant's concurrent
    /// attempts (`D`) adds.
    per_concurrency: u64,
}

fn cost_seam(
    old: &statek_policy::WeightedFairnessPolicy,
    new: &statek_policy::WeightedFairnessPolicy,
) -> Option<CostSeam> {
    let bounds = PolicySeam::new(old, new).cost_bounds()?;
    let (c1, c2) = (
        old.fairness().cost().copied()?,
        new.fairness().cost().copied()?,
    );
    Some(CostSeam {
        balance_cut_to: c2.balance_cap(),
        bounds: bounds
            .iter()
            .map(|b| CostSeamRow {
                tenant: b.tenant().to_string(),
                fixed: b.slack(0),
                per_concurrency: c1.max_cost().max(c2.max_cost()),
            })
            .collect(),
    })
}

/// A tenant that joins at this seal after leaving an earlier shard.
#[derive(Debug, Serialize)]
pub struct RejoinLine {
    tenant: String,
    last_shard: String,
    last_pick: u64,
    /// Reservations from that pick to its first pick after this seal,
    /// counting that one.
    waited: u64,
}

fn rejoin_lines(found: Vec<statek_store_pg::RejoiningTenant>) -> Vec<RejoinLine> {
    found
        .into_iter()
        .map(|r| RejoinLine {
            tenant: r.tenant.to_string(),
            last_shard: r.last_shard.to_string(),
            last_pick: r.last_pick,
            waited: r.waited,
        })
        .collect()
}

/// The two files of a rollout, read and checked before any connection.
pub struct RolloutPlan {
    from: PolicyFile,
    to: PolicyFile,
    schedule: Option<ScheduleId>,
}

impl RolloutPlan {
    /// Reads both files and checks what needs no database: TO has a new
    /// shard id, and the files do not name different schedules.
    ///
    /// # Errors
    /// A file that does not parse, TO with FROM's shard id (exit 3);
    /// [`crate::exit::ScheduleMismatch`] (exit 13).
    pub fn load(from: &Path, to: &Path) -> Result<Self> {
        let (from, to) = (policy_cmd::load_file(from)?, policy_cmd::load_file(to)?);
        if from.policy().shard_id() == to.policy().shard_id() {
            return Err(crate::exit::InvalidInput(format!(
                "{} and {} both name shard {}: a rollout needs a new shard id in {} (a shard is \
                 bound to its policy forever)",
                from.file_name(),
                to.file_name(),
                to.policy().shard_id(),
                to.file_name()
            ))
            .into());
        }
        let schedule = policy_cmd::rollout_schedule(&from, &to)?;
        Ok(Self { from, to, schedule })
    }

    fn leaving(&self) -> Vec<String> {
        PolicySeam::new(self.from.policy(), self.to.policy())
            .leaving()
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    /// `--dry-run`: every tenant's seam bound at its worst over every seal
    /// point ([`PolicySeam::worst`]); no database.
    pub fn dry_run(&self) -> RolloutReport {
        let (old, new) = (self.from.policy(), self.to.policy());
        RolloutReport {
            dry_run: true,
            seam_at: "worst",
            cursor: None,
            carried_from: None,
            schedule: self.schedule.as_ref().map(ToString::to_string),
            predecessor: old.shard_id().to_string(),
            successor: new.shard_id().to_string(),
            sealed_at_sequence: None,
            sealed_at: None,
            replayed: false,
            seam: policy_cmd::seam_rows(old, new, &PolicySeam::new(old, new).worst()),
            leaving: self.leaving(),
            rejoining: Vec::new(),
            cost_seam: cost_seam(old, new),
        }
    }

    /// `--dry-run --at-cursor`: the exact seam for a seal at the live
    /// shard's cursor now, with the gaps carried into FROM from the seam
    /// before it; writes nothing.
    ///
    /// # Errors
    /// As the rollout would fail before it writes: `UnknownShard` (1),
    /// `PolicyConflict` (4), `NotLiveShard` (11), `SuccessorExists` (12),
    /// `ScheduleConflict` (13); a missing database URL (2); connection
    /// errors (6, 9).
    pub async fn dry_run_at_cursor(&self, db: &DbArgs) -> Result<RolloutReport> {
        let (old, new) = (self.from.policy(), self.to.policy());
        let store = db.store(1)?;
        let preview = store
            .preview_rollout(old, new, self.schedule.as_ref())
            .await?;
        let rejoining = store
            .rejoining_tenants(old.shard_id(), preview.cursor(), new)
            .await?;
        Ok(RolloutReport {
            dry_run: true,
            seam_at: "cursor",
            cursor: Some(preview.cursor()),
            carried_from: preview.carried_from().map(ToString::to_string),
            schedule: Some(preview.schedule().to_string()),
            predecessor: old.shard_id().to_string(),
            successor: new.shard_id().to_string(),
            sealed_at_sequence: None,
            sealed_at: None,
            replayed: false,
            seam: policy_cmd::seam_rows(old, new, preview.seam()),
            leaving: self.leaving(),
            rejoining: rejoin_lines(rejoining),
            cost_seam: cost_seam(old, new),
        })
    }

    /// The rollout: seals FROM's shard and registers TO's as its successor.
    ///
    /// # Errors
    /// The store's typed errors (see [`crate::exit`]): `PolicyConflict`
    /// (4), `UnknownShard` (1), `NotLiveShard` (11), `SuccessorExists` (12),
    /// `ScheduleConflict` (13), `PermissionDenied` (7, a role other than the
    /// owner), `DurabilityRefused` (10), connection errors (6, 9).
    pub async fn run(&self, db: &DbArgs) -> Result<RolloutReport> {
        let (old, new) = (self.from.policy(), self.to.policy());
        let store = db.store(1)?;
        let rollout = store
            .rollout(old, new, self.schedule.as_ref())
            .await
            .map_err(|e| {
                crate::db::needs_role(
                    e,
                    "rollout needs the owner role (the --database-url of migrate): the runtime \
                     and retention roles may not seal a shard",
                )
            })?;
        let rejoining = store
            .rejoining_tenants(old.shard_id(), rollout.sealed_at_sequence(), new)
            .await?;
        Ok(RolloutReport {
            dry_run: false,
            seam_at: "sealed",
            cursor: None,
            carried_from: None,
            schedule: Some(rollout.schedule().to_string()),
            predecessor: rollout.predecessor().to_string(),
            successor: rollout.successor().to_string(),
            sealed_at_sequence: Some(rollout.sealed_at_sequence()),
            sealed_at: Some(humantime::format_rfc3339_millis(rollout.sealed_at()).to_string()),
            replayed: rollout.replayed(),
            seam: policy_cmd::seam_rows(old, new, rollout.seam()),
            leaving: rollout.leaving().iter().map(ToString::to_string).collect(),
            rejoining: rejoin_lines(rejoining),
            cost_seam: cost_seam(old, new),
        })
    }
}

impl Report for RolloutReport {
    fn write_text(&self, w: &mut dyn fmt::Write) -> fmt::Result {
        let r = self;
        match (r.dry_run, r.sealed_at_sequence) {
            (false, Some(n)) => {
                // The sequences below N; a shard sealed at 0 had none.
                let handed_out = match n {
                    0 => "it handed out no reservations".to_owned(),
                    1 => "it handed out sequence 0".to_owned(),
                    n => format!("it handed out sequences 0 to {}", n - 1),
                };
                writeln!(
                    w,
                    "{}: schedule {}: sealed {} at sequence {n} ({handed_out}); {} goes on from \
                     sequence 0",
                    if r.replayed {
                        "replayed (already rolled out, nothing written)"
                    } else {
                        "rolled out"
                    },
                    r.schedule.as_deref().unwrap_or("-"),
                    r.predecessor,
                    r.successor
                )?;
                writeln!(w, "sealed at    {}", r.sealed_at.as_deref().unwrap_or("-"))?;
            }
            _ => {
                let asked = match r.cursor {
                    Some(_) => "read the database",
                    None => "no database asked",
                };
                writeln!(
                    w,
                    "dry run (nothing written, {asked}): {} -> {}, schedule {}",
                    r.predecessor,
                    r.successor,
                    r.schedule
                        .as_deref()
                        .unwrap_or("(the one the sealed shard belongs to)")
                )?;
                match (r.cursor, &r.carried_from) {
                    (Some(n), Some(carried)) => writeln!(
                        w,
                        "seam: exact for a seal at cursor N = {n}, with the gaps carried from {carried}"
                    )?,
                    (Some(n), None) => writeln!(
                        w,
                        "seam: exact for a seal at cursor N = {n} ({} is the first shard of its schedule)",
                        r.predecessor
                    )?,
                    (None, _) => writeln!(
                        w,
                        "seam: worst case over every seal point N, {} counted from its own start",
                        r.predecessor
                    )?,
                }
            }
        }
        writeln!(w)?;
        policy_cmd::seam_table(&r.seam, w)?;
        if !r.leaving.is_empty() {
            writeln!(
                w,
                "leaving: {} (no slot after the seal)",
                r.leaving.join(", ")
            )?;
        }
        for t in &r.rejoining {
            writeln!(
                w,
                "rejoining: {} was last picked in {} at sequence {}: {} reservations from there to its \
                 first pick in {} (its joining bound counts from the seal only)",
                t.tenant, t.last_shard, t.last_pick, t.waited, r.successor
            )?;
        }
        if let Some(cost) = &r.cost_seam {
            writeln!(
                w,
                "cost ledger: kept across the seal; positive balances are cut to b_cap = {} of {}, \
                 debts kept",
                cost.balance_cut_to, r.successor
            )?;
            let width = cost
                .bounds
                .iter()
                .map(|b| b.tenant.len())
                .max()
                .unwrap_or(0);
            for b in &cost.bounds {
                writeln!(
                    w,
                    "  {:<width$}  cost bound across the seam {:.3} + D×{}",
                    b.tenant, b.fixed, b.per_concurrency
                )?;
            }
            writeln!(
                w,
                "cost bound across the seam = B = q₁·Δ₁ + q₂·Δ₂ + D·max C_max + max b_cap, in cost \
                 units: over a window straddling the seal the cost served stays within B of its \
                 entitlement on each side (docs/guarantees.md, \"Across a rollout's seam\")"
            )?;
        }
        writeln!(w)?;
        if r.dry_run && r.cursor.is_some() {
            writeln!(
            w,
            "seam bound = reservations from the tenant's last pick before {} to its first pick in {}, counting \
             the picking one: exact for a seal at the cursor read. The cursor moves on while replicas \
             reserve; the rollout seals at the cursor it locks and prints the bound for that N.",
            r.successor, r.successor
        )?;
        } else if r.dry_run {
            writeln!(
            w,
            "seam bound = reservations from the tenant's last pick in {} to its first pick in {}, counting \
             the picking one; shown at its worst over every seal point N (the smallest N reaching it), \
             counting {} from its own start: if it succeeded another shard, a tenant it has not picked \
             yet carries a longer gap (--at-cursor reads it). The rollout prints the exact bound for the N \
             it seals at.",
            r.predecessor, r.successor, r.predecessor
        )?;
        } else {
            writeln!(
            w,
            "seam bound = reservations from the tenant's last pick in {} to its first pick in {}, counting \
             the picking one: exact for this seal (docs/guarantees.md). Replicas follow the chain \
             within one tick of meeting the seal.",
            r.predecessor, r.successor
        )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::RejoinLine;
    use super::RolloutReport;
    use crate::out::{render, Format};
    use crate::policy_cmd::SeamRow;

    /// The text of a rollout of `primary-v1` sealed at `n`, with one
    /// joining tenant.
    fn text_sealed_at(n: u64) -> String {
        let report = RolloutReport {
            dry_run: false,
            seam_at: "sealed",
            cursor: None,
            carried_from: None,
            schedule: Some("primary".into()),
            predecessor: "primary-v1".into(),
            successor: "primary-v2".into(),
            sealed_at_sequence: Some(n),
            sealed_at: Some("2026-12-01T17:42:21.023Z".into()),
            replayed: false,
            seam: vec![SeamRow {
                tenant: "tenant-c".into(),
                seal_sequence: n,
                last_pick_before_seal: None,
                first_pick_after_seal: 0,
                reservations_across_seam: 1,
                joining: true,
                bound: (None, 3),
            }],
            leaving: vec!["tenant-b".into()],
            cost_seam: None,
            rejoining: vec![RejoinLine {
                tenant: "tenant-c".into(),
                last_shard: "primary-v0".into(),
                last_pick: 5,
                waited: 12,
            }],
        };
        render(&report, Format::Text).unwrap()
    }

    fn check(n: u64, first_line: &str) {
        let text = text_sealed_at(n);
        assert_eq!(text.lines().next(), Some(first_line), "{text}");
    }

    #[test]
    fn the_seal_names_the_sequences_handed_out() {
        check(
            0,
            "rolled out: schedule primary: sealed primary-v1 at sequence 0 (it handed out no \
             reservations); primary-v2 goes on from sequence 0",
        );
        check(
            1,
            "rolled out: schedule primary: sealed primary-v1 at sequence 1 (it handed out \
             sequence 0); primary-v2 goes on from sequence 0",
        );
        check(
            9,
            "rolled out: schedule primary: sealed primary-v1 at sequence 9 (it handed out \
             sequences 0 to 8); primary-v2 goes on from sequence 0",
        );
    }

    #[test]
    fn a_rollout_sealed_at_zero_in_full() {
        assert_eq!(
            text_sealed_at(0),
            "rolled out: schedule primary: sealed primary-v1 at sequence 0 (it handed out no \
             reservations); primary-v2 goes on from sequence 0
sealed at    2026-12-01T17:42:21.023Z

tenant    seal at N   last pick  first pick  seam bound  bound old -> new
tenant-c          0     joining           0           1  - -> 3
leaving: tenant-b (no slot after the seal)
rejoining: tenant-c was last picked in primary-v0 at sequence 5: 12 reservations from there to its \
             first pick in primary-v2 (its joining bound counts from the seal only)

seam bound = reservations from the tenant's last pick in primary-v1 to its first pick in \
             primary-v2, counting the picking one: exact for this seal (docs/guarantees.md). \
             Replicas follow the chain within one tick of meeting the seal.
"
        );
    }
}
