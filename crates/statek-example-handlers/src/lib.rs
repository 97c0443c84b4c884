//! An example crate of run handlers, as a user keeps one beside the
//! service that runs a statek `Worker`.
//!
//! It depends on statek-core (for [`RunHandler`], [`Run`] and
//! [`RunError`]) and statek-policy only, and its unit tests tick a real
//! scheduler over statek-testing's in-memory reservation source and
//! executor: `cargo tree -p statek-example-handlers -e normal,dev` lists
//! no PostgreSQL client, TLS stack or pool, and `cargo xtask arch-check`
//! fails if one appears.

#![forbid(unsafe_code)]

use statek_core::{Completed, Run, RunError, RunHandler, RunResult};
use tokio_util::sync::CancellationToken;

/// The largest payload [`Resize`] accepts, in bytes.
pub const MAX_IMAGE_BYTES: usize = 64;

/// A handler that "resizes" the image in its payload: it refuses an empty
/// payload (nothing to resize) and one over [`MAX_IMAGE_BYTES`], and
/// stops when its run is cancelled.
#[derive(Debug, Default, Clone, Copy)]
pub struct Resize;

impl RunHandler for Resize {
    async fn handle(&self, run: &Run, cancel: CancellationToken) -> RunResult {
        if cancel.is_cancelled() {
            return Err(RunError::new("cancelled before it started"));
        }
        match run.payload.len() {
            0 => Err(RunError::new("empty payload: no image to resize")),
            n if n > MAX_IMAGE_BYTES => Err(RunError::new(format!(
                "image of {n} bytes, at most {MAX_IMAGE_BYTES}"
            ))),
            _ => Ok(Completed::new()),
        }
    }
}

#[cfg(test)]
mod tests;
