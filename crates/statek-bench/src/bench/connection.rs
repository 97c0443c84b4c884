//! The bench's plain PostgreSQL client connections, with statek's
//! reading of the URL.

use anyhow::{Context, Result};

use crate::pg;

/// A plain client for `url`, with statek's reading of the URL (TLS
/// settings included).
pub(crate) async fn connect(url: &str) -> Result<tokio_postgres::Client> {
    let client = statek_store_pg::StoreConfig::from_url(url)?
        .connect_client()
        .await
        .with_context(|| format!("connecting to {}", pg::redact(url)))?;
    Ok(client)
}
