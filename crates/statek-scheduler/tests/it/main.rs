//! The integration tests of statek-scheduler in one test binary: one link of the
//! whole stack instead of one per file (each file is a module here;
//! `cargo test -p statek-scheduler --test it MODULE::` runs one).
//! Tests that install a global metrics recorder keep binaries of their
//! own, beside this one.

mod batch_workers;
mod fair_tick;
mod finish_backpressure;
mod finish_retries;
mod idle_tenants;
mod in_memory;
mod listen_reconnect;
mod multi_process;
mod outage;
mod pgbouncer;
mod rollout;
mod tenant_limits;
mod worker;
mod worker_idle;
