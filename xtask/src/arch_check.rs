//! `cargo xtask arch-check`: the allowed arrows between workspace crates
//! (ARCHITECTURE.md, "Allowed arrows"), checked against `cargo metadata`.
//!
//! - statek-core (the seam's values) -> statek-policy
//! - statek-store-pg -> statek-policy, statek-core
//! - statek-scheduler -> statek-policy, statek-core, statek-store-pg
//! - statek-testing (test doubles and conformance suites) -> policy, core,
//!   scheduler; store and scheduler use it only as a dev-dependency
//! - statek-example-handlers (a user's crate of handlers) -> policy, core;
//!   and to testing and scheduler as dev-dependencies
//! - statek-cli -> all four, and statek-testing (its `demo` feature only:
//!   `statek demo --cost-skew` runs on the in-memory executor)
//! - statek-examples (users' examples) -> policy, core, store, scheduler
//! - devpg (PostgreSQL for development) -> no workspace crate
//! - statek-bench (the dev tools that link the product) -> policy, core,
//!   store, scheduler, cli, devpg
//! - xtask -> devpg; and to policy, store, scheduler and cli only as
//!   dev-dependencies (its tidy tests), so building xtask compiles no
//!   product crate
//! - nothing depends on xtask
//! - statek-policy depends on no workspace crate, and its normal dependency
//!   closure holds no async runtime or database crate;
//! - statek-core's normal dependency closure holds no database crate (it
//!   may reach tokio, through tokio-util's cancellation token), so a crate
//!   of run handlers that depends on it compiles no PostgreSQL client;
//! - with the features each selects (`cargo tree`, not the workspace's
//!   unified features), statek-testing's normal dependencies and
//!   statek-example-handlers' normal and dev dependencies hold no database
//!   crate: a crate of handlers tested with statek-testing compiles no
//!   PostgreSQL client.
//!
//! Every kind of dependency (normal, dev, build) counts as an arrow between
//! workspace crates. A workspace member without a rule here is an error, so a
//! new crate needs a deliberate decision.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use anyhow::{bail, Context, Result};
use serde::Deserialize;

use crate::{command, workspace};

/// The crate that must stay pure.
const PURE_CRATE: &str = "statek-policy";

/// The crate whose normal dependency closure must hold no database crate.
const DATABASE_FREE_CRATE: &str = "statek-core";

/// Allowed workspace arrows: crate -> the workspace crates it may depend on.
const ARROWS: &[(&str, &[&str])] = &[
    ("statek-policy", &[]),
    ("statek-core", &["statek-policy"]),
    ("statek-store-pg", &["statek-policy", "statek-core"]),
    (
        "statek-scheduler",
        &["statek-policy", "statek-core", "statek-store-pg"],
    ),
    (
        "statek-testing",
        &["statek-policy", "statek-core", "statek-scheduler"],
    ),
    ("statek-example-handlers", &["statek-policy", "statek-core"]),
    (
        "statek-cli",
        &[
            "statek-policy",
            "statek-core",
            "statek-store-pg",
            "statek-scheduler",
            // Only with its feature `demo`: `statek demo --cost-skew` runs
            // on the in-memory executor, no database needed.
            "statek-testing",
        ],
    ),
    (
        "statek-examples",
        &[
            "statek-policy",
            "statek-core",
            "statek-store-pg",
            "statek-scheduler",
        ],
    ),
    ("devpg", &[]),
    (
        "statek-bench",
        &[
            "statek-policy",
            "statek-core",
            "statek-store-pg",
            "statek-scheduler",
            "statek-cli",
            "devpg",
        ],
    ),
    ("xtask", &["devpg"]),
];

/// Arrows allowed only as dev-dependencies: crate -> the workspace crates
/// its tests may use.
const DEV_ARROWS: &[(&str, &[&str])] = &[
    ("statek-store-pg", &["statek-testing"]),
    (
        "statek-example-handlers",
        &["statek-testing", "statek-scheduler"],
    ),
    ("statek-scheduler", &["statek-testing"]),
    (
        "xtask",
        &[
            "statek-policy",
            "statek-core",
            "statek-store-pg",
            "statek-scheduler",
            "statek-cli",
        ],
    ),
];

