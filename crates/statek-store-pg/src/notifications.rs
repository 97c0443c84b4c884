//! Wake-ups: `LISTEN statek_runs`, fed by the trigger that notifies when a
//! run becomes claimable.

use futures_util::StreamExt;
use statek_policy::TenantId;
use tokio::sync::mpsc;
use tokio_postgres::AsyncMessage;

use crate::{PgStore, StoreError};

/// The channel the run-queue triggers notify (payload: the tenant id).
pub const RUNS_CHANNEL: &str = "statek_runs";

/// How many undelivered wake-ups are kept; more are dropped, since one
/// pending wake-up is as good as many.
const BUFFERED_WAKEUPS: usize = 256;

/// A dedicated connection listening on [`RUNS_CHANNEL`]. Each message names
/// a tenant that has a run claimable now. Dropping it closes the
/// connection.
#[derive(Debug)]
pub struct RunNotifications {
    rx: mpsc::Receiver<Result<TenantId, StoreError>>,
    // Keeps the connection open: it closes when the client is dropped.
    _client: tokio_postgres::Client,
}

impl RunNotifications {
    /// The next wake-up: `Some(Ok(tenant))`; `Some(Err(_))` once if the
    /// connection failed; `None` after that (listen again to resume).
    pub async fn recv(&mut self) -> Option<Result<TenantId, StoreError>> {
        self.rx.recv().await
    }
}

impl PgStore {
    /// Opens a dedicated (unpooled) connection and listens for runs that
    /// become claimable. Cheap to keep open for the lifetime of a worker.
    ///
    /// # Errors
    /// Connection and server errors.
    pub async fn listen_for_runs(&self) -> Result<RunNotifications, StoreError> {
        let (client, mut connection) = self
            .config()
            .pooled_pg_config()
            .connect(self.config().tls_connector()?)
            .await
            .map_err(StoreError::from_connect)?;
        let (tx, rx) = mpsc::channel(BUFFERED_WAKEUPS);
        tokio::spawn(async move {
            let mut messages = futures_util::stream::poll_fn(move |cx| connection.poll_message(cx));
            while let Some(message) = messages.next().await {
                match message {
                    Ok(AsyncMessage::Notification(n)) => {
                        // A payload that is not a tenant id is not ours to act on.
                        if let Ok(tenant) = TenantId::try_from(n.payload()) {
                            // Full: a wake-up is already pending; drop this one.
                            let _ = tx.try_send(Ok(tenant));
                        }
                    }
                    Ok(_) => {}
                    Err(e) => {
                        let _ = tx.send(Err(StoreError::from(e))).await;
                        return;
                    }
                }
            }
        });
        client
            .batch_execute(&format!("LISTEN {RUNS_CHANNEL}"))
            .await?;
        Ok(RunNotifications {
            rx,
            _client: client,
        })
    }
}
