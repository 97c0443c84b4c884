//! statek's user-facing examples, compiled as a user would compile them: a
//! separate crate whose only dependencies are the ones its `Cargo.toml`
//! names (statek-policy, statek-store-pg, statek-scheduler, tokio with
//! `macros` and `rt-multi-thread`, tokio-util).
//!
//! - `examples/starvation_bound.rs`: compile a policy and read a tenant's
//!   bound (runs without a database: `cargo run -p statek-examples
//!   --example starvation_bound`);
//! - `examples/prune.rs`: build a retention policy and prune (needs
//!   `DATABASE_URL`);
//! - `examples/library.rs`: the README's library example (needs
//!   `DATABASE_URL`).
//!
//! `cargo test --workspace` and clippy build all three; the first one also
//! runs as a test of this crate.

#![forbid(unsafe_code)]
