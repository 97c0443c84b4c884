//! One PostgreSQL cluster: a data directory and a log file in a cluster
//! directory, managed with `initdb` and `pg_ctl` as the server user.

use std::fs;
use std::io::ErrorKind;
use std::net::{Ipv4Addr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{anyhow, bail, Context, Result};

use super::server_user::ServerUser;
use super::tls::{self, TlsFiles};
use crate::command::{self, TAIL_LINES};

/// Server settings passed with `pg_ctl start -o`.
///
/// `fsync`, `synchronous_commit` and `full_page_writes` are off: these
/// clusters are for development, tests and the demo, where a crash may lose
/// data and speed matters. Never copy these settings to a real deployment.
/// Unix sockets are off (`unix_socket_directories=''`), so clients connect
/// over TCP on 127.0.0.1 only.
const SERVER_SETTINGS: &[&str] = &[
    "listen_addresses=127.0.0.1",
    "unix_socket_directories=''",
    "fsync=off",
    "synchronous_commit=off",
    "full_page_writes=off",
    "max_connections=200",
];

/// How many ports to try when the chosen port was taken before the server
/// could bind it.
const PORT_ATTEMPTS: usize = 3;

/// A cluster directory with `data/` and `postgres.log`.
#[derive(Clone, Debug)]
pub struct Cluster {
    /// The cluster directory (owned by the server user).
    pub dir: PathBuf,
    /// Directory with `initdb`, `pg_ctl` and `postgres`.
    pub bin_dir: PathBuf,
    /// Who runs the tools (`None`: the current user).
    pub server_user: Option<ServerUser>,
}

impl Cluster {
    /// The data directory.
    pub fn data_dir(&self) -> PathBuf {
        self.dir.join("data")
    }

    /// The cluster's TLS files (CA, server certificate and key).
    pub fn tls_files(&self) -> TlsFiles {
        TlsFiles::of(&self.dir)
    }

    /// The server log (stderr of the postmaster).
    pub fn log_file(&self) -> PathBuf {
        self.dir.join("postgres.log")
    }

    fn tool(&self, name: &str) -> Command {
        let mut command = Command::new(self.bin_dir.join(name));
        command
            .current_dir(&self.dir)
            .env_remove("PGDATA")
            .env_remove("PGPORT")
            .env_remove("PGHOST")
            .env("LC_ALL", "C");
        if let Some(user) = &self.server_user {
            user.apply(&mut command);
        }
        command
    }

    /// A command run as the server user (when there is one) in the cluster
    /// directory.
    pub fn command(&self, program: &str) -> Command {
        let mut command = Command::new(program);
        command.current_dir(&self.dir);
        if let Some(user) = &self.server_user {
            user.apply(&mut command);
        }
        command
    }

    /// `pg_ctl promote -w`: ends recovery of a standby (at most 60 s).
    pub fn promote(&self) -> Result<()> {
        let mut pg_ctl = self.tool("pg_ctl");
        pg_ctl
            .arg("promote")
            .arg("-D")
            .arg(self.data_dir())
            .args(["-w", "-t", "60"]);
        command::run_captured(&mut pg_ctl).map(|_| ())
    }

    /// Whether `data/` holds an initialised cluster.
    pub fn is_initialised(&self) -> bool {
        self.data_dir().join("PG_VERSION").is_file()
    }

    /// Creates the cluster directory (mode 0700, owned by the server user)
    /// and runs `initdb` unless the data directory is already initialised.
    /// `initdb` writes into a temporary directory that is renamed into place,
    /// so an interrupted `initdb` is never used.
    pub fn initialise(&self) -> Result<()> {
        fs::create_dir_all(&self.dir)
            .with_context(|| format!("creating {}", self.dir.display()))?;
        fs::set_permissions(
            &self.dir,
            std::os::unix::fs::PermissionsExt::from_mode(0o700),
        )
        .with_context(|| format!("setting the mode of {}", self.dir.display()))?;
        if let Some(user) = &self.server_user {
            user.chown(&self.dir)?;
        }
        if self.is_initialised() {
            return Ok(());
        }
        let data = self.data_dir();
        if data.exists() {
            fs::remove_dir_all(&data).with_context(|| format!("removing {}", data.display()))?;
        }
        let temp = self.dir.join("data.initdb");
        if temp.exists() {
            fs::remove_dir_all(&temp).with_context(|| format!("removing {}", temp.display()))?;
        }
        let started = Instant::now();
        let mut initdb = self.tool("initdb");
        initdb.arg("-D").arg(&temp).args([
            "-E",
            "UTF8",
            "--no-locale",
            "-U",
            "postgres",
            "-A",
            "trust",
        ]);
        command::run_captured(&mut initdb)?;
        fs::rename(&temp, &data)
            .with_context(|| format!("moving {} to {}", temp.display(), data.display()))?;
        eprintln!(
            "xtask: initdb {} in {:.1}s",
            data.display(),
            started.elapsed().as_secs_f64()
        );
        Ok(())
    }

    /// Starts the server on a free 127.0.0.1 port and waits until it accepts
    /// connections (at most 60 s); returns the port. `before_start` runs
    /// with the chosen port before `pg_ctl start` (to record state).
    ///
    /// The server runs with `ssl=on` and the cluster's own CA and server
    /// certificate (made on first start), and pg_hba.conf admits its test
    /// roles as [`tls`] describes.
    pub fn start(&self, before_start: impl FnMut(u16) -> Result<()>) -> Result<u16> {
        self.start_with(&[], before_start)
    }

    /// As [`start`](Self::start), with `extra` settings (`name=value`)
    /// after the development and TLS settings (a later `-c` wins).
    pub fn start_with(
        &self,
        extra: &[String],
        mut before_start: impl FnMut(u16) -> Result<()>,
    ) -> Result<u16> {
        let tls_files = self.tls_files();
        tls_files.ensure(self.server_user.as_ref())?;
        tls::ensure_hba(&self.data_dir())?;
        let mut last_error = None;
        for _ in 0..PORT_ATTEMPTS {
            let port = free_port()?;
            before_start(port)?;
            let log_offset = fs::metadata(self.log_file()).map_or(0, |m| m.len());
            let mut pg_ctl = self.tool("pg_ctl");
            pg_ctl
                .arg("start")
                .arg("-D")
                .arg(self.data_dir())
                .arg("-l")
                .arg(self.log_file())
                .args(["-w", "-t", "60", "-o"])
                .arg(server_options(port, &tls_files, extra));
            let output = pg_ctl
                .stdin(Stdio::null())
                .output()
                .map_err(|error| command::spawn_error(&pg_ctl, &error))?;
            if output.status.success() {
                return Ok(port);
            }
            let log = self.log_since(log_offset);
            let message = format!(
                "{}\n--- last {TAIL_LINES} lines of {} ---\n{}",
                command::failure_message(&pg_ctl, &output),
                self.log_file().display(),
                command::tail(&log, TAIL_LINES)
            );
            if !(log.contains("could not bind") || log.contains("Address already in use")) {
                bail!(message);
            }
            last_error = Some(message);
        }
        Err(anyhow!(last_error.unwrap_or_default()))
            .context(format!("no free port after {PORT_ATTEMPTS} attempts"))
    }

    /// Starts the stopped server again on `port` (the port its clients
    /// know), with `extra` settings as [`start_with`](Self::start_with);
    /// waits until it accepts connections (`pg_ctl start -w`, at most 60 s).
    pub fn start_on(&self, port: u16, extra: &[String]) -> Result<()> {
        let log_offset = fs::metadata(self.log_file()).map_or(0, |m| m.len());
        let mut pg_ctl = self.tool("pg_ctl");
        pg_ctl
            .arg("start")
            .arg("-D")
            .arg(self.data_dir())
            .arg("-l")
            .arg(self.log_file())
            .args(["-w", "-t", "60", "-o"])
            .arg(server_options(port, &self.tls_files(), extra));
        let output = pg_ctl
            .stdin(Stdio::null())
            .output()
            .map_err(|error| command::spawn_error(&pg_ctl, &error))?;
        if !output.status.success() {
            bail!(
                "{}\n--- last {TAIL_LINES} lines of {} ---\n{}",
                command::failure_message(&pg_ctl, &output),
                self.log_file().display(),
                command::tail(&self.log_since(log_offset), TAIL_LINES)
            );
        }
        Ok(())
    }

    fn log_since(&self, offset: u64) -> String {
        let bytes = fs::read(self.log_file()).unwrap_or_default();
        let start = usize::try_from(offset).unwrap_or(0).min(bytes.len());
        String::from_utf8_lossy(&bytes[start..]).into_owned()
    }

    /// Whether a server runs on this data directory (`pg_ctl status`).
    pub fn is_running(&self) -> Result<bool> {
        if !self.data_dir().is_dir() {
            return Ok(false);
        }
        let mut pg_ctl = self.tool("pg_ctl");
        pg_ctl.arg("status").arg("-D").arg(self.data_dir());
        let output = pg_ctl
            .stdin(Stdio::null())
            .output()
            .map_err(|error| command::spawn_error(&pg_ctl, &error))?;
        match output.status.code() {
            Some(0) => Ok(true),
            Some(3 | 4) => Ok(false),
            _ => bail!(command::failure_message(&pg_ctl, &output)),
        }
    }

    /// The postmaster's process id, from line 1 of `postmaster.pid`.
    pub fn pid(&self) -> Option<u32> {
        self.postmaster_pid_line(0)?.parse().ok()
    }

    /// The postmaster's port, from line 4 of `postmaster.pid`.
    pub fn port(&self) -> Option<u16> {
        self.postmaster_pid_line(3)?.parse().ok()
    }

    fn postmaster_pid_line(&self, index: usize) -> Option<String> {
        let text = fs::read_to_string(self.data_dir().join("postmaster.pid")).ok()?;
        Some(text.lines().nth(index)?.trim().to_owned())
    }

    /// Stops the server with `pg_ctl stop -m <mode>` (`fast`: roll back open
    /// transactions; `immediate`: no clean shutdown) and waits at most 60 s.
    /// Returns whether a server was running.
    pub fn stop(&self, mode: &str) -> Result<bool> {
        if !self.is_running()? {
            return Ok(false);
        }
        let mut pg_ctl = self.tool("pg_ctl");
        pg_ctl
            .arg("stop")
            .arg("-D")
            .arg(self.data_dir())
            .args(["-m", mode, "-w", "-t", "60"]);
        command::run_captured(&mut pg_ctl).map_err(|error| {
            error.context(format!(
                "last lines of {}:\n{}",
                self.log_file().display(),
                command::tail(&self.log_since(0), TAIL_LINES)
            ))
        })?;
        Ok(true)
    }

    /// Stops the server if it runs and deletes the cluster directory.
    pub fn destroy(&self) -> Result<()> {
        self.stop("fast")?;
        match fs::remove_dir_all(&self.dir) {
            Err(error) if error.kind() != ErrorKind::NotFound => {
                Err(error).with_context(|| format!("removing {}", self.dir.display()))
            }
            _ => Ok(()),
        }
    }
}

/// The `-o` argument of `pg_ctl start` (pg_ctl passes it through `sh`).
fn server_options(port: u16, tls_files: &TlsFiles, extra: &[String]) -> String {
    let mut options = format!("-p {port}");
    let tls_settings = tls::server_settings(tls_files);
    for setting in SERVER_SETTINGS
        .iter()
        .copied()
        .chain(tls_settings.iter().map(String::as_str))
        .chain(extra.iter().map(String::as_str))
    {
        options.push_str(" -c ");
        options.push_str(setting);
    }
    options
}

/// The settings that make a cluster durable: what `SERVER_SETTINGS` turns
/// off, back on (for the failover test, `pg pair` and the bench).
pub const DURABLE_SETTINGS: &[&str] = &["fsync=on", "synchronous_commit=on", "full_page_writes=on"];

/// A port on 127.0.0.1 that was free a moment ago (bound to port 0, then
/// released).
pub fn free_port() -> Result<u16> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).context("finding a free port")?;
    Ok(listener.local_addr()?.port())
}

