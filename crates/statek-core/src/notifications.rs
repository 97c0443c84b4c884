//! Run wake-ups: a bounded channel of tenants whose runs became
//! claimable, filled by a queue's listener ([`RunWakeups`]) and read by a
//! Worker ([`RunNotifications`]), with no store type on either end.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use statek_policy::TenantId;
use tokio::sync::mpsc;

use crate::source_error::SourceError;

/// How many undelivered wake-ups a channel keeps (tenants); more are
/// dropped, and [`RunNotifications::take_missed`] says so.
pub const BUFFERED_WAKEUPS: usize = 256;

/// A new wake-up channel: the listener keeps the [`RunWakeups`], the
/// Worker reads the [`RunNotifications`] (through
/// [`crate::TenantExecutor::listen_for_runs`]). Holds at most
/// [`BUFFERED_WAKEUPS`] unread wake-ups.
pub fn run_notifications() -> (RunWakeups, RunNotifications) {
    let (tx, rx) = mpsc::channel(BUFFERED_WAKEUPS);
    let missed = Arc::new(AtomicBool::new(false));
    let wakeups = RunWakeups {
        tx,
        missed: Arc::clone(&missed),
        failed: Arc::new(AtomicBool::new(false)),
    };
    (wakeups, RunNotifications { rx, missed })
}

/// The sending end: a listener (statek-store-pg's `LISTEN statek_runs`
/// connection, or an in-memory queue) wakes tenants through it and reports
/// its one failure. Cloning it shares the channel.
#[derive(Debug, Clone)]
pub struct RunWakeups {
    tx: mpsc::Sender<Result<TenantId, SourceError>>,
    missed: Arc<AtomicBool>,
    failed: Arc<AtomicBool>,
}

impl RunWakeups {
    /// Wakes `tenant` (a run of it is claimable now), without waiting: when
    /// [`BUFFERED_WAKEUPS`] wait unread, this one is dropped and the reader
    /// is told that some were missed. Returns `false` once the reader is
    /// gone.
    pub fn wake(&self, tenant: TenantId) -> bool {
        match self.tx.try_send(Ok(tenant)) {
            Ok(()) => true,
            Err(mpsc::error::TrySendError::Full(_)) => {
                self.missed.store(true, Ordering::SeqCst);
                true
            }
            Err(mpsc::error::TrySendError::Closed(_)) => false,
        }
    }

    /// Reports that the listener failed (its connection broke or stopped
    /// answering): the reader receives `error` after the wake-ups already
    /// sent, then the end of the channel once every sender is gone. Only
    /// the first failure of a channel is delivered, whichever clone sees it.
    pub async fn fail(&self, error: SourceError) {
        if !self.failed.swap(true, Ordering::SeqCst) {
            let _ = self.tx.send(Err(error)).await;
        }
    }

    /// Resolves when the reader has dropped its [`RunNotifications`]: the
    /// listener should close its connection then.
    pub fn closed(&self) -> impl Future<Output = ()> + Send + '_ {
        self.tx.closed()
    }
}

/// The reading end: each message names a tenant that has a run claimable
/// now. Dropping it tells the listener to stop
/// ([`RunWakeups::closed`]).
#[derive(Debug)]
pub struct RunNotifications {
    rx: mpsc::Receiver<Result<TenantId, SourceError>>,
    missed: Arc<AtomicBool>,
}

impl RunNotifications {
    /// The next wake-up: `Some(Ok(tenant))`; `Some(Err(_))` once if the
    /// listener failed; `None` after that, or when every sender is gone
    /// (listen again to resume).
    pub async fn recv(&mut self) -> Option<Result<TenantId, SourceError>> {
        self.rx.recv().await
    }

    /// Whether wake-ups were dropped since the last call, because
    /// [`BUFFERED_WAKEUPS`] were waiting unread; clears it. A consumer that
    /// acts on which tenant was notified (the Worker's idle tenants) must
    /// then treat every tenant as notified.
    pub fn take_missed(&self) -> bool {
        self.missed.swap(false, Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source_error::SourceErrorKind;

    fn tenant(id: &str) -> TenantId {
        TenantId::try_from(id).expect("valid tenant id")
    }

    /// Wake-ups arrive in order; past the buffer they are dropped and
    /// counted as missed once; only the first failure is delivered, after
    /// the wake-ups sent before it; the channel then ends.
    #[tokio::test]
    async fn wakeups_overflow_and_one_failure() {
        let (wakeups, mut notifications) = run_notifications();
        for _ in 0..BUFFERED_WAKEUPS {
            assert!(wakeups.wake(tenant("a")));
        }
        assert!(!notifications.take_missed());
        assert!(wakeups.wake(tenant("b")));
        assert!(notifications.take_missed());
        assert!(!notifications.take_missed());
        for _ in 0..BUFFERED_WAKEUPS {
            let got = notifications.recv().await.expect("a wake-up");
            assert_eq!(got.expect("not a failure"), tenant("a"));
        }
        let twin = wakeups.clone();
        wakeups
            .fail(SourceError::new(
                SourceErrorKind::Transient,
                "connection reset",
            ))
            .await;
        twin.fail(SourceError::new(SourceErrorKind::Other, "second"))
            .await;
        let failure = notifications.recv().await.expect("the failure");
        let error = failure.expect_err("a failure");
        assert_eq!(error.kind(), SourceErrorKind::Transient);
        assert_eq!(error.get_ref().to_string(), "connection reset");
        drop((wakeups, twin));
        assert!(notifications.recv().await.is_none());
    }

    /// Dropping the reader resolves `closed` and makes `wake` say so.
    #[tokio::test]
    async fn dropping_the_reader_closes_the_channel() {
        let (wakeups, notifications) = run_notifications();
        drop(notifications);
        wakeups.closed().await;
        assert!(!wakeups.wake(tenant("a")));
    }
}
