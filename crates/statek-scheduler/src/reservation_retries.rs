//! The retry rule of a scheduler's reservation calls: transient errors
//! retried with the same reservation id and bounded backoff
//! ([`SchedulerOptions`]), the reservation counters and latency recorded
//! on success.

use statek_core::SourceError;
use statek_policy::SchedulerShardId;
use uuid::Uuid;

use crate::error::SchedulerError;
use crate::options::SchedulerOptions;

/// Runs one reservation call (single or batch, keyed by `id`), retrying
/// transient errors with the same id and bounded backoff; counts
/// `reservations` reservations and the call's latency on success.
pub(crate) async fn with_retries<T, F, Fut>(
    options: &SchedulerOptions,
    shard: &SchedulerShardId,
    id: Uuid,
    reservations: u64,
    call: F,
) -> Result<(T, u32), SchedulerError>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<T, SourceError>>,
{
    let started = std::time::Instant::now();
    let mut retries = 0;
    loop {
        match call().await {
            Ok(reserved) => {
                let shard_label = shard.to_string();
                metrics::counter!(crate::metrics::RESERVATIONS_TOTAL, "shard" => shard_label.clone())
                    .increment(reservations);
                metrics::histogram!(crate::metrics::RESERVATION_DURATION_SECONDS, "shard" => shard_label)
                    .record(started.elapsed().as_secs_f64());
                return Ok((reserved, retries));
            }
            Err(e) if e.is_retryable() && retries + 1 < options.attempts() => {
                let backoff = options.backoff(retries);
                tracing::warn!(
                    shard = %shard, reservation_id = %id, retry = retries + 1,
                    backoff_ms = backoff.as_millis() as u64, error = %crate::error::chain(&e),
                    "reservation failed transiently; retrying with the same id"
                );
                metrics::counter!(
                    crate::metrics::RESERVATION_RETRIES_TOTAL,
                    "shard" => shard.to_string()
                )
                .increment(1);
                tokio::time::sleep(backoff).await;
                retries += 1;
            }
            Err(source) => return Err(SchedulerError::Source { source, retries }),
        }
    }
}
