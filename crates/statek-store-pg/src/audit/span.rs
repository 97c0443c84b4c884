//! Which span to audit: the sequences of the range rows reserved between
//! two times ([`PgStore::sequences_reserved_between`]).

use std::ops::Range;
use std::time::SystemTime;

use statek_policy::SchedulerShardId;
use tokio_postgres::types::Type;

use super::to_u64;
use crate::statement::Db;
use crate::{PgStore, StoreError};

const SELECT_BETWEEN: &str = "
    SELECT (SELECT min(r.sequence) FROM statek.scheduler_reservations AS r
            WHERE r.shard_id = $1 AND r.reserved_at >= $2 AND r.reserved_at < $3) AS first,
           (SELECT max(r.sequence + r.sequence_count) FROM statek.scheduler_reservations AS r
            WHERE r.shard_id = $1 AND r.reserved_at >= $2 AND r.reserved_at < $3) AS last";

impl PgStore {
    /// The sequences of `shard`'s retained range rows reserved (database
    /// time) at or after `from` and before `to`, from the first such row's
    /// first sequence to the last one's end: the span
    /// [`audit_shard`](Self::audit_shard) takes. Empty (`0..0`) when none.
    ///
    /// # Errors
    /// Connection and server errors.
    pub async fn sequences_reserved_between(
        &self,
        shard: &SchedulerShardId,
        from: SystemTime,
        to: SystemTime,
    ) -> Result<Range<u64>, StoreError> {
        let shard = shard.as_str();
        let row = self
            .with_response_timeout(async |db: &Db<'_>| {
                Ok(db
                    .query_one(
                        SELECT_BETWEEN,
                        &[
                            (&shard, Type::TEXT),
                            (&from, Type::TIMESTAMPTZ),
                            (&to, Type::TIMESTAMPTZ),
                        ],
                    )
                    .await?)
            })
            .await?;
        let first: Option<i64> = row.try_get("first")?;
        let last: Option<i64> = row.try_get("last")?;
        match (first, last) {
            (Some(first), Some(last)) => {
                Ok(to_u64(first, "reservation range")?..to_u64(last, "reservation range")?)
            }
            _ => Ok(0..0),
        }
    }
}
