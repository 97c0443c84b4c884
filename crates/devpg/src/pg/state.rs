//! The state of the cluster that `cargo xtask pg start` leaves running, kept
//! in `<target>/statek-pg/<major>/state.json` so that `status` and `stop`
//! work from another invocation.

use std::fs;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

/// Contents of `state.json`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterState {
    /// PostgreSQL major version (16 or 17).
    pub major: u16,
    /// First line of `postgres --version`.
    pub server_version: String,
    /// Where the binaries came from.
    pub source: String,
    /// TCP port on 127.0.0.1.
    pub port: u16,
    /// The cluster directory (holds `data/` and `postgres.log`).
    pub cluster_dir: PathBuf,
    /// Directory with `initdb`, `pg_ctl` and `postgres`.
    pub bin_dir: PathBuf,
    /// The user that runs the server.
    pub server_user: String,
    /// When `pg start` last started it (seconds since the Unix epoch).
    pub started_at_unix: u64,
}

impl ClusterState {
    /// Reads the state file; `None` when there is none.
    pub fn load(path: &Path) -> Result<Option<Self>> {
        match fs::read_to_string(path) {
            Ok(text) => serde_json::from_str(&text)
                .map(Some)
                .with_context(|| format!("parsing {}", path.display())),
            Err(error) if error.kind() == ErrorKind::NotFound => Ok(None),
            Err(error) => Err(error).with_context(|| format!("reading {}", path.display())),
        }
    }

    /// Writes the state file atomically (temporary file, then rename).
    pub fn save(&self, path: &Path) -> Result<()> {
        let temp = path.with_extension(format!("json.tmp-{}", std::process::id()));
        let text = serde_json::to_string_pretty(self)?;
        fs::write(&temp, text + "\n").with_context(|| format!("writing {}", temp.display()))?;
        fs::rename(&temp, path).with_context(|| format!("writing {}", path.display()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_through_a_file() {
        let path = std::env::temp_dir().join(format!("xtask-state-{}.json", std::process::id()));
        assert_eq!(ClusterState::load(&path).unwrap(), None);
        let state = ClusterState {
            major: 17,
            server_version: "postgres (PostgreSQL) 17.10".into(),
            source: "npm".into(),
            port: 5555,
            cluster_dir: "/tmp/c".into(),
            bin_dir: "/tmp/b".into(),
            server_user: "nobody".into(),
            started_at_unix: 1,
        };
        state.save(&path).unwrap();
        assert_eq!(ClusterState::load(&path).unwrap(), Some(state));
        fs::remove_file(&path).unwrap();
    }
}
