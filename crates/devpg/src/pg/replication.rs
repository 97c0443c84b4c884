//! A primary and streaming standbys from the same binaries, on loopback:
//! a pair for the failover test and `cargo xtask pg pair`, and a set of
//! standbys with chosen `application_name`s for the durability layouts
//! (`cargo xtask ha-layouts`).
//!
//! The npm package ships only `initdb`, `pg_ctl` and `postgres` (no
//! `pg_basebackup`), so the standby is seeded from a copy of the primary's
//! data directory taken after `initdb`, before the primary first starts: the
//! two then share a system identifier and timeline 1, and the standby
//! streams from the primary's first WAL record.

use std::fs;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use super::cluster::{self, Cluster, DURABLE_SETTINGS};
use super::{distribution, started, PgMajor, Server};
use crate::command;

/// The standby's `application_name` (what `synchronous_standby_names`
/// lists).
pub const STANDBY_NAME: &str = "standby1";

/// How the pair replicates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Replication {
    /// `synchronous_standby_names = 'standby1'`: commits wait for the
    /// standby's flush (with `synchronous_commit = on`).
    Synchronous,
    /// `synchronous_standby_names` empty: commits do not wait.
    Asynchronous,
}

/// A running primary and standby, stopped and deleted on drop.
#[derive(Debug)]
pub struct ReplicaPair {
    /// The primary cluster.
    pub primary: Cluster,
    /// The standby cluster.
    pub standby: Cluster,
    /// The primary's port.
    pub primary_port: u16,
    /// The standby's port.
    pub standby_port: u16,
    registrations: [u64; 2],
}

/// A running primary and standbys, stopped and deleted on drop. The
/// primary's `synchronous_standby_names` is empty at start and not on its
/// command line, so `ALTER SYSTEM` and a reload change it.
#[derive(Debug)]
pub struct ReplicaSet {
    /// The primary's port.
    pub primary_port: u16,
    dir: PathBuf,
    registrations: Vec<u64>,
}

impl Server {
    /// A fresh directory for the clusters of one pair or set.
    fn replication_dir(&self, kind: &str) -> Result<PathBuf> {
        let parent = self.layout.ephemeral_parent(self.major);
        distribution::create_dir_all_0755(&self.layout.runtime_dir(self.major))?;
        distribution::create_dir_all_0755(&parent)?;
        self.sweep_abandoned(&parent);
        let dir = parent.join(format!(
            "{}-{kind}{}",
            std::process::id(),
            super::NEXT_EPHEMERAL.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        ));
        distribution::create_dir_all_0755(&dir)?;
        Ok(dir)
    }

    /// The cluster named `name` in `dir`.
    fn cluster_in(&self, dir: &Path, name: &str) -> Cluster {
        Cluster {
            dir: dir.join(name),
            bin_dir: self.binaries.bin_dir.clone(),
            server_user: self.layout.server_user.clone(),
        }
    }

