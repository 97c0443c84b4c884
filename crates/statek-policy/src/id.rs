//! Identifiers: [`TenantId`], [`SchedulerShardId`] and [`ScheduleId`].
//!
//! All three follow one grammar: 1..=[`MAX_ID_LENGTH`] bytes of ASCII
//! `[A-Za-z0-9._:-]`, and not `.` or `..`. Ids are case-sensitive, never
//! normalised, and ordered by their raw bytes (so `"B" < "a"`).

use alloc::string::{String, ToString};
use alloc::sync::Arc;
use core::borrow::Borrow;
use core::fmt;

/// The largest length of a [`TenantId`], [`SchedulerShardId`] or
/// [`ScheduleId`], in bytes.
pub const MAX_ID_LENGTH: usize = 128;

/// Which rule of the id grammar an id broke.
///
/// The grammar is shared by [`TenantId`],
/// [`SchedulerShardId`] and [`ScheduleId`]: 1..=128 bytes of ASCII
/// `[A-Za-z0-9._:-]`, and not `.` or `..`. The rules are checked in the
/// order of the variants below, so an id that breaks several rules reports
/// the first one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
#[non_exhaustive]
pub enum IdError {
    /// The id has no bytes.
    #[error("is empty")]
    Empty,
    /// The id is longer than `max` bytes.
    #[error("is {actual} bytes long, the maximum is {max}")]
    TooLong {
        /// The largest allowed length in bytes (128).
        max: usize,
        /// The length of the rejected id in bytes.
        actual: usize,
    },
    /// The id contains a byte outside ASCII `[A-Za-z0-9._:-]`.
    #[error("has byte 0x{byte:02x} at index {index}, only ASCII [A-Za-z0-9._:-] is allowed")]
    InvalidByte {
        /// The 0-based index of the first bad byte.
        index: usize,
        /// The bad byte itself (a UTF-8 code unit for non-ASCII text).
        byte: u8,
    },
    /// The id is `.` or `..`, which read as path components.
    #[error("is \".\" or \"..\"")]
    PathLike,
}

/// Whether `byte` may appear in an id.
const fn is_id_byte(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || matches!(byte, b'.' | b'_' | b':' | b'-')
}

/// Checks `bytes` against the id grammar, reporting the first rule broken.
fn validate_id(bytes: &[u8]) -> Result<(), IdError> {
    if bytes.is_empty() {
        return Err(IdError::Empty);
    }
    if bytes.len() > MAX_ID_LENGTH {
        return Err(IdError::TooLong {
            max: MAX_ID_LENGTH,
            actual: bytes.len(),
        });
    }
    if let Some((index, &byte)) = bytes.iter().enumerate().find(|(_, b)| !is_id_byte(**b)) {
        return Err(IdError::InvalidByte { index, byte });
    }
    if bytes == b"." || bytes == b".." {
        return Err(IdError::PathLike);
    }
    Ok(())
}

/// Builds the `String` of bytes that passed [`validate_id`] (all ASCII).
fn ascii_string(bytes: &[u8]) -> String {
    bytes.iter().copied().map(char::from).collect()
}

