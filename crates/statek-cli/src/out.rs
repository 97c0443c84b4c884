//! Standard output for every command. A command does its work and returns
//! a value that implements [`Report`]; the dispatcher (`cli.rs`) hands it
//! to [`emit`] with the [`Format`] the command was asked for, once per
//! command. [`emit`] renders the whole report (one pretty JSON document,
//! or the report's text) and writes it through [`write_stdout`], which
//! turns a closed pipe (`EPIPE`, e.g. `statek status | head -1`) into the
//! typed [`StdoutClosed`] instead of a panic. The binary ends quietly with
//! exit 0 on it (see `exit.rs`). Below `cli.rs` and every command module.
//!
//! A command whose report is also a failure (`policy verify` of another
//! policy, a failed demo check) returns the report and its error
//! separately: the report is written first, then the error ends the
//! command. Progress (prune's batches) goes to standard error while the
//! command runs. The one exception is the demo, which runs for tens of
//! seconds and streams its progress lines to standard output with
//! [`outln!`] as it goes; its tables, charts and checks at the end are a
//! [`Report`] like every other command's.

use std::fmt;
use std::io::{ErrorKind, Write};

/// Output format of read commands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Human-readable text (alias: table).
    #[value(alias = "table")]
    Text,
    /// One JSON document.
    Json,
}

/// What a command returns for standard output: its `--format json` form
/// is the value's [`serde::Serialize`] encoding, its text form
/// [`Report::write_text`].
pub trait Report: serde::Serialize {
    /// Writes the text form: whole lines, each ending in `\n`.
    ///
    /// # Errors
    /// Only those of `w` (a `String` never fails).
    fn write_text(&self, w: &mut dyn fmt::Write) -> fmt::Result;
}

/// Writes `report` to standard output in `format`: for [`Format::Json`]
/// one pretty-printed JSON document and a newline, for [`Format::Text`]
/// [`Report::write_text`]. The report is rendered whole before the one
/// write.
///
/// # Errors
/// As [`write_stdout`]; a value serde cannot encode.
pub fn emit(report: &impl Report, format: Format) -> anyhow::Result<()> {
    write_stdout(format_args!("{}", render(report, format)?))
}

/// The bytes [`emit`] writes.
pub(crate) fn render(report: &impl Report, format: Format) -> anyhow::Result<String> {
    let mut rendered = String::new();
    match format {
        Format::Json => {
            rendered = serde_json::to_string_pretty(report)?;
            rendered.push('\n');
        }
        Format::Text => report.write_text(&mut rendered)?,
    }
    Ok(rendered)
}

/// Writes to standard error and flushes, and ignores a failure: a
/// warning, progress or the final error message that cannot be written
/// (`2>/dev/full`) is dropped, and the command's outcome and exit code
/// stand (`eprintln!` would panic and exit 101).
pub fn write_stderr(args: fmt::Arguments<'_>) {
    let mut stderr = std::io::stderr().lock();
    let _ignored = stderr.write_fmt(args).and_then(|()| stderr.flush());
}

/// `eprintln!` through [`write_stderr`].
macro_rules! errln {
    () => {
        $crate::out::write_stderr(format_args!("\n"))
    };
    ($($arg:tt)*) => {
        $crate::out::write_stderr(format_args!("{}\n", format_args!($($arg)*)))
    };
}

/// `eprint!` through [`write_stderr`].
macro_rules! err {
    ($($arg:tt)*) => {
        $crate::out::write_stderr(format_args!($($arg)*))
    };
}