/// Whether a crate name is an async runtime or database crate, which the
/// pure crate must not reach through normal dependencies.
fn is_runtime_or_database(name: &str) -> bool {
    matches!(name, "tokio" | "async-std") || name.starts_with("tokio-") || is_database(name)
}

/// Whether a crate name is a database crate (a PostgreSQL client, pool,
/// migration runner or SQL toolkit).
fn is_database(name: &str) -> bool {
    name == "postgres"
        || name == "tokio-postgres"
        || [
            "postgres-",
            "tokio-postgres-",
            "deadpool",
            "refinery",
            "sqlx",
        ]
        .iter()
        .any(|prefix| name.starts_with(prefix))
}

/// The parts of `cargo metadata --format-version 1` that the check reads.
#[derive(Debug, Deserialize)]
pub struct Metadata {
    packages: Vec<Package>,
    workspace_members: Vec<String>,
    resolve: Option<Resolve>,
}

#[derive(Debug, Deserialize)]
struct Package {
    id: String,
    name: String,
}

#[derive(Debug, Deserialize)]
struct Resolve {
    nodes: Vec<Node>,
}

#[derive(Debug, Deserialize)]
struct Node {
    id: String,
    #[serde(default)]
    deps: Vec<NodeDep>,
}

#[derive(Debug, Deserialize)]
struct NodeDep {
    pkg: String,
    #[serde(default)]
    dep_kinds: Vec<DepKind>,
}

#[derive(Debug, Deserialize)]
struct DepKind {
    kind: Option<String>,
}

impl NodeDep {
    fn is_normal(&self) -> bool {
        self.dep_kinds.iter().any(|kind| kind.kind.is_none())
    }

    fn is_dev_only(&self) -> bool {
        self.dep_kinds
            .iter()
            .all(|kind| kind.kind.as_deref() == Some("dev"))
    }

    fn kinds(&self) -> String {
        let kinds: BTreeSet<&str> = self
            .dep_kinds
            .iter()
            .map(|kind| kind.kind.as_deref().unwrap_or("normal"))
            .collect();
        kinds.into_iter().collect::<Vec<_>>().join("+")
    }
}

/// Crates whose dependency tree, resolved with the features that crate
/// selects, must hold no database crate, and the `cargo tree --edges` kinds
/// that count.
const DATABASE_FREE_TREES: &[(&str, &str)] = &[
    ("statek-testing", "normal"),
    ("statek-example-handlers", "normal,dev"),
];

/// Runs `cargo metadata` and `cargo tree` and checks them; fails with every
/// violation.
pub fn run() -> Result<()> {
    let mut cargo = workspace::cargo();
    cargo.args(["metadata", "--format-version", "1", "--all-features"]);
    let output = command::run_captured(&mut cargo)?;
    let metadata: Metadata =
        serde_json::from_slice(&output.stdout).context("parsing `cargo metadata` output")?;
    let mut violations = check(&metadata);
    for (root, edges) in DATABASE_FREE_TREES {
        let mut cargo = workspace::cargo();
        cargo.args([
            "tree", "-p", root, "-e", edges, "--prefix", "none", "--format", "{p}",
        ]);
        let output = command::run_captured(&mut cargo)?;
        let tree = String::from_utf8_lossy(&output.stdout);
        violations.extend(database_crates_in_tree(root, edges, &tree));
    }
    if violations.is_empty() {
        println!("arch-check: the arrows between workspace crates follow ARCHITECTURE.md");
        Ok(())
    } else {
        bail!(
            "arch-check found {} violation(s):\n  {}",
            violations.len(),
            violations.join("\n  ")
        )
    }
}

