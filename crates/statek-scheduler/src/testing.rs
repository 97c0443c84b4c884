//! Test support for code built on statek (feature `testing`).
//!
//! - [`conformance`]: the behaviour suite every [`crate::TenantExecutor`]
//!   must pass, for your own executor.
//!
//! Unit tests of handlers and of code around a scheduler need no feature:
//! [`crate::InMemoryReservations`] and [`crate::InMemoryExecutor`] are
//! always built.

pub mod conformance;
mod harness;
