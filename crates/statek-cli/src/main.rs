//! `statek`: the operator tool. See `statek --help`.

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = statek_cli::Cli::parse();
    match statek_cli::run(cli) {
        Ok(()) => ExitCode::from(statek_cli::exit::OK),
        // A closed stdout (`statek status | head -1`) is not a failure.
        Err(error) if statek_cli::exit::is_stdout_closed(&error) => {
            ExitCode::from(statek_cli::exit::OK)
        }
        Err(error) => {
            statek_cli::exit::report(&error);
            ExitCode::from(statek_cli::exit::code_for(&error))
        }
    }
}