/// Every violation of the rules, one message each; empty when all is well.
pub fn check(metadata: &Metadata) -> Vec<String> {
    let names: BTreeMap<&str, &str> = metadata
        .packages
        .iter()
        .map(|package| (package.id.as_str(), package.name.as_str()))
        .collect();
    let name_of = |id: &str| names.get(id).copied().unwrap_or(id).to_owned();
    let members: BTreeSet<&str> = metadata
        .workspace_members
        .iter()
        .map(String::as_str)
        .collect();
    let Some(resolve) = &metadata.resolve else {
        return vec!["cargo metadata has no dependency graph (`resolve`)".to_owned()];
    };
    let nodes: BTreeMap<&str, &Node> = resolve
        .nodes
        .iter()
        .map(|node| (node.id.as_str(), node))
        .collect();

    let mut violations = Vec::new();
    for member in &members {
        let from = name_of(member);
        let Some(allowed) = ARROWS
            .iter()
            .find(|(name, _)| *name == from)
            .map(|(_, to)| *to)
        else {
            violations.push(format!(
                "workspace member {from} has no arrow rule in xtask/src/arch_check.rs; \
                 add one (ARCHITECTURE.md, Allowed arrows)"
            ));
            continue;
        };
        let Some(node) = nodes.get(member) else {
            continue;
        };
        for dep in &node.deps {
            if !members.contains(dep.pkg.as_str()) {
                continue;
            }
            let to = name_of(&dep.pkg);
            if to == from {
                // A crate's dev-dependency on itself (to enable a test
                // feature such as `test-support`) is not an arrow.
                continue;
            }
            if to == "xtask" {
                violations.push(format!(
                    "forbidden arrow: {from} -> xtask ({} dependency); nothing may depend on xtask",
                    dep.kinds()
                ));
            } else if !allowed.contains(&to.as_str()) {
                let dev_allowed = DEV_ARROWS
                    .iter()
                    .find(|(name, _)| *name == from)
                    .is_some_and(|(_, to_crates)| to_crates.contains(&to.as_str()));
                if dev_allowed && dep.is_dev_only() {
                    continue;
                }
                let allowed = if allowed.is_empty() {
                    "no workspace crate".to_owned()
                } else {
                    allowed.join(", ")
                };
                violations.push(format!(
                    "forbidden arrow: {from} -> {to} ({} dependency); {from} may depend on {allowed}",
                    dep.kinds()
                ));
            }
        }
    }

    if let Some(pure) = members.iter().find(|id| name_of(id) == PURE_CRATE) {
        violations.extend(
            forbidden_in_closure(pure, &nodes, &name_of, is_runtime_or_database)
                .into_iter()
                .map(|path| {
                    format!(
                        "{PURE_CRATE} must not depend on an async runtime or database crate, \
                         but reaches {} through normal dependencies: {}",
                        path.last().map_or("", String::as_str),
                        path.join(" -> ")
                    )
                }),
        );
    }
    if let Some(core) = members.iter().find(|id| name_of(id) == DATABASE_FREE_CRATE) {
        violations.extend(
            forbidden_in_closure(core, &nodes, &name_of, is_database)
                .into_iter()
                .map(|path| {
                    format!(
                        "{DATABASE_FREE_CRATE} must not depend on a database crate, but reaches \
                         {} through normal dependencies: {}",
                        path.last().map_or("", String::as_str),
                        path.join(" -> ")
                    )
                }),
        );
    }
    violations
}

/// The database crates `cargo tree -p root -e edges --prefix none
/// --format {p}` lists (one package per line, `name vX.Y.Z …`), one
/// message each.
fn database_crates_in_tree(root: &str, edges: &str, tree: &str) -> Vec<String> {
    let found: BTreeSet<&str> = tree
        .lines()
        .filter_map(|line| line.split_whitespace().next())
        .filter(|name| is_database(name))
        .collect();
    found
        .into_iter()
        .map(|name| {
            format!(
                "{root} must compile no database crate, but `cargo tree -p {root} -e {edges}` \
                 lists {name}"
            )
        })
        .collect()
}

