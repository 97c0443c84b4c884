//! `cargo xtask rule-tests`: the unit tests of the alert rules, run by the
//! real Prometheus rule engine: `promtool test rules
//! deploy/prometheus/alerts.test.yaml` (every alert fires from series that
//! start at 0, as a replica exports them; `cargo xtask deploy-check`
//! checks that every alert has such a case).
//!
//! promtool: `STATEK_PROMTOOL=/path/to/promtool`, else `promtool` on
//! `PATH`. When it is missing and xtask runs as root, xtask installs
//! Debian's package `prometheus` (`apt-get update`, then `apt-get install
//! -y --no-install-recommends prometheus`; on a host run by systemd that
//! package also enables a Prometheus service); otherwise it fails naming
//! the package. A missing promtool is a failure, never a skip.

use std::process::Command;

use anyhow::{Context, Result};

use crate::debian_tool::DebianTool;
use crate::{command, workspace};

/// Environment variable naming a promtool binary.
pub const PROMTOOL_ENV: &str = "STATEK_PROMTOOL";

/// The rule test file, relative to the workspace root.
pub const RULE_TESTS: &str = "deploy/prometheus/alerts.test.yaml";

/// promtool from Debian's package `prometheus`, or `STATEK_PROMTOOL`.
pub const TOOL: DebianTool = DebianTool {
    binary: "promtool",
    package: "prometheus",
    env: PROMTOOL_ENV,
    needed_by: "the unit tests of deploy/prometheus/alerts.yaml need it",
};

/// Finds (or installs) promtool and runs the rule tests; fails on any
/// failing case.
pub fn run() -> Result<()> {
    let promtool = TOOL.find_or_install()?;
    let version = command::run_captured(Command::new(&promtool).arg("--version"))
        .with_context(|| format!("{} --version", promtool.display()))?;
    let version = String::from_utf8_lossy(&version.stdout)
        .lines()
        .next()
        .unwrap_or("promtool (version unknown)")
        .trim()
        .to_owned();
    println!("rule-tests: {version} ({})", promtool.display());
    command::run_inherited(
        Command::new(&promtool)
            .args(["test", "rules", RULE_TESTS])
            .current_dir(workspace::root()),
    )
    .with_context(|| format!("promtool test rules {RULE_TESTS}"))
}
