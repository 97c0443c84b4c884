//! Identifiers: [`TenantId`], [`SchedulerShardId`] and [`ScheduleId`].
//!
//! All three follow one grammar: 1..=[`MAX_ID_LENGTH`] bytes of ASCII
//! `[A-Za-z0-9._:-]`, and not `.` or `..`. Ids are case-sensitive, never
//! normalised, and ordered by their raw bytes (so `"B" < "a"`).

use alloc::string::String;
use core::borrow::Borrow;
use core::fmt;
use core::str::FromStr;

use crate::error::{IdError, PolicyError};

/// The largest length of a [`TenantId`], [`SchedulerShardId`] or
/// [`ScheduleId`], in bytes.
pub const MAX_ID_LENGTH: usize = 128;

/// Whether `byte` may appear in an id.
const fn is_id_byte(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || matches!(byte, b'.' | b'_' | b':' | b'-')
}

/// Checks `bytes` against the id grammar, reporting the first rule broken.
pub(crate) fn validate_id(bytes: &[u8]) -> Result<(), IdError> {
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
        $name:ident, $variant:ident, $what:literal
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub struct $name(String);

        impl $name {
            #[doc = concat!("The ", $what, " as text.")]
            #[must_use]
            pub fn as_str(&self) -> &str {
                &self.0
            }

            #[doc = concat!("Consumes the ", $what, " and returns its text.")]
            #[must_use]
            pub fn into_string(self) -> String {
                self.0
            }

            /// Validates raw bytes (for example from the canonical decoder).
            pub(crate) fn from_bytes(bytes: &[u8]) -> Result<Self, PolicyError> {
                validate_id(bytes).map_err(|reason| PolicyError::$variant { reason })?;
                Ok(Self(ascii_string(bytes)))
            }
        }

        impl TryFrom<&str> for $name {
            type Error = PolicyError;

            #[doc = concat!(
                "Validates `value` as a ", $what, ".\n\n",
                "# Errors\n\n",
                "[`PolicyError::", stringify!($variant), "`] naming the broken rule."
            )]
            fn try_from(value: &str) -> Result<Self, Self::Error> {
                Self::from_bytes(value.as_bytes())
            }
        }

        impl TryFrom<String> for $name {
            type Error = PolicyError;

            #[doc = concat!(
                "Validates `value` as a ", $what, ", reusing its allocation.\n\n",
                "# Errors\n\n",
                "[`PolicyError::", stringify!($variant), "`] naming the broken rule."
            )]
            fn try_from(value: String) -> Result<Self, Self::Error> {
                validate_id(value.as_bytes()).map_err(|reason| PolicyError::$variant { reason })?;
                Ok(Self(value))
            }
        }

        impl FromStr for $name {
            type Err = PolicyError;

            #[doc = concat!(
                "Validates `s` as a ", $what, ".\n\n",
                "# Errors\n\n",
                "[`PolicyError::", stringify!($variant), "`] naming the broken rule."
            )]
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                Self::try_from(s)
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
                id.0
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
    /// [`PolicyError::InvalidTenantId`].
    ///
    /// ```
    /// use statek_policy::TenantId;
    /// let tenant = TenantId::try_from("tenant-a")?;
    /// assert_eq!(tenant.as_str(), "tenant-a");
    /// assert!(TenantId::try_from("a/b").is_err());
    /// # Ok::<(), statek_policy::PolicyError>(())
    /// ```
    TenantId, InvalidTenantId, "tenant id"
}

id_type! {
    /// Names a scheduler shard: one independent schedule, bound forever to one
    /// policy (for example `primary-v1`).
    ///
    /// Same grammar as [`TenantId`], but a separate type so the two cannot be
    /// mixed up. Built only through `TryFrom<&str>`, `TryFrom<String>` or
    /// `FromStr`, which fail with [`PolicyError::InvalidShardId`].
    ///
    /// ```
    /// use statek_policy::SchedulerShardId;
    /// let shard: SchedulerShardId = "primary-v1".parse()?;
    /// assert_eq!(shard.to_string(), "primary-v1");
    /// # Ok::<(), statek_policy::PolicyError>(())
    /// ```
    SchedulerShardId, InvalidShardId, "shard id"
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
    /// `FromStr`, which fail with [`PolicyError::InvalidScheduleId`], or
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
    ScheduleId, InvalidScheduleId, "schedule id"
}

