//! Where the workspace and its cargo target directory are, and how to call cargo.

use std::env;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The workspace root, resolved once per process: the statek workspace
/// that holds the current directory (see [`find_root`]), else the one this
/// binary was compiled in (found from this crate's `CARGO_MANIFEST_DIR`).
///
/// The current directory wins so that a copy of the checkout (whose
/// `target/` may hold an xtask binary built in the original) works on its
/// own files and its own `target/`, never on the original's.
pub fn root() -> PathBuf {
    static ROOT: OnceLock<PathBuf> = OnceLock::new();
    ROOT.get_or_init(|| {
        env::current_dir()
            .ok()
            .and_then(|cwd| find_root(&cwd))
            .unwrap_or_else(compiled_root)
    })
    .clone()
}

/// The workspace this crate was compiled in (`crates/devpg` lies two
/// levels below its root).
fn compiled_root() -> PathBuf {
    let manifest_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    find_root(manifest_dir).unwrap_or_else(|| manifest_dir.to_path_buf())
}

/// The nearest directory at or above `start` that is a statek workspace
/// root: its `Cargo.toml` has a `[workspace]` table and it holds
/// `xtask/Cargo.toml`. A `[workspace]` of some other project (e.g. a
/// checkout nested in a larger workspace) is passed over.
pub fn find_root(start: &Path) -> Option<PathBuf> {
    start.ancestors().find_map(|dir| {
        let manifest = std::fs::read_to_string(dir.join("Cargo.toml")).ok()?;
        let is_workspace = manifest.lines().any(|line| line.trim() == "[workspace]");
        (is_workspace && dir.join("xtask").join("Cargo.toml").is_file()).then(|| dir.to_path_buf())
    })
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
///
/// The variables `cargo run` sets for the package it runs
/// ([`is_package_variable`]) are removed: a build script that declares
/// `rerun-if-env-changed` on one of them (ring's does, on
/// `CARGO_MANIFEST_DIR` and `CARGO_PKG_NAME`) would otherwise see them
/// change between this nested build and a plain `cargo` command, and
/// rebuild itself and everything above it each time.
pub fn cargo() -> Command {
    let program = env::var_os("CARGO").unwrap_or_else(|| OsString::from("cargo"));
    let mut command = Command::new(program);
    command.current_dir(root());
    for (name, _) in env::vars_os() {
        if name.to_str().is_some_and(is_package_variable) {
            command.env_remove(name);
        }
    }
    if env::var_os("CARGO_TARGET_DIR").is_some_and(|value| !value.is_empty()) {
        command.env("CARGO_TARGET_DIR", target_dir());
    }
    command
}

/// Whether `name` is one of the variables cargo sets for the package whose
/// binary it runs or tests (`CARGO_MANIFEST_DIR`, `CARGO_PKG_NAME`, ...),
/// which describe that package, not the build a nested cargo starts.
pub fn is_package_variable(name: &str) -> bool {
    name.starts_with("CARGO_PKG_")
        || name.starts_with("CARGO_MANIFEST_")
        || matches!(
            name,
            "CARGO_CRATE_NAME" | "CARGO_BIN_NAME" | "CARGO_PRIMARY_PACKAGE" | "OUT_DIR"
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_nested_cargo_does_not_inherit_the_running_packages_variables() {
        // `cargo test` sets these for this test binary, as `cargo run`
        // does for xtask.
        assert!(env::var_os("CARGO_MANIFEST_DIR").is_some());
        assert!(env::var_os("CARGO_PKG_NAME").is_some());
        let command = cargo();
        let removed: Vec<String> = command
            .get_envs()
            .filter(|(_, value)| value.is_none())
            .map(|(name, _)| name.to_string_lossy().into_owned())
            .collect();
        assert!(
            removed.contains(&"CARGO_MANIFEST_DIR".to_owned()),
            "{removed:?}"
        );
        assert!(
            removed.contains(&"CARGO_PKG_NAME".to_owned()),
            "{removed:?}"
        );
        assert!(
            removed.iter().all(|name| is_package_variable(name)),
            "{removed:?}"
        );
        assert!(!is_package_variable("CARGO"));
        assert!(!is_package_variable("CARGO_TARGET_DIR"));
        assert!(!is_package_variable("CARGO_HOME"));
    }

    /// A throw-away directory under the system temp dir, removed on drop.
    struct TempTree(PathBuf);

    impl TempTree {
        fn new(name: &str) -> Self {
            let dir = env::temp_dir().join(format!("statek-xtask-{name}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
            Self(dir)
        }

        fn write(&self, relative: &str, text: &str) -> PathBuf {
            let path = self.0.join(relative);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, text).unwrap();
            path
        }
    }

    impl Drop for TempTree {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn a_copy_of_the_checkout_is_its_own_root() {
        let tree = TempTree::new("copy");
        tree.write("copy/Cargo.toml", "[workspace]\nmembers = [\"xtask\"]\n");
        tree.write("copy/xtask/Cargo.toml", "[package]\nname = \"xtask\"\n");
        let nested = tree.0.join("copy/crates/statek-cli/src");
        std::fs::create_dir_all(&nested).unwrap();
        tree.write(
            "copy/crates/statek-cli/Cargo.toml",
            "[package]\nname = \"statek-cli\"\n",
        );
        let copy = tree.0.join("copy");
        assert_eq!(find_root(&copy), Some(copy.clone()));
        assert_eq!(find_root(&nested), Some(copy.clone()));
        assert_eq!(find_root(&copy.join("xtask")), Some(copy));
    }

    #[test]
    fn another_projects_workspace_is_passed_over() {
        let tree = TempTree::new("other");
        tree.write("Cargo.toml", "[workspace]\nmembers = [\"a\"]\n");
        tree.write("a/Cargo.toml", "[package]\nname = \"a\"\n");
        assert_eq!(find_root(&tree.0.join("a")), None);
        // A statek checkout nested inside it is found.
        tree.write("a/statek/Cargo.toml", "[workspace]\n");
        tree.write("a/statek/xtask/Cargo.toml", "[package]\n");
        assert_eq!(
            find_root(&tree.0.join("a/statek/xtask")),
            Some(tree.0.join("a/statek"))
        );
    }

    #[test]
    fn this_checkout_is_found_from_its_manifest_dir() {
        assert_eq!(
            find_root(Path::new(env!("CARGO_MANIFEST_DIR"))),
            Some(compiled_root())
        );
    }
}
