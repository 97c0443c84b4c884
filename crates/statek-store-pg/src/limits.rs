//! Tenant limits: a per-tenant concurrency cap and rate limit, runtime
//! settings kept in `statek.tenant_limits` (migration V9), checked inside
//! every claim.
//!
//! Limits are not policy: they do not change the cycle, so they change at
//! any time without a new shard and apply from the next claim on. A slot
//! whose tenant may not start a run now is consumed
//! ([`crate::SlotClaim::Limited`], [`crate::ClaimOutcome::Limited`]),
//! never passed to another tenant.
//!
//! **How the claim enforces them.** A claim for a tenant with a limits row
//! locks that row (`FOR UPDATE`, in tenant order) inside the claim
//! statement, through the SECURITY DEFINER function
//! `statek.claim_allowance`, and only then counts, in a fresh snapshot,
//! the tenant's unexpired leases and its claims within the rate window.
//! Every claimer of the tenant, on any replica, waits for that lock, so
//! no two of them can both see `cap - 1` running. Tenants without limits
//! take no lock.

use crate::RunQueueError;
use std::fmt;
use std::str::FromStr;
use std::time::{Duration, SystemTime};

use statek_policy::TenantId;
use tokio_postgres::types::Type;

use crate::statement::Db;
use crate::{PgStore, StoreError};

/// Largest concurrency cap: 100,000 runs.
pub const MAX_RUNNING_LIMIT: u32 = 100_000;
/// Largest rate: 1,000,000 claims per window.
pub const MAX_RATE_CLAIMS: u32 = 1_000_000;
/// Longest rate window: 1 hour (claim history younger than an hour is
/// never pruned, so a window always sees every claim in it).
pub const MAX_RATE_WINDOW: Duration = Duration::from_secs(3600);
/// Shortest rate window: 1 ms (windows are whole milliseconds).
pub const MIN_RATE_WINDOW: Duration = Duration::from_millis(1);

const UPSERT_LIMITS: &str = "
    INSERT INTO statek.tenant_limits (tenant_id, max_running, rate_limit, rate_window_ms)
    VALUES ($1, $2, $3, $4)
    ON CONFLICT (tenant_id) DO UPDATE
    SET max_running = EXCLUDED.max_running, rate_limit = EXCLUDED.rate_limit,
        rate_window_ms = EXCLUDED.rate_window_ms, updated_at = now()
    RETURNING tenant_id, max_running, rate_limit, rate_window_ms, updated_at";

/// Merges in one statement: a limit given replaces the stored one, a limit
/// not given (NULL) keeps it, so two concurrent merges of different limits
/// both hold (the row lock of `ON CONFLICT DO UPDATE` orders them).
const MERGE_LIMITS: &str = "
    INSERT INTO statek.tenant_limits (tenant_id, max_running, rate_limit, rate_window_ms)
    VALUES ($1, $2, $3, $4)
    ON CONFLICT (tenant_id) DO UPDATE
    SET max_running = coalesce(EXCLUDED.max_running, tenant_limits.max_running),
        rate_limit = coalesce(EXCLUDED.rate_limit, tenant_limits.rate_limit),
        rate_window_ms = CASE WHEN EXCLUDED.rate_limit IS NULL THEN tenant_limits.rate_window_ms
                              ELSE EXCLUDED.rate_window_ms END,
        updated_at = now()
    RETURNING tenant_id, max_running, rate_limit, rate_window_ms, updated_at";

const SELECT_LIMITS: &str = "
    SELECT tenant_id, max_running, rate_limit, rate_window_ms, updated_at
    FROM statek.tenant_limits WHERE tenant_id = $1";

const SELECT_ALL_LIMITS: &str = "
    SELECT tenant_id, max_running, rate_limit, rate_window_ms, updated_at
    FROM statek.tenant_limits ORDER BY tenant_id";

const DELETE_LIMITS: &str = "DELETE FROM statek.tenant_limits WHERE tenant_id = $1";

