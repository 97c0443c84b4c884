//! The examples users read are the examples that compile: the README's
//! library example is `examples/library.rs` byte for byte, and the two
//! introductory examples (`starvation_bound.rs`, `prune.rs`) stand line for
//! line in the crate docs of statek-policy and statek-store-pg, whose
//! doctests run them.

use std::fs;
use std::path::{Path, PathBuf};

fn workspace_file(relative: &str) -> String {
    let path: PathBuf = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(relative);
    fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

fn example(name: &str) -> String {
    workspace_file(&format!("crates/statek-examples/examples/{name}"))
}

/// The body of `fn main` of an example: the lines between its opening and
/// its final `Ok(())` (the part a doctest shows verbatim).
fn main_body(source: &str) -> Vec<String> {
    let lines: Vec<&str> = source.lines().collect();
    let start = lines
        .iter()
        .position(|line| line.contains("fn main()"))
        .unwrap_or_else(|| panic!("no fn main in\n{source}"));
    let end = lines
        .iter()
        .rposition(|line| line.trim() == "Ok(())")
        .unwrap_or_else(|| panic!("no Ok(()) in\n{source}"));
    lines[start + 1..end]
        .iter()
        .map(|line| line.strip_prefix("    ").unwrap_or(line).to_owned())
        .collect()
}

/// The crate-doc lines of a `lib.rs`, without their `//! ` prefix.
fn crate_doc(lib_rs: &str) -> String {
    workspace_file(lib_rs)
        .lines()
        .filter_map(|line| line.strip_prefix("//!"))
        .map(|line| line.strip_prefix(' ').unwrap_or(line))
        .collect::<Vec<_>>()
        .join("\n")
}

fn assert_in_doc(doc: &str, body: &[String], skip: &[&str]) {
    let kept: Vec<&str> = body
        .iter()
        .map(String::as_str)
        .filter(|line| !skip.iter().any(|s| line.contains(s)))
        .collect();
    let block = kept.join("\n");
    assert!(
        doc.contains(block.trim()),
        "crate doc lacks, verbatim:\n{block}\n--- doc ---\n{doc}"
    );
}

#[test]
fn the_readme_library_example_is_examples_library_rs() {
    let readme = workspace_file("README.md");
    let section = readme
        .split("## Library example\n")
        .nth(1)
        .expect("README has a Library example section");
    let code = section
        .split("```rust,no_run\n")
        .nth(1)
        .and_then(|rest| rest.split("\n```\n").next())
        .expect("the section has a rust,no_run block");
    assert_eq!(format!("{code}\n"), example("library.rs"));
}

#[test]
fn the_bound_example_is_statek_policys_doctest() {
    let body = main_body(&example("starvation_bound.rs"));
    assert_in_doc(&crate_doc("crates/statek-policy/src/lib.rs"), &body, &[]);
}

#[test]
fn the_prune_example_is_statek_store_pgs_doctest() {
    let body = main_body(&example("prune.rs"));
    // The example's own connection and printing are not part of the doc.
    assert_in_doc(
        &crate_doc("crates/statek-store-pg/src/lib.rs"),
        &body,
        &["PgStore::connect", "println!"],
    );
}