macro_rules! id_type {
    (
        $(#[$meta:meta])*
        $name:ident, $what:literal
    ) => {
        $(#[$meta])*
        // Shared text: a clone (every slot of a batch names its tenant) is
        // a reference count, not an allocation.
        #[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub struct $name(Arc<str>);

        impl $name {
            #[doc = concat!("The ", $what, " as text.")]
            #[must_use]
            pub fn as_str(&self) -> &str {
                &self.0
            }

            #[doc = concat!("Consumes the ", $what, " and returns its text.")]
            #[must_use]
            pub fn into_string(self) -> String {
                self.0.to_string()
            }

            /// Validates `bytes` against the id grammar; the conversions
            /// into [`PolicyError`](crate::PolicyError) are in `id_parse.rs`.
            pub(crate) fn parse(bytes: &[u8]) -> Result<Self, IdError> {
                validate_id(bytes)?;
                Ok(Self(Arc::from(ascii_string(bytes))))
            }

            /// Validates `value`.
            pub(crate) fn parse_string(value: String) -> Result<Self, IdError> {
                validate_id(value.as_bytes())?;
                Ok(Self(Arc::from(value)))
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl Borrow<str> for $name {
            fn borrow(&self) -> &str {
                &self.0
            }
        }

        impl From<$name> for String {
            fn from(id: $name) -> String {
                id.0.to_string()
            }
        }
    };
}

id_type! {
    /// Names a tenant: an isolated customer queue.
    ///
    /// 1..=128 bytes of ASCII `[A-Za-z0-9._:-]`, not `.` or `..`;
    /// case-sensitive and ordered by raw bytes. Built only through
    /// `TryFrom<&str>`, `TryFrom<String>` or `FromStr`, which fail with
    /// [`PolicyError::InvalidTenantId`](crate::PolicyError::InvalidTenantId).
    ///
    /// ```
    /// use statek_policy::TenantId;
    /// let tenant = TenantId::try_from("tenant-a")?;
    /// assert_eq!(tenant.as_str(), "tenant-a");
    /// assert!(TenantId::try_from("a/b").is_err());
    /// # Ok::<(), statek_policy::PolicyError>(())
    /// ```
    TenantId, "tenant id"
}

id_type! {
    /// Names a scheduler shard: one independent schedule, bound forever to one
    /// policy (for example `primary-v1`).
    ///
    /// Same grammar as [`TenantId`], but a separate type so the two cannot be
    /// mixed up. Built only through `TryFrom<&str>`, `TryFrom<String>` or
    /// `FromStr`, which fail with [`PolicyError::InvalidShardId`](crate::PolicyError::InvalidShardId).
    ///
    /// ```
    /// use statek_policy::SchedulerShardId;
    /// let shard: SchedulerShardId = "primary-v1".parse()?;
    /// assert_eq!(shard.to_string(), "primary-v1");
    /// # Ok::<(), statek_policy::PolicyError>(())
    /// ```
    SchedulerShardId, "shard id"
}

id_type! {
    /// Names a schedule: the chain of shards that succeed each other in
    /// rollouts (for example `primary`, served by `primary-v1`, then
    /// `primary-v2`). At most one shard of a schedule accepts reservations
    /// at any moment, and the bound across a rollout's seam
    /// ([`PolicySeam`](crate::PolicySeam)) holds only between two shards of
    /// one schedule.
    ///
    /// Same grammar as [`TenantId`] and [`SchedulerShardId`], but a separate
    /// type. Built only through `TryFrom<&str>`, `TryFrom<String>` or
    /// `FromStr`, which fail with [`PolicyError::InvalidScheduleId`](crate::PolicyError::InvalidScheduleId), or
    /// from a shard with [`of_shard`](Self::of_shard).
    ///
    /// ```
    /// use statek_policy::{ScheduleId, SchedulerShardId};
    /// let schedule: ScheduleId = "primary".parse()?;
    /// assert_eq!(schedule.as_str(), "primary");
    /// // A shard registered without a schedule is alone in the one named
    /// // after it.
    /// let shard = SchedulerShardId::try_from("primary-v1")?;
    /// assert_eq!(ScheduleId::of_shard(&shard).to_string(), "primary-v1");
    /// # Ok::<(), statek_policy::PolicyError>(())
    /// ```
    ScheduleId, "schedule id"
}

impl ScheduleId {
    /// The schedule a shard registered without one belongs to: the one
    /// named like the shard id (the grammars are the same, so this never
    /// fails).
    #[must_use]
    pub fn of_shard(shard: &SchedulerShardId) -> ScheduleId {
        ScheduleId(Arc::clone(&shard.0))
    }
}