/// At most `claims` claims of a tenant in any sliding window of `window`
/// (database time, counted from the claim history).
///
/// Parses from `N/UNIT` or `N/<k><UNIT>` with UNIT `ms`, `s`, `m`, `h`:
/// `10/s`, `100/m`, `5000/h`, `5/10s`, `1/250ms`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateLimit {
    claims: u32,
    window: Duration,
}

impl RateLimit {
    /// `claims` 1..=[`MAX_RATE_CLAIMS`] per `window`, a whole number of
    /// milliseconds in [`MIN_RATE_WINDOW`]..=[`MAX_RATE_WINDOW`].
    ///
    /// # Errors
    /// [`RunQueueError::InvalidLimit`](crate::RunQueueError::InvalidLimit) naming the value out of range.
    pub fn new(claims: u32, window: Duration) -> Result<Self, StoreError> {
        if !(1..=MAX_RATE_CLAIMS).contains(&claims) {
            return Err(claims_out_of_range(claims));
        }
        if !(MIN_RATE_WINDOW..=MAX_RATE_WINDOW).contains(&window)
            || window.subsec_nanos() % 1_000_000 != 0
        {
            return Err(window_out_of_range(format_args!("{window:?}")));
        }
        Ok(Self { claims, window })
    }

    /// Claims allowed per window.
    pub fn claims(&self) -> u32 {
        self.claims
    }

    /// The window.
    pub fn window(&self) -> Duration {
        self.window
    }

    fn window_ms(&self) -> i32 {
        i32::try_from(self.window.as_millis()).unwrap_or(i32::MAX)
    }
}

impl fmt::Display for RateLimit {
    /// `10/s`, `100/m`, `1/h`, `5/10s`, `1/250ms`: what [`FromStr`] reads.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = self.window.as_millis();
        let (count, unit) = if ms % 3_600_000 == 0 {
            (ms / 3_600_000, "h")
        } else if ms % 60_000 == 0 {
            (ms / 60_000, "m")
        } else if ms % 1000 == 0 {
            (ms / 1000, "s")
        } else {
            (ms, "ms")
        };
        if count == 1 {
            write!(f, "{}/{unit}", self.claims)
        } else {
            write!(f, "{}/{count}{unit}", self.claims)
        }
    }
}

/// A rate's claims out of `1..=MAX_RATE_CLAIMS`: `got` as given.
fn claims_out_of_range(got: impl fmt::Display) -> StoreError {
    StoreError::RunQueue(RunQueueError::InvalidLimit {
        detail: format!("a rate must allow 1..={MAX_RATE_CLAIMS} claims, got {got}"),
    })
}

/// A rate's window out of range or not whole milliseconds: `got` as given.
fn window_out_of_range(got: impl fmt::Display) -> StoreError {
    StoreError::RunQueue(RunQueueError::InvalidLimit {
        detail: format!("a rate window must be whole milliseconds, 1 ms..=1 h, got {got}"),
    })
}

impl FromStr for RateLimit {
    type Err = StoreError;

    fn from_str(text: &str) -> Result<Self, StoreError> {
        let bad = || {
            StoreError::RunQueue(RunQueueError::InvalidLimit {
                detail: format!(
                "rate {:?}: expected CLAIMS/WINDOW such as 10/s, 100/m, 5000/h, 5/10s or 1/250ms",
                text.chars().take(40).collect::<String>()
            ),
            })
        };
        // A whole number that does not fit (negative, or past u32 / u64) is
        // out of range, and said so, like one that fits but is too large.
        // Claims are digits (a leading `+` is not a rate a user writes).
        let digits = |t: &str| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit());
        let (claims, window) = text.trim().split_once('/').ok_or_else(bad)?;
        let claims = claims.trim();
        let claims: u32 = match claims.parse() {
            Ok(parsed) if digits(claims) => parsed,
            Err(_) if digits(claims.strip_prefix('-').unwrap_or(claims)) => {
                return Err(claims_out_of_range(
                    claims.chars().take(40).collect::<String>(),
                ))
            }
            _ => return Err(bad()),
        };
        let window = window.trim();
        let split = window.find(|c: char| !c.is_ascii_digit()).ok_or_else(bad)?;
        let (count, unit) = window.split_at(split);
        let unit_ms: u64 = match unit {
            "ms" => 1,
            "s" => 1000,
            "m" | "min" => 60_000,
            "h" => 3_600_000,
            _ => return Err(bad()),
        };
        let too_long = || {
            window_out_of_range(format_args!(
                "{}{unit}",
                count.chars().take(40).collect::<String>()
            ))
        };
        let count: u64 = if count.is_empty() {
            1
        } else {
            count.parse().map_err(|_| too_long())?
        };
        let ms = count.checked_mul(unit_ms).ok_or_else(too_long)?;
        Self::new(claims, Duration::from_millis(ms))
    }
}

