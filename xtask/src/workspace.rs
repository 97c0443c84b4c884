//! Where the workspace and its cargo target directory are, and how to call cargo.

use std::env;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The workspace root: the parent of this crate's manifest directory.
pub fn root() -> PathBuf {
    let manifest_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest_dir.parent().unwrap_or(manifest_dir).to_path_buf()
}

/// The cargo target directory: `CARGO_TARGET_DIR` when set (relative to the
/// current directory, as cargo reads it), else `<workspace>/target`.
///
/// Resolved on first use; xtask calls this before it changes directory.
pub fn target_dir() -> PathBuf {
    static TARGET_DIR: OnceLock<PathBuf> = OnceLock::new();
    TARGET_DIR.get_or_init(resolve_target_dir).clone()
}

fn resolve_target_dir() -> PathBuf {
    match env::var_os("CARGO_TARGET_DIR").filter(|value| !value.is_empty()) {
        Some(dir) => {
            let dir = PathBuf::from(dir);
            if dir.is_absolute() {
                dir
            } else {
                env::current_dir().map_or(dir.clone(), |cwd| cwd.join(dir))
            }
        }
        None => root().join("target"),
    }
}

/// A `cargo` command run from the workspace root, using the same cargo that
/// runs xtask when there is one (`CARGO`), else `cargo` from `PATH`.
pub fn cargo() -> Command {
    let program = env::var_os("CARGO").unwrap_or_else(|| OsString::from("cargo"));
    let mut command = Command::new(program);
    command.current_dir(root());
    if env::var_os("CARGO_TARGET_DIR").is_some_and(|value| !value.is_empty()) {
        command.env("CARGO_TARGET_DIR", target_dir());
    }
    command
}
