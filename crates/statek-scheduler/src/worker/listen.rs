//! A [`Worker`](super::Worker)'s notification connection: each run
//! notification of one of the policy's tenants wakes the Worker and ends
//! its idle streak; a failed connection is opened again, pausing between
//! attempts, while the backoff probe covers for it.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use statek_core::{ReservationSource, RunNotifications, TenantExecutor};
use tokio_util::sync::CancellationToken;

use super::shared::{work_found, Shared};

/// Pause before listening again after the notification connection failed,
/// doubling from the first to the second value between attempts.
const RELISTEN_PAUSE: (Duration, Duration) = (Duration::from_secs(1), Duration::from_secs(30));

/// Whether a Worker's notification connection listens, as its executor
/// hears it ([`TenantExecutor::notifications_listening`]): told on every
/// change, and "stopped" when dropped (the listening task ended or was
/// aborted).
struct ListenState<'a, E: TenantExecutor> {
    executor: &'a E,
    listening: bool,
}

impl<E: TenantExecutor> ListenState<'_, E> {
    fn set(&mut self, listening: bool) {
        if self.listening != listening {
            self.listening = listening;
            self.executor.notifications_listening(listening);
        }
    }
}

impl<E: TenantExecutor> Drop for ListenState<'_, E> {
    fn drop(&mut self) {
        self.set(false);
    }
}

/// Wakes the worker on run notifications; listens again when they fail.
pub(super) async fn listen<E: TenantExecutor, R: ReservationSource>(
    shared: Arc<Shared<E, R>>,
    mut n: RunNotifications,
    stop: CancellationToken,
) {
    let executor = shared.scheduler.executor();
    let mut state = ListenState {
        executor,
        listening: false,
    };
    state.set(true);
    loop {
        let message = tokio::select! {
            () = stop.cancelled() => return,
            message = n.recv() => message,
        };
        match message {
            Some(Ok(tenant)) => {
                if n.take_missed() {
                    // Wake-ups were dropped unread: any tenant may have
                    // been notified, so forget which are known empty.
                    executor.notifications_missed();
                }
                // Only the policy's tenants: runs of others can never take
                // a slot, so their notifications must not end a backoff.
                if shared.scheduler.policy().tenant_index(&tenant).is_none() {
                    continue;
                }
                executor.run_notified(&tenant);
                shared.counters.wakeups.fetch_add(1, Ordering::Relaxed);
                work_found(&shared);
                shared.wake.notify_waiters();
                continue;
            }
            Some(Err(e)) => {
                tracing::warn!(error = %crate::error::chain(&e), "run notifications failed; listening again, meanwhile relying on the backoff probe");
            }
            None => {
                tracing::warn!("run notifications ended; listening again, meanwhile relying on the backoff probe");
            }
        }
        // Listen again, pausing 1 s doubling to 30 s between attempts. Work
        // notified meanwhile is found by the backoff probe, and by claims:
        // nothing is skipped as known empty while no connection listens.
        state.set(false);
        let mut pause = RELISTEN_PAUSE.0;
        n = loop {
            tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep(pause) => {}
            }
            match executor.listen_for_runs().await {
                Some(Ok(fresh)) => break fresh,
                None => {
                    tracing::warn!(
                        "the executor has no run notifications; relying on the backoff probe"
                    );
                    return;
                }
                Some(Err(e)) => {
                    tracing::warn!(error = %crate::error::chain(&e), "cannot listen for runs yet");
                    pause = (pause * 2).min(RELISTEN_PAUSE.1);
                }
            }
        };
        state.set(true);
        shared
            .counters
            .listen_reconnects
            .fetch_add(1, Ordering::Relaxed);
        tracing::info!("listening for runs again");
    }
}
