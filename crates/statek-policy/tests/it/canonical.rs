//! Canonical bytes: the exact encoding, the round trip, and one line per
//! deviation the strict decoder rejects.
// Helpers outside `#[test]` functions are test code too.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use statek_policy::{
    IdError, PolicyError, SchedulerShardId, TenantFairnessWeight, TenantId, WeightedFairnessPolicy,
};

/// `tenant-a:3, tenant-b:1`, 93 bytes.
const CANONICAL: &str = r#"{"algorithm":"swrr-v1","tenants":[{"id":"tenant-a","weight":3},{"id":"tenant-b","weight":1}]}"#;

const OPEN_ALGORITHM: &str = r#"{"algorithm":""#;
const OPEN_TENANTS: &str = r#"","tenants":["#;
const OPEN_TENANT: &str = r#"{"id":""#;

fn shard() -> SchedulerShardId {
    SchedulerShardId::try_from("primary-v1").unwrap()
}

fn tenant(id: &str) -> TenantId {
    TenantId::try_from(id).unwrap()
}

fn non_canonical(offset: usize, expected: &'static str) -> PolicyError {
    PolicyError::NonCanonicalPolicyBytes { offset, expected }
}

fn weight_error(id: &str, weight: u32) -> PolicyError {
    PolicyError::WeightOutOfRange {
        tenant: tenant(id),
        weight,
        min: 1,
        max: 1024,
    }
}

fn id_error(reason: IdError) -> PolicyError {
    PolicyError::InvalidTenantId { reason }
}

fn decode(bytes: &[u8]) -> Result<WeightedFairnessPolicy, PolicyError> {
    WeightedFairnessPolicy::decode(shard(), bytes)
}

/// `CANONICAL` with the first `from` replaced by `to`.
fn edit(from: &str, to: &str) -> Vec<u8> {
    assert!(CANONICAL.contains(from), "{from}");
    CANONICAL.replacen(from, to, 1).into_bytes()
}

fn check(bytes: &[u8], expected: PolicyError) {
    assert_eq!(
        decode(bytes),
        Err(expected),
        "{}",
        String::from_utf8_lossy(bytes)
    );
}

