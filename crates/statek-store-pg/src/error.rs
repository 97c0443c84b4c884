//! The store's one error type, and the single place where SQLSTATE codes are
//! mapped to conditions.

use statek_policy::{PolicyDigest, ScheduleId, SchedulerShardId};

use crate::durability_report::{DurabilityReport, DurabilityRisk, SynchronousCommit};
use crate::lost_reservations::LostReservations;
use crate::shard_halt::ShardHalted;
use tokio_postgres::error::SqlState;
use uuid::Uuid;

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
    /// The shard is already bound to different canonical policy bytes.
    /// Nothing was written. A policy change needs a new shard id.
    #[error(
        "shard {shard} is bound to policy {stored}, not {offered}: a policy change needs a new shard id"
    )]
    PolicyConflict {
        /// The shard.
        shard: SchedulerShardId,
        /// Digest of the policy stored in the database.
        stored: PolicyDigest,
        /// Digest of the policy offered by the caller.
        offered: PolicyDigest,
    },
    /// The shard has not been registered.
    #[error("shard {shard} is not registered")]
    UnknownShard {
        /// The shard.
        shard: SchedulerShardId,
    },
    /// The shard is sealed (a rollout moved its schedule on): it accepts no
    /// new reservation. Its sequences are `0..sealed_at_sequence`; the
    /// schedule goes on at `successor`. Nothing was written. Replicas follow
    /// the chain to the successor.
    #[error(
        "shard {shard} is sealed at sequence {sealed_at_sequence} (its last sequence is the one before): its successor is {successor}"
    )]
    ShardSealed {
        /// The sealed shard.
        shard: SchedulerShardId,
        /// `N`: the cursor at the seal.
        sealed_at_sequence: u64,
        /// The shard that goes on from the seal.
        successor: SchedulerShardId,
    },
    /// The shard succeeds a shard that is not sealed naming it, so it
    /// accepts no reservation yet (the database prevents this state; see
    /// migration V8). Nothing was written.
    #[error("shard {shard} accepts no reservation before its predecessor {predecessor} is sealed")]
    PredecessorNotSealed {
        /// The successor.
        shard: SchedulerShardId,
        /// Its predecessor.
        predecessor: SchedulerShardId,
    },
    /// A rollout from a shard that is not the live shard of its schedule
    /// (it is sealed already). Nothing was written.
    #[error(
        "shard {shard} is not the live shard of schedule {schedule}: it was sealed at sequence {sealed_at_sequence}; roll out from {live}"
    )]
    NotLiveShard {
        /// The shard the rollout was asked from.
        shard: SchedulerShardId,
        /// Its schedule.
        schedule: ScheduleId,
        /// Where it was sealed.
        sealed_at_sequence: u64,
        /// The live shard of the schedule.
        live: SchedulerShardId,
    },
    /// A rollout's successor shard id is already registered: a successor is
    /// always a new shard id. Nothing was written.
    #[error("shard {shard} is already registered: a rollout needs a new shard id as successor")]
    SuccessorExists {
        /// The successor's shard id.
        shard: SchedulerShardId,
    },
    /// The shard belongs to another schedule than the one asked for (a
    /// different chain). Nothing was written.
    #[error("shard {shard} belongs to schedule {stored}, not {offered}")]
    ScheduleConflict {
        /// The shard.
        shard: SchedulerShardId,
        /// Its stored schedule.
        stored: ScheduleId,
        /// The schedule the caller named.
        offered: ScheduleId,
    },
    /// A new shard cannot join a schedule that already has shards except as
    /// the successor of its live shard. Nothing was written.
    #[error(
        "schedule {schedule} already has the live shard {live}: change its policy with `statek rollout` (a new shard joins a schedule only as a successor)"
    )]
    ScheduleHasLiveShard {
        /// The schedule.
        schedule: ScheduleId,
        /// Its live shard.
        live: SchedulerShardId,
    },
    /// A reservation was asked for with a policy digest other than the one
    /// the shard is bound to (a replica running another policy).
    #[error("shard {shard} is bound to policy {stored}, but the caller runs {offered}")]
    PolicyDigestMismatch {
        /// The shard.
        shard: SchedulerShardId,
        /// Digest stored for the shard.
        stored: PolicyDigest,
        /// Digest the caller presented.
        offered: PolicyDigest,
    },
    /// The reservation id already names a reservation on another shard,
    /// under another policy digest, or a row of a reservation batch.
    /// Nothing was written.
    #[error("reservation {reservation_id} already exists for another shard, policy or batch")]
    ReservationConflict {
        /// The reservation id that was reused.
        reservation_id: Uuid,
    },
    /// The batch id already names a reservation batch on another shard,
    /// under another policy digest or of another size. Nothing was written.
    #[error("reservation batch {batch_id} already exists with other arguments: {detail}")]
    BatchConflict {
        /// The batch id that was reused.
        batch_id: Uuid,
        /// What differs.
        detail: String,
    },
    /// A slot of a claim for a batch of slots had already claimed a run
    /// (the claim history holds one run per shard and sequence, ever).
    /// Nothing of the call was kept: no run was claimed.
    #[error("a slot of shard {shard} already claimed a run")]
    SlotAlreadyClaimed {
        /// The shard.
        shard: SchedulerShardId,
    },
    /// The shard's cursor reached `i64::MAX`; no further sequence exists.
    #[error("shard {shard} has exhausted its sequence space")]
    SequenceExhausted {
        /// The shard.
        shard: SchedulerShardId,
    },
    /// Stored data failed a consistency check (digest, cycle length, cursor,
    /// slot). statek refuses to act on it.
    #[error("corrupt data in {what}: {detail}")]
    CorruptData {
        /// Which record.
        what: &'static str,
        /// What did not hold.
        detail: String,
    },
    /// A run-queue state change found that the caller no longer holds the
    /// run's lease (its token no longer matches, or the run left `running`).
    #[error("lease on run {run_id} was lost")]
    LeaseLost {
        /// The run.
        run_id: Uuid,
    },
    /// The idempotency key already names a run of the tenant with a
    /// different payload. Nothing was written.
    #[error("idempotency key already used by run {run_id} with another payload")]
    IdempotencyConflict {
        /// The existing run.
        run_id: Uuid,
    },
    /// A tenant limit value is out of range or incomplete (a cap of 0, a
    /// rate without a window, ...). Nothing was written.
    #[error("invalid tenant limit: {detail}")]
    InvalidLimit {
        /// Which value and its range.
        detail: String,
    },
    /// A run priority outside [`crate::MIN_PRIORITY`]..=[`crate::MAX_PRIORITY`].
    #[error("priority must be {min}..={max}, got {priority}")]
    InvalidPriority {
        /// The priority given.
        priority: i32,
        /// The lowest accepted.
        min: i32,
        /// The highest accepted.
        max: i32,
    },
    /// A bulk enqueue of more runs (or payload bytes) than one statement
    /// takes. Nothing was written.
    #[error("bulk enqueue of {runs} runs and {bytes} payload bytes, at most {max_runs} runs and {max_bytes} bytes per call")]
    EnqueueBatchTooLarge {
        /// Runs given.
        runs: usize,
        /// Payload bytes given.
        bytes: usize,
        /// Most runs per call.
        max_runs: usize,
        /// Most payload bytes per call.
        max_bytes: usize,
    },
    /// No run has this id (never enqueued, or pruned).
    #[error("run {run_id} does not exist")]
    RunNotFound {
        /// The run.
        run_id: Uuid,
    },
    /// An operator action that the run's state does not allow (retrying a
    /// run that is not failed or cancelled). Nothing changed.
    #[error("run {run_id} is {state}: {action} needs a run that is {needs}")]
    RunStateConflict {
        /// The run.
        run_id: Uuid,
        /// Its state now.
        state: String,
        /// What was asked (`retry`, `cancel`).
        action: &'static str,
        /// The states the action accepts.
        needs: &'static str,
    },
    /// An immutability trigger refused an update or delete.
    #[error("refused by the database: {message}")]
    ImmutableRow {
        /// The trigger's message.
        message: String,
    },
    /// The database's claim and finish functions refused what they were
    /// asked to record (SQLSTATE SK002, migration V11): a slot in no
    /// reservation range of its shard, a tenant that is not the cycle's
    /// tenant at the slot, a shard without a slot map (registered before
    /// migration V6: roll it out to a new shard), or a malformed call.
    /// Nothing was written.
    #[error("claim refused by the database: {message}")]
    ClaimRefused {
        /// The function's message.
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
    /// The connection string does not parse, names no host or user, has an
    /// unknown parameter or an invalid value. The message never repeats
    /// the string (it may hold a password). Not retryable.
    #[error("invalid connection string: {0}")]
    InvalidConnectionString(String),
    /// A TLS setting of the connection string cannot be used: an unreadable
    /// or empty certificate file, a key that does not match, `sslmode`
    /// `verify-ca`/`verify-full` without root certificates, a weak
    /// `sslmode` with `sslrootcert=system`. Not retryable.
    #[error("tls configuration: {detail}")]
    TlsConfiguration {
        /// What is wrong, naming the parameter and file.
        detail: String,
        /// The underlying I/O, PEM or rustls error, if any.
        #[source]
        source: Option<Box<dyn std::error::Error + Send + Sync>>,
    },
    /// The TLS handshake failed for a reason no retry changes: the
    /// server's certificate is not trusted, names another host, is out of
    /// its validity period, or the handshake itself was refused. Not
    /// retryable.
    #[error("tls connection to PostgreSQL failed: {failure}")]
    Tls {
        /// Why, as a type.
        failure: TlsFailure,
        /// The driver's error (its chain names rustls' reason).
        #[source]
        source: tokio_postgres::Error,
    },
    /// The server refused the connection for good: authentication failed
    /// (28P01), the role may not connect or does not exist, pg_hba.conf
    /// has no entry or rejects it, e.g. "no encryption" on a TLS-only
    /// server (28000), or the database does not exist (3D000). Not
    /// retryable.
    #[error("PostgreSQL refused the connection ({code}): {message}")]
    ConnectionRejected {
        /// SQLSTATE: 28000, 28P01 or 3D000.
        code: String,
        /// The server's message.
        message: String,
        /// The driver's error.
        #[source]
        source: tokio_postgres::Error,
    },
    /// The driver refused to connect with these settings before the server
    /// could answer: e.g. `sslmode=require` against a server without TLS,
    /// a password the server asks for but the string lacks, an
    /// authentication method the driver does not support. Not retryable.
    #[error("cannot connect to PostgreSQL with these settings")]
    ConnectionSettings {
        /// The driver's error.
        #[source]
        source: tokio_postgres::Error,
    },
    /// The database records an applied migration whose name or checksum
    /// differs from the one compiled into this crate (a landed migration was
    /// edited, or another build migrated the database).
    #[error("applied migration V{version}__{applied_name} differs from this build's V{version}__{local_name}")]
    MigrationDivergent {
        /// The version.
        version: u32,
        /// Name recorded in the database.
        applied_name: String,
        /// Name compiled into this crate.
        local_name: String,
    },
    /// The database records an applied migration this crate does not know
    /// (a newer build migrated it): refusing to run against it.
    #[error("the database has migration V{version}__{name}, which this build does not know")]
    MigrationMissing {
        /// The version.
        version: u32,
        /// Its name.
        name: String,
    },
    /// A migration failed to apply.
    #[error("migration failed")]
    Migration(#[source] Box<refinery::Error>),
    /// The server did not answer a store call within its response timeout
    /// (or maintenance timeout); the connection was discarded. A write may
    /// have committed (retry a reservation with the same id to find out).
    #[error("no answer from PostgreSQL within {after:?}; the connection was discarded")]
    ResponseTimeout {
        /// The response timeout that passed.
        after: std::time::Duration,
    },
    /// Under transaction pooling statek cannot set a session setting at
    /// connect time, and the server's value (from the role or database)
    /// differs from the configured one: set it for the role. Not retryable.
    #[error(
        "transaction pooling: the server's {setting} is {found:?}, statek is configured for \
         {expected:?}; set it for the role (ALTER ROLE \"{role}\" SET {setting} = '{expected}', \
         then make PgBouncer reopen its server connections: RECONNECT) or turn transaction \
         pooling off"
    )]
    SessionSettingMismatch {
        /// The setting (`lock_timeout`, `statement_timeout`, ...).
        setting: &'static str,
        /// The configured value, in the setting's base unit (`5000ms`).
        expected: String,
        /// The server's value, the same way (`0ms`).
        found: String,
        /// The connected role.
        role: String,
    },
    /// A call that needs a session of its own (`LISTEN`, migrations) was
    /// made under transaction pooling without a direct connection. Not
    /// retryable.
    #[error(
        "{what} cannot run through a transaction-mode pool, only on a direct connection: give \
         one with StoreConfig::direct_url (statek: --direct-database-url or \
         STATEK_DIRECT_DATABASE_URL)"
    )]
    DirectConnectionRequired {
        /// What needed it (`LISTEN`, `migrations`).
        what: &'static str,
    },
    /// The durability check found risks the store's
    /// [`DurabilityPolicy`](crate::DurabilityPolicy) refuses. Not retryable:
    /// change the server's settings (or opt in explicitly).
    #[error("the server can lose acknowledged reservations: {}", join_risks(.risks))]
    DurabilityRefused {
        /// The refused risks, each naming its setting.
        risks: Vec<DurabilityRisk>,
        /// Everything the check read.
        report: Box<DurabilityReport>,
    },
    /// A reservation transaction did not run with the `synchronous_commit`
    /// statek asked for (a server or pooler that overrides it). Nothing was
    /// reserved.
    #[error("synchronous_commit is {found} in statek's transaction, not {expected}")]
    DurabilityNotInForce {
        /// The level statek set.
        expected: SynchronousCommit,
        /// The level in force.
        found: String,
    },
    /// The server's timeline changed (a standby was promoted) and
    /// reservations this store had acknowledged on the shard are missing
    /// on the new primary or carry another sequence: a failover lost them
    /// and their sequences may be handed out again. Not retryable; with
    /// [`LostReservationAction::Halt`](crate::LostReservationAction::Halt)
    /// every later reservation of the shard in this store fails with it.
    #[error("{0}")]
    ReservationsLostInFailover(Box<LostReservations>),
    /// The shard is halted in the database (migration V10): a store found
    /// acknowledged reservations lost in a failover, or met the shard last
    /// reserved on another timeline with nothing to re-read. No store
    /// reserves on it until an owner runs `statek shard resume SHARD
    /// --acknowledge-loss` ([`PgStore::resume_shard`](crate::PgStore::resume_shard)).
    /// Nothing was written. Not retryable.
    #[error("{0}")]
    ShardHalted(Box<ShardHalted>),
    /// The connected server is a standby in recovery (during a failover,
    /// before promotion, or a URL that names a standby): it cannot reserve.
    #[error("the server is a standby in recovery and cannot take reservations")]
    InRecovery,
    /// No connection became available from the pool in time.
    #[error("connection pool timed out ({0})")]
    PoolTimeout(&'static str),
    /// The connection to the server was lost or could not be opened
    /// (refused, reset, unreachable, closed). Retryable. The cause (e.g.
    /// "Connection refused") is the error's source.
    #[error("connection to PostgreSQL failed")]
    Connection(#[source] tokio_postgres::Error),
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
    /// An error of the pool itself (closed pool, hook failure).
    #[error("connection pool error: {0}")]
    Pool(String),
}

/// Why a TLS connection failed ([`StoreError::Tls`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum TlsFailure {
    /// The server's certificate chain leads to no root certificate given
    /// with `sslrootcert` (or the default root file).
    UntrustedCertificate,
    /// The certificate is trusted but does not name the host connected to
    /// (`sslmode=verify-full` checks it; `verify-ca` does not).
    HostNameMismatch,
    /// The certificate is expired or not yet valid.
    CertificateNotValidNow,
    /// The certificate is malformed, revoked or unusable otherwise.
    InvalidCertificate,
    /// The handshake failed otherwise: no common protocol version or
    /// cipher suite, or the server sent an alert (e.g. it rejected the
    /// client certificate).
    Handshake,
}

