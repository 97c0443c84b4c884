//! Every store call goes through `PgStore::with_response_timeout` or
//! `PgStore::in_transaction` (ARCHITECTURE.md): outside `store.rs` and
//! `statement.rs` (and the fixtures of `testing.rs`), no source file checks out a pooled connection, starts a
//! transaction or prepares a statement itself.

#![allow(clippy::unwrap_used, clippy::panic)]

use std::path::Path;

/// What only the wrappers may do.
const RESERVED: &[&str] = &[
    "self.client()",
    ".client().await",
    "PgStore::begin(",
    "prepare_cached(",
    "prepare_typed_cached(",
    ".build_transaction()",
];

#[test]
fn store_calls_go_through_the_wrappers() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut offenders = Vec::new();
    let mut checked = 0;
    // Every .rs file under src/, modules in subfolders included.
    let mut files = Vec::new();
    let mut folders = vec![src.clone()];
    while let Some(folder) = folders.pop() {
        for entry in std::fs::read_dir(&folder).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                folders.push(path);
            } else {
                files.push(path);
            }
        }
    }
    for path in files {
        let name = path
            .strip_prefix(&src)
            .unwrap()
            .to_string_lossy()
            .into_owned();
        // testing.rs: fixtures with their own unpooled clients.
        if !name.ends_with(".rs")
            || ["store.rs", "statement.rs", "testing.rs"].contains(&name.as_str())
        {
            continue;
        }
        checked += 1;
        let text = std::fs::read_to_string(&path).unwrap();
        for (number, line) in text.lines().enumerate() {
            if RESERVED.iter().any(|reserved| line.contains(reserved)) {
                offenders.push(format!("src/{name}:{}: {}", number + 1, line.trim()));
            }
        }
    }
    assert!(checked >= 20, "only {checked} files checked under {src:?}");
    assert!(
        offenders.is_empty(),
        "store calls outside the wrappers:\n{}",
        offenders.join("\n")
    );
}

/// Rows are read by column name (STYLE 17): no `try_get(<index>)` or
/// `get(<index>)` anywhere under `src/`, so a reordered SELECT list can
/// never read one column as another.
#[test]
fn rows_are_read_by_column_name() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut offenders = Vec::new();
    let mut folders = vec![src.clone()];
    let mut checked = 0;
    while let Some(folder) = folders.pop() {
        for entry in std::fs::read_dir(&folder).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                folders.push(path);
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            checked += 1;
            let text = std::fs::read_to_string(&path).unwrap();
            for (number, line) in text.lines().enumerate() {
                for call in ["try_get(", ".get("] {
                    let mut rest = line;
                    while let Some(at) = rest.find(call) {
                        rest = &rest[at + call.len()..];
                        if rest.starts_with(|c: char| c.is_ascii_digit()) {
                            offenders.push(format!(
                                "{}:{}: {}",
                                path.display(),
                                number + 1,
                                line.trim()
                            ));
                        }
                    }
                }
            }
        }
    }
    assert!(checked > 20, "only {checked} files found under src/");
    assert!(
        offenders.is_empty(),
        "rows read by index:\n{}",
        offenders.join("\n")
    );
}