impl ScheduleId {
    /// The schedule a shard registered without one belongs to: the one
    /// named like the shard id (the grammars are the same, so this never
    /// fails).
    #[must_use]
    pub fn of_shard(shard: &SchedulerShardId) -> ScheduleId {
        ScheduleId(String::from(shard.as_str()))
    }
}

#[cfg(test)]
mod tests {
    use alloc::format;
    use alloc::string::ToString;
    use alloc::vec::Vec;

    use super::*;

    fn check(input: &str, expected: Result<(), IdError>) {
        let tenant = TenantId::try_from(input);
        let shard = SchedulerShardId::try_from(input);
        let schedule = ScheduleId::try_from(input);
        match expected {
            Ok(()) => {
                assert_eq!(
                    tenant.as_ref().map(TenantId::as_str),
                    Ok(input),
                    "{input:?}"
                );
                assert_eq!(
                    shard.as_ref().map(SchedulerShardId::as_str),
                    Ok(input),
                    "{input:?}"
                );
                assert_eq!(
                    schedule.as_ref().map(ScheduleId::as_str),
                    Ok(input),
                    "{input:?}"
                );
                assert_eq!(input.parse::<ScheduleId>(), schedule, "{input:?}");
                assert_eq!(
                    ScheduleId::try_from(input.to_string()),
                    schedule,
                    "{input:?}"
                );
                if let Ok(shard) = &shard {
                    assert_eq!(Ok(ScheduleId::of_shard(shard)), schedule, "{input:?}");
                }
                assert_eq!(TenantId::try_from(input.to_string()), tenant, "{input:?}");
                assert_eq!(input.parse::<TenantId>(), tenant, "{input:?}");
                assert_eq!(tenant.map(|t| t.to_string()), Ok(input.to_string()));
            }
            Err(reason) => {
                assert_eq!(
                    tenant,
                    Err(PolicyError::InvalidTenantId { reason }),
                    "{input:?}"
                );
                assert_eq!(
                    shard,
                    Err(PolicyError::InvalidShardId { reason }),
                    "{input:?}"
                );
                assert_eq!(
                    schedule,
                    Err(PolicyError::InvalidScheduleId { reason }),
                    "{input:?}"
                );
                assert_eq!(
                    input.parse::<ScheduleId>(),
                    Err(PolicyError::InvalidScheduleId { reason })
                );
                assert_eq!(
                    ScheduleId::try_from(input.to_string()),
                    Err(PolicyError::InvalidScheduleId { reason })
                );
                assert_eq!(
                    TenantId::try_from(input.to_string()),
                    Err(PolicyError::InvalidTenantId { reason })
                );
                assert_eq!(
                    input.parse::<SchedulerShardId>(),
                    Err(PolicyError::InvalidShardId { reason })
                );
            }
        }
    }

