//! Exit codes: one per class of error, so scripts can tell them apart,
//! chosen from the error's type (never from its message text), and the
//! rendering of an error chain on standard error.

use statek_policy::policy_file::PolicyFileError;
use statek_scheduler::{SourceError, SourceErrorKind};
use statek_store_pg::StoreError;
use statek_store_pg::{DurabilityError, RolloutError, RunQueueError};

/// Everything went well. Also when standard output was closed early
/// (`statek status | head -1`): the command stops quietly.
pub const OK: u8 = 0;
/// An error not classified below.
pub const FAILURE: u8 = 1;
/// Bad command-line usage (clap's own code): also a flag value clap cannot
/// parse as its kind (an integer, a duration, one of the listed names, a
/// UUID).
pub const USAGE: u8 = 2;
/// A policy file or argument is invalid: a parsed value out of its range
/// (`--retain`, `--batch`, `--limit`, `--max-running`), a rate, an id or
/// role name statek refuses; nothing was written.
pub const INVALID_INPUT: u8 = 3;
/// The shard is bound to another policy (`policy verify` mismatch, register conflict).
pub const POLICY_CONFLICT: u8 = 4;
/// Stored data failed its consistency checks.
pub const CORRUPT_DATA: u8 = 5;
/// The database could not be reached or a transient error persisted; retry later.
pub const UNAVAILABLE: u8 = 6;
/// The connected role lacks a privilege.
pub const PERMISSION_DENIED: u8 = 7;
/// A demo check failed.
pub const CHECK_FAILED: u8 = 8;
/// The durability check refused the server: it can lose acknowledged
/// reservations (`fsync`, `full_page_writes`, `synchronous_commit`,
/// asynchronous standbys). Change the server, or pass `--durability`.
pub const DURABILITY_REFUSED: u8 = 10;
/// The connection settings are wrong and retrying will not help: no or an
/// empty database URL, a URL that does not parse or names no host or user,
/// an unknown `sslmode`, unusable TLS files, an untrusted or mismatched
/// server certificate, or the server refused the role, password or
/// database (SQLSTATE 28000, 28P01, 3D000). Fix the settings.
pub const CONFIGURATION: u8 = 9;
/// The shard is not the live shard of its schedule: a rollout from a shard
/// that is sealed already (the error names the live shard to roll out
/// from), or a reservation on a sealed shard. Nothing was written.
pub const NOT_LIVE_SHARD: u8 = 11;
/// A rollout's successor shard id is already registered: a successor is
/// always a new shard id. Nothing was written.
pub const SUCCESSOR_EXISTS: u8 = 12;
/// A different chain: the shard belongs to another schedule than the one
/// the policy file names, or the two files of a rollout name different
/// schedules. Nothing was written.
pub const SCHEDULE_CONFLICT: u8 = 13;
/// `register` of a new shard into a schedule that already has a live
/// shard: change the policy with `statek rollout` instead. Nothing was
/// written.
pub const SCHEDULE_HAS_LIVE_SHARD: u8 = 14;
/// The shard is halted in the database after a reservation loss (or an
/// unverified failover): no store reserves on it until an owner runs
/// `statek shard resume SHARD --acknowledge-loss`. Nothing was written.
pub const SHARD_HALTED: u8 = 15;
/// `statek audit` found an observed gap above its bound or inconsistent
/// evidence (the report, written first, names each finding).
pub const AUDIT_FAILED: u8 = 16;

/// Every exit code with its name, for docs and tests.
pub const ALL: &[(u8, &str)] = &[
    (OK, "OK"),
    (FAILURE, "FAILURE"),
    (USAGE, "USAGE"),
    (INVALID_INPUT, "INVALID_INPUT"),
    (POLICY_CONFLICT, "POLICY_CONFLICT"),
    (CORRUPT_DATA, "CORRUPT_DATA"),
    (UNAVAILABLE, "UNAVAILABLE"),
    (PERMISSION_DENIED, "PERMISSION_DENIED"),
    (CHECK_FAILED, "CHECK_FAILED"),
    (CONFIGURATION, "CONFIGURATION"),
    (DURABILITY_REFUSED, "DURABILITY_REFUSED"),
    (NOT_LIVE_SHARD, "NOT_LIVE_SHARD"),
    (SUCCESSOR_EXISTS, "SUCCESSOR_EXISTS"),
    (SCHEDULE_CONFLICT, "SCHEDULE_CONFLICT"),
    (SCHEDULE_HAS_LIVE_SHARD, "SCHEDULE_HAS_LIVE_SHARD"),
    (SHARD_HALTED, "SHARD_HALTED"),
    (AUDIT_FAILED, "AUDIT_FAILED"),
];

/// A connection setting given to the CLI is missing or unusable (exit
/// code [`CONFIGURATION`]).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Configuration(pub String);

