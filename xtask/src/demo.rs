//! `cargo xtask demo`: `statek demo` (crates/statek-cli/src/demo.rs) on a
//! PostgreSQL that xtask provisions, unless `DATABASE_URL` is set.

use anyhow::Result;

use crate::pg::PgMajor;

/// Options of `cargo xtask demo`: those of `statek demo`, plus the server.
#[derive(Debug, Clone, clap::Args)]
pub struct XtaskDemoArgs {
    #[command(flatten)]
    pub demo: statek_cli::demo::DemoArgs,
    /// PostgreSQL major version to provision (ignored when DATABASE_URL is set).
    #[arg(long, value_enum, default_value_t = PgMajor::V17)]
    pub pg: PgMajor,
}

/// Runs the demo against `database_url`.
pub fn run(args: XtaskDemoArgs, database_url: &str) -> Result<()> {
    let mut demo = args.demo;
    if demo.charts_dir.is_none() {
        demo.charts_dir = Some(crate::workspace::target_dir().join("statek-demo"));
    }
    statek_cli::demo::run(demo, database_url)
}