    #[test]
    fn grammar() {
        let max = "x".repeat(128);
        let too_long = "x".repeat(129);
        let bad_at_end = format!("{}/", "x".repeat(127));
        check("", Err(IdError::Empty));
        check("a", Ok(()));
        check(&max, Ok(()));
        check(
            &too_long,
            Err(IdError::TooLong {
                max: 128,
                actual: 129,
            }),
        );
        check(
            &"/".repeat(129),
            Err(IdError::TooLong {
                max: 128,
                actual: 129,
            }),
        );
        check(
            &bad_at_end,
            Err(IdError::InvalidByte {
                index: 127,
                byte: b'/',
            }),
        );
        check(".", Err(IdError::PathLike));
        check("..", Err(IdError::PathLike));
        check("...", Ok(()));
        check(".a", Ok(()));
        check("a..", Ok(()));
        check(
            "a/b",
            Err(IdError::InvalidByte {
                index: 1,
                byte: b'/',
            }),
        );
        check(
            "/",
            Err(IdError::InvalidByte {
                index: 0,
                byte: b'/',
            }),
        );
        check(
            "../a",
            Err(IdError::InvalidByte {
                index: 2,
                byte: b'/',
            }),
        );
        check(
            "a b",
            Err(IdError::InvalidByte {
                index: 1,
                byte: b' ',
            }),
        );
        check(
            " a",
            Err(IdError::InvalidByte {
                index: 0,
                byte: b' ',
            }),
        );
        check(
            "a\n",
            Err(IdError::InvalidByte {
                index: 1,
                byte: b'\n',
            }),
        );
        check("a\0", Err(IdError::InvalidByte { index: 1, byte: 0 }));
        check(
            "a\"",
            Err(IdError::InvalidByte {
                index: 1,
                byte: b'"',
            }),
        );
        check(
            "a\\",
            Err(IdError::InvalidByte {
                index: 1,
                byte: b'\\',
            }),
        );
        check(
            "a+b",
            Err(IdError::InvalidByte {
                index: 1,
                byte: b'+',
            }),
        );
        check(
            "é",
            Err(IdError::InvalidByte {
                index: 0,
                byte: 0xc3,
            }),
        );
        check(
            "aé",
            Err(IdError::InvalidByte {
                index: 1,
                byte: 0xc3,
            }),
        );
        check("ABCDEFGHIJKLMNOPQRSTUVWXYZ", Ok(()));
        check("abcdefghijklmnopqrstuvwxyz", Ok(()));
        check("0123456789", Ok(()));
        check("._:-", Ok(()));
        check("primary-v1", Ok(()));
        check("org:acme.team_1-x", Ok(()));
        check("-", Ok(()));
        check(":", Ok(()));
        check("_", Ok(()));
    }

    #[test]
    fn every_ascii_byte() {
        let allowed: Vec<u8> = (0u8..=127)
            .filter(|b| TenantId::try_from(char::from(*b).to_string().as_str()).is_ok())
            .collect();
        let mut expected: Vec<u8> = Vec::new();
        expected.extend(b'0'..=b'9');
        expected.extend(b'A'..=b'Z');
        expected.extend(b'a'..=b'z');
        expected.extend([b'-', b':', b'_']);
        expected.sort_unstable();
        // "." alone is path-like, so it is not accepted as a one-byte id.
        assert_eq!(allowed, expected);
    }

    #[test]
    fn ordering_is_by_raw_bytes() {
        let id = |s: &str| TenantId::try_from(s).unwrap();
        assert!(id("B") < id("a"));
        assert!(id("Z") < id("a"));
        assert!(id("-") < id("..."));
        assert!(id("...") < id("0"));
        assert!(id("9") < id(":"));
        assert!(id(":") < id("A"));
        assert!(id("Z") < id("_"));
        assert!(id("_") < id("a"));
        assert!(id("a") < id("aa"));
        assert!(id("tenant-a") < id("tenant-b"));
        assert!(id("tenant-10") < id("tenant-9"));
        assert_ne!(id("A"), id("a"));
    }

    #[test]
    fn conversions() {
        let tenant = TenantId::try_from("tenant-a").unwrap();
        assert_eq!(tenant.as_ref() as &str, "tenant-a");
        assert_eq!(String::from(tenant.clone()), "tenant-a");
        assert_eq!(tenant.into_string(), "tenant-a");
        let shard = SchedulerShardId::try_from("primary-v1").unwrap();
        assert_eq!(format!("{shard}"), "primary-v1");
        assert_eq!(format!("{shard:?}"), "SchedulerShardId(\"primary-v1\")");
        let schedule = ScheduleId::of_shard(&shard);
        assert_eq!(format!("{schedule}"), "primary-v1");
        assert_eq!(format!("{schedule:?}"), "ScheduleId(\"primary-v1\")");
        assert_eq!(String::from(schedule.clone()), "primary-v1");
        assert_eq!(schedule.as_ref() as &str, "primary-v1");
        assert_eq!(schedule.into_string(), "primary-v1");
        let primary = ScheduleId::try_from("primary").unwrap();
        assert_eq!(primary.to_string(), "primary");
        assert_ne!(ScheduleId::of_shard(&shard), primary);
    }
}
