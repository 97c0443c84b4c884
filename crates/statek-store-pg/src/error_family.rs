//! The families of [`StoreError`](crate::StoreError): one enum per area
//! (connection, durability, rollout, reservation, run queue, migration),
//! each a variant of `StoreError` with the same text. Errors every area
//! can meet (a corrupt row, a refused argument or permission, any other
//! server error) stay on `StoreError` itself.

use statek_policy::{PolicyDigest, ScheduleId, SchedulerShardId};
use uuid::Uuid;

use crate::durability_report::{DurabilityReport, DurabilityRisk, SynchronousCommit};
use crate::lost_reservations::LostReservations;
use crate::shard_halt::ShardHalted;

/// Reaching the server: the connection string, TLS, the pool, response timeouts, transaction pooling and standbys. A [`StoreError::Connection`](crate::StoreError::Connection).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConnectionError {
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
    Rejected {
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
    Settings {
        /// The driver's error.
        #[source]
        source: tokio_postgres::Error,
    },
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
    Lost(#[source] tokio_postgres::Error),
    /// An error of the pool itself (closed pool, hook failure).
    #[error("connection pool error: {0}")]
    Pool(String),
}

/// What can lose acknowledged reservations: the server's durability settings, and failovers that lost some (and the halts they cause). A [`StoreError::Durability`](crate::StoreError::Durability).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DurabilityError {
    /// The durability check found risks the store's
    /// [`DurabilityPolicy`](crate::DurabilityPolicy) refuses. Not retryable:
    /// change the server's settings (or opt in explicitly).
    #[error("the server can lose acknowledged reservations: {}", join_risks(.risks))]
    Refused {
        /// The refused risks, each naming its setting.
        risks: Vec<DurabilityRisk>,
        /// Everything the check read.
        report: Box<DurabilityReport>,
    },
    /// A reservation transaction did not run with the `synchronous_commit`
    /// statek asked for (a server or pooler that overrides it). Nothing was
    /// reserved.
    #[error("synchronous_commit is {found} in statek's transaction, not {expected}")]
    NotInForce {
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
}

/// Binding policies to shards and following a schedule's chain of shards: registration, seals and successors. A [`StoreError::Rollout`](crate::StoreError::Rollout).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RolloutError {
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
}

/// Reserving slots: idempotency ids and the shard's sequence. A [`StoreError::Reservation`](crate::StoreError::Reservation).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReservationError {
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
    /// The shard's cursor reached `i64::MAX`; no further sequence exists.
    #[error("shard {shard} has exhausted its sequence space")]
    SequenceExhausted {
        /// The shard.
        shard: SchedulerShardId,
    },
}

/// The run queue: enqueueing, claiming, finishing, tenant limits and priorities. A [`StoreError::RunQueue`](crate::StoreError::RunQueue).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RunQueueError {
    /// A slot of a claim for a batch of slots had already claimed a run
    /// (the claim history holds one run per shard and sequence, ever).
    /// Nothing of the call was kept: no run was claimed.
    #[error("a slot of shard {shard} already claimed a run")]
    SlotAlreadyClaimed {
        /// The shard.
        shard: SchedulerShardId,
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
    /// A run priority outside [`statek_core::MIN_PRIORITY`]..=[`statek_core::MAX_PRIORITY`].
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
}

/// The schema's migrations. A [`StoreError::Migration`](crate::StoreError::Migration).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MigrationError {
    /// The database records an applied migration whose name or checksum
    /// differs from the one compiled into this crate (a landed migration was
    /// edited, or another build migrated the database).
    #[error("applied migration V{version}__{applied_name} differs from this build's V{version}__{local_name}")]
    Divergent {
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
    Missing {
        /// The version.
        version: u32,
        /// Its name.
        name: String,
    },
    /// A migration failed to apply.
    #[error("migration failed")]
    Failed(#[source] Box<refinery::Error>),
    /// The database is not migrated to `version`, which `needed_for` needs
    /// (a binary upgraded before the database): run the migrations
    /// (`statek migrate`, [`PgStore::migrate`](crate::PgStore::migrate)).
    #[error("{needed_for} needs migration V{version}, which the database does not have yet: run `statek migrate`")]
    Behind {
        /// The migration needed.
        version: u32,
        /// What needs it.
        needed_for: &'static str,
    },
}

/// Why a TLS connection failed ([`ConnectionError::Tls`](crate::ConnectionError::Tls)).
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
    pub(crate) fn of(error: &rustls::Error) -> Self {
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

fn join_risks(risks: &[DurabilityRisk]) -> String {
    risks
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}
