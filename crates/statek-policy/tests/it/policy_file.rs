//! Policy files: the documented example, then one line per failure with the
//! exact message (`{file}:{line}:{column}: {field}: {what}`).
// Helpers outside `#[test]` functions are test code too.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
#![cfg(feature = "toml")]

use statek_policy::policy_file::{PolicyFile, PolicyFileError};
use statek_policy::{
    IdError, PolicyAlgorithm, PolicyError, ScheduleId, TenantId, WeightedFairnessPolicy,
};

const EXAMPLE: &str = r#"# deploy/policies/example.toml
shard = "primary-v1"
algorithm = "swrr-v1"   # optional, default swrr-v1
[[tenants]]
id = "tenant-a"
weight = 3
[[tenants]]
id = "tenant-b"
weight = 1
"#;

/// The header every failing case below shares: line 1.
const SHARD: &str = "shard = \"s\"\n";

fn parse(text: &str) -> Result<PolicyFile, PolicyFileError> {
    PolicyFile::parse("example.toml", text)
}

fn check(text: &str, expected: &str) {
    assert_eq!(parse(text).unwrap_err().to_string(), expected, "{text}");
}

fn example_policy() -> WeightedFairnessPolicy {
    parse(EXAMPLE).unwrap().into_policy()
}

#[test]
fn example() {
    let file = parse(EXAMPLE).unwrap();
    assert_eq!(file.file_name(), "example.toml");
    let policy = file.policy();
    assert_eq!(policy.shard_id().as_str(), "primary-v1");
    assert_eq!(policy.algorithm(), PolicyAlgorithm::SwrrV1);
    assert_eq!(
        policy.canonical_bytes(),
        br#"{"algorithm":"swrr-v1","tenants":[{"id":"tenant-a","weight":3},{"id":"tenant-b","weight":1}]}"#
    );
    assert_eq!(
        policy.digest().to_string(),
        "6acf11c1d16fcb2ec8754466b5d93ff654598189fbddce650b94514f19aa7965"
    );
}

#[test]
fn min_gap_algorithm() {
    let text = EXAMPLE.replace(
        "algorithm = \"swrr-v1\"   # optional, default swrr-v1",
        "algorithm = \"min-gap-v1\"",
    );
    let policy = parse(&text).unwrap().into_policy();
    assert_eq!(policy.algorithm(), PolicyAlgorithm::MinGapV1);
    assert_eq!(
        policy.canonical_bytes(),
        br#"{"algorithm":"min-gap-v1","tenants":[{"id":"tenant-a","weight":3},{"id":"tenant-b","weight":1}]}"#
    );
    assert_eq!(
        policy.digest().to_string(),
        "da0f9c1e849ca76e961bd117162eadc98ca5c9656ce4bc5cee3e1cd283457431"
    );
    assert_ne!(policy, example_policy());
    check(
        &text.replace("min-gap-v1", "min-gap-v3"),
        "example.toml:3:13: algorithm: unknown policy algorithm \"min-gap-v3\"",
    );
    let v2 = parse(&text.replace("min-gap-v1", "min-gap-v2"))
        .unwrap()
        .into_policy();
    assert_eq!(v2.algorithm(), PolicyAlgorithm::MinGapV2);
    assert_eq!(
        v2.canonical_bytes(),
        br#"{"algorithm":"min-gap-v2","tenants":[{"id":"tenant-a","weight":3},{"id":"tenant-b","weight":1}]}"#
    );
}

/// The example with `schedule = {value}` (TOML text) after the shard.
fn with_schedule(value: &str) -> String {
    EXAMPLE.replace(
        "shard = \"primary-v1\"\n",
        &format!("shard = \"primary-v1\"\nschedule = {value}\n"),
    )
}