/// Whether the error is only that standard output was closed: the binary
/// then exits [`OK`] without a message.
pub fn is_stdout_closed(error: &anyhow::Error) -> bool {
    error
        .chain()
        .any(|cause| cause.downcast_ref::<crate::out::StdoutClosed>().is_some())
}

/// A failed demo check (exit code [`CHECK_FAILED`]).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct CheckFailed(pub String);

/// The two policy files of a rollout name different schedules (exit code
/// [`SCHEDULE_CONFLICT`]); found before any connection.
#[derive(Debug, thiserror::Error)]
#[error(
    "{from_file} names schedule {from}, {to_file} names schedule {to}: a rollout continues one \
     schedule (give {to_file} schedule = \"{from}\", or leave the key out)"
)]
pub struct ScheduleMismatch {
    /// The sealed shard's file.
    pub from_file: String,
    /// Its schedule.
    pub from: String,
    /// The successor's file.
    pub to_file: String,
    /// Its schedule.
    pub to: String,
}

/// `statek audit` found problems (exit code [`AUDIT_FAILED`]).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct AuditFailed(pub String);

/// Invalid user input detected by the CLI itself (exit code [`INVALID_INPUT`]).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct InvalidInput(pub String);

/// Writes the error line, `statek: error: ` and [`render`], to standard
/// error; a standard error that cannot be written drops it (the exit code
/// still says what happened).
pub fn report(error: &anyhow::Error) {
    crate::out::write_stderr(format_args!("statek: error: {}\n", render(error)));
}

/// The error line the binary prints (after `statek: error: `): every cause
/// of the chain, joined by `: `, so that the real cause shows
/// ("Connection refused", "invalid peer certificate: UnknownIssuer").
/// A server error is shown once: its `StoreError` already quotes the
/// server's message, so the driver's copy below it is left out, except
/// for the server's DETAIL and HINT.
pub fn render(error: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in error.chain() {
        if let Some(db) = cause
            .downcast_ref::<tokio_postgres::Error>()
            .and_then(tokio_postgres::Error::as_db_error)
        {
            if let Some(detail) = db.detail() {
                text.push_str(&format!(" (detail: {detail})"));
            }
            if let Some(hint) = db.hint() {
                text.push_str(&format!(" (hint: {hint})"));
            }
            break;
        }
        if !text.is_empty() {
            text.push_str(": ");
        }
        text.push_str(&cause.to_string());
    }
    if let Some(hint) = error
        .chain()
        .find_map(|cause| cause.downcast_ref::<StoreError>().and_then(what_to_do))
    {
        text.push_str(&format!(" ({hint})"));
    }
    text
}

/// What an operator does next for a server error whose message alone does
/// not say it.
fn what_to_do(error: &StoreError) -> Option<&'static str> {
    match error {
        // 42P01 undefined_table on a statek relation: not migrated.
        StoreError::Database { code, message, .. }
            if code == "42P01" && message.contains("\"statek.") =>
        {
            Some("the statek schema is not migrated in this database: run `statek migrate` as the owner role")
        }
        // 42704 undefined_object: a role the role profile names.
        StoreError::Database { code, message, .. }
            if code == "42704" && message.starts_with("role ") =>
        {
            Some("create the three login roles first, see docs/operations.md \"Roles and connection strings\"")
        }
        StoreError::Durability(DurabilityError::Refused { .. }) => Some(
            "make the server durable (docs/operations.md \"High availability and durability\"), \
             or, for a throw-away development server such as `cargo xtask pg start`'s, pass \
             `--durability none`",
        ),
        _ => None,
    }
}

/// The exit code for an error chain: the first classified cause wins.
pub fn code_for(error: &anyhow::Error) -> u8 {
    use statek_scheduler::SchedulerError;
    if is_stdout_closed(error) {
        return OK;
    }
    for cause in error.chain() {
        if cause.downcast_ref::<Configuration>().is_some() {
            return CONFIGURATION;
        }
        if cause.downcast_ref::<PolicyFileError>().is_some()
            || cause.downcast_ref::<statek_policy::PolicyError>().is_some()
            || cause.downcast_ref::<InvalidInput>().is_some()
        {
            return INVALID_INPUT;
        }
        if cause.downcast_ref::<AuditFailed>().is_some() {
            return AUDIT_FAILED;
        }
        if cause.downcast_ref::<CheckFailed>().is_some() {
            return CHECK_FAILED;
        }
        if cause.downcast_ref::<ScheduleMismatch>().is_some() {
            return SCHEDULE_CONFLICT;
        }
        if let Some(store) = cause.downcast_ref::<StoreError>() {
            return classify(store);
        }
        // A source error of the scheduler's own making (its cause is no
        // StoreError, which the next cause would classify): by its kind.
        if let Some(source) = cause.downcast_ref::<SourceError>() {
            if source.downcast_ref::<StoreError>().is_none() {
                return classify_kind(source.kind());
            }
        }
        match cause.downcast_ref::<SchedulerError>() {
            Some(SchedulerError::Store { source, .. }) => return classify(source),
            Some(e) if e.is_retryable() => return UNAVAILABLE,
            Some(SchedulerError::InvalidOption(_) | SchedulerError::UnsupportedFairness { .. }) => {
                return INVALID_INPUT
            }
            Some(SchedulerError::PolicyMismatch { .. } | SchedulerError::CycleMismatch(_)) => {
                return POLICY_CONFLICT
            }
            _ => {}
        }
    }
    FAILURE
}

