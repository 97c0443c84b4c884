//! PgBouncer in transaction pooling mode in front of a test server, for the
//! tests that run through it (`STATEK_TEST_PGBOUNCER_URL`).
//!
//! The binary: `STATEK_PGBOUNCER=/path/to/pgbouncer`, else `pgbouncer` on
//! `PATH` or in `/usr/sbin` (Debian's package `pgbouncer`). When it is
//! missing and xtask runs as root, xtask installs the package
//! (`apt-get update`, then `apt-get install -y pgbouncer`); otherwise it
//! fails naming the package.
//!
//! The instance listens on a free port of 127.0.0.1, with `pool_mode =
//! transaction`, a wildcard database entry (every test creates its own
//! database), `auth_type = trust` against an auth file naming `postgres`,
//! no Unix socket, and no `ignore_startup_parameters`: the tests prove that
//! statek works without it. Its configuration, auth file and log live in
//! the cluster directory (under `target/`), and it runs as the same
//! unprivileged user as the server when xtask runs as root. It is stopped
//! when the handle is dropped, and by the Ctrl-C handler.

use std::fs;
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use super::server_user::ServerUser;
use crate::command;
use crate::debian_tool::DebianTool;

/// Environment variable naming a PgBouncer binary.
pub const PGBOUNCER_ENV: &str = "STATEK_PGBOUNCER";

/// The Debian package that provides it.
const PACKAGE: &str = "pgbouncer";

/// Server connections per (database, user) pool: few, so that concurrent
/// clients share them and statements hop between server connections, as in
/// production.
const POOL_SIZE: u32 = 4;

/// Pids of instances this process started, for the Ctrl-C handler.
static STARTED: Mutex<Vec<u32>> = Mutex::new(Vec::new());

/// A running PgBouncer that this process started; stopped on drop.
#[derive(Debug)]
pub struct RunningPgBouncer {
    child: Child,
    port: u16,
    version: String,
    log: PathBuf,
}

impl RunningPgBouncer {
    /// `postgres://postgres@127.0.0.1:<port>/postgres`: any database name
    /// works through the wildcard entry.
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// First line of `pgbouncer --version`, e.g. `PgBouncer 1.18.0`.
    pub fn version(&self) -> &str {
        &self.version
    }

    /// The last lines of its log.
    pub fn log_tail(&self) -> String {
        let log = fs::read(&self.log).unwrap_or_default();
        command::tail(&String::from_utf8_lossy(&log), command::TAIL_LINES)
    }

    /// Starts PgBouncer in `dir` (created; owned by `user` when given) in
    /// front of the server on 127.0.0.1:`server_port`.
    pub fn start(dir: &Path, server_port: u16, user: Option<&ServerUser>) -> Result<Self> {
        let binary = TOOL.find_or_install()?;
        let version = version_of(&binary)?;
        fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let port = free_port()?;
        let ini = dir.join("pgbouncer.ini");
        let auth = dir.join("userlist.txt");
        let log = dir.join("pgbouncer.log");
        fs::write(&auth, "\"postgres\" \"\"\n")
            .with_context(|| format!("writing {}", auth.display()))?;
        fs::write(&ini, config(server_port, port, &auth, &log))
            .with_context(|| format!("writing {}", ini.display()))?;
        if let Some(user) = user {
            for path in [dir, ini.as_path(), auth.as_path()] {
                user.chown(path)?;
            }
        }
        let mut pgbouncer = Command::new(&binary);
        pgbouncer
            .arg(&ini)
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        if let Some(user) = user {
            user.apply(&mut pgbouncer);
        }
        let child = pgbouncer
            .spawn()
            .map_err(|error| command::spawn_error(&pgbouncer, &error))?;
        lock_started().push(child.id());
        let mut running = Self {
            child,
            port,
            version,
            log,
        };
        running.wait_until_listening()?;
        eprintln!(
            "xtask: {} (transaction pooling) is up on port {port} in front of port {server_port}",
            running.version
        );
        Ok(running)
    }

    fn wait_until_listening(&mut self) -> Result<()> {
        let started = Instant::now();
        let address = SocketAddr::from((Ipv4Addr::LOCALHOST, self.port));
        while started.elapsed() < Duration::from_secs(30) {
            if let Some(status) = self.child.try_wait().context("waiting for pgbouncer")? {
                bail!(
                    "pgbouncer exited ({status}) before listening on port {}\n--- its log ---\n{}",
                    self.port,
                    self.log_tail()
                );
            }
            if TcpStream::connect_timeout(&address, Duration::from_millis(200)).is_ok() {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        bail!(
            "pgbouncer did not listen on port {} within 30 s\n--- its log ---\n{}",
            self.port,
            self.log_tail()
        )
    }
}

impl Drop for RunningPgBouncer {
    fn drop(&mut self) {
        let pid = self.child.id();
        lock_started().retain(|started| *started != pid);
        if let Err(error) = self.child.kill() {
            eprintln!("xtask: could not stop pgbouncer (pid {pid}): {error}");
        }
        let _ = self.child.wait();
    }
}

fn lock_started() -> std::sync::MutexGuard<'static, Vec<u32>> {
    STARTED
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Stops every instance this process started (SIGTERM by pid); for the
/// Ctrl-C handler.
pub fn stop_all_started() {
    for pid in lock_started().drain(..) {
        let Ok(pid) = i32::try_from(pid) else {
            continue;
        };
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGTERM,
        );
    }
}

/// The configuration file's text.
fn config(server_port: u16, port: u16, auth: &Path, log: &Path) -> String {
    format!(
        "; Written by cargo xtask test: PgBouncer in transaction pooling mode in
; front of a throw-away test server. Deleted with the cluster.
[databases]
* = host=127.0.0.1 port={server_port}

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {port}
unix_socket_dir =
auth_type = trust
auth_file = {auth}
pool_mode = transaction
max_client_conn = 1000
default_pool_size = {POOL_SIZE}
server_idle_timeout = 10
logfile = {log}
",
        auth = auth.display(),
        log = log.display()
    )
}

/// PgBouncer from Debian's package `pgbouncer`, or `STATEK_PGBOUNCER`.
/// PgBouncer from Debian's package `pgbouncer`, or `STATEK_PGBOUNCER`.
pub const TOOL: DebianTool = DebianTool {
    binary: "pgbouncer",
    package: PACKAGE,
    env: PGBOUNCER_ENV,
    needed_by: "the tests through a transaction-mode pool need it",
};

fn version_of(binary: &Path) -> Result<String> {
    let output = command::run_captured(Command::new(binary).arg("--version"))?;
    Ok(String::from_utf8_lossy(&output.stdout)
        .lines()
        .next()
        .unwrap_or("PgBouncer (version unknown)")
        .trim()
        .to_owned())
}

/// A port on 127.0.0.1 that was free a moment ago.
fn free_port() -> Result<u16> {
    let listener =
        TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).context("finding a free port for pgbouncer")?;
    Ok(listener.local_addr()?.port())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_config_is_transaction_pooling_with_a_wildcard_database() {
        let text = config(
            5432,
            6543,
            Path::new("/x/userlist.txt"),
            Path::new("/x/log"),
        );
        for line in [
            "* = host=127.0.0.1 port=5432",
            "listen_port = 6543",
            "pool_mode = transaction",
            "auth_type = trust",
            "auth_file = /x/userlist.txt",
            "default_pool_size = 4",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} in\n{text}");
        }
        assert!(!text.contains("ignore_startup_parameters"), "{text}");
    }
}
