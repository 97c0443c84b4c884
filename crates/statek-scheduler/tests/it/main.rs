//! The integration tests of statek-scheduler in one test binary: one link of the
//! whole stack instead of one per file (each file is a module here;
//! `cargo test -p statek-scheduler --test it MODULE::` runs one).
//! Tests that read metrics give them to a recorder of their own thread
//! (`metrics::set_default_local_recorder`; a `#[tokio::test]` runs its tasks
//! on that thread), never a global one, so they share this binary. The
//! executor conformance suite and the in-memory doubles come from
//! statek-testing.

mod batch_workers;
mod conformance;
mod cost_mode;
mod fair_tick;
mod faults;
mod finish_backpressure;
mod finish_retries;
mod halted_worker;
mod idle_tenants;
mod in_memory;
mod listen_reconnect;
mod metric_descriptions;
mod metric_values;
mod multi_process;
mod outage;
mod pgbouncer;
mod rollout;
mod run_gauges;
mod tenant_limits;
mod worker;
mod worker_idle;
mod zero_series;