#[test]
fn schedule() {
    let named = parse(&with_schedule("\"primary\"")).unwrap();
    let primary = ScheduleId::try_from("primary").unwrap();
    assert_eq!(named.schedule(), Some(&primary));
    assert_eq!(named.schedule_or_default(), primary);
    // Not part of the policy: the same bytes and digest as without it.
    assert_eq!(named.policy(), &example_policy());
    assert_eq!(
        named.policy().canonical_bytes(),
        br#"{"algorithm":"swrr-v1","tenants":[{"id":"tenant-a","weight":3},{"id":"tenant-b","weight":1}]}"#
    );
    assert_eq!(
        named.policy().digest().to_string(),
        "6acf11c1d16fcb2ec8754466b5d93ff654598189fbddce650b94514f19aa7965"
    );
    // Absent: the schedule named like the shard.
    let alone = parse(EXAMPLE).unwrap();
    assert_eq!(alone.schedule(), None);
    assert_eq!(alone.schedule_or_default().as_str(), "primary-v1");
    // The grammar of ids, nothing more: the shard's own name is allowed.
    let same = parse(&with_schedule("\"primary-v1\"")).unwrap();
    assert_eq!(same.schedule().map(ScheduleId::as_str), Some("primary-v1"));
    let last = &[
        SHARD,
        "[[tenants]]\nid = \"a\"\nweight = 1\nschedule = \"s\"\n",
    ]
    .concat();
    check(
        last,
        "example.toml:5:12: tenants[1].schedule: unknown key, expected one of id, weight",
    );
    let top = parse(
        &[
            SHARD,
            "schedule = \"s\"\n[[tenants]]\nid = \"a\"\nweight = 1\n",
        ]
        .concat(),
    )
    .unwrap();
    assert_eq!(top.schedule().map(ScheduleId::as_str), Some("s"));
}

#[test]
fn schedule_errors() {
    check(
        &with_schedule("\"primary/b\""),
        "example.toml:3:12: schedule: invalid schedule id: has byte 0x2f at index 7, only ASCII [A-Za-z0-9._:-] is allowed",
    );
    check(
        &with_schedule("\"\""),
        "example.toml:3:12: schedule: invalid schedule id: is empty",
    );
    check(
        &with_schedule("\"..\""),
        "example.toml:3:12: schedule: invalid schedule id: is \".\" or \"..\"",
    );
    check(
        &with_schedule(&format!("\"{}\"", "s".repeat(129))),
        "example.toml:3:12: schedule: invalid schedule id: is 129 bytes long, the maximum is 128",
    );
    check(
        &with_schedule("2"),
        "example.toml:3:12: schedule: expected a string, found an integer",
    );
    check(
        &with_schedule("[\"primary\"]"),
        "example.toml:3:12: schedule: expected a string, found an array",
    );
    check(
        &with_schedule("{ name = \"primary\" }"),
        "example.toml:3:12: schedule: expected a string, found a table",
    );
    // The shard is checked before the schedule.
    check(
        &with_schedule("1").replace("primary-v1", "a b"),
        "example.toml:2:9: shard: invalid shard id: has byte 0x20 at index 1, only ASCII [A-Za-z0-9._:-] is allowed",
    );
    let error = parse(&with_schedule("\"a b\"")).unwrap_err();
    assert_eq!(
        error.policy_error(),
        Some(&PolicyError::InvalidScheduleId {
            reason: IdError::InvalidByte {
                index: 1,
                byte: b' '
            }
        })
    );
    assert_eq!(
        (error.location().line(), error.location().field()),
        (3, "schedule")
    );
}

#[test]
fn equivalent_spellings() {
    let without_algorithm = EXAMPLE.replace(
        "algorithm = \"swrr-v1\"   # optional, default swrr-v1\n",
        "",
    );
    assert_eq!(
        parse(&without_algorithm).unwrap().into_policy(),
        example_policy()
    );
    let inline = "shard = \"primary-v1\"\ntenants = [{ id = \"tenant-b\", weight = 1 }, { id = \"tenant-a\", weight = 3 }]\n";
    assert_eq!(parse(inline).unwrap().into_policy(), example_policy());
}

