//! Wake-ups: `LISTEN statek_runs`, fed by the trigger that notifies when a
//! run becomes claimable.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use statek_policy::TenantId;
use tokio::sync::{mpsc, oneshot};
use tokio_postgres::AsyncMessage;

use crate::{PgStore, StoreError};

/// The channel the run-queue triggers notify (payload: the tenant id).
pub const RUNS_CHANNEL: &str = "statek_runs";

/// How many undelivered wake-ups are kept; more are dropped, and
/// [`RunNotifications::take_missed`] says so.
pub const BUFFERED_WAKEUPS: usize = 256;

/// A dedicated connection listening on [`RUNS_CHANNEL`]. Each message names
/// a tenant that has a run claimable now. Dropping it closes the
/// connection.
#[derive(Debug)]
pub struct RunNotifications {
    rx: mpsc::Receiver<Result<TenantId, StoreError>>,
    /// Set when a wake-up was dropped because [`BUFFERED_WAKEUPS`] were
    /// waiting unread.
    missed: Arc<AtomicBool>,
    // Dropped with `self`: tells the probe task to close the connection.
    _close: oneshot::Sender<()>,
}

impl RunNotifications {
    /// The next wake-up: `Some(Ok(tenant))`; `Some(Err(_))` once if the
    /// connection failed or stopped answering its probe
    /// ([`StoreError::ResponseTimeout`], see
    /// [`crate::StoreConfig::listen_probe_interval`]); `None` after that
    /// (listen again to resume).
    pub async fn recv(&mut self) -> Option<Result<TenantId, StoreError>> {
        self.rx.recv().await
    }

    /// Whether wake-ups were dropped since the last call, because
    /// [`BUFFERED_WAKEUPS`] were waiting unread; clears it. A consumer
    /// that acts on which tenant was notified (statek-scheduler's idle
    /// tenants) must then treat every tenant as notified.
    pub fn take_missed(&self) -> bool {
        self.missed.swap(false, Ordering::SeqCst)
    }
}

/// Sends the connection's one error, whichever task sees it first.
#[derive(Clone)]
struct Report {
    tx: mpsc::Sender<Result<TenantId, StoreError>>,
    sent: Arc<AtomicBool>,
}

impl Report {
    async fn failed(&self, error: StoreError) {
        if !self.sent.swap(true, Ordering::SeqCst) {
            let _ = self.tx.send(Err(error)).await;
        }
    }
}

impl PgStore {
    /// Opens a dedicated (unpooled) connection and listens for runs that
    /// become claimable. Cheap to keep open for the lifetime of a worker.
    ///
    /// The connection is the direct one when
    /// [`crate::StoreConfig::direct_url`] is set. It uses TCP keepalives
    /// (idle 30 s, every 10 s, 3 probes) and sends an empty query every
    /// [`crate::StoreConfig::listen_probe_interval`]; a probe without an
    /// answer within the response timeout ends it with
    /// [`StoreError::ResponseTimeout`] on the stream, so a silent link is
    /// reported instead of waiting forever.
    ///
    /// # Errors
    /// [`StoreError::DirectConnectionRequired`] under transaction pooling
    /// without a direct connection; connection and server errors.
    pub async fn listen_for_runs(&self) -> Result<RunNotifications, StoreError> {
        let mut pg = self.config().session_pg_config("LISTEN")?;
        pg.keepalives(true)
            .keepalives_idle(Duration::from_secs(30))
            .keepalives_interval(Duration::from_secs(10))
            .keepalives_retries(3);
        let probe_every = self.config().effective_listen_probe_interval();
        let answer_within = self.config().effective_response_timeout();
        let (client, mut connection) =
            tokio::time::timeout(answer_within, pg.connect(self.config().tls_connector()?))
                .await
                .map_err(|_| StoreError::ResponseTimeout {
                    after: answer_within,
                })?
                .map_err(StoreError::from_connect)?;
        let (tx, rx) = mpsc::channel(BUFFERED_WAKEUPS);
        let report = Report {
            tx: tx.clone(),
            sent: Arc::new(AtomicBool::new(false)),
        };
        let driver_report = report.clone();
        let missed = Arc::new(AtomicBool::new(false));
        let driver_missed = Arc::clone(&missed);
        let driver = tokio::spawn(async move {
            let mut messages = futures_util::stream::poll_fn(move |cx| connection.poll_message(cx));
            while let Some(message) = messages.next().await {
                match message {
                    Ok(AsyncMessage::Notification(n)) => {
                        // A payload that is not a tenant id is not ours to act on.
                        if let Ok(tenant) = TenantId::try_from(n.payload()) {
                            // Full: drop this one, and say so.
                            if tx.try_send(Ok(tenant)).is_err() {
                                driver_missed.store(true, Ordering::SeqCst);
                            }
                        }
                    }
                    Ok(_) => {}
                    Err(e) => {
                        driver_report.failed(StoreError::from(e)).await;
                        return;
                    }
                }
            }
        });
        let listened = tokio::time::timeout(
            answer_within,
            client.batch_execute(&format!("LISTEN {RUNS_CHANNEL}")),
        )
        .await;
        match listened {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                driver.abort();
                return Err(e.into());
            }
            Err(_) => {
                driver.abort();
                return Err(StoreError::ResponseTimeout {
                    after: answer_within,
                });
            }
        }
        let (close, mut closed) = oneshot::channel::<()>();
        tokio::spawn(async move {
            let outcome = loop {
                tokio::select! {
                    _ = &mut closed => break None,
                    _ = tokio::time::sleep(probe_every) => {}
                }
                match tokio::time::timeout(answer_within, client.simple_query("")).await {
                    Ok(Ok(_)) => {}
                    Ok(Err(e)) => break Some(StoreError::from(e)),
                    Err(_) => {
                        break Some(StoreError::ResponseTimeout {
                            after: answer_within,
                        })
                    }
                }
            };
            // Stop reading a link that may never answer, then report.
            driver.abort();
            if let Some(error) = outcome {
                tracing::warn!(error = %error, "the LISTEN connection stopped answering");
                report.failed(error).await;
            }
            drop(client);
        });
        Ok(RunNotifications {
            rx,
            missed,
            _close: close,
        })
    }
}