fn classify_kind(kind: SourceErrorKind) -> u8 {
    match kind {
        SourceErrorKind::Transient => UNAVAILABLE,
        SourceErrorKind::PolicyConflict => POLICY_CONFLICT,
        SourceErrorKind::Corrupt | SourceErrorKind::ReservationsLost => CORRUPT_DATA,
        SourceErrorKind::DurabilityRefused => DURABILITY_REFUSED,
        SourceErrorKind::InvalidArgument => INVALID_INPUT,
        SourceErrorKind::ShardSealed => NOT_LIVE_SHARD,
        SourceErrorKind::ShardHalted => SHARD_HALTED,
        _ => FAILURE,
    }
}

fn classify(store: &StoreError) -> u8 {
    match store {
        StoreError::Rollout(RolloutError::PolicyConflict { .. })
        | StoreError::Rollout(RolloutError::PolicyDigestMismatch { .. }) => POLICY_CONFLICT,
        StoreError::CorruptData { .. }
        | StoreError::Durability(DurabilityError::ReservationsLostInFailover(_)) => CORRUPT_DATA,
        StoreError::Durability(DurabilityError::Refused { .. }) => DURABILITY_REFUSED,
        StoreError::PermissionDenied { .. } => PERMISSION_DENIED,
        StoreError::InvalidArgument(_)
        | StoreError::RunQueue(RunQueueError::InvalidLimit { .. })
        | StoreError::RunQueue(RunQueueError::InvalidPriority { .. })
        | StoreError::RunQueue(RunQueueError::EnqueueBatchTooLarge { .. })
        | StoreError::RunQueue(RunQueueError::RunNotFound { .. })
        | StoreError::RunQueue(RunQueueError::RunStateConflict { .. }) => INVALID_INPUT,
        StoreError::Rollout(RolloutError::ShardSealed { .. })
        | StoreError::Rollout(RolloutError::NotLiveShard { .. })
        | StoreError::Rollout(RolloutError::PredecessorNotSealed { .. }) => NOT_LIVE_SHARD,
        StoreError::Rollout(RolloutError::SuccessorExists { .. }) => SUCCESSOR_EXISTS,
        StoreError::Rollout(RolloutError::ScheduleConflict { .. }) => SCHEDULE_CONFLICT,
        StoreError::Rollout(RolloutError::ScheduleHasLiveShard { .. }) => SCHEDULE_HAS_LIVE_SHARD,
        StoreError::Durability(DurabilityError::ShardHalted(_)) => SHARD_HALTED,
        e if e.is_configuration() => CONFIGURATION,
        e if e.is_retryable() => UNAVAILABLE,
        _ => FAILURE,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use statek_store_pg::ConnectionError;

    fn check(error: anyhow::Error, code: u8) {
        assert_eq!(code_for(&error), code, "{error:#}");
    }

    #[test]
    fn one_code_per_class() {
        check(anyhow::Error::new(crate::out::StdoutClosed), OK);
        check(
            anyhow::Error::new(crate::out::StdoutClosed).context("printing the status"),
            OK,
        );
        check(anyhow::anyhow!("something else"), FAILURE);
        check(InvalidInput("bad".into()).into(), INVALID_INPUT);
        check(
            StoreError::InvalidArgument("bad".into()).into(),
            INVALID_INPUT,
        );
        check(
            StoreError::CorruptData {
                what: "shard",
                detail: "x".into(),
            }
            .into(),
            CORRUPT_DATA,
        );
        check(
            StoreError::Connection(ConnectionError::PoolTimeout("wait")).into(),
            UNAVAILABLE,
        );
        check(
            StoreError::PermissionDenied {
                message: "x".into(),
            }
            .into(),
            PERMISSION_DENIED,
        );
        check(CheckFailed("gap".into()).into(), CHECK_FAILED);
        check(Configuration("no database".into()).into(), CONFIGURATION);
        check(
            StoreError::Connection(ConnectionError::InvalidConnectionString("x".into())).into(),
            CONFIGURATION,
        );
        check(
            StoreError::Connection(ConnectionError::TlsConfiguration {
                detail: "x".into(),
                source: None,
            })
            .into(),
            CONFIGURATION,
        );
        check(
            StoreError::Connection(ConnectionError::DirectConnectionRequired { what: "LISTEN" })
                .into(),
            CONFIGURATION,
        );
        check(
            StoreError::Durability(DurabilityError::Refused {
                risks: vec![statek_store_pg::DurabilityRisk::FsyncOff],
                report: Box::new(statek_store_pg::DurabilityReport {
                    fsync: false,
                    full_page_writes: true,
                    synchronous_commit: statek_store_pg::SynchronousCommit::On,
                    synchronous_standby_names: String::new(),
                    standbys: Vec::new(),
                    hidden_walsenders: 0,
                    timeline: Some(1),
                }),
            })
            .into(),
            DURABILITY_REFUSED,
        );
        let shard = |s: &str| statek_policy::SchedulerShardId::try_from(s).unwrap();
        let schedule = |s: &str| statek_policy::ScheduleId::try_from(s).unwrap();
        check(
            StoreError::Rollout(RolloutError::ShardSealed {
                shard: shard("v1"),
                sealed_at_sequence: 3,
                successor: shard("v2"),
            })
            .into(),
            NOT_LIVE_SHARD,
        );
        check(
            StoreError::Durability(DurabilityError::ShardHalted(Box::new(
                statek_store_pg::ShardHalted {
                    shard: shard("v1"),
                    halts: Vec::new(),
                },
            )))
            .into(),
            SHARD_HALTED,
        );
        check(
            StoreError::Rollout(RolloutError::NotLiveShard {
                shard: shard("v1"),
                schedule: schedule("primary"),
                sealed_at_sequence: 3,
                live: shard("v2"),
            })
            .into(),
            NOT_LIVE_SHARD,
        );
        check(
            StoreError::Rollout(RolloutError::PredecessorNotSealed {
                shard: shard("v2"),
                predecessor: shard("v1"),
            })
            .into(),
            NOT_LIVE_SHARD,
        );
        check(
            StoreError::Rollout(RolloutError::SuccessorExists { shard: shard("v2") }).into(),
            SUCCESSOR_EXISTS,
        );
        check(
            StoreError::Rollout(RolloutError::ScheduleConflict {
                shard: shard("v1"),
                stored: schedule("a"),
                offered: schedule("b"),
            })
            .into(),
            SCHEDULE_CONFLICT,
        );
        check(
            ScheduleMismatch {
                from_file: "a.toml".into(),
                from: "a".into(),
                to_file: "b.toml".into(),
                to: "b".into(),
            }
            .into(),
            SCHEDULE_CONFLICT,
        );
        check(
            StoreError::Rollout(RolloutError::ScheduleHasLiveShard {
                schedule: schedule("primary"),
                live: shard("v1"),
            })
            .into(),
            SCHEDULE_HAS_LIVE_SHARD,
        );
        check(
            statek_scheduler::SchedulerError::Store {
                source: StoreError::Rollout(RolloutError::SuccessorExists { shard: shard("v2") }),
                retries: 0,
            }
            .into(),
            SUCCESSOR_EXISTS,
        );
        // Through the reservation source: the StoreError inside decides...
        check(
            statek_scheduler::SchedulerError::Source {
                source: StoreError::Rollout(RolloutError::SuccessorExists { shard: shard("v2") })
                    .into(),
                retries: 0,
            }
            .into(),
            SUCCESSOR_EXISTS,
        );
        // ...and without one, the kind.
        check(
            statek_scheduler::SchedulerError::Source {
                source: SourceError::new(SourceErrorKind::Corrupt, "corrupt data in reservation"),
                retries: 2,
            }
            .into(),
            CORRUPT_DATA,
        );
    }

    #[test]
    fn codes_are_distinct_and_documented() {
        let mut codes: Vec<u8> = ALL.iter().map(|(code, _)| *code).collect();
        codes.sort_unstable();
        codes.dedup();
        assert_eq!(codes.len(), ALL.len(), "duplicate codes");
        let highest = u8::try_from(ALL.len() - 1).unwrap();
        assert_eq!(codes, (0..=highest).collect::<Vec<u8>>());
        let docs = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../docs/operations.md"
        ))
        .unwrap();
        let table = docs
            .split("## CLI exit codes")
            .nth(1)
            .unwrap()
            .split("\n\n")
            .nth(1)
            .unwrap();
        let documented: Vec<u8> = table
            .lines()
            .filter_map(|line| line.strip_prefix("| ")?.split(' ').next()?.parse().ok())
            .collect();
        assert_eq!(documented, codes, "{table}");
    }
}
