//! Finding the server binaries (`initdb`, `pg_ctl`, `postgres`) for a major
//! version: from `STATEK_PG<major>_BIN` or `STATEK_PG_BIN`, else from the
//! pinned npm release.

use std::env;
use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};

use super::distribution::{self, copy_tree, NpmRelease};
use super::layout::Layout;
use super::major::PgMajor;
use crate::command;

/// Where a set of binaries came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BinarySource {
    /// A directory named by an environment variable.
    Directory {
        /// The variable, e.g. `STATEK_PG_BIN`.
        variable: String,
    },
    /// The pinned npm release.
    Npm(NpmRelease),
}

impl fmt::Display for BinarySource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Directory { variable } => write!(f, "{variable}"),
            Self::Npm(release) => write!(f, "npm {}", release.spec()),
        }
    }
}

/// Server binaries that the server user can run.
#[derive(Clone, Debug)]
pub struct Binaries {
    /// Directory with `initdb`, `pg_ctl` and `postgres`.
    pub bin_dir: PathBuf,
    /// Where they came from.
    pub source: BinarySource,
    /// The first line of `postgres --version`, e.g. `postgres (PostgreSQL) 17.10`.
    pub version_string: String,
}

impl Binaries {
    /// Finds (and when needed downloads, unpacks or copies) the binaries.
    pub fn provide(layout: &Layout, major: PgMajor) -> Result<Self> {
        let specific = format!("STATEK_PG{major}_BIN");
        for variable in [specific.as_str(), "STATEK_PG_BIN"] {
            if let Some(dir) = env::var_os(variable).filter(|value| !value.is_empty()) {
                return Self::from_directory(layout, major, variable, PathBuf::from(dir));
            }
        }
        let release = NpmRelease::for_major(major);
        let mut native = distribution::ensure_unpacked(&layout.store, major)?;
        if layout.uses_fallback() {
            native = copy_to_runtime(layout, major, &release, &native)?;
        }
        let bin_dir = native.join("bin");
        let version_string = checked_version(layout, major, &bin_dir)?;
        Ok(Self {
            bin_dir,
            source: BinarySource::Npm(release),
            version_string,
        })
    }

    fn from_directory(
        layout: &Layout,
        major: PgMajor,
        variable: &str,
        dir: PathBuf,
    ) -> Result<Self> {
        for binary in ["initdb", "pg_ctl", "postgres"] {
            if !dir.join(binary).is_file() {
                bail!("{variable}={} has no {binary}", dir.display());
            }
        }
        if let Some(user) = &layout.server_user {
            if !user.can_traverse(&dir)? {
                bail!(
                    "{variable}={} cannot be reached by user {}, who runs the server because \
                     xtask runs as root; move the binaries somewhere readable (e.g. under /opt)",
                    dir.display(),
                    user.name
                );
            }
        }
        let version_string = checked_version(layout, major, &dir).with_context(|| {
            format!(
                "{variable}={} (name the directory of each version with STATEK_PG16_BIN / \
                 STATEK_PG17_BIN, or run one version with --pg)",
                dir.display()
            )
        })?;
        Ok(Self {
            bin_dir: dir,
            source: BinarySource::Directory {
                variable: variable.to_owned(),
            },
            version_string,
        })
    }
}

/// Runs `postgres --version` as the server user, and checks the major.
fn checked_version(layout: &Layout, major: PgMajor, bin_dir: &Path) -> Result<String> {
    let mut postgres = Command::new(bin_dir.join("postgres"));
    postgres.arg("--version").current_dir("/");
    if let Some(user) = &layout.server_user {
        user.apply(&mut postgres);
    }
    let output = command::run_captured(&mut postgres)?;
    let version_string = String::from_utf8_lossy(&output.stdout)
        .lines()
        .next()
        .unwrap_or_default()
        .trim()
        .to_owned();
    match parse_major(&version_string) {
        Some(found) if found == major.number() => Ok(version_string),
        _ => bail!("expected PostgreSQL {major}, but `postgres --version` says {version_string:?}"),
    }
}

/// The major version in `postgres (PostgreSQL) 17.10` (or `16.4 (Debian ...)`).
pub fn parse_major(version_string: &str) -> Option<u16> {
    let rest = version_string.split("(PostgreSQL)").nth(1)?.trim_start();
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

/// Copies an unpacked `native` directory into the runtime root (fallback),
/// atomically and once per release.
fn copy_to_runtime(
    layout: &Layout,
    major: PgMajor,
    release: &NpmRelease,
    native: &Path,
) -> Result<PathBuf> {
    let parent = layout.runtime_dir(major);
    distribution::create_dir_all_0755(&parent)?;
    let copy = parent.join(release.version);
    let marker = copy.join(".statek-verified");
    if fs::read_to_string(&marker).is_ok_and(|text| text.trim() == release.sha256) {
        return Ok(copy.join("native"));
    }
    if copy.exists() {
        fs::remove_dir_all(&copy).with_context(|| format!("removing {}", copy.display()))?;
    }
    let temp = parent.join(format!(".copy-{}-{}", release.version, std::process::id()));
    if temp.exists() {
        fs::remove_dir_all(&temp).with_context(|| format!("removing {}", temp.display()))?;
    }
    let result = copy_tree(native, &temp.join("native"))
        .and_then(|()| {
            fs::set_permissions(&temp, std::os::unix::fs::PermissionsExt::from_mode(0o755))
                .context("setting mode")
        })
        .and_then(|()| {
            fs::write(
                temp.join(".statek-verified"),
                format!("{}\n", release.sha256),
            )
            .context("writing the marker")
        });
    if let Err(error) = result {
        let _ = fs::remove_dir_all(&temp);
        return Err(error.context(format!("copying binaries to {}", temp.display())));
    }
    if fs::rename(&temp, &copy).is_err() {
        let _ = fs::remove_dir_all(&temp);
        if !marker.exists() {
            bail!("could not move {} to {}", temp.display(), copy.display());
        }
    }
    eprintln!(
        "xtask: copied PostgreSQL {major} binaries to {}",
        copy.display()
    );
    Ok(copy.join("native"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_major_version() {
        let check = |text: &str, expected: Option<u16>| assert_eq!(parse_major(text), expected);
        check("postgres (PostgreSQL) 17.10", Some(17));
        check("postgres (PostgreSQL) 16.14", Some(16));
        check(
            "postgres (PostgreSQL) 16.4 (Debian 16.4-1.pgdg120+1)",
            Some(16),
        );
        check("postgres (PostgreSQL) 18beta1", Some(18));
        check("something else", None);
    }
}
