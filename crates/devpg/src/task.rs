//! The frame every dev-tool binary (xtask, statek-bench) runs its task in:
//! from the workspace root, with Ctrl-C stopping the servers it started,
//! and one way to turn the task's result into an exit status.

use std::process::ExitCode;

use anyhow::{Context, Result};

use crate::{interrupt, pg, workspace};

/// Resolves `CARGO_TARGET_DIR` against the caller's directory, enters the
/// workspace root, installs the Ctrl-C handler and runs `task`. Returns
/// 0 when it succeeds; 130 after an interrupt (the handler is stopping the
/// servers and exits with 130 too); else prints `xtask: error: ...` with
/// the whole error chain and returns `failure_code(&error)`.
pub fn run(
    task: impl FnOnce() -> Result<()>,
    failure_code: impl Fn(&anyhow::Error) -> u8,
) -> ExitCode {
    let result = enter_workspace().and_then(|()| task());
    if interrupt::interrupted() {
        pg::stop_all_started();
        return ExitCode::from(interrupt::EXIT_STATUS);
    }
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("xtask: error: {error:#}");
            ExitCode::from(failure_code(&error))
        }
    }
}

fn enter_workspace() -> Result<()> {
    workspace::target_dir();
    std::env::set_current_dir(workspace::root()).context("entering the workspace root")?;
    interrupt::install()
}
