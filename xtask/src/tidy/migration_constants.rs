//! The limits the migrations keep in the database (CHECK constraints,
//! trigger functions) are the Rust constants: a landed migration is never
//! edited, so a constant that moves must fail here, next to its SQL.
//!
//! In the code of every `migrations/V*.sql` (comments left out):
//! - `cycle_length BETWEEN 1 AND N`: N is `MAX_CYCLE_LENGTH`;
//! - `octet_length(ID) BETWEEN 1 AND N`: N is `MAX_ID_LENGTH`, for
//!   `idempotency_key` statek-store-pg's `MAX_IDEMPOTENCY_KEY_LENGTH`,
//!   for a slot outcome record's `classes` its `MAX_OUTCOME_RUNS`;
//! - `ID ~ '^[CLASS]+$'`: CLASS admits exactly the bytes an id may hold
//!   (other patterns, such as a weight's digits, are not ids);
//! - `::integer BETWEEN A AND B` (a weight): `MIN_WEIGHT..=MAX_WEIGHT`;
//! - `v_tenants NOT BETWEEN 1 AND N`: N is `MAX_TENANTS`;
//! - `'\x..'::bytea` digest domains: `POLICY_DIGEST_DOMAIN` or
//!   `CYCLE_DIGEST_DOMAIN`.
//!
//! Each rule must match at least once, so a rewording that escapes the
//! scan fails too.

use std::collections::BTreeMap;

use statek_policy::{
    TenantId, CYCLE_DIGEST_DOMAIN, MAX_CYCLE_LENGTH, MAX_ID_LENGTH, MAX_TENANTS, MAX_WEIGHT,
    MIN_WEIGHT, POLICY_DIGEST_DOMAIN,
};
use statek_store_pg::input_limits::{MAX_IDEMPOTENCY_KEY_LENGTH, MAX_OUTCOME_RUNS};

