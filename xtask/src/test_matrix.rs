//! `cargo xtask test`: the README's test command and CI's only command.
//!
//! Steps, each announced and timed: rustfmt check; clippy on the workspace
//! (all targets, all features), on statek-policy without default
//! features, and on statek-scheduler (with statek-testing and
//! statek-example-handlers) without its feature `postgres`, all with `-D
//! warnings`; a `no_std` build of statek-policy;
//! arch-check; the one build of the product, `cargo build --workspace
//! --all-features --tests --bins` (the test binaries, and statek-bench,
//! which runs deploy-check, failover, ha-layouts and chaos: see
//! `linked.rs`); deploy-check (the YAML and JSON under `deploy/`); the alert
//! rules' unit tests with promtool (Debian's package `prometheus`,
//! installed when missing and running as root, or `STATEK_PROMTOOL=/path`;
//! see `rule_tests.rs`; the missing packages of promtool and PgBouncer are
//! installed in one `apt-get` call on a thread of its own from the start,
//! beside the compile steps); then for
//! PostgreSQL 17 and 16 a fresh server (with `ssl=on`, see devpg's `pg/tls.rs`) and
//! the tests with `STATEK_TEST_DATABASE_URL`, `STATEK_TEST_TLS_CA`,
//! `STATEK_TEST_PG_VERSION` (which statek-store-pg's `tests/it/server_version.rs`
//! checks against the server's major version), `STATEK_TEST_REQUIRE_DB=1` and
//! `RUST_TEST_THREADS` (three per core, at most 8, unless set: the database
//! tests mostly wait, see [`test_threads`]), with PgBouncer
//! in transaction pooling mode in front of the server
//! (`STATEK_TEST_PGBOUNCER_URL`; Debian's package `pgbouncer`, installed
//! when missing and running as root, or `STATEK_PGBOUNCER=/path`; see
//! devpg's `pg/pgbouncer.rs`). The first version runs the whole workspace
//! test suite (unit, property, doc and database tests); the second runs the
//! test binaries of statek-store-pg and statek-cli again, from the first
//! one's build (`test_binaries.rs`: no second build). Every SQL statement
//! statek sends lives in statek-store-pg, so its tests are where two majors
//! can differ; statek-scheduler's tests (about 140 s, mostly waiting on
//! timeouts and backoffs) drive the same store calls and run on the first
//! version only.
//! After the first version's suite, `cargo xtask failover` runs one
//! asynchronous failover with forced lag and five synchronous ones on a
//! durable primary/standby pair of that version, and `cargo xtask
//! ha-layouts` judges standby layouts on a primary with two standbys of
//! that version, and `cargo xtask chaos --quick` runs a Worker fleet
//! through an immediate restart and a termination of every backend on a
//! durable server of that version. Every step runs even when
//! an earlier one failed; any failure fails the command.

use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Result};

use crate::pg::{self, PgMajor, RunningPgBouncer, Server};
use crate::{
    arch_check, command, debian_tool, interrupt, linked, rule_tests, test_binaries, workspace,
};

/// Options of `cargo xtask test`.
#[derive(Debug, Clone, clap::Args)]
pub struct TestArgs {
    /// Test against one PostgreSQL version only (then it runs the whole
    /// suite); default: 17 (whole suite), then 16 (the store's and the CLI's
    /// tests).
    #[arg(long, value_enum)]
    pub pg: Option<PgMajor>,
}

/// The PgBouncer URL the tests through a transaction-mode pool read.
const PGBOUNCER_URL_ENV: &str = "STATEK_TEST_PGBOUNCER_URL";

/// libtest's thread count, which the database steps set unless the caller
/// did.
const TEST_THREADS_ENV: &str = "RUST_TEST_THREADS";

/// The most tests of one binary the database steps run at once.
const MAX_TEST_THREADS: usize = 8;

/// Tests at once per binary in the database steps: three per core, at most
/// [`MAX_TEST_THREADS`] (each test holds a few connections of the server's
/// 200). The database tests mostly wait (on the server, on leases,
/// backoffs and timeouts): statek-scheduler's binary used 18 s of CPU in
/// 122 s with libtest's default of one per core on 2 cores, and took 64 s
/// with 6.
fn test_threads(cores: usize) -> usize {
    cores.saturating_mul(3).clamp(1, MAX_TEST_THREADS)
}

/// The build step: every test binary and binary of the workspace, with the
/// features of [`FULL_SUITE`] (dev-dependencies included, because test
/// targets are built), so the test steps compile nothing more.
const TEST_BUILD: &[&str] = &[
    "build",
    "--workspace",
    "--all-features",
    "--tests",
    "--bins",
];

