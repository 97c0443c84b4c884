//! `statek runs list|cancel|retry|prune`: the operator's view of the run
//! queue and the retention of finished runs.

use statek_store_pg::RunQueueError;
use std::fmt;
use std::time::{Duration, SystemTime};

use anyhow::Result;
use serde::Serialize;
use statek_store_pg::{RunListing, RunRetentionPolicy, RunState, StoreError};
use uuid::Uuid;

use crate::db::DbArgs;
use crate::limits_cmd::tenant_id;
use crate::out::{count, Report};

fn rfc3339(t: SystemTime) -> String {
    humantime::format_rfc3339_millis(t).to_string()
}

#[derive(Serialize)]
struct RunRow {
    run_id: String,
    tenant: String,
    state: String,
    priority: i32,
    attempt: u32,
    max_attempts: u32,
    enqueued_at: String,
    available_at: String,
    finished_at: Option<String>,
    last_error: Option<String>,
    /// The paging cursor (`--after`).
    cursor: u64,
}

impl From<&RunListing> for RunRow {
    fn from(r: &RunListing) -> Self {
        Self {
            run_id: r.run_id.to_string(),
            tenant: r.tenant.to_string(),
            state: r.state.to_string(),
            priority: r.priority,
            attempt: r.attempt,
            max_attempts: r.max_attempts,
            enqueued_at: rfc3339(r.enqueued_at),
            available_at: rfc3339(r.available_at),
            finished_at: r.finished_at.map(rfc3339),
            last_error: r.last_error.clone(),
            cursor: r.queue_seq,
        }
    }
}

/// One page of `runs list`.
#[derive(Serialize)]
pub struct Page {
    runs: Vec<RunRow>,
    /// Pass as `--after` for the next page; `null` on the last.
    next: Option<u64>,
}

impl Report for Page {
    fn write_text(&self, w: &mut dyn fmt::Write) -> fmt::Result {
        writeln!(
            w,
            "{:<36}  {:<20} {:<9} {:>4} {:>9}  {:<24} last error",
            "run", "tenant", "state", "prio", "attempts", "enqueued at"
        )?;
        for r in &self.runs {
            let error: String = r
                .last_error
                .as_deref()
                .unwrap_or("")
                .chars()
                .take(40)
                .map(|c| if c.is_control() { ' ' } else { c })
                .collect();
            writeln!(
                w,
                "{:<36}  {:<20} {:<9} {:>4} {:>9}  {:<24} {}",
                r.run_id,
                r.tenant,
                r.state,
                r.priority,
                format!("{}/{}", r.attempt, r.max_attempts),
                r.enqueued_at,
                error
            )?;
        }
        if let Some(next) = self.next {
            writeln!(w, "more: --after {next}")?;
        }
        Ok(())
    }
}

/// `statek runs list [--tenant T] [--state S] [--limit N] [--after C]`.
pub async fn list(
    tenant: Option<&str>,
    state: Option<RunState>,
    limit: u32,
    after: Option<u64>,
    db: &DbArgs,
) -> Result<Page> {
    let tenant = tenant.map(tenant_id).transpose()?;
    let page = db
        .store(1)?
        .list_runs(tenant.as_ref(), state, limit, after)
        .await?;
    Ok(Page {
        runs: page.runs.iter().map(RunRow::from).collect(),
        next: page.next,
    })
}

/// A run `runs cancel` or `runs retry` changed: as JSON the run's row.
#[derive(Serialize)]
#[serde(transparent)]
pub struct Changed {
    run: RunRow,
    /// `cancelled` or `retried`.
    #[serde(skip)]
    what: &'static str,
}

impl Report for Changed {
    fn write_text(&self, w: &mut dyn fmt::Write) -> fmt::Result {
        writeln!(
            w,
            "{} run {} of {} (now {})",
            self.what, self.run.run_id, self.run.tenant, self.run.state
        )
    }
}

/// `statek runs cancel ID`.
pub async fn cancel(run_id: Uuid, db: &DbArgs) -> Result<Changed> {
    let store = db.store(1)?;
    let cancelled = store.cancel_run(run_id).await?;
    let run = store
        .run(run_id)
        .await?
        .ok_or(StoreError::RunQueue(RunQueueError::RunNotFound { run_id }))?;
    if !cancelled {
        return Err(StoreError::RunQueue(RunQueueError::RunStateConflict {
            run_id,
            state: run.state.to_string(),
            action: "cancel",
            needs: "available or running",
        })
        .into());
    }
    Ok(Changed {
        run: RunRow::from(&run),
        what: "cancelled",
    })
}

/// `statek runs retry ID`.
pub async fn retry(run_id: Uuid, db: &DbArgs) -> Result<Changed> {
    let run = db.store(1)?.retry_run(run_id).await?;
    Ok(Changed {
        run: RunRow::from(&run),
        what: "retried",
    })
}

/// What `runs prune` deleted, in all.
#[derive(Serialize)]
pub struct PruneTotals {
    batches: u64,
    runs: u64,
    claims: u64,
    last_cutoff: Option<String>,
    seconds: f64,
}

impl Report for PruneTotals {
    fn write_text(&self, w: &mut dyn fmt::Write) -> fmt::Result {
        writeln!(
            w,
            "pruned {} and {} in {} ({:.1} s); cutoff {}",
            count(self.runs, "finished run", "finished runs"),
            count(self.claims, "claim row", "claim rows"),
            count(self.batches, "batch", "batches"),
            self.seconds,
            self.last_cutoff.as_deref().unwrap_or("-")
        )
    }
}

/// `statek runs prune --retain D --batch N [--until-empty]` (retention role).
pub async fn prune(
    retain: Duration,
    batch: u32,
    until_empty: bool,
    db: &DbArgs,
) -> Result<PruneTotals> {
    let policy = RunRetentionPolicy::new(retain, batch)?;
    let store = db.store(1)?;
    let started = std::time::Instant::now();
    let mut totals = PruneTotals {
        batches: 0,
        runs: 0,
        claims: 0,
        last_cutoff: None,
        seconds: 0.0,
    };
    loop {
        let report = store.prune_finished_runs(&policy).await.map_err(|e| {
            crate::db::needs_role(
                e,
                "runs prune needs the retention role's --database-url (or the owner's): the \
                     runtime role may not delete runs",
            )
        })?;
        totals.batches += 1;
        totals.runs += report.deleted_runs;
        totals.claims += report.deleted_claims;
        totals.last_cutoff = Some(rfc3339(report.cutoff));
        if !until_empty || report.deleted_runs < u64::from(batch) {
            break;
        }
    }
    totals.seconds = started.elapsed().as_secs_f64();
    Ok(totals)
}

#[cfg(test)]
mod tests {
    use super::PruneTotals;
    use crate::out::{render, Format};

    fn check(batches: u64, runs: u64, claims: u64, expected: &str) {
        let totals = PruneTotals {
            batches,
            runs,
            claims,
            last_cutoff: None,
            seconds: 1.31,
        };
        assert_eq!(render(&totals, Format::Text).unwrap(), expected);
    }

    #[test]
    fn prune_totals_count_in_the_singular_and_plural() {
        check(
            1,
            0,
            0,
            "pruned 0 finished runs and 0 claim rows in 1 batch (1.3 s); cutoff -\n",
        );
        check(
            1,
            1,
            1,
            "pruned 1 finished run and 1 claim row in 1 batch (1.3 s); cutoff -\n",
        );
        check(
            3,
            2,
            5,
            "pruned 2 finished runs and 5 claim rows in 3 batches (1.3 s); cutoff -\n",
        );
    }
}
