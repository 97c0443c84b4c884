//! `statek`: the operator tool. See `statek --help`.

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = statek_cli::Cli::parse();
    match statek_cli::run(cli) {
        Ok(()) => ExitCode::from(statek_cli::exit::OK),
        Err(error) => {
            #[allow(clippy::print_stderr)]
            {
                eprintln!("statek: error: {error:#}");
            }
            ExitCode::from(statek_cli::exit::code_for(&error))
        }
    }
}