/// SQL without `--` comments (no migration quotes `--` in a string).
fn code(sql: &str) -> String {
    sql.lines()
        .map(|line| line.split("--").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The text after each occurrence of `marker`.
fn after<'a>(text: &'a str, marker: &'a str) -> impl Iterator<Item = &'a str> + 'a {
    text.match_indices(marker)
        .map(move |(at, _)| &text[at + marker.len()..])
}

/// The integer at the start of `text` (after spaces).
fn leading_number(text: &str) -> Option<u64> {
    let text = text.trim_start();
    let end = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    text[..end].parse().ok()
}

/// `BETWEEN A AND B` at the start of `text`.
fn between(text: &str) -> Option<(u64, u64)> {
    let text = text.trim_start().strip_prefix("BETWEEN")?;
    let low = leading_number(text)?;
    let rest = text
        .trim_start()
        .trim_start_matches(|c: char| c.is_ascii_digit());
    let high = leading_number(rest.trim_start().strip_prefix("AND")?)?;
    Some((low, high))
}

/// The bytes a regex character class such as `A-Za-z0-9._:-` admits.
fn class_bytes(class: &str) -> Vec<u8> {
    let bytes = class.as_bytes();
    let mut admitted = Vec::new();
    let mut index = 0;
    while index < bytes.len() {
        if index + 2 < bytes.len() && bytes[index + 1] == b'-' {
            admitted.extend(bytes[index]..=bytes[index + 2]);
            index += 3;
        } else {
            admitted.push(bytes[index]);
            index += 1;
        }
    }
    admitted.sort_unstable();
    admitted.dedup();
    admitted
}

/// The bytes statek_policy admits in an id (after a letter, so that `.`
/// is not read as a path).
fn id_bytes() -> Vec<u8> {
    (0..=255u8)
        .filter(|byte| {
            byte.is_ascii() && TenantId::try_from(format!("x{}", char::from(*byte))).is_ok()
        })
        .collect()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

/// Every literal that differs from its constant, and every rule that
/// matched nothing; `files` are (name, SQL).
fn differences(files: &[(String, String)]) -> Vec<String> {
    let mut found = Vec::new();
    let mut matches: BTreeMap<&str, usize> = BTreeMap::new();
    let id_class: Vec<u8> = id_bytes();
    let domains = [hex(POLICY_DIGEST_DOMAIN), hex(CYCLE_DIGEST_DOMAIN)];
    for (name, sql) in files {
        let sql = code(sql);
        for rest in after(&sql, "cycle_length") {
            if let Some((low, high)) = between(rest) {
                *matches.entry("cycle length").or_default() += 1;
                if (low, high) != (1, u64::from(MAX_CYCLE_LENGTH)) {
                    found.push(format!("{name}: cycle_length BETWEEN {low} AND {high}, but MAX_CYCLE_LENGTH is {MAX_CYCLE_LENGTH}"));
                }
            }
        }
        for rest in after(&sql, "octet_length(") {
            let Some(close) = rest.find(')') else {
                continue;
            };
            if let Some((low, high)) = between(&rest[close + 1..]) {
                let (rule, constant, max) = if rest[..close].contains("idempotency_key") {
                    (
                        "idempotency key length",
                        "MAX_IDEMPOTENCY_KEY_LENGTH",
                        MAX_IDEMPOTENCY_KEY_LENGTH,
                    )
                } else if rest[..close].ends_with("classes") {
                    ("outcome runs", "MAX_OUTCOME_RUNS", MAX_OUTCOME_RUNS)
                } else {
                    ("id length", "MAX_ID_LENGTH", MAX_ID_LENGTH)
                };
                *matches.entry(rule).or_default() += 1;
                if (low, high) != (1, max as u64) {
                    found.push(format!("{name}: octet_length({}) BETWEEN {low} AND {high}, but {constant} is {max}", &rest[..close]));
                }
            }
        }
        for rest in after(&sql, "~ '^[") {
            let Some(end) = rest.find(']') else { continue };
            if !rest[end..].starts_with("]+$'") {
                continue;
            }
            *matches.entry("id grammar").or_default() += 1;
            if class_bytes(&rest[..end]) != id_class {
                found.push(format!(
                    "{name}: id pattern [{}] admits other bytes than statek_policy's id grammar",
                    &rest[..end]
                ));
            }
        }
        for rest in after(&sql, "::integer") {
            if let Some((low, high)) = between(rest) {
                *matches.entry("weight").or_default() += 1;
                if (low, high) != (u64::from(MIN_WEIGHT), u64::from(MAX_WEIGHT)) {
                    found.push(format!("{name}: weight BETWEEN {low} AND {high}, but weights are {MIN_WEIGHT}..={MAX_WEIGHT}"));
                }
            }
        }
        for rest in after(&sql, "v_tenants NOT") {
            if let Some((low, high)) = between(rest) {
                *matches.entry("tenants").or_default() += 1;
                if (low, high) != (1, MAX_TENANTS as u64) {
                    found.push(format!("{name}: tenants BETWEEN {low} AND {high}, but MAX_TENANTS is {MAX_TENANTS}"));
                }
            }
        }
        for rest in after(&sql, "'\\x") {
            let Some(end) = rest.find("'::bytea") else {
                continue;
            };
            *matches.entry("digest domain").or_default() += 1;
            if !domains.iter().any(|domain| *domain == rest[..end]) {
                found.push(format!(
                    "{name}: bytea literal \\x{} is neither digest domain",
                    &rest[..end]
                ));
            }
        }
    }
    for rule in [
        "cycle length",
        "id length",
        "idempotency key length",
        "outcome runs",
        "id grammar",
        "weight",
        "tenants",
        "digest domain",
    ] {
        if !matches.contains_key(rule) {
            found.push(format!(
                "no migration matched the {rule} rule: reworded SQL escapes this test"
            ));
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    fn migrations() -> Vec<(String, String)> {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../migrations");
        let mut files: Vec<(String, String)> = std::fs::read_dir(&dir)
            .unwrap()
            .filter_map(|entry| entry.ok().map(|entry| entry.path()))
            .filter(|path| path.extension().is_some_and(|ext| ext == "sql"))
            .map(|path| {
                let name = path.file_name().unwrap().to_string_lossy().into_owned();
                (name, std::fs::read_to_string(&path).unwrap())
            })
            .collect();
        files.sort();
        assert!(files.len() >= 9, "{files:?}");
        files
    }

    #[test]
    fn the_migrations_keep_the_rust_constants() {
        assert_eq!(differences(&migrations()), Vec::<String>::new());
    }

    #[test]
    fn a_drifted_literal_is_named() {
        let sql = "CHECK (cycle_length BETWEEN 1 AND 4095), -- cycle_length BETWEEN 1 AND 7\n\
                   CHECK (octet_length(id) BETWEEN 1 AND 128 AND id ~ '^[A-Za-z0-9._-]+$'),\n\
                   CHECK (octet_length(idempotency_key) BETWEEN 1 AND 255),\n\
                   CHECK (octet_length(classes) BETWEEN 1 AND 4000),\n\
                   (w)::integer BETWEEN 1 AND 1024, v_tenants NOT BETWEEN 1 AND 1024,\n\
                   sha256('\\x73746174656b2e706f6c6963792e763200'::bytea || b)";
        assert_eq!(
            differences(&[("V0__x.sql".to_owned(), sql.to_owned())]),
            [
                "V0__x.sql: cycle_length BETWEEN 1 AND 4095, but MAX_CYCLE_LENGTH is 4096",
                "V0__x.sql: octet_length(idempotency_key) BETWEEN 1 AND 255, but \
                 MAX_IDEMPOTENCY_KEY_LENGTH is 256",
                "V0__x.sql: octet_length(classes) BETWEEN 1 AND 4000, but MAX_OUTCOME_RUNS is 4096",
                "V0__x.sql: id pattern [A-Za-z0-9._-] admits other bytes than statek_policy's id grammar",
                "V0__x.sql: bytea literal \\x73746174656b2e706f6c6963792e763200 is neither digest domain",
            ]
        );
        assert_eq!(
            differences(&[("V0__x.sql".to_owned(), "SELECT 1".to_owned())]).len(),
            8
        );
    }
}
