//! Database URLs: from a flag or an environment variable, never printed
//! with a password.

use anyhow::{anyhow, Result};
use statek_store_pg::{DurabilityPolicy, PgStore, StoreConfig, StoreError};

/// Connection options shared by every command that talks to PostgreSQL.
#[derive(Debug, Clone, clap::Args)]
pub struct DbArgs {
    /// PostgreSQL URL or key-value connection string. Default: $DATABASE_URL.
    /// Use the owner role for migrate, roles, rollout, limits set|clear and
    /// demo (it migrates), the runtime role for register, status, limits
    /// show and runs list|cancel|retry, the retention role for prune and
    /// runs prune.
    #[arg(long, env = "DATABASE_URL", hide_env_values = true, value_name = "URL")]
    pub database_url: Option<String>,
    /// The URL points at a pooler in transaction mode (PgBouncer
    /// `pool_mode = transaction`): send unnamed statements and no startup
    /// options; lock_timeout and statement_timeout must then be set for the
    /// role (docs/operations.md). Default: $STATEK_TRANSACTION_POOLING (1, true, yes, on or 0,
    /// false, no, off; any other value is a usage error).
    #[arg(long, env = "STATEK_TRANSACTION_POOLING", value_parser = clap::builder::BoolishValueParser::new())]
    pub transaction_pooling: bool,
    /// A direct connection (PostgreSQL itself, not a transaction-mode pool)
    /// for LISTEN and migrations under --transaction-pooling. Default:
    /// $STATEK_DIRECT_DATABASE_URL.
    #[arg(
        long,
        env = "STATEK_DIRECT_DATABASE_URL",
        hide_env_values = true,
        value_name = "URL"
    )]
    pub direct_database_url: Option<String>,
    /// What the durability check (at register and Worker start) refuses:
    /// `require` refuses fsync/full_page_writes off, a synchronous_commit
    /// without flush and asynchronous standbys; `allow-async-standbys`
    /// accepts asynchronous standbys; `none` only reports (tests, demos).
    #[arg(long, env = "STATEK_DURABILITY", value_enum, default_value_t = Durability::Require)]
    pub durability: Durability,
}

/// The `--durability` values (`statek_store_pg::DurabilityPolicy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Durability {
    /// Refuse every risk (the default).
    Require,
    /// Accept asynchronous or invisible standbys.
    AllowAsyncStandbys,
    /// Accept everything and only report it (tests, demos).
    None,
}

impl From<Durability> for DurabilityPolicy {
    fn from(value: Durability) -> Self {
        match value {
            Durability::Require => DurabilityPolicy::Require,
            Durability::AllowAsyncStandbys => DurabilityPolicy::AllowAsynchronousStandbys,
            Durability::None => DurabilityPolicy::AllowNoDurability,
        }
    }
}

impl DbArgs {
    /// A store with its own pool of `pool_size` connections.
    pub fn store(&self, pool_size: usize) -> Result<PgStore> {
        let url = self.url()?;
        let mut config = StoreConfig::from_url(url)?
            .pool_size(pool_size)?
            .transaction_pooling(self.transaction_pooling)
            .durability_policy(self.durability.into());
        if let Some(direct) = &self.direct_database_url {
            config = config.direct_url(direct)?;
        }
        Ok(PgStore::new(config)?)
    }

    /// The URL, or an error saying how to give one (exit code
    /// [`CONFIGURATION`](crate::exit::CONFIGURATION), also for an empty one).
    pub fn url(&self) -> Result<&str> {
        match self.database_url.as_deref() {
            Some(url) if !url.trim().is_empty() => Ok(url),
            Some(_) => Err(anyhow!(crate::exit::Configuration(
                "the database URL is empty: pass --database-url or set DATABASE_URL".into()
            ))),
            None => Err(anyhow!(crate::exit::Configuration(
                "no database: pass --database-url or set DATABASE_URL".into()
            ))),
        }
    }

    /// The URL without its password, for messages.
    pub fn redacted(&self) -> String {
        self.database_url.as_deref().map(redact).unwrap_or_default()
    }
}

/// `error`, and when the connected role lacks a privilege
/// ([`StoreError::PermissionDenied`], exit 7) the role the command needs
/// before it: `statek: error: rollout needs the owner role ...: permission
/// denied: ...`. The store error stays in the chain (its exit code, its
/// message).
pub fn needs_role(error: StoreError, hint: &'static str) -> anyhow::Error {
    match error {
        StoreError::PermissionDenied { .. } => anyhow::Error::new(error).context(hint),
        other => other.into(),
    }
}

/// Replaces every password in a connection string with `***`: the
/// `user:password@` part and a `password=` query parameter of a URL, or a
/// `password=` pair of a key-value string.
pub fn redact(url: &str) -> String {
    let Some(scheme_end) = url.find("://").map(|i| i + 3) else {
        return redact_key_value(url);
    };
    let (scheme, rest) = url.split_at(scheme_end);
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    let authority = match authority.rfind('@') {
        Some(at) => match authority[..at].find(':') {
            Some(colon) => format!("{}:***{}", &authority[..colon], &authority[at..]),
            None => authority.to_owned(),
        },
        None => authority.to_owned(),
    };
    let tail = match tail.split_once('?') {
        Some((path, query)) => {
            let query: Vec<String> = query
                .split('&')
                .map(|pair| {
                    if pair.starts_with("password=") {
                        "password=***".to_owned()
                    } else {
                        pair.to_owned()
                    }
                })
                .collect();
            format!("{path}?{}", query.join("&"))
        }
        None => tail.to_owned(),
    };
    format!("{scheme}{authority}{tail}")
}

fn redact_key_value(text: &str) -> String {
    // `password = 'a b'` forms: hide everything after the key up to the
    // next unquoted space.
    let mut out = String::new();
    let mut rest = text;
    while let Some(pos) = rest.find("password") {
        let (before, after) = rest.split_at(pos);
        out.push_str(before);
        let after_key = &after["password".len()..];
        let trimmed = after_key.trim_start();
        if let Some(value) = trimmed.strip_prefix('=') {
            let value = value.trim_start();
            let end = if let Some(quoted) = value.strip_prefix('\'') {
                quoted.find('\'').map(|i| i + 2).unwrap_or(value.len())
            } else {
                value.find(char::is_whitespace).unwrap_or(value.len())
            };
            out.push_str("password=***");
            rest = &value[end..];
        } else {
            out.push_str("password");
            rest = after_key;
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(error: StoreError, rendered: &str, code: u8) {
        let error = needs_role(error, "x needs the owner role");
        assert_eq!(
            (crate::exit::render(&error), crate::exit::code_for(&error)),
            (rendered.to_owned(), code)
        );
    }

    #[test]
    fn only_a_permission_error_names_the_role_needed() {
        check(
            StoreError::PermissionDenied {
                message: "permission denied for table scheduler_shards".into(),
            },
            "x needs the owner role: permission denied: permission denied for table \
             scheduler_shards",
            crate::exit::PERMISSION_DENIED,
        );
        check(
            StoreError::InvalidArgument("bad".into()),
            "invalid argument: bad",
            crate::exit::INVALID_INPUT,
        );
    }

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
