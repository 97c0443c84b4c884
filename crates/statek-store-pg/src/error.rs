//! The store's one error type, and the single place where SQLSTATE codes are
//! mapped to conditions.

pub use crate::error_family::{
    ConnectionError, DurabilityError, MigrationError, ReservationError, RolloutError,
    RunQueueError, TlsFailure,
};
use tokio_postgres::error::SqlState;

/// SQLSTATE raised by statek's immutability triggers (see `migrations/V1`).
pub(crate) const IMMUTABLE_ROW_SQLSTATE: &str = "SK001";

/// SQLSTATE of a claim or finish the evidence functions refused (migration
/// V11): a slot not reserved on its shard, a tenant not the cycle's, a
/// shard without a slot map, a malformed call.
pub(crate) const CLAIM_REFUSED_SQLSTATE: &str = "SK002";

/// Everything that can go wrong in `statek-store-pg`.
///
/// Callers decide whether to retry with [`StoreError::is_retryable`]; nobody
/// should match on message text.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// Reaching the server (connection string, TLS, pool, timeouts, transaction pooling, standbys): see [`ConnectionError`].
    #[error(transparent)]
    Connection(#[from] ConnectionError),
    /// What can lose acknowledged reservations (durability settings, failovers, halts): see [`DurabilityError`].
    #[error(transparent)]
    Durability(#[from] DurabilityError),
    /// Policies, shards and schedules (registration, seals, successors): see [`RolloutError`].
    #[error(transparent)]
    Rollout(#[from] RolloutError),
    /// Reserving slots (idempotency ids, the sequence): see [`ReservationError`].
    #[error(transparent)]
    Reservation(#[from] ReservationError),
    /// The run queue (enqueue, claim, finish, limits, priorities): see [`RunQueueError`].
    #[error(transparent)]
    RunQueue(#[from] RunQueueError),
    /// The schema's migrations: see [`MigrationError`].
    #[error(transparent)]
    Migration(#[from] MigrationError),
    /// Stored data failed a consistency check (digest, cycle length, cursor,
    /// slot). statek refuses to act on it.
    #[error("corrupt data in {what}: {detail}")]
    CorruptData {
        /// Which record.
        what: &'static str,
        /// What did not hold.
        detail: String,
    },
    /// An immutability trigger refused an update or delete.
    #[error("refused by the database: {message}")]
    ImmutableRow {
        /// The trigger's message.
        message: String,
    },
    /// The connected role lacks a privilege (SQLSTATE 42501).
    #[error("permission denied: {message}")]
    PermissionDenied {
        /// The server's message.
        message: String,
    },
    /// An invalid configuration value or argument, rejected before anything
    /// was sent to the database.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// Any other server-side error, with its SQLSTATE.
    #[error("database error {code}: {message}")]
    Database {
        /// SQLSTATE, five characters.
        code: String,
        /// The server's message.
        message: String,
        /// The underlying error.
        #[source]
        error: tokio_postgres::Error,
    },
}

/// What a driver error's cause chain holds, for classification.
enum Cause<'a> {
    Tls(&'a rustls::Error),
    /// A host name rustls cannot use (not a DNS name or IP address).
    BadServerName,
    Io,
    Other,
    Nothing,
}

/// The first telling cause below `err`: a rustls error or an unusable
/// server name anywhere in the chain, else whether an I/O error is in it.
/// An `io::Error` hides what it wraps from `source()` (it returns the
/// wrapped error's own source), so it is also looked into with `get_ref`.
fn cause_of(err: &tokio_postgres::Error) -> Cause<'_> {
    let mut next = std::error::Error::source(err);
    let mut found = Cause::Nothing;
    while let Some(current) = next {
        let io = current.downcast_ref::<std::io::Error>();
        let wrapped = io
            .and_then(std::io::Error::get_ref)
            .map(|inner| inner as &(dyn std::error::Error + 'static));
        for candidate in [Some(current), wrapped].into_iter().flatten() {
            if let Some(tls) = candidate.downcast_ref::<rustls::Error>() {
                return Cause::Tls(tls);
            }
            if candidate
                .downcast_ref::<rustls::pki_types::InvalidDnsNameError>()
                .is_some()
            {
                return Cause::BadServerName;
            }
        }
        if io.is_some() {
            found = Cause::Io;
        } else if matches!(found, Cause::Nothing) {
            found = Cause::Other;
        }
        next = current.source();
    }
    found
}

/// SQLSTATEs with which a server refuses a connection for good.
fn is_rejection_sqlstate(code: &str) -> bool {
    matches!(code, "28000" | "28P01" | "3D000")
}

/// SQLSTATEs of a statement naming a function, column or table the
/// database does not have (`undefined_function`, `undefined_column`,
/// `undefined_table`): a schema older than the binary.
const UNDEFINED_OBJECT_SQLSTATES: [&str; 3] = ["42883", "42703", "42P01"];

impl StoreError {
    /// This error as [`MigrationError::Behind`] when the database lacks a
    /// function, column or table the statement named (its schema is older
    /// than migration `version`, which `needed_for` needs); any other error
    /// unchanged.
    pub(crate) fn schema_behind(self, version: u32, needed_for: &'static str) -> StoreError {
        match self {
            StoreError::Database { ref code, .. }
                if UNDEFINED_OBJECT_SQLSTATES.contains(&code.as_str()) =>
            {
                StoreError::Migration(MigrationError::Behind {
                    version,
                    needed_for,
                })
            }
            other => other,
        }
    }

    /// True for permanent configuration errors: the connection string, its
    /// TLS settings and files, the server's certificate, the server's
    /// refusal of the role, password or database, and under transaction
    /// pooling a role without statek's session settings or a missing
    /// direct connection, or a `synchronous_commit` overridden in statek's
    /// own transaction, or a database not migrated to what a call needs.
    /// Retrying never helps; the settings (or the schema) must change.
    /// Never retryable.
    pub fn is_configuration(&self) -> bool {
        matches!(
            self,
            StoreError::Connection(ConnectionError::InvalidConnectionString(_))
                | StoreError::Connection(ConnectionError::TlsConfiguration { .. })
                | StoreError::Connection(ConnectionError::Tls { .. })
                | StoreError::Connection(ConnectionError::Rejected { .. })
                | StoreError::Connection(ConnectionError::Settings { .. })
                | StoreError::Connection(ConnectionError::SessionSettingMismatch { .. })
                | StoreError::Connection(ConnectionError::DirectConnectionRequired { .. })
                | StoreError::Durability(DurabilityError::NotInForce { .. })
                | StoreError::Migration(MigrationError::Behind { .. })
        ) || matches!(self, StoreError::Database { code, .. } if code == PROTOCOL_VIOLATION)
    }

    /// Classifies an error of opening a connection: as [`From`], except
    /// that a driver error with neither an I/O cause nor a closed
    /// connection (the driver refused these settings) is
    /// [`ConnectionError::Settings`](crate::ConnectionError::Settings).
    pub(crate) fn from_connect(err: tokio_postgres::Error) -> Self {
        if err.as_db_error().is_some() || err.is_closed() {
            return StoreError::from(err);
        }
        match cause_of(&err) {
            Cause::Other | Cause::BadServerName => {
                StoreError::Connection(ConnectionError::Settings { source: err })
            }
            _ => StoreError::from(err),
        }
    }

    /// True for transient conditions where retrying the same call (with the
    /// same reservation id) is safe and may succeed: connection loss, pool
    /// timeout, serialization failure (40001), deadlock (40P01), lock not
    /// available (55P03), query cancelled or timed out (57014), server
    /// shutdown (57P01, 57P02, 57P03), and too many connections (53300:
    /// the server is at `max_connections`, which frees as other clients
    /// disconnect).
    pub fn is_retryable(&self) -> bool {
        match self {
            StoreError::Connection(ConnectionError::Lost(_))
            | StoreError::Connection(ConnectionError::PoolTimeout(_))
            | StoreError::Connection(ConnectionError::InRecovery)
            | StoreError::Connection(ConnectionError::ResponseTimeout { .. }) => true,
            StoreError::Database { code, .. } => is_retryable_sqlstate(code),
            _ => false,
        }
    }

    /// The SQLSTATE of a server error, if this is one.
    pub fn sqlstate(&self) -> Option<&str> {
        match self {
            StoreError::Database { code, .. }
            | StoreError::Connection(ConnectionError::Rejected { code, .. }) => Some(code),
            StoreError::PermissionDenied { .. } => Some(SqlState::INSUFFICIENT_PRIVILEGE.code()),
            StoreError::ImmutableRow { .. } => Some(IMMUTABLE_ROW_SQLSTATE),
            StoreError::RunQueue(RunQueueError::ClaimRefused { .. }) => {
                Some(CLAIM_REFUSED_SQLSTATE)
            }
            _ => None,
        }
    }

    pub(crate) fn corrupt(what: &'static str, detail: impl Into<String>) -> Self {
        StoreError::CorruptData {
            what,
            detail: detail.into(),
        }
    }
}

/// Whether a server error of SQLSTATE `code` is transient, so that the
/// same call may be sent again: `08xxx` (connection exceptions) but
/// `08P01`, `25006` (read-only transaction: a server in recovery),
/// `40001`, `40P01`, `53300` (too many connections), `55P03`, `57014`,
/// `57P01`-`57P03`. [`StoreError::is_retryable`] applies it to
/// [`StoreError::Database`]; docs/design.md lists the same codes.
pub fn is_retryable_sqlstate(code: &str) -> bool {
    matches!(
        code,
        "40001" | "40P01" | "55P03" | "57014" | "57P01" | "57P02" | "57P03" | "25006" | "53300"
    ) || (code.starts_with("08") && code != PROTOCOL_VIOLATION)
}

/// SQLSTATE 08P01: the server refused what the client sent, e.g. PgBouncer
/// before 1.20 refusing the `options` startup parameter
/// (`unsupported startup parameter: options`: use transaction pooling
/// mode). A configuration error, never retryable.
const PROTOCOL_VIOLATION: &str = "08P01";

/// A value echoed in an error, cut to 64 bytes (at a character boundary)
/// with the full length noted.
pub(crate) fn truncated(value: &str) -> String {
    const MAX: usize = 64;
    if value.len() <= MAX {
        return value.to_owned();
    }
    let mut end = MAX;
    while !value.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…({} bytes)", &value[..end], value.len())
}

impl From<tokio_postgres::Error> for StoreError {
    fn from(err: tokio_postgres::Error) -> Self {
        let Some(db) = err.as_db_error() else {
            // A TLS failure is permanent; anything else without a server
            // answer (closed connection, I/O error, protocol error) is not.
            return match cause_of(&err) {
                Cause::Tls(tls) => StoreError::Connection(ConnectionError::Tls {
                    failure: TlsFailure::of(tls),
                    source: err,
                }),
                _ => StoreError::Connection(ConnectionError::Lost(err)),
            };
        };
        let code = db.code().code().to_owned();
        let message = db.message().to_owned();
        if is_rejection_sqlstate(&code) {
            return StoreError::Connection(ConnectionError::Rejected {
                code,
                message,
                source: err,
            });
        }
        if db.code() == &SqlState::INSUFFICIENT_PRIVILEGE {
            return StoreError::PermissionDenied { message };
        }
        if code == IMMUTABLE_ROW_SQLSTATE {
            return StoreError::ImmutableRow { message };
        }
        if code == CLAIM_REFUSED_SQLSTATE {
            return StoreError::RunQueue(RunQueueError::ClaimRefused { message });
        }
        StoreError::Database {
            code,
            message,
            error: err,
        }
    }
}

impl From<deadpool_postgres::PoolError> for StoreError {
    fn from(err: deadpool_postgres::PoolError) -> Self {
        use deadpool_postgres::{PoolError, TimeoutType};
        match err {
            PoolError::Timeout(TimeoutType::Wait) => {
                StoreError::Connection(ConnectionError::PoolTimeout("wait"))
            }
            PoolError::Timeout(TimeoutType::Create) => {
                StoreError::Connection(ConnectionError::PoolTimeout("create"))
            }
            PoolError::Timeout(TimeoutType::Recycle) => {
                StoreError::Connection(ConnectionError::PoolTimeout("recycle"))
            }
            PoolError::Backend(e) => StoreError::from_connect(e),
            other => StoreError::Connection(ConnectionError::Pool(other.to_string())),
        }
    }
}

impl From<refinery::Error> for StoreError {
    fn from(err: refinery::Error) -> Self {
        use refinery::error::Kind;
        match err.kind() {
            Kind::DivergentVersion(applied, local) => {
                StoreError::Migration(MigrationError::Divergent {
                    version: applied.version(),
                    applied_name: applied.name().to_owned(),
                    local_name: local.name().to_owned(),
                })
            }
            Kind::MissingVersion(applied) => StoreError::Migration(MigrationError::Missing {
                version: applied.version(),
                name: applied.name().to_owned(),
            }),
            _ => {
                // A server refusal inside a migration keeps its meaning.
                let mut source = std::error::Error::source(&err);
                while let Some(cause) = source {
                    if let Some(db) = cause
                        .downcast_ref::<tokio_postgres::Error>()
                        .and_then(tokio_postgres::Error::as_db_error)
                    {
                        if db.code() == &SqlState::INSUFFICIENT_PRIVILEGE {
                            return StoreError::PermissionDenied {
                                message: db.message().to_owned(),
                            };
                        }
                    }
                    source = cause.source();
                }
                StoreError::Migration(MigrationError::Failed(Box::new(err)))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(code: &str, retryable: bool) {
        assert_eq!(is_retryable_sqlstate(code), retryable, "sqlstate {code}");
    }

    #[test]
    fn retryable_sqlstates() {
        check("40001", true); // serialization_failure
        check("40P01", true); // deadlock_detected
        check("55P03", true); // lock_not_available
        check("53300", true); // too_many_connections: frees as clients leave
        check("57014", true); // query_canceled (statement_timeout)
        check("57P01", true); // admin_shutdown
        check("57P02", true); // crash_shutdown
        check("57P03", true); // cannot_connect_now
        check("25006", true); // read_only_sql_transaction (a standby, mid-failover)
        check("08006", true); // connection_failure
        check("08P01", false); // protocol_violation (PgBouncer refusing `options`)
        check("23505", false); // unique_violation
        check("42501", false); // insufficient_privilege
        check("42P01", false); // undefined_table
        check("SK001", false); // statek immutability trigger
        check("22003", false); // numeric_value_out_of_range
    }

    #[test]
    fn pool_timeouts_are_retryable() {
        assert!(StoreError::Connection(ConnectionError::PoolTimeout("wait")).is_retryable());
        assert!(!StoreError::InvalidArgument("x".into()).is_retryable());
        assert!(!StoreError::corrupt("shard", "x").is_retryable());
    }
}