/// `n` and its noun for a text report: `1 batch`, `0 batches`, `2 batches`.
pub fn count(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// The reader of standard output went away (broken pipe). Not a failure
/// of the command: the binary exits 0 without a message.
#[derive(Debug, thiserror::Error)]
#[error("standard output was closed")]
pub struct StdoutClosed;

/// Writes to standard output and flushes.
///
/// # Errors
/// [`StdoutClosed`] for a broken pipe; any other I/O error as is.
pub fn write_stdout(args: fmt::Arguments<'_>) -> anyhow::Result<()> {
    let mut stdout = std::io::stdout().lock();
    match stdout.write_fmt(args).and_then(|()| stdout.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == ErrorKind::BrokenPipe => Err(StdoutClosed.into()),
        Err(e) => Err(anyhow::Error::new(e).context("cannot write to standard output")),
    }
}

/// `println!` through [`write_stdout`]; evaluates to `anyhow::Result<()>`.
/// Only for the demo's progress lines (see the module docs): a command's
/// result is a [`Report`].
#[cfg(feature = "demo")]
macro_rules! outln {
    () => {
        $crate::out::write_stdout(format_args!("\n"))
    };
    ($($arg:tt)*) => {
        $crate::out::write_stdout(format_args!("{}\n", format_args!($($arg)*)))
    };
}

#[cfg(feature = "demo")]
pub(crate) use outln;
pub(crate) use {err, errln};

#[cfg(test)]
mod tests {
    use super::{render, Format, Report};

    #[derive(serde::Serialize)]
    struct Pruned {
        batches: u64,
        cutoff: Option<String>,
        #[serde(skip)]
        unit: &'static str,
    }

    impl Report for Pruned {
        fn write_text(&self, w: &mut dyn std::fmt::Write) -> std::fmt::Result {
            writeln!(w, "pruned in {} {}", self.batches, self.unit)?;
            writeln!(w, "cutoff {}", self.cutoff.as_deref().unwrap_or("-"))
        }
    }

    #[test]
    fn count_names_one_in_the_singular() {
        assert_eq!(super::count(0, "batch", "batches"), "0 batches");
        assert_eq!(super::count(1, "batch", "batches"), "1 batch");
        assert_eq!(super::count(2, "batch", "batches"), "2 batches");
    }

    fn check(format: Format, expected: &str) {
        let report = Pruned {
            batches: 2,
            cutoff: None,
            unit: "batches",
        };
        assert_eq!(render(&report, format).unwrap(), expected);
    }

    /// The files of `src/` that write to standard output other than
    /// through [`super::emit`]: `outln!`, `print!`/`println!` (not their
    /// `eprint` forms), `write_stdout` or `stdout()`.
    fn stdout_writers(dir: &std::path::Path, root: &std::path::Path, found: &mut Vec<String>) {
        let mut entries: Vec<_> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        entries.sort();
        for path in entries {
            if path.is_dir() {
                stdout_writers(&path, root, found);
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            let writes = [
                "outln!(",
                "print!(",
                "println!(",
                "write_stdout(",
                "stdout()",
            ]
            .iter()
            .any(|needle| {
                text.match_indices(needle)
                    .any(|(at, _)| !text[..at].ends_with('e'))
            });
            if writes {
                let name = path.strip_prefix(root).unwrap();
                found.push(name.to_string_lossy().replace('\\', "/"));
            }
        }
    }

    /// ARCHITECTURE.md: no command module writes its result itself; only
    /// `out.rs` and the demo's progress lines do.
    #[test]
    fn only_out_and_the_demo_progress_write_standard_output() {
        let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut found = Vec::new();
        stdout_writers(&src, &src, &mut found);
        found.sort();
        assert_eq!(
            found,
            [
                "demo.rs",
                "demo/cost_skew.rs",
                "demo/db_work.rs",
                "demo/fair_side.rs",
                "demo/fifo_side.rs",
                "demo/side.rs",
                "out.rs"
            ]
        );
    }

    #[test]
    fn emit_renders_text_and_pretty_json_with_a_newline() {
        check(Format::Text, "pruned in 2 batches\ncutoff -\n");
        check(
            Format::Json,
            "{\n  \"batches\": 2,\n  \"cutoff\": null\n}\n",
        );
    }
}
