//! Wake-ups: `LISTEN statek_runs`, fed by the trigger that notifies when a
//! run becomes claimable.

use crate::ConnectionError;
use std::time::Duration;

use futures_util::StreamExt;
use statek_core::{run_notifications, RunNotifications};
use statek_policy::TenantId;
use tokio_postgres::AsyncMessage;

use crate::{PgStore, StoreError};

/// The channel the run-queue triggers notify (payload: the tenant id).
pub const RUNS_CHANNEL: &str = "statek_runs";

impl PgStore {
    /// Opens a dedicated (unpooled) connection and listens for runs that
    /// become claimable. Cheap to keep open for the lifetime of a worker.
    ///
    /// The connection is the direct one when
    /// [`crate::StoreConfig::direct_url`] is set. It uses TCP keepalives
    /// (idle 30 s, every 10 s, 3 probes) and sends an empty query every
    /// [`crate::StoreConfig::listen_probe_interval`]; a probe without an
    /// answer within the response timeout ends it with
    /// [`ConnectionError::ResponseTimeout`](crate::ConnectionError::ResponseTimeout) on the stream, so a silent link is
    /// reported instead of waiting forever.
    ///
    /// # Errors
    /// [`ConnectionError::DirectConnectionRequired`](crate::ConnectionError::DirectConnectionRequired) under transaction pooling
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
                .map_err(|_| {
                    StoreError::Connection(ConnectionError::ResponseTimeout {
                        after: answer_within,
                    })
                })?
                .map_err(StoreError::from_connect)?;
        let (wakeups, notifications) = run_notifications();
        let report = wakeups.clone();
        let driver = tokio::spawn(async move {
            let mut messages = futures_util::stream::poll_fn(move |cx| connection.poll_message(cx));
            while let Some(message) = messages.next().await {
                match message {
                    Ok(AsyncMessage::Notification(n)) => {
                        // A payload that is not a tenant id is not ours to act on.
                        // Full: dropped, and the reader is told.
                        if let Ok(tenant) = TenantId::try_from(n.payload()) {
                            wakeups.wake(tenant);
                        }
                    }
                    Ok(_) => {}
                    Err(e) => {
                        wakeups.fail(StoreError::from(e).into()).await;
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
                return Err(StoreError::Connection(ConnectionError::ResponseTimeout {
                    after: answer_within,
                }));
            }
        }
        tokio::spawn(async move {
            let outcome = loop {
                tokio::select! {
                    () = report.closed() => break None,
                    _ = tokio::time::sleep(probe_every) => {}
                }
                match tokio::time::timeout(answer_within, client.simple_query("")).await {
                    Ok(Ok(_)) => {}
                    Ok(Err(e)) => break Some(StoreError::from(e)),
                    Err(_) => {
                        break Some(StoreError::Connection(ConnectionError::ResponseTimeout {
                            after: answer_within,
                        }))
                    }
                }
            };
            // Stop reading a link that may never answer, then report.
            driver.abort();
            if let Some(error) = outcome {
                tracing::warn!(error = %error, "the LISTEN connection stopped answering");
                report.fail(error.into()).await;
            }
            drop(client);
        });
        Ok(notifications)
    }
}