#[test]
fn syntax_errors() {
    check(
        &EXAMPLE.replace("weight = 1", "weight = = 1"),
        "example.toml:9:10: document: invalid toml: invalid string; expected `\"`, `'`",
    );
    check(
        &[SHARD, "shard = \"x\"\n"].concat(),
        "example.toml:2:1: document: invalid toml: duplicate key `shard` in document root",
    );
    check(
        "shard = \"s\n",
        "example.toml:1:11: document: invalid toml: invalid basic string",
    );
    check(
        &[SHARD, "[[tenants]]\nid = \"a\"\nweight = 1\nweight = 2\n"].concat(),
        "example.toml:5:1: document: invalid toml: duplicate key `weight` in table `tenants`",
    );
}

#[test]
fn key_errors() {
    check(
        &EXAMPLE.replace("shard = \"primary-v1\"\n", ""),
        "example.toml:1:1: shard: missing required key",
    );
    check(SHARD, "example.toml:1:1: tenants: missing required key");
    check(
        &[SHARD, "shrad = 1\n"].concat(),
        "example.toml:2:9: shrad: unknown key, expected one of shard, schedule, algorithm, fairness, tenants",
    );
    check(
        &[SHARD, "[extra]\nx = 1\n"].concat(),
        "example.toml:2:1: extra: unknown key, expected one of shard, schedule, algorithm, fairness, tenants",
    );
    check(
        &[SHARD, "[[tenants]]\nid = \"a\"\nweight = 3\nextra = true\n"].concat(),
        "example.toml:5:9: tenants[1].extra: unknown key, expected one of id, weight",
    );
    check(
        &[
            SHARD,
            "[[tenants]]\nid = \"a\"\nweight = 1\n[tenants.x]\ny = 1\n",
        ]
        .concat(),
        "example.toml:5:1: tenants[1].x: unknown key, expected one of id, weight",
    );
    // Valid TOML that is not a policy file, with dotted keys (which the
    // reader cannot take with positions): named for what it is.
    check(
        &[SHARD, "[workspace.lints.rust]\nunsafe_code = \"forbid\"\n"].concat(),
        "example.toml:2:2: workspace: unknown key, expected one of shard, schedule, algorithm, fairness, tenants",
    );
    check(
        &[SHARD, "a.b = 1\n"].concat(),
        "example.toml:2:1: a: unknown key, expected one of shard, schedule, algorithm, fairness, tenants",
    );
    check(
        &[SHARD, "tenants.a = 1\n"].concat(),
        "example.toml:2:9: document: invalid toml: dotted keys (`a.b = 1`, `[a.b]`) are not \
         supported in a policy file: give each table its own header",
    );
    check(
        &[SHARD, "[[tenants]]\nid = \"a\"\n"].concat(),
        "example.toml:2:1: tenants[1].weight: missing required key",
    );
    check(
        &[SHARD, "[[tenants]]\nweight = 1\n"].concat(),
        "example.toml:2:1: tenants[1].id: missing required key",
    );
    check(
        &[
            SHARD,
            "[[tenants]]\nid = \"a\"\nweight = 1\n[[tenants]]\n\nweight = 1\n",
        ]
        .concat(),
        "example.toml:5:1: tenants[2].id: missing required key",
    );
}

