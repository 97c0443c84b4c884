//! A tool the test command needs from a Debian package: found through its
//! environment variable, on `PATH` or in the system binary folders, else
//! installed (as root: `apt-get update`, then `apt-get install -y
//! --no-install-recommends PACKAGE`), else a loud failure naming the
//! package and the variable. Never a skip: CI has neither tool preinstalled.

use std::path::PathBuf;
use std::process::Command;

use anyhow::{anyhow, bail, Context, Result};
use nix::unistd::Uid;

use crate::command;

/// One tool and the package that provides it.
#[derive(Debug, Clone, Copy)]
pub struct DebianTool {
    /// The binary's file name, e.g. `pgbouncer`.
    pub binary: &'static str,
    /// The Debian package that provides it.
    pub package: &'static str,
    /// The environment variable naming a binary instead.
    pub env: &'static str,
    /// What needs it, for the messages ("the tests through a
    /// transaction-mode pool need it").
    pub needed_by: &'static str,
}

impl DebianTool {
    /// The binary named by [`env`](Self::env), else one on `PATH` or in
    /// `/usr/sbin` or `/usr/local/sbin`; installs the package when missing
    /// and running as root.
    pub fn find_or_install(&self) -> Result<PathBuf> {
        let (binary, package, env) = (self.binary, self.package, self.env);
        if let Some(path) = std::env::var_os(env).filter(|path| !path.is_empty()) {
            let path = PathBuf::from(path);
            if !path.is_file() {
                bail!(
                    "{env}={} names no file; point it at a {binary} binary",
                    path.display()
                );
            }
            return Ok(path);
        }
        if let Some(found) = self.find_on_path() {
            return Ok(found);
        }
        if !Uid::effective().is_root() {
            bail!(
                "{binary} is missing: {}. Install Debian's package `{package}` (apt-get install \
                 {package}), or set {env}=/path/to/{binary}",
                self.needed_by
            );
        }
        eprintln!("xtask: {binary} is missing; installing Debian's package `{package}`");
        command::run_captured(Command::new("apt-get").arg("update"))
            .with_context(|| format!("apt-get update (to install {package})"))?;
        command::run_captured(
            Command::new("apt-get")
                .args(["install", "-y", "--no-install-recommends", package])
                .env("DEBIAN_FRONTEND", "noninteractive"),
        )
        .with_context(|| format!("installing Debian's package `{package}`"))?;
        self.find_on_path().ok_or_else(|| {
            anyhow!(
                "apt-get installed `{package}` but no {binary} binary is on PATH or in /usr/sbin; \
                 set {env}=/path/to/{binary}"
            )
        })
    }

    fn find_on_path(&self) -> Option<PathBuf> {
        let path = std::env::var_os("PATH").unwrap_or_default();
        std::env::split_paths(&path)
            .chain([PathBuf::from("/usr/sbin"), PathBuf::from("/usr/local/sbin")])
            .map(|dir| dir.join(self.binary))
            .find(|candidate| candidate.is_file())
    }
}
