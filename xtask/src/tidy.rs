//! Tidy tests: facts that live in one place and the files that repeat them,
//! checked against each other so that they cannot drift (STYLE 18, 20).
//! Test-only; `cargo test -p xtask` runs them.

mod architecture_files;
mod build_sharing;
mod changelog_migrations;
mod design_facts;
mod file_circles;
mod migration_constants;
mod operations_metrics;
mod role_table;
