//! Running the test binaries of chosen packages from a build of the whole
//! workspace, so a second PostgreSQL version's step reuses the first one's
//! build instead of compiling everything again.
//!
//! `cargo test -p a -p b --all-features` unifies dependency features over
//! the packages it selects, which differ from `--workspace`'s: cargo would
//! build a second copy of every dependency and test binary (about as large
//! as the first, measured as a full second build of the stack in CI's log
//! of 2026-12-02, which then ran out of disk). Here cargo builds (or finds
//! fresh) `cargo test --workspace --all-features --no-run` and reports each
//! test executable as JSON (`--message-format=json-render-diagnostics`,
//! whose `compiler-artifact` messages carry `profile.test`, `executable`
//! and `manifest_path`); xtask runs the executables of the chosen packages
//! itself, from the package's directory with `CARGO_MANIFEST_DIR` set, as
//! `cargo test` does, every one even after a failure.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{anyhow, bail, Context as _, Result};

use crate::{command, workspace};

/// One test executable cargo built: the package directory and the binary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TestBinary {
    /// The directory of the package's `Cargo.toml`.
    pub package_dir: PathBuf,
    /// The test harness executable.
    pub executable: PathBuf,
}

/// The test executables of one `compiler-artifact` JSON message, if it is
/// a test build of a package whose directory name is in `packages`.
fn test_binary(message: &serde_json::Value, packages: &[&str]) -> Option<TestBinary> {
    if message.get("reason")?.as_str()? != "compiler-artifact" {
        return None;
    }
    if !message.get("profile")?.get("test")?.as_bool()? {
        return None;
    }
    let executable = PathBuf::from(message.get("executable")?.as_str()?);
    let manifest = Path::new(message.get("manifest_path")?.as_str()?);
    let package_dir = manifest.parent()?.to_path_buf();
    let name = package_dir.file_name()?.to_str()?;
    packages.contains(&name).then_some(TestBinary {
        package_dir,
        executable,
    })
}

/// The test binaries of `packages` (package directory names) in cargo's
/// JSON output, in the order cargo reported them, without repeats.
pub fn parse(json_lines: &str, packages: &[&str]) -> Result<Vec<TestBinary>> {
    let mut binaries: Vec<TestBinary> = Vec::new();
    for line in json_lines.lines().filter(|line| line.starts_with('{')) {
        let message: serde_json::Value = serde_json::from_str(line)
            .with_context(|| format!("cargo printed a line that is not JSON: {line}"))?;
        if let Some(binary) = test_binary(&message, packages) {
            if !binaries.contains(&binary) {
                binaries.push(binary);
            }
        }
    }
    Ok(binaries)
}

/// Builds `cargo test --workspace --all-features --no-run` and returns the
/// test executables of `packages`; fails when one of them has none.
pub fn build(packages: &[&str]) -> Result<Vec<TestBinary>> {
    let mut cargo = workspace::cargo();
    cargo
        .args([
            "test",
            "--workspace",
            "--all-features",
            "--no-run",
            "--message-format=json-render-diagnostics",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    let output = cargo
        .output()
        .map_err(|error| command::spawn_error(&cargo, &error))?;
    if !output.status.success() {
        bail!("`{}` failed ({})", command::display(&cargo), output.status);
    }
    let binaries = parse(&String::from_utf8_lossy(&output.stdout), packages)?;
    for package in packages {
        if !binaries
            .iter()
            .any(|binary| binary.package_dir.file_name() == Some(std::ffi::OsStr::new(package)))
        {
            bail!("cargo reported no test binary of package {package}");
        }
    }
    Ok(binaries)
}

/// Runs every binary with `configure` applied to its command (the test
/// environment), from its package directory; runs them all and fails
/// naming every binary that failed.
pub fn run_all(binaries: &[TestBinary], configure: impl Fn(&mut Command)) -> Result<()> {
    let mut failed = Vec::new();
    for binary in binaries {
        println!("     Running {}", binary.executable.display());
        let mut test = Command::new(&binary.executable);
        test.current_dir(&binary.package_dir)
            .env("CARGO_MANIFEST_DIR", &binary.package_dir);
        configure(&mut test);
        if let Err(error) = command::run_inherited(&mut test) {
            eprintln!("{error:#}");
            failed.push(binary.executable.display().to_string());
        }
    }
    if failed.is_empty() {
        Ok(())
    } else {
        Err(anyhow!(
            "{} of {} test binaries failed: {}",
            failed.len(),
            binaries.len(),
            failed.join(", ")
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn artifact(manifest: &str, test: bool, executable: Option<&str>) -> String {
        serde_json::json!({
            "reason": "compiler-artifact",
            "manifest_path": manifest,
            "profile": {"test": test},
            "executable": executable,
        })
        .to_string()
    }

    #[test]
    fn picks_the_test_executables_of_the_chosen_packages_once_each() {
        let lines = [
            artifact("/w/crates/statek-cli/Cargo.toml", true, Some("/t/cli-1")),
            artifact("/w/crates/statek-cli/Cargo.toml", false, Some("/t/statek")),
            artifact(
                "/w/crates/statek-policy/Cargo.toml",
                true,
                Some("/t/policy-1"),
            ),
            artifact("/w/crates/statek-store-pg/Cargo.toml", true, None),
            r#"{"reason":"build-finished","success":true}"#.to_owned(),
            artifact(
                "/w/crates/statek-store-pg/Cargo.toml",
                true,
                Some("/t/pg-1"),
            ),
            artifact("/w/crates/statek-cli/Cargo.toml", true, Some("/t/cli-1")),
        ]
        .join("\n");
        let binaries = parse(&lines, &["statek-cli", "statek-store-pg"]).unwrap();
        assert_eq!(
            binaries,
            vec![
                TestBinary {
                    package_dir: PathBuf::from("/w/crates/statek-cli"),
                    executable: PathBuf::from("/t/cli-1"),
                },
                TestBinary {
                    package_dir: PathBuf::from("/w/crates/statek-store-pg"),
                    executable: PathBuf::from("/t/pg-1"),
                },
            ]
        );
    }

    #[test]
    fn a_line_that_is_not_json_is_an_error() {
        let error = parse("{not json", &["statek-cli"]).unwrap_err();
        assert!(
            format!("{error:#}").starts_with("cargo printed a line that is not JSON: {not json"),
            "{error:#}"
        );
    }
}
