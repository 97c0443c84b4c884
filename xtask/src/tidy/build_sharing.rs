//! `cargo xtask demo` builds xtask, then statek-bench: every crate both
//! builds must get the same features in both, or cargo compiles it (and
//! everything above it, tokio-postgres included) twice. devpg's
//! `Cargo.toml` lists the features statek-bench's build adds (a
//! "workspace hack"); this test fails when a new dependency of the product
//! turns on one more.

use std::collections::BTreeMap;

/// Each crate (`name vX.Y.Z`) of `package`'s normal and build dependency
/// closure with its activated features, as `cargo tree` reports them.
fn features_of(package: &str) -> BTreeMap<String, String> {
    let output = devpg::command::run_captured(devpg::workspace::cargo().args([
        "tree",
        "--package",
        package,
        "--edges",
        "normal,build",
        "--prefix",
        "none",
        "--format",
        "{p}|{f}",
    ]))
    .unwrap();
    String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .map(|line| {
            let line = line.trim_end_matches(" (*)").replace(" (proc-macro)", "");
            let (name, features) = line.split_once('|').unwrap_or((&line, ""));
            (name.to_owned(), features.to_owned())
        })
        .collect()
}

/// The crates both packages build whose features differ.
fn differences(xtask: &BTreeMap<String, String>, bench: &BTreeMap<String, String>) -> Vec<String> {
    xtask
        .iter()
        .filter_map(|(name, features)| {
            let other = bench.get(name)?;
            (other != features)
                .then(|| format!("{name}: xtask builds [{features}], statek-bench [{other}]"))
        })
        .collect()
}

#[test]
fn devpg_builds_once() {
    let found = differences(&features_of("xtask"), &features_of("statek-bench"));
    assert!(
        found.is_empty(),
        "add these features to crates/devpg/Cargo.toml's workspace hack:\n  {}",
        found.join("\n  ")
    );
}

#[test]
fn a_feature_difference_is_named() {
    let xtask = BTreeMap::from([
        ("slab v0.4.12".to_owned(), "std".to_owned()),
        ("tar v0.4.44".to_owned(), String::new()),
    ]);
    let bench = BTreeMap::from([
        ("slab v0.4.12".to_owned(), "default,std".to_owned()),
        ("plotters v0.3.7".to_owned(), "default".to_owned()),
    ]);
    assert_eq!(
        differences(&xtask, &bench),
        ["slab v0.4.12: xtask builds [std], statek-bench [default,std]"]
    );
}