/// A tenant's limits: a concurrency cap, a rate limit, or both.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TenantLimits {
    max_running: Option<u32>,
    rate: Option<RateLimit>,
}

impl TenantLimits {
    /// At most `max_running` (1..=[`MAX_RUNNING_LIMIT`]) runs of the tenant
    /// leased at once across all replicas (unexpired leases count, expired
    /// ones do not), and/or at most `rate` claims per window.
    ///
    /// # Errors
    /// [`RunQueueError::InvalidLimit`](crate::RunQueueError::InvalidLimit) for a cap out of range, or neither a
    /// cap nor a rate (clear the limits instead).
    pub fn new(max_running: Option<u32>, rate: Option<RateLimit>) -> Result<Self, StoreError> {
        if let Some(cap) = max_running {
            if !(1..=MAX_RUNNING_LIMIT).contains(&cap) {
                return Err(StoreError::RunQueue(RunQueueError::InvalidLimit {
                    detail: format!("max running must be 1..={MAX_RUNNING_LIMIT}, got {cap}"),
                }));
            }
        }
        if max_running.is_none() && rate.is_none() {
            return Err(StoreError::RunQueue(RunQueueError::InvalidLimit {
                detail: "give a max running, a rate or both (to remove limits, clear them)".into(),
            }));
        }
        Ok(Self { max_running, rate })
    }

    /// The concurrency cap.
    pub fn max_running(&self) -> Option<u32> {
        self.max_running
    }

    /// The rate limit.
    pub fn rate(&self) -> Option<RateLimit> {
        self.rate
    }
}

/// A tenant's limits as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredTenantLimits {
    /// The tenant.
    pub tenant: TenantId,
    /// Its limits.
    pub limits: TenantLimits,
    /// Database time of the last change.
    pub updated_at: SystemTime,
}

fn decode(row: &tokio_postgres::Row) -> Result<StoredTenantLimits, StoreError> {
    let tenant: String = row.try_get("tenant_id")?;
    let tenant = TenantId::try_from(tenant.as_str())
        .map_err(|e| StoreError::corrupt("tenant limits", format!("tenant id: {e}")))?;
    let cap: Option<i32> = row.try_get("max_running")?;
    let claims: Option<i32> = row.try_get("rate_limit")?;
    let window_ms: Option<i32> = row.try_get("rate_window_ms")?;
    let corrupt = |detail: String| StoreError::corrupt("tenant limits", detail);
    let max_running = cap
        .map(|c| u32::try_from(c).map_err(|_| corrupt(format!("max_running {c}"))))
        .transpose()?;
    let rate = match (claims, window_ms) {
        (None, None) => None,
        (Some(c), Some(w)) => {
            let c = u32::try_from(c).map_err(|_| corrupt(format!("rate_limit {c}")))?;
            let w = u64::try_from(w).map_err(|_| corrupt(format!("rate_window_ms {w}")))?;
            Some(RateLimit::new(c, Duration::from_millis(w)).map_err(|e| corrupt(e.to_string()))?)
        }
        _ => return Err(corrupt("a rate without its window".into())),
    };
    Ok(StoredTenantLimits {
        tenant,
        limits: TenantLimits::new(max_running, rate).map_err(|e| corrupt(e.to_string()))?,
        updated_at: row.try_get("updated_at")?,
    })
}