    /// Starts a durable primary and one streaming standby per name (its
    /// `application_name`), and waits until every standby streams.
    pub fn start_replicas(&self, names: &[&str]) -> Result<ReplicaSet> {
        let dir = self.replication_dir("set")?;
        let primary = self.cluster_in(&dir, "primary");
        let standbys: Vec<(Cluster, &str)> = names
            .iter()
            .map(|&name| (self.cluster_in(&dir, name), name))
            .collect();
        let mut registrations = vec![started::register(primary.clone())];
        registrations.extend(standbys.iter().map(|(c, _)| started::register(c.clone())));
        let settings: Vec<String> = DURABLE_SETTINGS.iter().map(|s| (*s).to_owned()).collect();
        match start_standbys(&primary, &standbys, &settings, &settings) {
            Ok((primary_port, ports)) => {
                eprintln!(
                    "xtask: PostgreSQL {} primary on port {primary_port}, standbys {} \
                     (durable settings)",
                    self.major,
                    names
                        .iter()
                        .zip(&ports)
                        .map(|(name, port)| format!("`{name}` on port {port}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                );
                Ok(ReplicaSet {
                    primary_port,
                    dir,
                    registrations,
                })
            }
            Err(error) => {
                for id in registrations {
                    let _ = started::destroy(id);
                }
                let _ = fs::remove_dir_all(&dir);
                Err(error.context(format!("starting a PostgreSQL {} replica set", self.major)))
            }
        }
    }

    /// Starts a durable primary (`fsync`, `synchronous_commit`,
    /// `full_page_writes` on) and a streaming standby of it, and waits until
    /// the standby streams.
    pub fn start_pair(&self, replication: Replication) -> Result<ReplicaPair> {
        let dir = self.replication_dir("pair")?;
        let cluster = |name: &str| self.cluster_in(&dir, name);
        let (primary, standby) = (cluster("primary"), cluster("standby"));
        let registrations = [
            started::register(primary.clone()),
            started::register(standby.clone()),
        ];
        let result = start_pair(&primary, &standby, replication);
        match result {
            Ok((primary_port, standby_port)) => {
                eprintln!(
                    "xtask: PostgreSQL {} primary on port {primary_port}, {} standby `{STANDBY_NAME}` \
                     on port {standby_port} (durable settings)",
                    self.major,
                    match replication {
                        Replication::Synchronous => "synchronous",
                        Replication::Asynchronous => "asynchronous",
                    }
                );
                Ok(ReplicaPair {
                    primary,
                    standby,
                    primary_port,
                    standby_port,
                    registrations,
                })
            }
            Err(error) => {
                for id in registrations {
                    let _ = started::destroy(id);
                }
                let _ = fs::remove_dir_all(&dir);
                Err(error.context(format!("starting a PostgreSQL {} pair", self.major)))
            }
        }
    }
}

fn start_pair(
    primary: &Cluster,
    standby: &Cluster,
    replication: Replication,
) -> Result<(u16, u16)> {
    let settings: Vec<String> = DURABLE_SETTINGS.iter().map(|s| (*s).to_owned()).collect();
    // Only the primary names its synchronous standby: a promoted standby
    // has none to wait for (a command-line setting could not be changed
    // after the failover).
    let mut primary_settings = settings.clone();
    if replication == Replication::Synchronous {
        primary_settings.push(format!("synchronous_standby_names={STANDBY_NAME}"));
    }
    let (primary_port, ports) = start_standbys(
        primary,
        &[(standby.clone(), STANDBY_NAME)],
        &primary_settings,
        &settings,
    )?;
    let standby_port = ports.first().copied().context("the standby has no port")?;
    Ok((primary_port, standby_port))
}

/// Initialises the primary, seeds each standby from a copy of its
/// never-started data directory, starts them (the primary with
/// `primary_settings`, each standby with `standby_settings` and its
/// `application_name`), and waits until every standby streams; returns
/// the primary's port and the standbys' ports.
fn start_standbys(
    primary: &Cluster,
    standbys: &[(Cluster, &str)],
    primary_settings: &[String],
    standby_settings: &[String],
) -> Result<(u16, Vec<u16>)> {
    primary.initialise()?;
    for (standby, _) in standbys {
        // The standby's directory: a copy of the never-started primary.
        fs::create_dir_all(&standby.dir)
            .with_context(|| format!("creating {}", standby.dir.display()))?;
        fs::set_permissions(
            &standby.dir,
            std::os::unix::fs::PermissionsExt::from_mode(0o700),
        )?;
        if let Some(user) = &standby.server_user {
            user.chown(&standby.dir)?;
        }
        let mut copy = primary.command("cp");
        copy.arg("-a")
            .arg(primary.data_dir())
            .arg(standby.data_dir());
        command::run_captured(&mut copy)?;
    }
    let primary_port = primary.start_with(primary_settings, |_| Ok(()))?;
    let mut ports = Vec::new();
    for (standby, name) in standbys {
        write_as(
            standby,
            standby.data_dir().join("standby.signal"),
            String::new(),
        )?;
        let auto_conf = standby.data_dir().join("postgresql.auto.conf");
        let mut conf = fs::read_to_string(&auto_conf).unwrap_or_default();
        conf.push_str(&format!(
            "primary_conninfo = 'host=127.0.0.1 port={primary_port} user=postgres application_name={name}'\n"
        ));
        write_as(standby, auto_conf, conf)?;
        ports.push(standby.start_with(standby_settings, |_| Ok(()))?);
    }
    let names: Vec<&str> = standbys.iter().map(|(_, name)| *name).collect();
    wait_streaming(primary_port, &names)?;
    Ok((primary_port, ports))
}

/// Writes `text` to `path` and gives it to the server user.
fn write_as(cluster: &Cluster, path: PathBuf, text: String) -> Result<()> {
    let mut file =
        fs::File::create(&path).with_context(|| format!("writing {}", path.display()))?;
    file.write_all(text.as_bytes())?;
    if let Some(user) = &cluster.server_user {
        user.chown(&path)?;
    }
    Ok(())
}

/// Waits (at most 30 s) until the primary's `pg_stat_replication` shows
/// every standby of `names` streaming.
fn wait_streaming(primary_port: u16, names: &[&str]) -> Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let url = cluster::database_url(primary_port);
        let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await?;
        let driver = tokio::spawn(connection);
        let started = Instant::now();
        loop {
            let streaming: i64 = client
                .query_one(
                    "SELECT count(DISTINCT application_name) FROM pg_stat_replication
                     WHERE application_name = ANY($1) AND state = 'streaming'
                       AND replay_lsn IS NOT NULL",
                    &[&names],
                )
                .await?
                .get(0);
            if usize::try_from(streaming).ok() == Some(names.len()) {
                break;
            }
            if started.elapsed() > Duration::from_secs(30) {
                bail!("the standbys {names:?} did not all stream within 30 s");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        drop(client);
        let _ = driver.await;
        Ok(())
    })
}

impl ReplicaPair {
    /// `host=127.0.0.1,127.0.0.1 port=P,S ... target_session_attrs=read-write`:
    /// connects to whichever of the two accepts writes.
    pub fn failover_url(&self) -> String {
        format!(
            "host=127.0.0.1,127.0.0.1 port={},{} user=postgres dbname=postgres \
             target_session_attrs=read-write",
            self.primary_port, self.standby_port
        )
    }

    /// The primary's URL.
    pub fn primary_url(&self) -> String {
        cluster::database_url(self.primary_port)
    }

    /// Kills every process of the primary with SIGKILL (no shutdown, no
    /// last WAL sent): a crash of its machine, as far as the standby sees.
    pub fn crash_primary(&self) -> Result<()> {
        let Some(postmaster) = self.primary.pid() else {
            bail!("the primary has no postmaster.pid");
        };
        let mut children = std::process::Command::new("pgrep");
        children.arg("-P").arg(postmaster.to_string());
        let output = children.output().context("running pgrep")?;
        let mut pids = vec![postmaster.to_string()];
        pids.extend(
            String::from_utf8_lossy(&output.stdout)
                .split_whitespace()
                .map(str::to_owned),
        );
        let mut kill = std::process::Command::new("kill");
        kill.arg("-KILL").args(&pids);
        // Some children may already be gone; the postmaster is what counts.
        let _ = kill.output();
        let started = Instant::now();
        while std::path::Path::new(&format!("/proc/{postmaster}")).exists() {
            if started.elapsed() > Duration::from_secs(10) {
                bail!("the primary's postmaster {postmaster} survived SIGKILL");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }

    /// Stops (SIGSTOP) or resumes (SIGCONT) the primary's walsender, to
    /// hold replication back.
    pub fn signal_walsender(&self, pid: i32, signal: &str) -> Result<()> {
        let mut kill = std::process::Command::new("kill");
        kill.arg(format!("-{signal}")).arg(pid.to_string());
        command::run_captured(&mut kill).map(|_| ())
    }

    /// Promotes the standby.
    pub fn promote_standby(&self) -> Result<()> {
        self.standby.promote()
    }

    /// Stops both servers and deletes the pair.
    pub fn stop(self) -> Result<()> {
        let dir = self.primary.dir.parent().map(PathBuf::from);
        for id in self.registrations {
            started::destroy(id)?;
        }
        if let Some(dir) = dir {
            let _ = fs::remove_dir_all(dir);
        }
        Ok(())
    }
}

impl ReplicaSet {
    /// The primary's URL.
    pub fn primary_url(&self) -> String {
        cluster::database_url(self.primary_port)
    }

    /// Stops every server and deletes the set.
    pub fn stop(mut self) -> Result<()> {
        for id in std::mem::take(&mut self.registrations) {
            started::destroy(id)?;
        }
        let _ = fs::remove_dir_all(&self.dir);
        Ok(())
    }
}

impl Drop for ReplicaSet {
    fn drop(&mut self) {
        for id in std::mem::take(&mut self.registrations) {
            if let Err(error) = started::destroy(id) {
                eprintln!("xtask: could not stop a replica set: {error:#}");
            }
        }
        let _ = fs::remove_dir_all(&self.dir);
    }
}

impl Drop for ReplicaPair {
    fn drop(&mut self) {
        for id in self.registrations {
            if let Err(error) = started::destroy(id) {
                eprintln!("xtask: could not stop a replication pair: {error:#}");
            }
        }
        if let Some(dir) = self.primary.dir.parent() {
            let _ = fs::remove_dir_all(dir);
        }
    }
}

/// `cargo xtask pg pair`: a pair in the foreground until Ctrl-C.
pub fn pair(major: PgMajor, asynchronous: bool) -> Result<()> {
    let server = Server::provision(major)?;
    let replication = if asynchronous {
        Replication::Asynchronous
    } else {
        Replication::Synchronous
    };
    let pair = server.start_pair(replication)?;
    println!(
        "primary:  {}  (data {})\nstandby:  postgres://postgres@127.0.0.1:{}/postgres  (data {})\n\
         failover URL (follows the writable one):\n  DATABASE_URL='{}'\n\n\
         To fail over: kill -9 {} (the primary's postmaster), then\n  {} promote -D {}\n\
         (as the server's user). Ctrl-C stops both servers and deletes them.",
        pair.primary_url(),
        pair.primary.data_dir().display(),
        pair.standby_port,
        pair.standby.data_dir().display(),
        pair.failover_url(),
        pair.primary.pid().unwrap_or(0),
        pair.standby.bin_dir.join("pg_ctl").display(),
        pair.standby.data_dir().display(),
    );
    loop {
        std::thread::sleep(Duration::from_secs(3600));
    }
}
