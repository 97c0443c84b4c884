//! How text becomes an id: `TryFrom<&str>`, `TryFrom<String>` and
//! `FromStr` for [`TenantId`], [`SchedulerShardId`] and [`ScheduleId`],
//! failing with the [`PolicyError`] variant that names the id's kind and
//! the [`IdError`](crate::IdError) rule it broke. Below both `id.rs` (the types and their
//! grammar) and `error.rs` (whose variants hold ids).

use alloc::string::String;
use core::str::FromStr;

use crate::error::PolicyError;
use crate::id::{ScheduleId, SchedulerShardId, TenantId};

macro_rules! id_parse {
    ($name:ident, $variant:ident, $what:literal) => {
        impl $name {
            /// Validates raw bytes (for example from the canonical decoder).
            pub(crate) fn from_bytes(bytes: &[u8]) -> Result<Self, PolicyError> {
                Self::parse(bytes).map_err(|reason| PolicyError::$variant { reason })
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
                Self::parse_string(value).map_err(|reason| PolicyError::$variant { reason })
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
    };
}

id_parse!(TenantId, InvalidTenantId, "tenant id");
id_parse!(SchedulerShardId, InvalidShardId, "shard id");
id_parse!(ScheduleId, InvalidScheduleId, "schedule id");

#[cfg(test)]
mod tests {
    use alloc::format;
    use alloc::string::ToString;
    use alloc::vec::Vec;

    use super::*;
    use crate::id::IdError;

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
