//! The figure tables of docs/benchmarks.md that are generated from a
//! committed results file, and the check that they have not drifted from
//! it.
//!
//! A generated block is
//!
//! ```text
//! <!-- generated from docs/bench/results-COMMIT.json by `cargo xtask bench --update-docs`; do not edit -->
//! ...tables...
//! <!-- end generated -->
//! ```
//!
//! `cargo xtask bench --update-docs` rewrites every block from the file it
//! names (the section `workloads` tables of that run, headed by its commit,
//! date and machine); the tidy test `generated_tables_match_their_results`
//! fails when a block differs from what its file gives.

use std::path::Path;

use anyhow::{bail, Context, Result};

use super::Report;

const BEGIN: &str = "<!-- generated from ";
const BEGIN_END: &str = " by `cargo xtask bench --update-docs`; do not edit -->";
const END: &str = "<!-- end generated -->";

/// The document whose blocks are generated.
pub const DOC: &str = "docs/benchmarks.md";

/// One generated block: the results file it names (relative to the
/// workspace root) and the byte range of its body.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Block {
    results: String,
    body: std::ops::Range<usize>,
}

/// Every generated block of `doc`, in order.
fn blocks(doc: &str) -> Result<Vec<Block>> {
    let mut found = Vec::new();
    let mut from = 0;
    while let Some(at) = doc[from..].find(BEGIN) {
        let start = from + at;
        let line_end = doc[start..].find('\n').map_or(doc.len(), |n| start + n);
        let line = &doc[start..line_end];
        let Some(results) = line
            .strip_prefix(BEGIN)
            .and_then(|rest| rest.strip_suffix(BEGIN_END))
        else {
            bail!("a generated block's first line is not `{BEGIN}FILE{BEGIN_END}`: {line:?}");
        };
        let body_start = (line_end + 1).min(doc.len());
        let Some(end) = doc[body_start..].find(END) else {
            bail!("the generated block from {results} has no `{END}`");
        };
        found.push(Block {
            results: results.to_owned(),
            body: body_start..body_start + end,
        });
        from = body_start + end + END.len();
    }
    Ok(found)
}

/// What a block from `report` holds: the run's commit, date and machine,
/// then its section `workloads` tables.
pub fn render(report: &Report) -> String {
    let m = &report.machine;
    format!(
        "Commit {}, {}; {} ({} CPUs), load average {} at the start{}; {} samples per side, {} s windows.\n\n{}",
        m.commit,
        m.date,
        m.cpu,
        m.cpus,
        m.load_average,
        m.cpu_steal_percent
            .map_or_else(String::new, |steal| format!(", CPU steal {steal:.2}%")),
        report
            .workloads
            .runs
            .iter()
            .flat_map(|run| run.sides.iter().filter_map(|side| side.range.as_ref()))
            .map(|range| range.samples)
            .max()
            .unwrap_or(1),
        report.workloads.window_seconds,
        super::workloads::table::markdown(&report.workloads)
    )
}

fn load(root: &Path, results: &str) -> Result<Report> {
    let path = root.join(results);
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    serde_json::from_str(&text)
        .with_context(|| format!("{} is not a bench results.json", path.display()))
}

/// `doc` with every block rendered anew from the file it names.
fn regenerate(root: &Path, doc: &str) -> Result<String> {
    let mut out = String::with_capacity(doc.len());
    let mut copied = 0;
    for block in blocks(doc)? {
        out.push_str(&doc[copied..block.body.start]);
        out.push_str(&render(&load(root, &block.results)?));
        copied = block.body.end;
    }
    out.push_str(&doc[copied..]);
    Ok(out)
}

/// `cargo xtask bench --update-docs`: rewrites the generated blocks of
/// [`DOC`]; returns how many there are.
pub fn update(root: &Path) -> Result<usize> {
    let path = root.join(DOC);
    let doc =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let fresh = regenerate(root, &doc)?;
    if fresh != doc {
        std::fs::write(&path, &fresh).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(blocks(&fresh)?.len())
}

/// The blocks of [`DOC`] that differ from their results files, by file
/// (the tidy test's check).
#[cfg(test)]
fn drifted(root: &Path) -> Result<Vec<String>> {
    let doc = std::fs::read_to_string(root.join(DOC))?;
    let mut out = Vec::new();
    for block in blocks(&doc)? {
        if doc[block.body.clone()] != render(&load(root, &block.results)?) {
            out.push(block.results);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_are_found_with_their_files_and_bodies() {
        let doc = format!(
            "intro\n{BEGIN}docs/bench/a.json{BEGIN_END}\nold table\n{END}\nmiddle\n{BEGIN}docs/bench/b.json{BEGIN_END}\n{END}\n"
        );
        let found = blocks(&doc).unwrap();
        assert_eq!(
            found.iter().map(|b| b.results.as_str()).collect::<Vec<_>>(),
            ["docs/bench/a.json", "docs/bench/b.json"]
        );
        assert_eq!(&doc[found[0].body.clone()], "old table\n");
        assert_eq!(&doc[found[1].body.clone()], "");
        let unterminated = format!("{BEGIN}x.json{BEGIN_END}\ntable\n");
        assert_eq!(
            blocks(&unterminated).unwrap_err().to_string(),
            "the generated block from x.json has no `<!-- end generated -->`"
        );
        let malformed = format!("{BEGIN}x.json -->\n{END}\n");
        assert!(blocks(&malformed)
            .unwrap_err()
            .to_string()
            .starts_with("a generated block's first line is not"));
    }

    /// The tidy check: docs/benchmarks.md's generated tables are what
    /// their committed results files give (`cargo xtask bench
    /// --update-docs` rewrites them).
    #[test]
    fn generated_tables_match_their_results() {
        let root = crate::workspace::root();
        let doc = std::fs::read_to_string(root.join(DOC)).unwrap();
        assert!(
            !blocks(&doc).unwrap().is_empty(),
            "{DOC} has no generated block"
        );
        assert_eq!(
            drifted(&root).unwrap(),
            Vec::<String>::new(),
            "run `cargo xtask bench --update-docs`"
        );
    }
}