impl PgStore {
    /// Sets `tenant`'s limits to exactly `limits` (a cap or rate not given
    /// is removed). Applies from the next claim on; a claim in flight
    /// finishes under the old limits (the change waits for its lock).
    /// Needs the owner role (the runtime role may only read limits).
    ///
    /// # Errors
    /// [`StoreError::PermissionDenied`] for a role that may not change
    /// limits; connection and server errors.
    pub async fn set_tenant_limits(
        &self,
        tenant: &TenantId,
        limits: &TenantLimits,
    ) -> Result<StoredTenantLimits, StoreError> {
        self.write_limits(UPSERT_LIMITS, tenant, limits).await
    }

    /// Merges into `tenant`'s limits: a cap or rate given replaces the
    /// stored one, one not given (`None`) is kept (`statek limits set`).
    /// One statement, so concurrent merges of different limits all hold.
    /// Needs the owner role, like [`set_tenant_limits`](Self::set_tenant_limits).
    ///
    /// # Errors
    /// [`RunQueueError::InvalidLimit`](crate::RunQueueError::InvalidLimit) when neither is given;
    /// [`StoreError::PermissionDenied`]; connection and server errors.
    pub async fn merge_tenant_limits(
        &self,
        tenant: &TenantId,
        max_running: Option<u32>,
        rate: Option<RateLimit>,
    ) -> Result<StoredTenantLimits, StoreError> {
        // Validates the values given (at least one, each in range).
        let given = TenantLimits::new(max_running, rate)?;
        self.write_limits(MERGE_LIMITS, tenant, &given).await
    }

