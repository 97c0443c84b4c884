//! `statek limits set|show|clear`: a tenant's concurrency cap and rate
//! limit (runtime settings in `statek.tenant_limits`).

use std::fmt;

use anyhow::{anyhow, Result};
use serde::Serialize;
use statek_policy::{EchoedValue, TenantId};
use statek_store_pg::input_limits::MAX_RUNNING_LIMIT;
use statek_store_pg::{RateLimit, StoredTenantLimits, TenantLimits};

use crate::db::DbArgs;
use crate::exit::InvalidInput;
use crate::out::Report;

/// The hint when a role other than the owner changes limits (exit 7).
const OWNER_FOR_LIMITS: &str =
    "limits set and clear need the owner role (the --database-url of migrate): \
     the runtime role may only read them";

/// `--tenant T` as a tenant id.
pub fn tenant_id(text: &str) -> Result<TenantId> {
    TenantId::try_from(text)
        .map_err(|e| anyhow!(InvalidInput(format!("--tenant {}: {e}", EchoedValue(text)))))
}

/// `--max-running N`: any integer (clap refuses other text),
/// range-checked by [`TenantLimits`] (so 0, negative and absurd values are
/// the same typed error).
fn max_running(value: i128) -> Result<u32> {
    // Out of u32: the same range error, naming the value given (not a
    // clamped one).
    let Ok(value) = u32::try_from(value) else {
        return Err(anyhow!(InvalidInput(format!(
            "invalid tenant limit: max running must be 1..={MAX_RUNNING_LIMIT}, got {value}"
        ))));
    };
    TenantLimits::new(Some(value), None)?;
    Ok(value)
}

#[derive(Serialize)]
struct LimitsRow {
    tenant: String,
    max_running: Option<u32>,
    /// `10/s`, `100/m`, ...
    rate: Option<String>,
    rate_claims: Option<u32>,
    rate_window_ms: Option<u128>,
    updated_at: String,
}

impl From<&StoredTenantLimits> for LimitsRow {
    fn from(s: &StoredTenantLimits) -> Self {
        Self {
            tenant: s.tenant.to_string(),
            max_running: s.limits.max_running(),
            rate: s.limits.rate().map(|r| r.to_string()),
            rate_claims: s.limits.rate().map(|r| r.claims()),
            rate_window_ms: s.limits.rate().map(|r| r.window().as_millis()),
            updated_at: humantime::format_rfc3339_millis(s.updated_at).to_string(),
        }
    }
}

/// The limits `limits set` and `limits show` report: one row per tenant
/// (a JSON array).
#[derive(Serialize)]
#[serde(transparent)]
pub struct LimitsTable(Vec<LimitsRow>);

impl Report for LimitsTable {
    fn write_text(&self, w: &mut dyn fmt::Write) -> fmt::Result {
        writeln!(
            w,
            "{:<24} {:>11} {:>12}  updated at",
            "tenant", "max running", "rate"
        )?;
        for r in &self.0 {
            writeln!(
                w,
                "{:<24} {:>11} {:>12}  {}",
                r.tenant,
                r.max_running.map_or("-".to_owned(), |c| c.to_string()),
                r.rate.as_deref().unwrap_or("-"),
                r.updated_at
            )?;
        }
        Ok(())
    }
}

/// `statek limits set --tenant T [--max-running N] [--rate N/s]`: changes
/// the given limits and keeps the others (owner role).
pub async fn set(
    tenant: &str,
    max: Option<i128>,
    rate: Option<&str>,
    db: &DbArgs,
) -> Result<LimitsTable> {
    // Neither limit: clap refuses it (a usage error), and the store would
    // (`RunQueueError::InvalidLimit`).
    let tenant = tenant_id(tenant)?;
    let max = max.map(max_running).transpose()?;
    let rate = rate.map(str::parse::<RateLimit>).transpose()?;
    let store = db.store(1)?;
    // Merged in the database: a limit not given is kept, also against a
    // concurrent `limits set` of the other limit.
    let stored = store
        .merge_tenant_limits(&tenant, max, rate)
        .await
        .map_err(|e| crate::db::needs_role(e, OWNER_FOR_LIMITS))?;
    Ok(LimitsTable(vec![LimitsRow::from(&stored)]))
}

/// `statek limits show [--tenant T]`.
pub async fn show(tenant: Option<&str>, db: &DbArgs) -> Result<LimitsTable> {
    let store = db.store(1)?;
    let all = match tenant {
        Some(t) => store
            .tenant_limits(&tenant_id(t)?)
            .await?
            .into_iter()
            .collect(),
        None => store.all_tenant_limits().await?,
    };
    Ok(LimitsTable(all.iter().map(LimitsRow::from).collect()))
}

/// What `limits clear` did.
#[derive(Serialize)]
pub struct Cleared {
    tenant: String,
    /// False when the tenant had no limits.
    cleared: bool,
}

impl Report for Cleared {
    fn write_text(&self, w: &mut dyn fmt::Write) -> fmt::Result {
        if self.cleared {
            writeln!(w, "cleared the limits of {}", self.tenant)
        } else {
            writeln!(w, "{} had no limits", self.tenant)
        }
    }
}

/// `statek limits clear --tenant T` (owner role).
pub async fn clear(tenant: &str, db: &DbArgs) -> Result<Cleared> {
    let tenant = tenant_id(tenant)?;
    let cleared = db
        .store(1)?
        .clear_tenant_limits(&tenant)
        .await
        .map_err(|e| crate::db::needs_role(e, OWNER_FOR_LIMITS))?;
    Ok(Cleared {
        tenant: tenant.to_string(),
        cleared,
    })
}
