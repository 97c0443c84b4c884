//! The integration tests of statek-store-pg in one test binary: one link of the
//! whole stack instead of one per file (each file is a module here;
//! `cargo test -p statek-store-pg --test it MODULE::` runs one).
//! Tests that install a global metrics recorder keep binaries of their
//! Every file of the folder is a module of this binary.

mod attempt_costs;
mod audit;
mod baseline;
mod batch;
mod cancellation;
mod claim_recovery;
mod completion;
mod dead_link;
mod durability;
mod halt;
mod integrity;
mod lighter_claims;
mod lost_ack;
mod migrations;
mod notifications;
mod pgbouncer;
mod pgbouncer_durability;
mod registration_and_reservation;
mod retention;
mod roles;
mod run_queue;
mod run_retention;
mod schema_snapshot;
mod server_version;
mod slot_claims;
mod slot_outcomes;
mod source_conformance;
mod succession;
mod tenant_controls;
mod tidy;
mod tls;