#[test]
fn type_errors() {
    check(
        "shard = 1\n",
        "example.toml:1:9: shard: expected a string, found an integer",
    );
    check(
        &[SHARD, "algorithm = true\n"].concat(),
        "example.toml:2:13: algorithm: expected a string, found a boolean",
    );
    check(
        &[SHARD, "tenants = \"a\"\n"].concat(),
        "example.toml:2:11: tenants: expected an array of tables, found a string",
    );
    check(
        &[SHARD, "[tenants]\nid = \"a\"\n"].concat(),
        "example.toml:2:1: tenants: expected an array of tables, found a table",
    );
    check(
        &[SHARD, "tenants = [1]\n"].concat(),
        "example.toml:2:12: tenants[1]: expected a table, found an integer",
    );
    check(
        &[SHARD, "[[tenants]]\nid = 7\nweight = 1\n"].concat(),
        "example.toml:3:6: tenants[1].id: expected a string, found an integer",
    );
    check(
        &[SHARD, "[[tenants]]\nid = \"a\"\nweight = \"3\"\n"].concat(),
        "example.toml:4:10: tenants[1].weight: expected an integer, found a string",
    );
    check(
        &[SHARD, "[[tenants]]\nid = \"a\"\nweight = 1.5\n"].concat(),
        "example.toml:4:10: tenants[1].weight: expected an integer, found a float",
    );
    check(
        &[SHARD, "[[tenants]]\nid = \"a\"\nweight = 1979-05-27\n"].concat(),
        "example.toml:4:10: tenants[1].weight: expected an integer, found a datetime",
    );
    check(
        &[SHARD, "[[tenants]]\nid = \"a\"\nweight = [1]\n"].concat(),
        "example.toml:4:10: tenants[1].weight: expected an integer, found an array",
    );
    check(
        &[SHARD, "[[tenants]]\nid = \"a\"\nweight = -1\n"].concat(),
        "example.toml:4:10: tenants[1].weight: -1 is out of range 1..=1024",
    );
    check(
        &[SHARD, "[[tenants]]\nid = \"a\"\nweight = 99999999999\n"].concat(),
        "example.toml:4:10: tenants[1].weight: 99999999999 is out of range 1..=1024",
    );
}

#[test]
fn policy_errors() {
    check(&EXAMPLE.replace("weight = 3", "weight = 0"), "example.toml:6:10: tenants[1].weight: weight 0 of tenant tenant-a is out of range 1..=1024");
    check(&EXAMPLE.replace("weight = 1", "weight = 0"), "example.toml:9:10: tenants[2].weight: weight 0 of tenant tenant-b is out of range 1..=1024");
    check(&EXAMPLE.replace("weight = 3", "weight = 1025"), "example.toml:6:10: tenants[1].weight: weight 1025 of tenant tenant-a is out of range 1..=1024");
    check(&EXAMPLE.replace("primary-v1", "primary v1"), "example.toml:2:9: shard: invalid shard id: has byte 0x20 at index 7, only ASCII [A-Za-z0-9._:-] is allowed");
    check(
        &EXAMPLE.replace("swrr-v1\"", "swrr-v2\""),
        "example.toml:3:13: algorithm: unknown policy algorithm \"swrr-v2\"",
    );
    check(&EXAMPLE.replace("tenant-b", "a/b"), "example.toml:8:6: tenants[2].id: invalid tenant id: has byte 0x2f at index 1, only ASCII [A-Za-z0-9._:-] is allowed");
    check(
        &EXAMPLE.replace("tenant-b", ".."),
        "example.toml:8:6: tenants[2].id: invalid tenant id: is \".\" or \"..\"",
    );
    check(&[SHARD, "[[tenants]]\n  id = \"é\"\nweight = 1\n"].concat(), "example.toml:3:8: tenants[1].id: invalid tenant id: has byte 0xc3 at index 0, only ASCII [A-Za-z0-9._:-] is allowed");
    check(
        &[SHARD, "tenants = []\n"].concat(),
        "example.toml:2:11: tenants: a policy needs at least one tenant",
    );
    check(
        &[EXAMPLE, "[[tenants]]\nid = \"tenant-a\"\nweight = 2\n"].concat(),
        "example.toml:11:6: tenants[3].id: tenant tenant-a is listed more than once",
    );
}