const FULL_SUITE: &[&str] = &["test", "--workspace", "--all-features", "--no-fail-fast"];
/// The packages whose test binaries (unit and integration, no doctests)
/// the second PostgreSQL version runs, from the first version's build (see
/// `test_binaries.rs`): the store, which holds every SQL statement, and the
/// CLI (6 s).
const DATABASE_PACKAGES: &[&str] = &["statek-store-pg", "statek-cli"];

/// What one version's test step runs.
#[derive(Clone, Copy)]
enum Suite {
    /// `cargo test` with these arguments.
    Cargo(&'static [&'static str]),
    /// The test binaries of these packages, from the workspace's build.
    Binaries(&'static [&'static str]),
}

impl Suite {
    fn display(self) -> String {
        match self {
            Self::Cargo(args) => display(args),
            Self::Binaries(packages) => format!(
                "the test binaries of {}, from the build step above (no second build)",
                packages.join(", ")
            ),
        }
    }
}

struct StepRecord {
    name: String,
    duration: Duration,
    ok: bool,
}

#[derive(Default)]
struct Report {
    steps: Vec<StepRecord>,
    servers: Vec<(String, String)>,
}

impl Report {
    /// Runs one announced, timed step; records and prints its outcome.
    fn step<T>(&mut self, name: &str, body: impl FnOnce() -> Result<T>) -> Option<T> {
        if interrupt::interrupted() {
            return None;
        }
        let number = self.steps.len() + 1;
        println!("\n==> [{number}] {name}");
        let started = Instant::now();
        let result = body();
        let duration = started.elapsed();
        let ok = result.is_ok();
        let value = match result {
            Ok(value) => {
                println!(
                    "<== [{number}] ok in {:.1}s: {name}",
                    duration.as_secs_f64()
                );
                Some(value)
            }
            Err(error) => {
                eprintln!(
                    "<== [{number}] FAILED in {:.1}s: {name}\n{error:#}",
                    duration.as_secs_f64()
                );
                None
            }
        };
        self.steps.push(StepRecord {
            name: name.to_owned(),
            duration,
            ok,
        });
        value
    }

    fn print_summary(&self, total: Duration) {
        let width = self
            .steps
            .iter()
            .map(|step| step.name.len())
            .max()
            .unwrap_or(4);
        println!("\n==== cargo xtask test: summary");
        println!("{:<width$}  {:<6}  {:>8}", "step", "result", "time");
        for step in &self.steps {
            println!(
                "{:<width$}  {:<6}  {:>7.1}s",
                step.name,
                if step.ok { "ok" } else { "FAILED" },
                step.duration.as_secs_f64()
            );
        }
        for (label, version) in &self.servers {
            println!("{label}: {version}");
        }
        let failed = self.steps.iter().filter(|step| !step.ok).count();
        println!(
            "{} steps: {} ok, {failed} failed, in {:.1}s",
            self.steps.len(),
            self.steps.len() - failed,
            total.as_secs_f64()
        );
    }
}

fn cargo_step<'a>(args: &'a [&'a str]) -> impl FnOnce() -> Result<()> + 'a {
    move || command::run_inherited(workspace::cargo().args(args))
}

/// Runs a test suite against a server (and the PgBouncer in front of it,
/// when xtask started one; otherwise an inherited
/// `STATEK_TEST_PGBOUNCER_URL` passes through); `tls_ca` is the server's CA
/// certificate for the TLS tests (`None` for `DATABASE_URL`: then the
/// caller's `STATEK_TEST_TLS_CA`, if any, is passed on, and without it the
/// TLS tests fail).
fn run_suite(
    suite: Suite,
    url: &str,
    pgbouncer: Option<&str>,
    major: Option<PgMajor>,
    tls_ca: Option<&std::path::Path>,
) -> Result<()> {
    let threads = std::env::var_os(TEST_THREADS_ENV).is_none().then(|| {
        test_threads(std::thread::available_parallelism().map_or(1, std::num::NonZero::get))
    });
    let test_env = |command: &mut std::process::Command| {
        if let Some(threads) = threads {
            command.env(TEST_THREADS_ENV, threads.to_string());
        }
        if let Some(ca) = tls_ca {
            command.env(pg::TLS_CA_ENV, ca);
        }
        command
            .env("STATEK_TEST_DATABASE_URL", url)
            .env("STATEK_TEST_REQUIRE_DB", "1")
            .env_remove("STATEK_TEST_SKIP_DB");
        if let Some(pgbouncer) = pgbouncer {
            command.env(PGBOUNCER_URL_ENV, pgbouncer);
        }
        match major {
            Some(major) => command.env("STATEK_TEST_PG_VERSION", major.to_string()),
            None => command.env_remove("STATEK_TEST_PG_VERSION"),
        };
    };
    match suite {
        Suite::Cargo(args) => {
            let mut cargo = workspace::cargo();
            cargo.args(args);
            test_env(&mut cargo);
            command::run_inherited(&mut cargo)
        }
        Suite::Binaries(packages) => {
            let binaries = test_binaries::build(packages)?;
            test_binaries::run_all(&binaries, test_env)
        }
    }
}

fn display(args: &[&str]) -> String {
    format!("cargo {}", args.join(" "))
}

/// Installs the missing Debian tools of the suite (promtool, and PgBouncer
/// unless `DATABASE_URL` replaces the provisioned servers) on a thread of
/// its own, so that `apt-get` runs beside the compile steps instead of
/// before the steps that need the tools.
fn install_tools_in_background() -> std::thread::JoinHandle<Result<Vec<&'static str>>> {
    let mut tools = vec![rule_tests::TOOL];
    if pg::external_database_url().is_none() {
        tools.push(pg::PGBOUNCER_TOOL);
    }
    std::thread::spawn(move || debian_tool::install_missing(&tools))
}

