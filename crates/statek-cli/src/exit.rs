//! Exit codes: one per class of error, so scripts can tell them apart.

use statek_policy::policy_file::PolicyFileError;
use statek_store_pg::StoreError;

/// Everything went well.
pub const OK: u8 = 0;
/// An error not classified below.
pub const FAILURE: u8 = 1;
/// Bad command-line usage (clap's own code).
pub const USAGE: u8 = 2;
/// A policy file or argument is invalid; nothing was written.
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

/// A failed demo check (exit code [`CHECK_FAILED`]).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct CheckFailed(pub String);

/// Invalid user input detected by the CLI itself (exit code [`INVALID_INPUT`]).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct InvalidInput(pub String);

/// The exit code for an error chain: the first classified cause wins.
pub fn code_for(error: &anyhow::Error) -> u8 {
    use statek_scheduler::SchedulerError;
    for cause in error.chain() {
        if cause.downcast_ref::<PolicyFileError>().is_some()
            || cause.downcast_ref::<statek_policy::PolicyError>().is_some()
            || cause.downcast_ref::<InvalidInput>().is_some()
        {
            return INVALID_INPUT;
        }
        if cause.downcast_ref::<CheckFailed>().is_some() {
            return CHECK_FAILED;
        }
        if let Some(store) = cause.downcast_ref::<StoreError>() {
            return classify(store);
        }
        match cause.downcast_ref::<SchedulerError>() {
            Some(SchedulerError::Store { source, .. }) => return classify(source),
            Some(e) if e.is_retryable() => return UNAVAILABLE,
            Some(SchedulerError::InvalidOption(_)) => return INVALID_INPUT,
            Some(SchedulerError::PolicyMismatch { .. } | SchedulerError::CycleMismatch { .. }) => {
                return POLICY_CONFLICT
            }
            _ => {}
        }
    }
    FAILURE
}

fn classify(store: &StoreError) -> u8 {
    match store {
        StoreError::PolicyConflict { .. } | StoreError::PolicyDigestMismatch { .. } => {
            POLICY_CONFLICT
        }
        StoreError::CorruptData { .. } => CORRUPT_DATA,
        StoreError::PermissionDenied { .. } => PERMISSION_DENIED,
        StoreError::InvalidArgument(_) => INVALID_INPUT,
        e if e.is_retryable() => UNAVAILABLE,
        _ => FAILURE,
    }
}