/// `n` tenants `t0000…` of weight `w` each, canonically encoded.
fn generated(n: usize, weight: u32) -> Vec<u8> {
    let tenants: Vec<String> = (0..n)
        .map(|i| format!(r#"{{"id":"t{i:04}","weight":{weight}}}"#))
        .collect();
    format!(
        r#"{{"algorithm":"swrr-v1","tenants":[{}]}}"#,
        tenants.join(",")
    )
    .into_bytes()
}

#[test]
fn encoding_and_round_trip() {
    let policy = WeightedFairnessPolicy::new(
        shard(),
        [
            TenantFairnessWeight::new(tenant("tenant-b"), 1).unwrap(),
            TenantFairnessWeight::new(tenant("tenant-a"), 3).unwrap(),
        ],
    )
    .unwrap();
    assert_eq!(policy.canonical_bytes(), CANONICAL.as_bytes());
    assert_eq!(CANONICAL.len(), 93);
    let decoded = decode(CANONICAL.as_bytes()).unwrap();
    assert_eq!(decoded, policy);
    assert_eq!(decoded.canonical_bytes(), CANONICAL.as_bytes());
    assert_eq!(decoded.digest(), policy.digest());
    assert_eq!(decoded.cycle_tenant_indexes(), [0, 0, 1, 0]);
    // The shard is not in the bytes: the same bytes bind to any shard.
    let other = WeightedFairnessPolicy::decode(
        SchedulerShardId::try_from("other").unwrap(),
        CANONICAL.as_bytes(),
    )
    .unwrap();
    assert_eq!(other.shard_id().as_str(), "other");
    assert_ne!(other, policy);
    assert_eq!(
        (other.canonical_bytes(), other.digest()),
        (policy.canonical_bytes(), policy.digest())
    );
}

#[test]
fn limits_round_trip() {
    for bytes in [generated(1024, 1), generated(4, 1024), generated(1, 1)] {
        assert_eq!(decode(&bytes).unwrap().canonical_bytes(), bytes);
    }
}

#[test]
fn rejections() {
    // Layout
    check(b"", non_canonical(0, OPEN_ALGORITHM));
    check(
        &[b" ", CANONICAL.as_bytes()].concat(),
        non_canonical(0, OPEN_ALGORITHM),
    );
    check(
        &[b"\xef\xbb\xbf", CANONICAL.as_bytes()].concat(),
        non_canonical(0, OPEN_ALGORITHM),
    );
    check(
        &[b"\xff", CANONICAL.as_bytes()].concat(),
        non_canonical(0, OPEN_ALGORITHM),
    );
    check(
        &edit("{\"algorithm\"", "{ \"algorithm\""),
        non_canonical(1, OPEN_ALGORITHM),
    );
    check(
        &edit(":\"swrr", ": \"swrr"),
        non_canonical(13, OPEN_ALGORITHM),
    );
    check(
        &edit(",\"tenants\"", ", \"tenants\""),
        non_canonical(23, OPEN_TENANTS),
    );
    check(&edit("},{", "}, {"), non_canonical(63, OPEN_TENANT));
    check(&edit("},{", "},\n{"), non_canonical(63, OPEN_TENANT));
    check(&edit("}]}", "}\n]}"), non_canonical(91, "`,` or `]`"));
    check(
        &edit("\"weight\":3", "\"weight\": 3"),
        non_canonical(60, "a decimal weight"),
    );
    check(
        &[CANONICAL.as_bytes(), b"\n"].concat(),
        non_canonical(93, "end of input"),
    );
    check(
        &[CANONICAL.as_bytes(), b" "].concat(),
        non_canonical(93, "end of input"),
    );
    check(
        &[CANONICAL.as_bytes(), b"{}"].concat(),
        non_canonical(93, "end of input"),
    );
    check(
        &[CANONICAL.as_bytes(), b"\0"].concat(),
        non_canonical(93, "end of input"),
    );
    // Keys: order, unknown, missing, unquoted
    check(
        br#"{"tenants":[{"id":"tenant-a","weight":3}],"algorithm":"swrr-v1"}"#,
        non_canonical(2, OPEN_ALGORITHM),
    );
    check(
        &edit(",\"tenants\"", ",\"shard\":\"s\",\"tenants\""),
        non_canonical(24, OPEN_TENANTS),
    );
    check(
        &edit(
            "{\"id\":\"tenant-a\",\"weight\":3}",
            "{\"weight\":3,\"id\":\"tenant-a\"}",
        ),
        non_canonical(36, OPEN_TENANT),
    );
    check(
        &edit("\"weight\":3}", "\"weight\":3,\"x\":1}"),
        non_canonical(61, "}"),
    );
    check(
        &edit("\"weight\":3}", "\"weight\":3,\"weight\":3}"),
        non_canonical(61, "}"),
    );
    check(
        &edit("{\"id\":\"tenant-a\",", "{"),
        non_canonical(36, OPEN_TENANT),
    );
    check(
        &edit("\"tenant-a\"", "tenant-a"),
        non_canonical(40, OPEN_TENANT),
    );
    check(
        &edit("\"algorithm\"", "'algorithm'"),
        non_canonical(1, OPEN_ALGORITHM),
    );
    // Containers
    check(&edit("[", "{"), non_canonical(33, OPEN_TENANTS));
    check(&edit("},{", "}{"), non_canonical(62, "`,` or `]`"));
    check(&edit("}]}", "},]}"), non_canonical(92, OPEN_TENANT));
    check(&edit("}]}", "}]"), non_canonical(92, "]}"));
    check(
        br#"{"algorithm":"swrr-v1","tenants":[]}"#,
        PolicyError::NoTenants,
    );
    check(
        br#"{"algorithm":"swrr-v1","tenants":null}"#,
        non_canonical(33, OPEN_TENANTS),
    );
    // Truncation
    check(&CANONICAL.as_bytes()[..45], non_canonical(45, "`\"`"));
    check(
        &CANONICAL.as_bytes()[..60],
        non_canonical(60, "a decimal weight"),
    );
    check(&CANONICAL.as_bytes()[..92], non_canonical(92, "]}"));
    // Weights
    check(
        &edit(":3}", ":03}"),
        non_canonical(60, "a weight without leading zeros"),
    );
    check(
        &edit(":3}", ":00}"),
        non_canonical(60, "a weight without leading zeros"),
    );
    check(&edit(":3}", ":+3}"), non_canonical(60, "a decimal weight"));
    check(&edit(":3}", ":-3}"), non_canonical(60, "a decimal weight"));
    check(
        &edit(":3}", ":\"3\"}"),
        non_canonical(60, "a decimal weight"),
    );
    check(
        &edit(":3}", ":null}"),
        non_canonical(60, "a decimal weight"),
    );
    check(&edit(":3}", ":3.0}"), non_canonical(61, "}"));
    check(&edit(":3}", ":3e0}"), non_canonical(61, "}"));
    check(
        &edit(":3}", ":4294967296}"),
        non_canonical(60, "a weight in 1..=1024"),
    );
    check(
        &edit(":3}", ":99999999999999999999}"),
        non_canonical(60, "a weight in 1..=1024"),
    );
    check(&edit(":3}", ":0}"), weight_error("tenant-a", 0));
    check(&edit(":3}", ":1025}"), weight_error("tenant-a", 1025));
    check(
        &edit(":3}", ":4294967295}"),
        weight_error("tenant-a", u32::MAX),
    );
    // Ids
    check(
        &edit("tenant-a", "tenant\\u002da"),
        non_canonical(47, "a tenant id without escapes"),
    );
    check(
        &edit("tenant-a", "tenant\\\"a"),
        non_canonical(47, "a tenant id without escapes"),
    );
    check(
        &edit("tenant-a", "tenant\ta"),
        non_canonical(47, "a tenant id without escapes"),
    );
    check(&edit("tenant-a", ""), id_error(IdError::Empty));
    check(&edit("tenant-a", "."), id_error(IdError::PathLike));
    check(&edit("tenant-a", ".."), id_error(IdError::PathLike));
    check(
        &edit("tenant-a", &"x".repeat(129)),
        id_error(IdError::TooLong {
            max: 128,
            actual: 129,
        }),
    );
    check(
        &edit("tenant-a", "a/b"),
        id_error(IdError::InvalidByte {
            index: 1,
            byte: b'/',
        }),
    );
    check(
        &edit("tenant-a", "tenant a"),
        id_error(IdError::InvalidByte {
            index: 6,
            byte: b' ',
        }),
    );
    check(
        &edit("tenant-a", "é"),
        id_error(IdError::InvalidByte {
            index: 0,
            byte: 0xc3,
        }),
    );
    let mut invalid_utf8 = CANONICAL.as_bytes().to_vec();
    invalid_utf8[47] = 0xff;
    check(
        &invalid_utf8,
        id_error(IdError::InvalidByte {
            index: 6,
            byte: 0xff,
        }),
    );
    // Tenant order
    check(br#"{"algorithm":"swrr-v1","tenants":[{"id":"tenant-b","weight":1},{"id":"tenant-a","weight":3}]}"#, non_canonical(70, "tenants sorted by id"));
    check(
        br#"{"algorithm":"swrr-v1","tenants":[{"id":"b","weight":1},{"id":"B","weight":3}]}"#,
        non_canonical(63, "tenants sorted by id"),
    );
    check(
        &edit("tenant-b", "tenant-a"),
        PolicyError::DuplicateTenant {
            tenant: tenant("tenant-a"),
        },
    );
    // Algorithm
    check(
        &edit("swrr-v1", "swrr-v2"),
        PolicyError::UnknownAlgorithm {
            name: "swrr-v2".into(),
        },
    );
    check(
        &edit("swrr-v1", "SWRR-V1"),
        PolicyError::UnknownAlgorithm {
            name: "SWRR-V1".into(),
        },
    );
    check(
        &edit("swrr-v1", ""),
        PolicyError::UnknownAlgorithm {
            name: String::new(),
        },
    );
    check(
        &edit("swrr-v1", "swrr\\u002dv1"),
        non_canonical(18, "a known algorithm name"),
    );
    check(
        &edit("swrr-v1", &"x".repeat(65)),
        non_canonical(14, "a known algorithm name"),
    );
    let mut bad_algorithm = CANONICAL.as_bytes().to_vec();
    bad_algorithm[16] = 0xff;
    check(&bad_algorithm, non_canonical(14, "a known algorithm name"));
    // Limits
    check(
        &generated(1025, 1),
        PolicyError::TooManyTenants {
            max: 1024,
            actual: 1025,
        },
    );
    check(
        &generated(4097, 1),
        PolicyError::TooManyTenants {
            max: 1024,
            actual: 4097,
        },
    );
    check(
        &generated(5, 820),
        PolicyError::CycleTooLong {
            max: 4096,
            actual: 4100,
        },
    );
}

#[test]
fn every_proper_prefix_is_rejected() {
    for end in 0..CANONICAL.len() {
        let result = decode(&CANONICAL.as_bytes()[..end]);
        assert!(
            matches!(result, Err(PolicyError::NonCanonicalPolicyBytes { .. })),
            "{end}: {result:?}"
        );
    }
}

/// Accepts `bytes` only if they are exactly the canonical bytes of the
/// decoded policy.
fn assert_strict(bytes: &[u8]) {
    if let Ok(policy) = decode(bytes) {
        assert_eq!(
            policy.canonical_bytes(),
            bytes,
            "{}",
            String::from_utf8_lossy(bytes)
        );
    }
}

#[test]
fn every_single_byte_edit_is_rejected_or_canonical() {
    let canonical = CANONICAL.as_bytes();
    for index in 0..canonical.len() {
        let mut deleted = canonical.to_vec();
        deleted.remove(index);
        assert_strict(&deleted);
        for byte in 0..=u8::MAX {
            let mut replaced = canonical.to_vec();
            replaced[index] = byte;
            assert_strict(&replaced);
            let mut inserted = canonical.to_vec();
            inserted.insert(index, byte);
            assert_strict(&inserted);
        }
    }
}
