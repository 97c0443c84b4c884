//! Standard output for every command: the output [`Format`] a command is
//! asked for, and each print goes through [`write_stdout`], which turns a
//! closed pipe (`EPIPE`, e.g. `statek status | head -1`) into the typed
//! [`StdoutClosed`] instead of a panic. The binary ends quietly with exit 0
//! on it (see `exit.rs`). Below `cli.rs` and every command module.

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

/// `print!` through [`write_stdout`]; evaluates to `anyhow::Result<()>`.
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::out::write_stdout(format_args!($($arg)*))
    };
}

/// `println!` through [`write_stdout`]; evaluates to `anyhow::Result<()>`.
macro_rules! outln {
    () => {
        $crate::out::write_stdout(format_args!("\n"))
    };
    ($($arg:tt)*) => {
        $crate::out::write_stdout(format_args!("{}\n", format_args!($($arg)*)))
    };
}

pub(crate) use {out, outln};

/// Prints `value` as one pretty JSON document and a newline.
///
/// # Errors
/// As [`write_stdout`]; a value serde cannot encode.
pub fn print_json(value: &impl serde::Serialize) -> anyhow::Result<()> {
    outln!("{}", serde_json::to_string_pretty(value)?)
}
