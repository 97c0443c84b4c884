//! PostgreSQL for statek's development and CI, and the small process
//! helpers every dev tool shares. It depends on no statek crate, so that
//! `cargo xtask pg start` builds in seconds and never compiles the product.
//!
//! - [`pg`]: PostgreSQL 16 and 17 (pinned, checksummed npm binaries or
//!   binaries of your own), throw-away and long-running clusters, a
//!   streaming standby, TLS, PgBouncer in transaction mode.
//! - [`workspace`]: where the checkout and its cargo target directory are.
//! - [`command`]: subprocesses whose failures name the command.
//! - [`interrupt`]: Ctrl-C stops the servers this process started.
//! - [`debian_tool`]: a tool from a Debian package, found or installed.
//! - [`task`]: the frame a dev-tool binary runs its task in (workspace
//!   root, Ctrl-C, exit status).
//!
//! Used by xtask and by statek-bench; nothing of the product uses it.
#![allow(clippy::print_stdout, clippy::print_stderr)]

pub mod command;
pub mod debian_tool;
pub mod interrupt;
pub mod pg;
pub mod task;
pub mod workspace;
