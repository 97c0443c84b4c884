//! Which operating-system user runs `initdb`, `pg_ctl` and `postgres`.
//!
//! `initdb` and `pg_ctl` refuse to run as root. When xtask runs as root (as CI
//! does), the server tools run as an unprivileged user instead: `nobody`, or
//! the user named by `STATEK_PG_USER`, looked up in the user database.

use std::env;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{anyhow, Context, Result};
use nix::unistd::{Uid, User};

/// The default unprivileged user when running as root.
const DEFAULT_USER: &str = "nobody";

/// An unprivileged user that server tools run as.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerUser {
    /// User name, for messages.
    pub name: String,
    /// Numeric user id.
    pub uid: u32,
    /// Numeric primary group id.
    pub gid: u32,
}

impl ServerUser {
    /// `None` when xtask does not run as root (the tools then run as the
    /// current user); otherwise the unprivileged user to switch to.
    pub fn for_current_process() -> Result<Option<Self>> {
        if !Uid::effective().is_root() {
            return Ok(None);
        }
        let name = env::var("STATEK_PG_USER").unwrap_or_else(|_| DEFAULT_USER.to_owned());
        let user = User::from_name(&name)
            .with_context(|| format!("looking up user {name:?}"))?
            .ok_or_else(|| {
                anyhow!(
                    "xtask runs as root, and initdb/pg_ctl refuse to run as root, but there is no \
                     user {name:?} to run them as; create one, name another with STATEK_PG_USER, \
                     run xtask as a non-root user, or set DATABASE_URL to an existing server"
                )
            })?;
        if user.uid.is_root() {
            return Err(anyhow!("STATEK_PG_USER names {name:?}, which is root"));
        }
        Ok(Some(Self {
            name,
            uid: user.uid.as_raw(),
            gid: user.gid.as_raw(),
        }))
    }

    /// The user that owns `path`, as a server user; `None` when xtask does
    /// not run as root. Used to stop a cluster as the user that runs it.
    pub fn owner_of(path: &Path) -> Result<Option<Self>> {
        if !Uid::effective().is_root() {
            return Ok(None);
        }
        let metadata = fs::metadata(path).with_context(|| format!("reading {}", path.display()))?;
        let name = User::from_uid(Uid::from_raw(metadata.uid()))
            .ok()
            .flatten()
            .map_or_else(|| metadata.uid().to_string(), |user| user.name);
        Ok(Some(Self {
            name,
            uid: metadata.uid(),
            gid: metadata.gid(),
        }))
    }

    /// Makes `command` run as this user. When the parent is root, the
    /// standard library also drops all supplementary groups before switching.
    pub fn apply(&self, command: &mut Command) {
        command.uid(self.uid).gid(self.gid);
        command.env("USER", &self.name).env("LOGNAME", &self.name);
    }

    /// Changes the owner of `path` (not recursive) to this user.
    pub fn chown(&self, path: &Path) -> Result<()> {
        std::os::unix::fs::chown(path, Some(self.uid), Some(self.gid))
            .with_context(|| format!("changing the owner of {} to {}", path.display(), self.name))
    }

    /// Whether this user may search every directory from `/` down to `path`
    /// (inclusive when `path` is a directory), judged by mode bits with the
    /// primary group only (supplementary groups are dropped).
    pub fn can_traverse(&self, path: &Path) -> Result<bool> {
        let path = absolute(path)?;
        let mut current = PathBuf::new();
        for component in path.components() {
            current.push(component);
            let metadata =
                fs::metadata(&current).with_context(|| format!("reading {}", current.display()))?;
            if metadata.is_dir() && !self.may(&metadata, 0o1) {
                return Ok(false);
            }
        }
        Ok(true)
    }

    fn may(&self, metadata: &fs::Metadata, bit: u32) -> bool {
        let mode = metadata.mode();
        let shift = if metadata.uid() == self.uid {
            6
        } else if metadata.gid() == self.gid {
            3
        } else {
            0
        };
        mode & (bit << shift) != 0
    }
}

fn absolute(path: &Path) -> Result<PathBuf> {
    if path.is_absolute() {
        Ok(path.to_path_buf())
    } else {
        Ok(env::current_dir()
            .context("reading the current directory")?
            .join(path))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traversal_follows_mode_bits() {
        let user = ServerUser {
            name: "someone".into(),
            uid: 4_000_000,
            gid: 4_000_000,
        };
        let base = env::temp_dir().join(format!("xtask-traverse-{}", std::process::id()));
        let inner = base.join("closed").join("inner");
        fs::create_dir_all(&inner).unwrap();
        let set = |path: &Path, mode: u32| {
            fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(mode)).unwrap();
        };
        set(&base, 0o755);
        set(&base.join("closed"), 0o755);
        assert!(user.can_traverse(&inner).unwrap());
        set(&base.join("closed"), 0o700);
        assert!(!user.can_traverse(&inner).unwrap());
        set(&base.join("closed"), 0o755);
        fs::remove_dir_all(&base).unwrap();
    }
}
