//! Running subprocesses so that every failure names the command, its exit
//! status and the tail of what it wrote to stderr.

use std::fmt::Write as _;
use std::io;
use std::process::{Command, Output, Stdio};

use anyhow::{anyhow, Result};

/// How many trailing lines of stderr or of a log file a failure shows.
pub const TAIL_LINES: usize = 25;

/// The command as a shell-like line, for messages.
pub fn display(command: &Command) -> String {
    let mut line = quote(&command.get_program().to_string_lossy());
    for arg in command.get_args() {
        line.push(' ');
        line.push_str(&quote(&arg.to_string_lossy()));
    }
    line
}

fn quote(word: &str) -> String {
    let plain = !word.is_empty()
        && word
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./=:@%+,".contains(&b));
    if plain {
        word.to_owned()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

/// The last `lines` lines of `text`.
pub fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    let start = all.len().saturating_sub(lines);
    all[start..].join("\n")
}

/// Error for a command that could not be spawned at all.
pub fn spawn_error(command: &Command, error: &io::Error) -> anyhow::Error {
    anyhow!("could not run `{}`: {error}", display(command))
}

/// Runs `command` with stdout and stderr captured; a non-zero exit is an
/// error that shows the command, the exit status and the tail of stderr (and
/// of stdout when stderr is empty).
pub fn run_captured(command: &mut Command) -> Result<Output> {
    let output = command
        .stdin(Stdio::null())
        .output()
        .map_err(|error| spawn_error(command, &error))?;
    if output.status.success() {
        Ok(output)
    } else {
        Err(anyhow!(failure_message(command, &output)))
    }
}

/// The message for a captured command that exited unsuccessfully.
pub fn failure_message(command: &Command, output: &Output) -> String {
    let mut message = format!("`{}` failed ({})", display(command), output.status);
    for (name, bytes) in [("stderr", &output.stderr), ("stdout", &output.stdout)] {
        let text = String::from_utf8_lossy(bytes);
        if !text.trim().is_empty() {
            let _ = write!(
                message,
                "\n--- last {TAIL_LINES} lines of {name} ---\n{}",
                tail(&text, TAIL_LINES)
            );
            break;
        }
    }
    message
}

/// Runs `command` with inherited stdio (its output streams to the terminal);
/// a non-zero exit is an error naming the command and its exit status.
pub fn run_inherited(command: &mut Command) -> Result<()> {
    let status = command
        .stdin(Stdio::null())
        .status()
        .map_err(|error| spawn_error(command, &error))?;
    if status.success() {
        Ok(())
    } else {
        Err(anyhow!("`{}` failed ({status})", display(command)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_quotes_only_what_needs_it() {
        let mut command = Command::new("pg_ctl");
        command.args([
            "-o",
            "-c listen_addresses=127.0.0.1",
            "-D",
            "/tmp/x y",
            "''",
        ]);
        assert_eq!(
            display(&command),
            r"pg_ctl -o '-c listen_addresses=127.0.0.1' -D '/tmp/x y' ''\'''\'''"
        );
    }

    #[test]
    fn tail_keeps_the_last_lines() {
        assert_eq!(tail("a\nb\nc\n", 2), "b\nc");
        assert_eq!(tail("a", 5), "a");
        assert_eq!(tail("", 5), "");
    }
}
