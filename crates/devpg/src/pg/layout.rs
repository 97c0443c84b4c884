//! Where provisioned PostgreSQL files live.
//!
//! The store, `<target>/statek-pg/`, holds downloads, verified unpacks and
//! one `state.json` per major version. The runtime root holds clusters (data
//! directories and logs). It is the store itself unless the server runs as an
//! unprivileged user (xtask runs as root) who cannot reach the store, e.g.
//! because the checkout is under a mode-700 `/root`: then it is
//! `/tmp/statek-pg-<hash of the workspace path>/`, and the binaries are
//! copied there too.

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use nix::unistd::Uid;
use sha2::{Digest, Sha256};

use super::distribution::{create_dir_all_0755, hex};
use super::major::PgMajor;
use super::server_user::ServerUser;
use crate::workspace;

/// Resolved locations for one xtask invocation.
#[derive(Clone, Debug)]
pub struct Layout {
    /// `<target>/statek-pg`.
    pub store: PathBuf,
    /// Where clusters live: `store`, or the `/tmp` fallback.
    pub runtime: PathBuf,
    /// The user the server tools run as (`None`: the current user).
    pub server_user: Option<ServerUser>,
}

impl Layout {
    /// Resolves the layout for this process; creates the store directory.
    pub fn resolve() -> Result<Self> {
        let store = workspace::target_dir().join("statek-pg");
        create_dir_all_0755(&store)?;
        let server_user = ServerUser::for_current_process()?;
        let runtime = match &server_user {
            Some(user) if !user.can_traverse(&store)? => {
                let fallback = fallback_root(&workspace::root());
                eprintln!(
                    "xtask: user {} cannot reach {} (a parent directory is closed to it); \
                     using {} for PostgreSQL binaries and clusters instead",
                    user.name,
                    store.display(),
                    fallback.display()
                );
                prepare_fallback(&fallback)?;
                fallback
            }
            _ => store.clone(),
        };
        Ok(Self {
            store,
            runtime,
            server_user,
        })
    }

    /// Whether clusters live outside the store.
    pub fn uses_fallback(&self) -> bool {
        self.runtime != self.store
    }

    /// `<store>/<major>`: unpacked releases and `state.json`.
    pub fn store_dir(&self, major: PgMajor) -> PathBuf {
        self.store.join(major.to_string())
    }

    /// `<store>/<major>/state.json`: the state of the `pg start` cluster.
    pub fn state_file(&self, major: PgMajor) -> PathBuf {
        self.store_dir(major).join("state.json")
    }

    /// `<runtime>/<major>`: clusters (and copied binaries in the fallback).
    pub fn runtime_dir(&self, major: PgMajor) -> PathBuf {
        self.runtime.join(major.to_string())
    }

    /// The cluster that `cargo xtask pg start` manages and keeps.
    pub fn persistent_cluster_dir(&self, major: PgMajor) -> PathBuf {
        self.runtime_dir(major).join("cluster")
    }

    /// Parent of the throw-away clusters that tests and the demo start.
    pub fn ephemeral_parent(&self, major: PgMajor) -> PathBuf {
        self.runtime_dir(major).join("ephemeral")
    }
}

/// `/tmp/statek-pg-<first 12 hex digits of SHA-256 of the workspace path>`.
pub fn fallback_root(workspace_root: &Path) -> PathBuf {
    let digest = Sha256::digest(workspace_root.as_os_str().as_encoded_bytes());
    PathBuf::from(format!("/tmp/statek-pg-{}", &hex(&digest)[..12]))
}

/// Creates the fallback root (mode 0755) and refuses one that is a symlink or
/// belongs to another user, since `/tmp` is shared.
fn prepare_fallback(root: &Path) -> Result<()> {
    if let Ok(metadata) = fs::symlink_metadata(root) {
        if !metadata.is_dir() || metadata.uid() != Uid::effective().as_raw() {
            bail!(
                "{} exists but is not a directory owned by this user; remove it",
                root.display()
            );
        }
    }
    create_dir_all_0755(root).with_context(|| format!("preparing {}", root.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fallback_root_is_short_and_stable() {
        let a = fallback_root(Path::new("/root/work/statek"));
        assert_eq!(a, fallback_root(Path::new("/root/work/statek")));
        assert_ne!(a, fallback_root(Path::new("/root/work/other")));
        assert_eq!(a.as_os_str().len(), "/tmp/statek-pg-".len() + 12);
    }
}
