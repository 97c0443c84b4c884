//! What each tenant got from one side of the demo (statek or the plain
//! FIFO queue), read back from PostgreSQL: the runs as stored with their
//! claim history, in database time.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, SystemTime};

use anyhow::Result;
use statek_policy::TenantId;
use statek_store_pg::input_limits::MAX_RUN_HISTORY_BATCH;
use statek_store_pg::{PgStore, RunRecord};

use super::workload::Arrival;

/// One side's runs as stored, and when it started.
pub struct SideEvidence {
    /// "statek" or "FIFO".
    pub name: &'static str,
    /// The runs it enqueued, in enqueue order.
    pub arrivals: Vec<Arrival>,
    /// The stored runs, by run id.
    pub records: HashMap<uuid::Uuid, RunRecord>,
    /// Database time at which its workers started.
    pub origin: SystemTime,
}

impl SideEvidence {
    /// Reads the runs of `arrivals` back from PostgreSQL.
    pub async fn read(
        store: &PgStore,
        name: &'static str,
        arrivals: Vec<Arrival>,
        origin: Option<SystemTime>,
    ) -> Result<Self> {
        let mut records = HashMap::new();
        let ids: Vec<uuid::Uuid> = arrivals.iter().map(|a| a.run_id).collect();
        for chunk in ids.chunks(MAX_RUN_HISTORY_BATCH) {
            for record in store.run_history(chunk).await? {
                records.insert(record.run_id, record);
            }
        }
        // Without a backlog the workers started at about the first arrival.
        let origin = origin
            .or_else(|| records.values().map(|r| r.available_at).min())
            .unwrap_or(SystemTime::UNIX_EPOCH);
        Ok(Self {
            name,
            arrivals,
            records,
            origin,
        })
    }

    /// Per-tenant figures.
    pub fn service(&self) -> BTreeMap<TenantId, TenantService> {
        let mut out: BTreeMap<TenantId, TenantService> = BTreeMap::new();
        for arrival in &self.arrivals {
            let entry = out.entry(arrival.tenant.clone()).or_default();
            entry.enqueued += 1;
            let Some(record) = self.records.get(&arrival.run_id) else {
                continue;
            };
            let claimed = record
                .claims
                .first()
                .map(|c| c.claimed_at)
                .or(record.claimed_at);
            if let Some(claimed) = claimed {
                entry
                    .lag_ms
                    .push(millis_between(record.available_at, claimed));
            }
            if let Some(finished) = record.finished_at.filter(|_| record.state == "completed") {
                entry
                    .completed_ms
                    .push(millis_between(self.origin, finished));
            }
            if let (Some(cursor), Some(sequence)) = (
                arrival.cursor_at_enqueue,
                record
                    .claims
                    .first()
                    .and_then(|c| c.slot.as_ref().map(|s| s.1)),
            ) {
                entry
                    .lag_reservations
                    .push(sequence.saturating_sub(cursor) as f64);
            }
        }
        for entry in out.values_mut() {
            entry.lag_ms.sort_by(f64::total_cmp);
            entry.completed_ms.sort_by(f64::total_cmp);
            entry.lag_reservations.sort_by(f64::total_cmp);
        }
        out
    }

    /// Completed runs per second while the workers were saturated: from
    /// the start to the last completion of `backlog_tenant`'s runs (after
    /// that, the rate only follows the trickle), with the number of runs
    /// completed by then and the seconds it took. Database time.
    pub fn throughput(&self, backlog_tenant: &TenantId) -> (u64, f64, f64) {
        let completed = |r: &&RunRecord| r.state == "completed";
        let end = self
            .records
            .values()
            .filter(completed)
            .filter(|r| &r.tenant == backlog_tenant)
            .filter_map(|r| r.finished_at)
            .max()
            .or_else(|| {
                self.records
                    .values()
                    .filter(completed)
                    .filter_map(|r| r.finished_at)
                    .max()
            })
            .unwrap_or(self.origin);
        let runs = self
            .records
            .values()
            .filter(completed)
            .filter(|r| r.finished_at.is_some_and(|f| f <= end))
            .count() as u64;
        let seconds = millis_between(self.origin, end) / 1000.0;
        (runs, runs as f64 / seconds.max(1e-9), seconds)
    }

    /// Runs of this side that finished (completed or failed for good).
    pub fn finished_runs(&self) -> usize {
        self.records
            .values()
            .filter(|r| r.finished_at.is_some())
            .count()
    }

    /// The small tenants' service lags (ms) pooled, sorted.
    pub fn pooled_lag_ms(&self, tenants: &[TenantId]) -> Vec<f64> {
        let service = self.service();
        let mut all: Vec<f64> = tenants
            .iter()
            .filter_map(|t| service.get(t))
            .flat_map(|s| s.lag_ms.iter().copied())
            .collect();
        all.sort_by(f64::total_cmp);
        all
    }
}

/// One tenant's service on one side.
#[derive(Debug, Default)]
pub struct TenantService {
    pub enqueued: u64,
    /// Runnable to first claim, ms, sorted.
    pub lag_ms: Vec<f64>,
    /// Runnable to first claim in reservations (statek only), sorted.
    pub lag_reservations: Vec<f64>,
    /// Completion times since the side started, ms, sorted.
    pub completed_ms: Vec<f64>,
}

/// Milliseconds from `from` to `to` (0 when `to` is earlier).
pub fn millis_between(from: SystemTime, to: SystemTime) -> f64 {
    to.duration_since(from)
        .unwrap_or(Duration::ZERO)
        .as_secs_f64()
        * 1000.0
}

/// Nearest-rank percentile of sorted values; `None` when empty.
pub fn percentile(sorted: &[f64], p: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

/// "p50/p99" of sorted values, rounded; "-" when empty.
pub fn percentiles(sorted: &[f64]) -> String {
    match (percentile(sorted, 50.0), percentile(sorted, 99.0)) {
        (Some(p50), Some(p99)) => format!("{p50:.0}/{p99:.0}"),
        _ => "-".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&v, 50.0), Some(50.0));
        assert_eq!(percentile(&v, 99.0), Some(99.0));
        assert_eq!(percentile(&[7.0], 99.0), Some(7.0));
        assert_eq!(percentile(&[], 99.0), None);
        assert_eq!(percentiles(&[]), "-");
        assert_eq!(percentiles(&[1.0, 2.0, 3.0]), "2/3");
    }
}
