//! `statek runs list|cancel|retry|prune`: the operator's view of the run
//! queue and the retention of finished runs.

use crate::out::outln;
use std::time::{Duration, SystemTime};

use anyhow::{anyhow, Result};
use serde::Serialize;
use statek_policy::EchoedValue;
use statek_store_pg::{RunListing, RunRetentionPolicy, RunState, StoreError};
use uuid::Uuid;

use crate::db::DbArgs;
use crate::exit::InvalidInput;
use crate::limits_cmd::tenant_id;
use crate::out::Format;

fn rfc3339(t: SystemTime) -> String {
    humantime::format_rfc3339_millis(t).to_string()
}

fn run_id(text: &str) -> Result<Uuid> {
    Uuid::parse_str(text.trim()).map_err(|_| {
        anyhow!(InvalidInput(format!(
            "run id {}: not a UUID",
            EchoedValue(text)
        )))
    })
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

#[derive(Serialize)]
struct Page {
    runs: Vec<RunRow>,
    /// Pass as `--after` for the next page; `null` on the last.
    next: Option<u64>,
}

fn text_row(r: &RunRow) -> Result<()> {
    let error: String = r
        .last_error
        .as_deref()
        .unwrap_or("")
        .chars()
        .take(40)
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    outln!(
        "{:<36}  {:<20} {:<9} {:>4} {:>9}  {:<24} {}",
        r.run_id,
        r.tenant,
        r.state,
        r.priority,
        format!("{}/{}", r.attempt, r.max_attempts),
        r.enqueued_at,
        error
    )?;
    Ok(())
}

/// `statek runs list [--tenant T] [--state S] [--limit N] [--after C]`.
pub async fn list(
    tenant: Option<&str>,
    state: Option<&str>,
    limit: u32,
    after: Option<u64>,
    format: Format,
    db: &DbArgs,
) -> Result<()> {
    let tenant = tenant.map(tenant_id).transpose()?;
    let state = state.map(str::parse::<RunState>).transpose()?;
    let page = db
        .store(1)?
        .list_runs(tenant.as_ref(), state, limit, after)
        .await?;
    let out = Page {
        runs: page.runs.iter().map(RunRow::from).collect(),
        next: page.next,
    };
    match format {
        Format::Json => outln!("{}", serde_json::to_string_pretty(&out)?)?,
        Format::Text => {
            outln!(
                "{:<36}  {:<20} {:<9} {:>4} {:>9}  {:<24} last error",
                "run",
                "tenant",
                "state",
                "prio",
                "attempts",
                "enqueued at"
            )?;
            for r in &out.runs {
                text_row(r)?;
            }
            if let Some(next) = out.next {
                outln!("more: --after {next}")?;
            }
        }
    }
    Ok(())
}

fn print_one(run: &RunListing, what: &str, format: Format) -> Result<()> {
    match format {
        Format::Json => outln!("{}", serde_json::to_string_pretty(&RunRow::from(run))?)?,
        Format::Text => outln!(
            "{what} run {} of {} (now {})",
            run.run_id,
            run.tenant,
            run.state
        )?,
    }
    Ok(())
}

/// `statek runs cancel ID`.
pub async fn cancel(id: &str, format: Format, db: &DbArgs) -> Result<()> {
    let run_id = run_id(id)?;
    let store = db.store(1)?;
    let cancelled = store.cancel_run(run_id).await?;
    let run = store
        .run(run_id)
        .await?
        .ok_or(StoreError::RunNotFound { run_id })?;
    if !cancelled {
        return Err(StoreError::RunStateConflict {
            run_id,
            state: run.state.to_string(),
            action: "cancel",
            needs: "available or running",
        }
        .into());
    }
    print_one(&run, "cancelled", format)
}

/// `statek runs retry ID`.
pub async fn retry(id: &str, format: Format, db: &DbArgs) -> Result<()> {
    let run = db.store(1)?.retry_run(run_id(id)?).await?;
    print_one(&run, "retried", format)
}

#[derive(Serialize)]
struct PruneTotals {
    batches: u64,
    runs: u64,
    claims: u64,
    last_cutoff: Option<String>,
    seconds: f64,
}

/// `statek runs prune --retain D --batch N [--until-empty]` (retention role).
pub async fn prune(
    retain: Duration,
    batch: u32,
    until_empty: bool,
    format: Format,
    db: &DbArgs,
) -> Result<()> {
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
        let report = store.prune_finished_runs(&policy).await?;
        totals.batches += 1;
        totals.runs += report.deleted_runs;
        totals.claims += report.deleted_claims;
        totals.last_cutoff = Some(rfc3339(report.cutoff));
        if !until_empty || report.deleted_runs < u64::from(batch) {
            break;
        }
    }
    totals.seconds = started.elapsed().as_secs_f64();
    match format {
        Format::Json => outln!("{}", serde_json::to_string_pretty(&totals)?)?,
        Format::Text => outln!(
            "pruned {} finished runs and {} claim rows in {} batches ({:.1} s); cutoff {}",
            totals.runs,
            totals.claims,
            totals.batches,
            totals.seconds,
            totals.last_cutoff.as_deref().unwrap_or("-")
        )?,
    }
    Ok(())
}