impl std::fmt::Display for TlsFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            TlsFailure::UntrustedCertificate => {
                "the server's certificate is not signed by a trusted root certificate (sslrootcert)"
            }
            TlsFailure::HostNameMismatch => {
                "the server's certificate does not name the host connected to (sslmode=verify-full)"
            }
            TlsFailure::CertificateNotValidNow => {
                "the server's certificate is expired or not yet valid"
            }
            TlsFailure::InvalidCertificate => "the server's certificate is invalid",
            TlsFailure::Handshake => "the tls handshake failed",
        })
    }
}

impl TlsFailure {
    fn of(error: &rustls::Error) -> Self {
        use rustls::CertificateError as C;
        match error {
            rustls::Error::InvalidCertificate(C::UnknownIssuer) => TlsFailure::UntrustedCertificate,
            rustls::Error::InvalidCertificate(
                C::NotValidForName | C::NotValidForNameContext { .. },
            ) => TlsFailure::HostNameMismatch,
            rustls::Error::InvalidCertificate(
                C::Expired
                | C::ExpiredContext { .. }
                | C::NotValidYet
                | C::NotValidYetContext { .. },
            ) => TlsFailure::CertificateNotValidNow,
            rustls::Error::InvalidCertificate(_) => TlsFailure::InvalidCertificate,
            _ => TlsFailure::Handshake,
        }
    }
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

impl StoreError {
    /// True for permanent configuration errors: the connection string, its
    /// TLS settings and files, the server's certificate, the server's
    /// refusal of the role, password or database, and under transaction
    /// pooling a role without statek's session settings or a missing
    /// direct connection, or a `synchronous_commit` overridden in statek's
    /// own transaction. Retrying never helps; the settings must change.
    /// Never retryable.
    pub fn is_configuration(&self) -> bool {
        matches!(
            self,
            StoreError::InvalidConnectionString(_)
                | StoreError::TlsConfiguration { .. }
                | StoreError::Tls { .. }
                | StoreError::ConnectionRejected { .. }
                | StoreError::ConnectionSettings { .. }
                | StoreError::SessionSettingMismatch { .. }
                | StoreError::DirectConnectionRequired { .. }
                | StoreError::DurabilityNotInForce { .. }
        ) || matches!(self, StoreError::Database { code, .. } if code == PROTOCOL_VIOLATION)
    }

