//! Ctrl-C (and SIGTERM, SIGHUP): stop the PostgreSQL servers this process
//! started, then exit with status 130.

use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::{Context, Result};

use crate::pg;

/// Exit status after an interrupt (128 + SIGINT).
pub const EXIT_STATUS: u8 = 130;

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

/// Installs the handler. It marks the process interrupted (so no new step
/// starts and the exit status is 130 whoever exits first), stops and deletes
/// every server that this process started, and exits with status 130.
pub fn install() -> Result<()> {
    ctrlc::set_handler(|| {
        INTERRUPTED.store(true, Ordering::SeqCst);
        eprintln!("\nxtask: interrupted; stopping the PostgreSQL servers it started");
        pg::stop_all_started();
        std::process::exit(i32::from(EXIT_STATUS));
    })
    .context("installing the Ctrl-C handler")
}

/// Whether an interrupt arrived.
pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::SeqCst)
}
