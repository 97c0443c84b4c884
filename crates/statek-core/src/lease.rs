//! Keeping a claimed run's lease while its handler runs: shared by every
//! executor that leases runs.

use std::future::Future;
use std::pin::pin;
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::handler::RunResult;

/// Whether the executor still holds a claimed run's lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaseState {
    /// Held (as far as the executor knows).
    Held,
    /// The local deadline passed without a heartbeat; the token may still
    /// be valid in the queue.
    ExpiredLocally,
    /// A heartbeat found the token gone: someone else owns the run, or it
    /// was cancelled.
    LostOnServer,
}

/// What one heartbeat found.
pub enum Heartbeat {
    /// The lease was extended.
    Extended,
    /// The token no longer holds the run.
    Lost,
    /// The heartbeat could not be recorded (e.g. a connection error); the
    /// lease keeps its old deadline.
    Failed,
}

/// Margin by which a local lease deadline precedes the queue's: a fifth of
/// the lease, at least 20 ms, at most 5 s.
pub fn lease_margin(lease: Duration) -> Duration {
    (lease / 5).clamp(Duration::from_millis(20), Duration::from_secs(5))
}

/// Runs `handler`, calling `heartbeat` every `heartbeat_every`. Fires
/// `cancel` when a heartbeat finds the lease lost, or when the local lease
/// deadline passes without a successful heartbeat: the deadline counts from
/// `claim_sent` (before the claim was sent) or from before the last
/// successful heartbeat was sent, and ends a margin before the lease, so the
/// handler is told to stop before anyone else can claim the run. Returns
/// the handler's result, the lease state at its end, and the latest time
/// the queue may still hold the lease: the local deadline plus its margin
/// (after it, the run may have been claimed again).
pub async fn run_under_lease<HF>(
    handler: impl Future<Output = RunResult>,
    run_id: Uuid,
    lease: Duration,
    heartbeat_every: Option<Duration>,
    claim_sent: Instant,
    cancel: &CancellationToken,
    mut heartbeat: impl FnMut() -> HF,
) -> (RunResult, LeaseState, Instant)
where
    HF: Future<Output = Heartbeat>,
{
    let mut handler = pin!(handler);
    let margin = lease_margin(lease);
    let mut deadline = claim_sent + lease.saturating_sub(margin);
    let mut next_heartbeat = heartbeat_every.map(|p| Instant::now() + p);
    let mut state = LeaseState::Held;
    loop {
        let heartbeat_due = async {
            match next_heartbeat {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            result = &mut handler => return (result, state, deadline + margin),
            _ = heartbeat_due, if state == LeaseState::Held => {
                let sent = Instant::now();
                next_heartbeat = heartbeat_every.map(|p| sent + p);
                match heartbeat().await {
                    Heartbeat::Extended => deadline = sent + lease.saturating_sub(margin),
                    Heartbeat::Lost => {
                        tracing::warn!(run_id = %run_id, "lease lost; cancelling handler");
                        state = LeaseState::LostOnServer;
                        cancel.cancel();
                    }
                    Heartbeat::Failed => {}
                }
            }
            _ = tokio::time::sleep_until(deadline), if state == LeaseState::Held => {
                tracing::warn!(run_id = %run_id, "lease about to expire; cancelling handler");
                state = LeaseState::ExpiredLocally;
                cancel.cancel();
            }
        }
    }
}