/// Paths (crate names) from `root` to each crate in its normal dependency
/// closure whose name is `forbidden`, shortest first.
fn forbidden_in_closure(
    root: &str,
    nodes: &BTreeMap<&str, &Node>,
    name_of: &dyn Fn(&str) -> String,
    forbidden: fn(&str) -> bool,
) -> Vec<Vec<String>> {
    let mut parent: BTreeMap<&str, &str> = BTreeMap::new();
    let mut seen = BTreeSet::from([root]);
    let mut queue = VecDeque::from([root]);
    let mut found = Vec::new();
    while let Some(id) = queue.pop_front() {
        if id != root && forbidden(&name_of(id)) {
            let mut path = vec![name_of(id)];
            let mut current = id;
            while let Some(previous) = parent.get(current) {
                path.push(name_of(previous));
                current = previous;
            }
            path.reverse();
            found.push(path);
            continue;
        }
        let Some(node) = nodes.get(id) else {
            continue;
        };
        for dep in node.deps.iter().filter(|dep| dep.is_normal()) {
            if seen.insert(dep.pkg.as_str()) {
                parent.insert(dep.pkg.as_str(), id);
                queue.push_back(dep.pkg.as_str());
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tree listing names each database crate once; a clean one none.
    #[test]
    fn database_crates_in_a_tree_listing_are_named() {
        let tree = "statek-example-handlers v0.1.0 (/ws/crates/statek-example-handlers)\n\
                    statek-core v0.1.0 (/ws/crates/statek-core)\n\
                    tokio-postgres v0.7.13\n\
                    tokio-postgres v0.7.13\n\
                    deadpool-postgres v0.14.1\n\
                    tokio v1.48.0\n";
        assert_eq!(
            database_crates_in_tree("statek-example-handlers", "normal,dev", tree),
            vec![
                "statek-example-handlers must compile no database crate, but `cargo tree -p \
                 statek-example-handlers -e normal,dev` lists deadpool-postgres"
                    .to_owned(),
                "statek-example-handlers must compile no database crate, but `cargo tree -p \
                 statek-example-handlers -e normal,dev` lists tokio-postgres"
                    .to_owned(),
            ]
        );
        let clean = "statek-testing v0.1.0 (/ws)\nstatek-scheduler v0.1.0 (/ws)\ntokio v1.48.0\n";
        assert!(database_crates_in_tree("statek-testing", "normal", clean).is_empty());
    }

    /// Synthetic metadata: `members` are workspace crates; `edges` are
    /// `(from, to, kind)` with kind `None` for a normal dependency.
    fn metadata(members: &[&str], edges: &[(&str, &str, Option<&str>)]) -> Metadata {
        let mut names: BTreeSet<&str> = members.iter().copied().collect();
        for (from, to, _) in edges {
            names.insert(from);
            names.insert(to);
        }
        let id = |name: &str| format!("path+file:///ws/{name}#0.1.0");
        let packages: Vec<_> = names
            .iter()
            .map(|name| serde_json::json!({ "id": id(name), "name": name }))
            .collect();
        let nodes: Vec<_> = names
            .iter()
            .map(|name| {
                let deps: Vec<_> = edges
                    .iter()
                    .filter(|(from, _, _)| from == name)
                    .map(|(_, to, kind)| {
                        serde_json::json!({
                            "name": to.replace('-', "_"),
                            "pkg": id(to),
                            "dep_kinds": [{ "kind": kind, "target": null }],
                        })
                    })
                    .collect();
                serde_json::json!({ "id": id(name), "deps": deps, "features": [] })
            })
            .collect();
        let members: Vec<_> = members.iter().map(|name| id(name)).collect();
        serde_json::from_value(serde_json::json!({
            "packages": packages,
            "workspace_members": members,
            "resolve": { "nodes": nodes, "root": null },
            "version": 1,
        }))
        .unwrap()
    }

    const MEMBERS: &[&str] = &[
        "statek-policy",
        "statek-core",
        "statek-store-pg",
        "statek-scheduler",
        "statek-cli",
        "devpg",
        "xtask",
    ];

    fn check_edges(edges: &[(&str, &str, Option<&str>)]) -> Vec<String> {
        check(&metadata(MEMBERS, edges))
    }

    #[test]
    fn the_designed_graph_passes() {
        let violations = check_edges(&[
            ("statek-core", "statek-policy", None),
            ("statek-core", "tokio-util", None),
            ("tokio-util", "tokio", None),
            ("statek-store-pg", "statek-policy", None),
            ("statek-store-pg", "statek-core", None),
            ("statek-store-pg", "statek-store-pg", Some("dev")),
            ("statek-store-pg", "tokio-postgres", None),
            ("tokio-postgres", "tokio", None),
            ("statek-scheduler", "statek-policy", None),
            ("statek-scheduler", "statek-core", None),
            ("statek-scheduler", "statek-store-pg", None),
            ("statek-policy", "sha2", None),
            ("statek-policy", "proptest", Some("dev")),
            ("proptest", "tokio", None),
            ("xtask", "serde_json", None),
        ]);
        assert_eq!(violations, Vec::<String>::new());
    }

    #[test]
    fn a_backwards_arrow_is_named() {
        assert_eq!(
            check_edges(&[("statek-policy", "statek-store-pg", None)]),
            [
                "forbidden arrow: statek-policy -> statek-store-pg (normal dependency); \
              statek-policy may depend on no workspace crate"
            ]
        );
        assert_eq!(
            check_edges(&[("statek-store-pg", "statek-scheduler", Some("dev"))]),
            [
                "forbidden arrow: statek-store-pg -> statek-scheduler (dev dependency); \
              statek-store-pg may depend on statek-policy, statek-core"
            ]
        );
    }

    #[test]
    fn xtask_links_the_product_only_in_its_tests() {
        assert_eq!(
            check_edges(&[
                ("xtask", "devpg", None),
                ("xtask", "statek-cli", Some("dev")),
                ("xtask", "statek-policy", Some("dev")),
            ]),
            Vec::<String>::new()
        );
        assert_eq!(
            check_edges(&[("xtask", "statek-cli", None)]),
            ["forbidden arrow: xtask -> statek-cli (normal dependency); xtask may depend on devpg"]
        );
        assert_eq!(
            check_edges(&[("devpg", "statek-cli", None)]),
            ["forbidden arrow: devpg -> statek-cli (normal dependency); \
              devpg may depend on no workspace crate"]
        );
    }

    #[test]
    fn nothing_depends_on_xtask() {
        assert_eq!(
            check_edges(&[("statek-scheduler", "xtask", Some("dev"))]),
            [
                "forbidden arrow: statek-scheduler -> xtask (dev dependency); \
              nothing may depend on xtask"
            ]
        );
    }

    #[test]
    fn the_pure_crate_reaches_no_runtime_or_database() {
        assert_eq!(
            check_edges(&[("statek-policy", "helper", None), ("helper", "tokio", None)]),
            [
                "statek-policy must not depend on an async runtime or database crate, but \
              reaches tokio through normal dependencies: statek-policy -> helper -> tokio"
            ]
        );
        for forbidden in [
            "tokio-postgres",
            "postgres",
            "postgres-types",
            "deadpool-postgres",
            "refinery-core",
            "async-std",
            "sqlx-core",
        ] {
            let violations = check_edges(&[("statek-policy", forbidden, None)]);
            assert_eq!(violations.len(), 1, "{forbidden}: {violations:?}");
            assert!(violations[0].contains(&format!("statek-policy -> {forbidden}")));
        }
        // Dev and build dependencies do not ship with the crate.
        assert!(check_edges(&[("statek-policy", "tokio", Some("dev"))]).is_empty());
        assert!(check_edges(&[("statek-policy", "tokio", Some("build"))]).is_empty());
    }

    #[test]
    fn the_seam_crate_reaches_no_database() {
        assert_eq!(
            check_edges(&[
                ("statek-core", "statek-store-pg", None),
                ("statek-store-pg", "tokio-postgres", None),
            ]),
            [
                "forbidden arrow: statek-core -> statek-store-pg (normal dependency); \
              statek-core may depend on statek-policy",
                "statek-core must not depend on a database crate, but reaches tokio-postgres \
              through normal dependencies: statek-core -> statek-store-pg -> tokio-postgres"
            ]
        );
        for forbidden in [
            "postgres",
            "postgres-types",
            "deadpool-postgres",
            "refinery",
        ] {
            let violations = check_edges(&[("statek-core", forbidden, None)]);
            assert_eq!(violations.len(), 1, "{forbidden}: {violations:?}");
        }
        // A runtime is allowed; a database only as a dev-dependency.
        assert!(check_edges(&[("statek-core", "tokio", None)]).is_empty());
        assert!(check_edges(&[("statek-core", "tokio-postgres", Some("dev"))]).is_empty());
    }

    #[test]
    fn a_member_without_a_rule_is_reported() {
        let violations = check(&metadata(&["statek-policy", "statek-extra"], &[]));
        assert_eq!(
            violations,
            [
                "workspace member statek-extra has no arrow rule in xtask/src/arch_check.rs; \
              add one (ARCHITECTURE.md, Allowed arrows)"
            ]
        );
    }
}