    /// One limits statement (`UPSERT_LIMITS` or `MERGE_LIMITS`: tenant,
    /// cap, claims, window in ms), the stored row decoded.
    async fn write_limits(
        &self,
        sql: &'static str,
        tenant: &TenantId,
        limits: &TenantLimits,
    ) -> Result<StoredTenantLimits, StoreError> {
        let cap = limits
            .max_running
            .map(|c| i32::try_from(c).unwrap_or(i32::MAX));
        let claims = limits
            .rate
            .map(|r| i32::try_from(r.claims).unwrap_or(i32::MAX));
        let window_ms = limits.rate.map(|r| r.window_ms());
        let row = self
            .with_response_timeout(async |db: &Db<'_>| {
                Ok(db
                    .query_one(
                        sql,
                        &[
                            (&tenant.as_str(), Type::TEXT),
                            (&cap, Type::INT4),
                            (&claims, Type::INT4),
                            (&window_ms, Type::INT4),
                        ],
                    )
                    .await?)
            })
            .await?;
        decode(&row)
    }

    /// `tenant`'s limits, `None` when it has none.
    ///
    /// # Errors
    /// Connection and server errors; [`StoreError::CorruptData`] for a row
    /// that does not decode.
    pub async fn tenant_limits(
        &self,
        tenant: &TenantId,
    ) -> Result<Option<StoredTenantLimits>, StoreError> {
        let row = self
            .with_response_timeout(async |db: &Db<'_>| {
                Ok(db
                    .query_opt(SELECT_LIMITS, &[(&tenant.as_str(), Type::TEXT)])
                    .await?)
            })
            .await?;
        row.as_ref().map(decode).transpose()
    }

    /// Every tenant's limits, by tenant id.
    ///
    /// # Errors
    /// As [`tenant_limits`](Self::tenant_limits).
    pub async fn all_tenant_limits(&self) -> Result<Vec<StoredTenantLimits>, StoreError> {
        let rows = self
            .with_response_timeout(async |db: &Db<'_>| Ok(db.query(SELECT_ALL_LIMITS, &[]).await?))
            .await?;
        rows.iter().map(decode).collect()
    }

    /// Removes `tenant`'s limits; returns whether it had any.
    ///
    /// # Errors
    /// As [`set_tenant_limits`](Self::set_tenant_limits).
    pub async fn clear_tenant_limits(&self, tenant: &TenantId) -> Result<bool, StoreError> {
        self.with_response_timeout(async |db: &Db<'_>| {
            Ok(db
                .execute(DELETE_LIMITS, &[(&tenant.as_str(), Type::TEXT)])
                .await?
                == 1)
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(text: &str, expected: Option<(u32, u64)>) {
        let parsed = text.parse::<RateLimit>().ok();
        assert_eq!(
            parsed.map(|r| (r.claims(), r.window().as_millis() as u64)),
            expected,
            "{text}"
        );
        if let Some(rate) = parsed {
            assert_eq!(rate.to_string().parse::<RateLimit>().ok(), Some(rate));
        }
    }

    #[test]
    fn rates_parse() {
        check("10/s", Some((10, 1000)));
        check("100/m", Some((100, 60_000)));
        check("5000/h", Some((5000, 3_600_000)));
        check("5/10s", Some((5, 10_000)));
        check("1/250ms", Some((1, 250)));
        check(" 7 / 2m ", Some((7, 120_000)));
        check("0/s", None);
        check("-1/s", None);
        check("10", None);
        check("10/", None);
        check("10/d", None);
        check("10/2h", None);
        check("10/0s", None);
        check("1000001/s", None);
        check("99999999999999999999/s", None);
        check("1/99999999999999999999h", None);
        check("x/s", None);
    }

    /// A whole number out of range is named with its range, whatever its
    /// size or sign; anything else is shown the expected shape.
    #[test]
    fn bad_rates_say_what_is_wrong() {
        let message = |text: &str| match text.parse::<RateLimit>() {
            Err(StoreError::RunQueue(RunQueueError::InvalidLimit { detail })) => detail,
            other => panic!("{text}: {other:?}"),
        };
        for (text, detail) in [
            ("-1/s", "a rate must allow 1..=1000000 claims, got -1"),
            ("4294967296/s", "a rate must allow 1..=1000000 claims, got 4294967296"),
            ("1000001/s", "a rate must allow 1..=1000000 claims, got 1000001"),
            (
                "5/99999999999999999999h",
                "a rate window must be whole milliseconds, 1 ms..=1 h, got 99999999999999999999h",
            ),
            (
                "5/9999999999999999s",
                "a rate window must be whole milliseconds, 1 ms..=1 h, got 9999999999999999s",
            ),
            (
                "x/s",
                "rate \"x/s\": expected CLAIMS/WINDOW such as 10/s, 100/m, 5000/h, 5/10s or 1/250ms",
            ),
            (
                "+5/s",
                "rate \"+5/s\": expected CLAIMS/WINDOW such as 10/s, 100/m, 5000/h, 5/10s or 1/250ms",
            ),
            (
                "5/1d",
                "rate \"5/1d\": expected CLAIMS/WINDOW such as 10/s, 100/m, 5000/h, 5/10s or 1/250ms",
            ),
        ] {
            assert_eq!(message(text), detail, "{text}");
        }
    }

    #[test]
    fn rates_print() {
        let print = |text: &str| text.parse::<RateLimit>().unwrap().to_string();
        assert_eq!(print("10/1000ms"), "10/s");
        assert_eq!(print("10/60s"), "10/m");
        assert_eq!(print("3/90s"), "3/90s");
        assert_eq!(print("1/1500ms"), "1/1500ms");
    }

    #[test]
    fn caps() {
        assert!(TenantLimits::new(Some(0), None).is_err());
        assert!(TenantLimits::new(Some(1), None).is_ok());
        assert!(TenantLimits::new(Some(MAX_RUNNING_LIMIT), None).is_ok());
        assert!(TenantLimits::new(Some(MAX_RUNNING_LIMIT + 1), None).is_err());
        assert!(TenantLimits::new(None, None).is_err());
        let rate = RateLimit::new(1, Duration::from_secs(1)).unwrap();
        assert!(TenantLimits::new(None, Some(rate)).is_ok());
        assert!(RateLimit::new(1, Duration::from_micros(1500)).is_err());
    }
}