/// `postgres://postgres@127.0.0.1:<port>/postgres`.
pub fn database_url(port: u16) -> String {
    format!("postgres://postgres@127.0.0.1:{port}/postgres")
}

/// Whether a directory named like `<pid>-<n>` belongs to a process that no
/// longer exists.
pub fn owner_process_gone(dir: &Path) -> bool {
    let pid = dir
        .file_name()
        .and_then(|name| name.to_str())
        .and_then(|name| name.split('-').next())
        .and_then(|pid| pid.parse::<u32>().ok());
    match pid {
        Some(pid) => !Path::new(&format!("/proc/{pid}")).exists(),
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_options_for_pg_ctl() {
        assert_eq!(
            server_options(5555, &TlsFiles::of(Path::new("/c")), &[]),
            "-p 5555 -c listen_addresses=127.0.0.1 -c unix_socket_directories='' -c fsync=off \
             -c synchronous_commit=off -c full_page_writes=off -c max_connections=200 \
             -c ssl=on -c ssl_ca_file='/c/tls/ca.crt' -c ssl_cert_file='/c/tls/server.crt' -c ssl_key_file='/c/tls/server.key'"
        );
    }

    #[test]
    fn url_for_a_port() {
        assert_eq!(
            database_url(5555),
            "postgres://postgres@127.0.0.1:5555/postgres"
        );
    }
}