    /// Classifies an error of opening a connection: as [`From`], except
    /// that a driver error with neither an I/O cause nor a closed
    /// connection (the driver refused these settings) is
    /// [`StoreError::ConnectionSettings`].
    pub(crate) fn from_connect(err: tokio_postgres::Error) -> Self {
        if err.as_db_error().is_some() || err.is_closed() {
            return StoreError::from(err);
        }
        match cause_of(&err) {
            Cause::Other | Cause::BadServerName => StoreError::ConnectionSettings { source: err },
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
            StoreError::Connection(_)
            | StoreError::PoolTimeout(_)
            | StoreError::InRecovery
            | StoreError::ResponseTimeout { .. } => true,
            StoreError::Database { code, .. } => is_retryable_sqlstate(code),
            _ => false,
        }
    }

    /// The SQLSTATE of a server error, if this is one.
    pub fn sqlstate(&self) -> Option<&str> {
        match self {
            StoreError::Database { code, .. } | StoreError::ConnectionRejected { code, .. } => {
                Some(code)
            }
            StoreError::PermissionDenied { .. } => Some(SqlState::INSUFFICIENT_PRIVILEGE.code()),
            StoreError::ImmutableRow { .. } => Some(IMMUTABLE_ROW_SQLSTATE),
            StoreError::ClaimRefused { .. } => Some(CLAIM_REFUSED_SQLSTATE),
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

fn join_risks(risks: &[DurabilityRisk]) -> String {
    risks
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

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
                Cause::Tls(tls) => StoreError::Tls {
                    failure: TlsFailure::of(tls),
                    source: err,
                },
                _ => StoreError::Connection(err),
            };
        };
        let code = db.code().code().to_owned();
        let message = db.message().to_owned();
        if is_rejection_sqlstate(&code) {
            return StoreError::ConnectionRejected {
                code,
                message,
                source: err,
            };
        }
        if db.code() == &SqlState::INSUFFICIENT_PRIVILEGE {
            return StoreError::PermissionDenied { message };
        }
        if code == IMMUTABLE_ROW_SQLSTATE {
            return StoreError::ImmutableRow { message };
        }
        if code == CLAIM_REFUSED_SQLSTATE {
            return StoreError::ClaimRefused { message };
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
            PoolError::Timeout(TimeoutType::Wait) => StoreError::PoolTimeout("wait"),
            PoolError::Timeout(TimeoutType::Create) => StoreError::PoolTimeout("create"),
            PoolError::Timeout(TimeoutType::Recycle) => StoreError::PoolTimeout("recycle"),
            PoolError::Backend(e) => StoreError::from_connect(e),
            other => StoreError::Pool(other.to_string()),
        }
    }
}

impl From<refinery::Error> for StoreError {
    fn from(err: refinery::Error) -> Self {
        use refinery::error::Kind;
        match err.kind() {
            Kind::DivergentVersion(applied, local) => StoreError::MigrationDivergent {
                version: applied.version(),
                applied_name: applied.name().to_owned(),
                local_name: local.name().to_owned(),
            },
            Kind::MissingVersion(applied) => StoreError::MigrationMissing {
                version: applied.version(),
                name: applied.name().to_owned(),
            },
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
                StoreError::Migration(Box::new(err))
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
        assert!(StoreError::PoolTimeout("wait").is_retryable());
        assert!(!StoreError::InvalidArgument("x".into()).is_retryable());
        assert!(!StoreError::corrupt("shard", "x").is_retryable());
    }
}
