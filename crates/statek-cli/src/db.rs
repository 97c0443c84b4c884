//! Database URLs: from a flag or an environment variable, never printed
//! with a password.

use anyhow::{anyhow, Result};
use statek_store_pg::{PgStore, StoreConfig};

/// Connection options shared by every command that talks to PostgreSQL.
#[derive(Debug, Clone, clap::Args)]
pub struct DbArgs {
    /// PostgreSQL URL or key-value connection string. Default: $DATABASE_URL.
    /// Use the owner role for migrate and roles, the runtime role for register,
    /// status and demo, the retention role for prune.
    #[arg(long, env = "DATABASE_URL", hide_env_values = true, value_name = "URL")]
    pub database_url: Option<String>,
}

impl DbArgs {
    /// A store with its own pool of `pool_size` connections.
    pub fn store(&self, pool_size: usize) -> Result<PgStore> {
        let url = self.url()?;
        Ok(PgStore::new(
            StoreConfig::from_url(url)?.pool_size(pool_size)?,
        )?)
    }

    /// The URL, or an error saying how to give one.
    pub fn url(&self) -> Result<&str> {
        self.database_url.as_deref().ok_or_else(|| {
            anyhow!(crate::exit::InvalidInput(
                "no database: pass --database-url or set DATABASE_URL".into()
            ))
        })
    }

    /// The URL without its password, for messages.
    pub fn redacted(&self) -> String {
        self.database_url.as_deref().map(redact).unwrap_or_default()
    }
}

/// Replaces the password of a URL (`scheme://user:password@host`) or of a
/// key-value string (`password=...`) with `***`.
pub fn redact(url: &str) -> String {
    if let Some((scheme, rest)) = url.split_once("://") {
        if let Some((userinfo, host)) = rest.split_once('@') {
            if let Some((user, _password)) = userinfo.split_once(':') {
                return format!("{scheme}://{user}:***@{host}");
            }
        }
        return url.to_owned();
    }
    url.split_whitespace()
        .map(|part| {
            if part.starts_with("password=") {
                "password=***".to_owned()
            } else {
                part.to_owned()
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_never_show() {
        assert_eq!(
            redact("postgres://u:secret@h:5432/db"),
            "postgres://u:***@h:5432/db"
        );
        assert_eq!(redact("postgres://u@h/db"), "postgres://u@h/db");
        assert_eq!(
            redact("host=h user=u password=secret dbname=d"),
            "host=h user=u password=*** dbname=d"
        );
    }
}