/// Waits for [`install_tools_in_background`] and says what it did. A
/// failure is only reported here: the step that needs a tool looks for it
/// again and fails naming its package.
fn tools_installed(installing: std::thread::JoinHandle<Result<Vec<&'static str>>>) {
    match installing.join() {
        Ok(Ok(packages)) if !packages.is_empty() => println!(
            "\nxtask: installed Debian's packages {} beside the compile steps",
            packages.join(", ")
        ),
        Ok(Ok(_)) => {}
        Ok(Err(e)) => println!("\nxtask: installing the missing Debian tools failed: {e:#}"),
        Err(_) => println!("\nxtask: installing the missing Debian tools panicked"),
    }
}

/// Runs every step, prints the summary, and fails if any step failed.
pub fn run(args: &TestArgs) -> Result<()> {
    let started = Instant::now();
    let mut report = Report::default();
    let installing = install_tools_in_background();

    for args in [
        &["fmt", "--all", "--", "--check"][..],
        &[
            "clippy",
            "--workspace",
            "--all-targets",
            "--all-features",
            "--",
            "-D",
            "warnings",
        ],
        &[
            "clippy",
            "-p",
            "statek-policy",
            "--no-default-features",
            "--",
            "-D",
            "warnings",
        ],
        &["build", "-p", "statek-policy", "--no-default-features"],
        // The scheduler without its PostgreSQL parts, as statek-testing
        // and a user's crate of handlers build it (the workspace's steps
        // unify features and always turn `postgres` on).
        &[
            "clippy",
            "-p",
            "statek-scheduler",
            "-p",
            "statek-testing",
            "-p",
            "statek-example-handlers",
            "--no-default-features",
            "--lib",
            "--",
            "-D",
            "warnings",
        ],
        // The operator tool as `cargo install --path crates/statek-cli`
        // builds it: its default features, without `demo` (the steps
        // below unify features and always turn it on).
        &[
            "clippy",
            "-p",
            "statek-cli",
            "--bins",
            "--",
            "-D",
            "warnings",
        ],
    ] {
        report.step(&display(args), cargo_step(args));
    }
    report.step("arch-check", arch_check::run);
    // The one build of the product: the test binaries (with the features
    // `cargo test --workspace --all-features` resolves, so the test steps
    // reuse it) and statek-bench, which runs deploy-check, failover,
    // ha-layouts and chaos below.
    report.step(&display(TEST_BUILD), cargo_step(TEST_BUILD));
    report.step("deploy-check", || linked::run_built("deploy-check", &[]));
    tools_installed(installing);
    report.step(
        &format!(
            "rule-tests (promtool test rules {})",
            rule_tests::RULE_TESTS
        ),
        rule_tests::run,
    );

    if let Some(url) = pg::external_database_url() {
        println!(
            "\nDATABASE_URL is set ({}): the PostgreSQL 16/17 matrix is replaced by that one server",
            pg::redact(&url)
        );
        let suite = Suite::Cargo(FULL_SUITE);
        let name = format!("{} [DATABASE_URL]", suite.display());
        report.step(&name, || run_suite(suite, &url, None, None, None));
        report.servers.push((
            "DATABASE_URL".to_owned(),
            "external server, version not probed".to_owned(),
        ));
    } else {
        let versions = args
            .pg
            .map_or_else(|| PgMajor::ALL.to_vec(), |major| vec![major]);
        for (index, major) in versions.into_iter().enumerate() {
            let suite = if index == 0 {
                Suite::Cargo(FULL_SUITE)
            } else {
                Suite::Binaries(DATABASE_PACKAGES)
            };
            let provision = format!("PostgreSQL {major}: provision and start");
            let Some(server) = report.step(&provision, || Server::provision_and_start(major))
            else {
                report
                    .servers
                    .push((format!("PostgreSQL {major}"), "not started".to_owned()));
                continue;
            };
            report.servers.push((
                format!("PostgreSQL {major}"),
                format!("{} ({})", server.version_string(), server.source()),
            ));
            println!(
                "PostgreSQL {major} test server: fsync, synchronous_commit and full_page_writes \
                 are OFF (fast, not durable). statek's sessions still commit with \
                 synchronous_commit = on; tests opt in with DurabilityPolicy::AllowNoDurability, \
                 so the durability check reports fsync and full_page_writes without refusing."
            );
            let url = server.database_url();
            let bouncer = report.step(
                &format!("PgBouncer (transaction pooling) in front of PostgreSQL {major}"),
                || server.start_pgbouncer(),
            );
            if let Some(bouncer) = &bouncer {
                report.servers.push((
                    format!("PgBouncer for PostgreSQL {major}"),
                    bouncer.version().to_owned(),
                ));
            }
            let bouncer_url = bouncer.as_ref().map(RunningPgBouncer::url);
            let tls_ca = server.tls_ca_file();
            let name = format!("{} [PostgreSQL {major}]", suite.display());
            report.step(&name, || {
                run_suite(suite, &url, bouncer_url.as_deref(), Some(major), Some(&tls_ca)).map_err(|error| {
                    let bouncer_log = bouncer.as_ref().map_or_else(String::new, |b| {
                        format!("\n--- last lines of the PgBouncer log ---\n{}", b.log_tail())
                    });
                    anyhow!(
                        "{error:#}\n--- last lines of the PostgreSQL {major} server log ---\n{}{bouncer_log}",
                        server.log_tail()
                    )
                })
            });
            drop(bouncer);
            report.step(&format!("PostgreSQL {major}: stop"), || server.stop());
            if index == 0 {
                // A real failover on the first (newest) version: a primary
                // and a streaming standby from the same binaries.
                let pg = major.to_string();
                report.step(
                    &format!(
                        "PostgreSQL {major}: failover (1 asynchronous with lag, 5 synchronous)"
                    ),
                    || {
                        linked::run_built(
                            "failover",
                            &[
                                "--synchronous",
                                "5",
                                "--asynchronous",
                                "1",
                                "--replicas",
                                "4",
                                "--pg",
                                &pg,
                            ],
                        )
                    },
                );
                report.step(
                    &format!(
                        "PostgreSQL {major}: HA layouts (FIRST 1, ANY 1 and FIRST 2 of two \
                         standbys, FIRST 1 beside an asynchronous one)"
                    ),
                    || linked::run_built("ha-layouts", &["--pg", &pg]),
                );
                report.step(
                    &format!(
                        "PostgreSQL {major}: chaos --quick (an immediate restart, every backend \
                         terminated once, under load: 0 lost, 0 double executions, back to 80%)"
                    ),
                    || linked::run_built("chaos", &["--quick", "--workers", "3", "--pg", &pg]),
                );
                report.step(
                    &format!(
                        "PostgreSQL {major}: the README's demo (fair vs FIFO on one workload, \
                         its 8 checks)"
                    ),
                    || linked::run_built_on_own_server("demo", &["--pg", &pg]),
                );
            }
        }
    }

    report.print_summary(started.elapsed());
    let failed: Vec<&str> = report
        .steps
        .iter()
        .filter(|step| !step.ok)
        .map(|step| step.name.as_str())
        .collect();
    if failed.is_empty() {
        Ok(())
    } else {
        bail!("{} step(s) failed: {}", failed.len(), failed.join("; "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn three_test_threads_per_core_at_most_eight() {
        assert_eq!(test_threads(0), 1);
        assert_eq!(test_threads(1), 3);
        assert_eq!(test_threads(2), 6);
        assert_eq!(test_threads(3), 8);
        assert_eq!(test_threads(64), 8);
        assert_eq!(test_threads(usize::MAX), 8);
    }
}
