//! Cost mode's ledger as stored (migration V19): each tenant's balance in
//! the ledger of a shard's schedule ([`PgStore::cost_balances`]).

use statek_policy::{SchedulerShardId, TenantId};
use tokio_postgres::types::Type;

use crate::statement::Db;
use crate::{PgStore, StoreError};

/// One tenant's standing in cost mode's ledger of a schedule, in cost
/// units: the credit its slots granted (cut to `b_cap` above its charges),
/// what its attempts were charged, and the balance, their difference
/// (negative: in debt).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct CostBalance {
    /// The tenant.
    pub tenant: TenantId,
    /// Credit granted so far (`statek.cost_credits.credit`; 0 before its
    /// first slot was decided).
    pub credit: i128,
    /// Charged so far: the sum of its partial sums
    /// (`statek.cost_charges`), each attempt charged once.
    pub charged: i128,
    /// `credit − charged`.
    pub balance: i128,
}

/// Per tenant of the ledger of `$1`'s schedule: credit and charges, as
/// text (numeric has no native decoder here; the values are integers).
const COST_BALANCES: &str = "
    WITH schedule AS (
        SELECT s.schedule_id FROM statek.scheduler_shards AS s WHERE s.shard_id = $1
    ),
    tenants AS (
        SELECT c.tenant_id FROM statek.cost_credits AS c, schedule
        WHERE c.schedule_id = schedule.schedule_id
        UNION
        SELECT g.tenant_id FROM statek.cost_charges AS g, schedule
        WHERE g.schedule_id = schedule.schedule_id
    )
    SELECT t.tenant_id,
           coalesce((SELECT c.credit FROM statek.cost_credits AS c, schedule
                     WHERE c.schedule_id = schedule.schedule_id AND c.tenant_id = t.tenant_id),
                    0)::text AS credit,
           coalesce((SELECT sum(g.charged) FROM statek.cost_charges AS g, schedule
                     WHERE g.schedule_id = schedule.schedule_id AND g.tenant_id = t.tenant_id),
                    0)::text AS charged
    FROM tenants AS t
    ORDER BY t.tenant_id COLLATE \"C\"";

impl PgStore {
    /// Every tenant's standing in the cost ledger of `shard`'s schedule
    /// (sorted by tenant id; empty for a slot-mode schedule or one whose
    /// slots nothing claimed for yet). A tenant's first cost-mode slot
    /// starts it at balance 0, so its credit then equals its charges.
    ///
    /// # Errors
    /// [`crate::MigrationError::Behind`] before migration V19;
    /// [`StoreError::CorruptData`] for a value that is not an integer;
    /// connection and server errors.
    pub async fn cost_balances(
        &self,
        shard: &SchedulerShardId,
    ) -> Result<Vec<CostBalance>, StoreError> {
        let rows = self
            .with_response_timeout(async |db: &Db<'_>| {
                Ok(db
                    .query(COST_BALANCES, &[(&shard.as_str(), Type::TEXT)])
                    .await?)
            })
            .await
            .map_err(|e| e.schema_behind(19, "the cost ledger"))?;
        rows.iter()
            .map(|row| {
                let tenant: String = row.try_get("tenant_id")?;
                let number = |column: &str| -> Result<i128, StoreError> {
                    let text: String = row.try_get(column)?;
                    text.parse().map_err(|_| {
                        StoreError::corrupt("cost ledger", format!("{column} {text} of {tenant}"))
                    })
                };
                let (credit, charged) = (number("credit")?, number("charged")?);
                Ok(CostBalance {
                    tenant: TenantId::try_from(tenant.as_str()).map_err(|e| {
                        StoreError::corrupt("cost ledger", format!("tenant {tenant}: {e}"))
                    })?,
                    credit,
                    charged,
                    balance: credit - charged,
                })
            })
            .collect()
    }
}