/// A file with one `[[tenants]]` table of three lines per (id, weight).
fn many(tenants: impl IntoIterator<Item = (String, u32)>) -> String {
    let mut text = String::from(SHARD);
    for (id, weight) in tenants {
        text.push_str(&format!("[[tenants]]\nid = \"{id}\"\nweight = {weight}\n"));
    }
    text
}

#[test]
fn limits() {
    let ids = |n: usize| (0..n).map(|i| (format!("t{i:04}"), 1));
    assert_eq!(
        parse(&many(ids(1024))).unwrap().policy().tenants().len(),
        1024
    );
    // The 1025th tenant's table starts on line 2 + 3 * 1024.
    check(
        &many(ids(1025)),
        "example.toml:3074:1: tenants[1025]: 1025 tenants is too many, the maximum is 1024",
    );
    let heavy = |n: usize, last: u32| {
        (0..n).map(move |i| (format!("t{i}"), if i + 1 == n { last } else { 1024 }))
    };
    assert_eq!(
        parse(&many(heavy(4, 1024)))
            .unwrap()
            .policy()
            .cycle_length(),
        4096
    );
    // The weight that crosses 4096 is the 5th tenant's, on line 2 + 3 * 4 + 2.
    check(&many(heavy(5, 1)), "example.toml:16:10: tenants[5].weight: the weights sum to a cycle of 4097 slots, the maximum is 4096");
}

#[test]
fn errors_are_structured() {
    let error = parse(&EXAMPLE.replace("weight = 1", "weight = 0")).unwrap_err();
    let location = error.location();
    assert_eq!(
        (
            location.file(),
            location.line(),
            location.column(),
            location.field()
        ),
        ("example.toml", 9, 10, "tenants[2].weight")
    );
    assert_eq!(
        error.policy_error(),
        Some(&PolicyError::WeightOutOfRange {
            tenant: TenantId::try_from("tenant-b").unwrap(),
            weight: 0,
            min: 1,
            max: 1024
        })
    );
    assert!(matches!(
        parse(&[EXAMPLE, "[[tenants]]\nid = \"tenant-a\"\nweight = 2\n"].concat()),
        Err(PolicyFileError::Policy {
            error: PolicyError::DuplicateTenant { .. },
            ..
        })
    ));
    assert!(matches!(
        parse("shard = \"s\n"),
        Err(PolicyFileError::Syntax { .. })
    ));
    assert_eq!(parse("shard = \"s\n").unwrap_err().policy_error(), None);
}

const TENANT: &str = "[[tenants]]\nid = \"a\"\nweight = 1\n";

/// A `[fairness]` table of `body` (its header on line 2) and one tenant.
fn with_fairness(body: &str) -> String {
    format!("{SHARD}[fairness]\n{body}{TENANT}")
}

#[test]
fn cost_mode_is_read_with_default_cost_max_cost_and_is_in_the_digest() {
    use statek_policy::{CostFairness, FairnessUnit};
    let file = parse(&with_fairness(
        "unit = \"cost\"\nquantum = 2\nmax_cost = 40\nbalance_cap = 80\n",
    ))
    .unwrap();
    let expected = CostFairness::new(2, 40, 40, 80).unwrap();
    assert_eq!(file.policy().fairness(), FairnessUnit::Cost(expected));
    assert_eq!(
        file.policy().canonical_bytes(),
        br#"{"algorithm":"swrr-v1","tenants":[{"id":"a","weight":1}],"cost":{"quantum":2,"max_cost":40,"default_cost":40,"balance_cap":80}}"#
    );
    let explicit = parse(&with_fairness(
        "unit = \"cost\"\nquantum = 2\nmax_cost = 40\ndefault_cost = 0\nbalance_cap = 0\n",
    ))
    .unwrap();
    assert_eq!(
        explicit.policy().fairness(),
        FairnessUnit::Cost(CostFairness::new(2, 40, 0, 0).unwrap())
    );
    // Decoding the bytes gives the same policy back.
    let decoded = WeightedFairnessPolicy::decode(
        file.policy().shard_id().clone(),
        file.policy().canonical_bytes(),
    )
    .unwrap();
    assert_eq!(&decoded, file.policy());
    // Slots, said or not, is the policy without the table, byte for byte.
    let slots = parse(&with_fairness("unit = \"slots\"\n")).unwrap();
    let plain = parse(&format!("{SHARD}{TENANT}")).unwrap();
    assert_eq!(slots.policy(), plain.policy());
    assert_eq!(slots.policy().fairness(), FairnessUnit::Slots);
    assert_eq!(
        plain.policy().canonical_bytes(),
        br#"{"algorithm":"swrr-v1","tenants":[{"id":"a","weight":1}]}"#
    );
    assert_ne!(file.policy().digest(), plain.policy().digest());
    assert_eq!(file.policy().cycle_digest(), plain.policy().cycle_digest());
}

