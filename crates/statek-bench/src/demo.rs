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

/// Installs `pg_stat_statements` in the database of a server that xtask
/// started with it loaded, so the demo can read statements and server time
/// per run (a `DATABASE_URL` server is left as it is: the demo says n/a
/// there unless the extension is installed).
pub fn enable_statement_statistics(database_url: &str) -> Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let (client, connection) =
            tokio_postgres::connect(database_url, tokio_postgres::NoTls).await?;
        let connection = tokio::spawn(connection);
        crate::pg::enable_statement_statistics(&client).await;
        drop(client);
        connection.await??;
        Ok(())
    })
}

/// `args` with the charts going to `target/statek-demo` unless
/// `--charts-dir` says otherwise.
pub fn with_default_charts_dir(mut args: XtaskDemoArgs) -> XtaskDemoArgs {
    if args.demo.charts_dir.is_none() {
        args.demo.charts_dir = Some(crate::workspace::target_dir().join("statek-demo"));
    }
    args
}

/// Runs the demo against `database_url`; the caller has defaulted its
/// charts directory ([`with_default_charts_dir`]) before the early checks.
pub fn run(args: XtaskDemoArgs, database_url: &str) -> Result<()> {
    statek_cli::demo::run(args.demo, database_url)
}
