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
        install_missing(std::slice::from_ref(self))?;
        self.find_on_path().ok_or_else(|| {
            anyhow!(
                "apt-get installed `{package}` but no {binary} binary is on PATH or in /usr/sbin; \
                 set {env}=/path/to/{binary}"
            )
        })
    }

    /// Whether the tool is there without installing anything: named by
    /// [`env`](Self::env) (whatever the variable names: a wrong name is
    /// [`find_or_install`](Self::find_or_install)'s to report), on `PATH`
    /// or in the system binary folders.
    pub fn is_present(&self) -> bool {
        std::env::var_os(self.env).is_some_and(|path| !path.is_empty())
            || self.find_on_path().is_some()
    }

    fn find_on_path(&self) -> Option<PathBuf> {
        let path = std::env::var_os("PATH").unwrap_or_default();
        std::env::split_paths(&path)
            .chain([PathBuf::from("/usr/sbin"), PathBuf::from("/usr/local/sbin")])
            .map(|dir| dir.join(self.binary))
            .find(|candidate| candidate.is_file())
    }
}

/// The packages of `tools` to install: those of the tools that are not
/// `present`, each once, in order.
fn packages_to_install(
    tools: &[DebianTool],
    present: impl Fn(&DebianTool) -> bool,
) -> Vec<&'static str> {
    let mut packages: Vec<&'static str> = Vec::new();
    for tool in tools.iter().filter(|tool| !present(tool)) {
        if !packages.contains(&tool.package) {
            packages.push(tool.package);
        }
    }
    packages
}

/// Installs, in one `apt-get update` and one `apt-get install`, the
/// packages of every tool of `tools` that is missing, when running as
/// root; nothing when all are present or when not root (each tool's
/// [`DebianTool::find_or_install`] then reports what is missing). Returns
/// the packages it installed.
///
/// `cargo xtask test` calls it at its start, beside the compile steps, so
/// that the steps that need the tools later find them installed.
///
/// # Errors
/// When `apt-get` fails (its output in the error).
pub fn install_missing(tools: &[DebianTool]) -> Result<Vec<&'static str>> {
    let packages = packages_to_install(tools, DebianTool::is_present);
    if packages.is_empty() || !Uid::effective().is_root() {
        return Ok(Vec::new());
    }
    command::run_captured(Command::new("apt-get").arg("update"))
        .with_context(|| format!("apt-get update (to install {})", packages.join(", ")))?;
    command::run_captured(
        Command::new("apt-get")
            .args(["install", "-y", "--no-install-recommends"])
            .args(&packages)
            .env("DEBIAN_FRONTEND", "noninteractive"),
    )
    .with_context(|| format!("installing Debian's packages {}", packages.join(", ")))?;
    Ok(packages)
}

#[cfg(test)]
mod tests {
    use super::*;

    const fn tool(binary: &'static str, package: &'static str) -> DebianTool {
        DebianTool {
            binary,
            package,
            env: "DEVPG_TEST_UNSET_TOOL",
            needed_by: "a test",
        }
    }

    #[test]
    fn only_missing_tools_packages_are_installed_once_each() {
        let tools = [
            tool("pgbouncer", "pgbouncer"),
            tool("promtool", "prometheus"),
            tool("prometheus", "prometheus"),
        ];
        assert_eq!(
            packages_to_install(&tools, |_| false),
            ["pgbouncer", "prometheus"]
        );
        assert_eq!(
            packages_to_install(&tools, |t| t.binary == "pgbouncer"),
            ["prometheus"]
        );
        assert_eq!(
            packages_to_install(&tools, |t| t.binary != "promtool"),
            ["prometheus"]
        );
        assert!(packages_to_install(&tools, |_| true).is_empty());
    }
}