#[test]
fn fairness_table_errors() {
    let cost = "unit = \"cost\"\n";
    check(
        &with_fairness("unit = \"tokens\"\n"),
        "example.toml:3:8: fairness.unit: unknown fairness unit \"tokens\" (expected slots or cost)",
    );
    check(
        &with_fairness("unit = 1\n"),
        "example.toml:3:8: fairness.unit: expected a string, found an integer",
    );
    check(
        &with_fairness("unit = \"slots\"\nquantum = 1\n"),
        "example.toml:4:11: fairness.quantum: unknown key, expected one of unit (cost parameters need unit = \"cost\")",
    );
    check(
        &with_fairness("quantum = 1\n"),
        "example.toml:3:11: fairness.quantum: unknown key, expected one of unit (cost parameters need unit = \"cost\")",
    );
    check(
        &with_fairness(&format!("{cost}quanta = 1\n")),
        "example.toml:4:10: fairness.quanta: unknown key, expected one of unit, quantum, max_cost, default_cost, balance_cap",
    );
    check(
        &with_fairness(&format!("{cost}max_cost = 40\nbalance_cap = 80\n")),
        "example.toml:2:1: fairness.quantum: missing required key",
    );
    check(
        &with_fairness(&format!(
            "{cost}quantum = 0\nmax_cost = 40\nbalance_cap = 80\n"
        )),
        "example.toml:4:11: fairness.quantum: 0 is out of range 1..=1099511627776",
    );
    check(
        &with_fairness(&format!(
            "{cost}quantum = 1\nmax_cost = 1099511627777\nbalance_cap = 80\n"
        )),
        "example.toml:5:12: fairness.max_cost: 1099511627777 is out of range 1..=1099511627776",
    );
    check(
        &with_fairness(&format!(
            "{cost}quantum = 1\nmax_cost = 40\nbalance_cap = -1\n"
        )),
        "example.toml:6:15: fairness.balance_cap: -1 is out of range 0..=1099511627776",
    );
    check(
        &with_fairness(&format!(
            "{cost}quantum = 1.5\nmax_cost = 40\nbalance_cap = 80\n"
        )),
        "example.toml:4:11: fairness.quantum: expected an integer, found a float",
    );
    check(
        &with_fairness(&format!(
            "{cost}quantum = 1\nmax_cost = 40\ndefault_cost = 41\nbalance_cap = 80\n"
        )),
        "example.toml:6:16: fairness.default_cost: 41 is out of range 0..=40",
    );
    check(
        &with_fairness(&format!(
            "{cost}quantum = 1\nmax_cost = 40\ndefault_cost = -1\nbalance_cap = 80\n"
        )),
        "example.toml:6:16: fairness.default_cost: -1 is out of range 0..=40",
    );
    check(
        &format!("{SHARD}fairness = \"cost\"\n{TENANT}"),
        "example.toml:2:12: fairness: expected a table, found a string",
    );
}
