//! deploy-check's rule for CloudNativePG `Cluster` manifests under
//! `deploy/`: statek's reservations survive a failover only when every
//! commit waits for a standby, so such a manifest must keep synchronous
//! replication that does not fall back to asynchronous commits.

use serde_json::Value;

/// The problems of one document (none when it is not a CloudNativePG
/// `Cluster`).
pub fn check(at: &str, document: &Value) -> Vec<String> {
    let is_cluster = document.get("kind").and_then(Value::as_str) == Some("Cluster")
        && document
            .get("apiVersion")
            .and_then(Value::as_str)
            .is_some_and(|v| v.starts_with("postgresql.cnpg.io/"));
    if !is_cluster {
        return Vec::new();
    }
    let mut problems = Vec::new();
    let name = document
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("?");
    let at = format!("{at}: Cluster {name}");
    let instances = document
        .pointer("/spec/instances")
        .and_then(Value::as_i64)
        .unwrap_or(1);
    if instances < 2 {
        problems.push(format!(
            "{at}: spec.instances is {instances}; a failover needs at least one standby"
        ));
    }
    let Some(synchronous) = document.pointer("/spec/postgresql/synchronous") else {
        problems.push(format!(
            "{at}: no spec.postgresql.synchronous: standbys would be asynchronous and a \
             failover could lose acknowledged reservations"
        ));
        return problems;
    };
    let method = synchronous.get("method").and_then(Value::as_str);
    if !matches!(method, Some("any" | "first")) {
        problems.push(format!(
            "{at}: spec.postgresql.synchronous.method must be `any` or `first`, not {method:?}"
        ));
    }
    let number = synchronous
        .get("number")
        .and_then(Value::as_i64)
        .unwrap_or(0);
    if number < 1 || number >= instances {
        problems.push(format!(
            "{at}: spec.postgresql.synchronous.number is {number}; it must be 1..={}",
            instances - 1
        ));
    }
    match synchronous.get("dataDurability").and_then(Value::as_str) {
        None | Some("required") => {}
        Some(other) => problems.push(format!(
            "{at}: spec.postgresql.synchronous.dataDurability is `{other}`: commits would \
             become asynchronous without a standby; statek needs `required`"
        )),
    }
    for (setting, safe) in [
        (
            "synchronous_commit",
            &["on", "remote_apply", "remote_write"][..],
        ),
        ("fsync", &["on"][..]),
        ("full_page_writes", &["on"][..]),
    ] {
        if let Some(value) = document
            .pointer(&format!("/spec/postgresql/parameters/{setting}"))
            .and_then(Value::as_str)
        {
            if !safe.contains(&value) {
                problems.push(format!(
                    "{at}: parameter {setting} = {value} is not durable"
                ));
            }
        }
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cluster(spec: &str) -> Value {
        serde_norway::from_str(&format!(
            "apiVersion: postgresql.cnpg.io/v1\nkind: Cluster\nmetadata: {{ name: db }}\nspec:\n{spec}"
        ))
        .unwrap()
    }

    #[test]
    fn synchronous_clusters_pass_and_others_are_named() {
        let ok = "  instances: 3\n  postgresql:\n    synchronous: { method: any, number: 1 }\n";
        assert_eq!(check("f.yaml", &cluster(ok)), Vec::<String>::new());
        assert_eq!(
            check("f.yaml", &cluster("  instances: 3\n")),
            [
                "f.yaml: Cluster db: no spec.postgresql.synchronous: standbys would be \
              asynchronous and a failover could lose acknowledged reservations"
            ]
        );
        let preferred = "  instances: 2\n  postgresql:\n    synchronous: { method: first, number: 2, dataDurability: preferred }\n    parameters: { synchronous_commit: local }\n";
        assert_eq!(
            check("f.yaml", &cluster(preferred)),
            [
                "f.yaml: Cluster db: spec.postgresql.synchronous.number is 2; it must be 1..=1",
                "f.yaml: Cluster db: spec.postgresql.synchronous.dataDurability is `preferred`: \
                 commits would become asynchronous without a standby; statek needs `required`",
                "f.yaml: Cluster db: parameter synchronous_commit = local is not durable",
            ]
        );
        let single = "  instances: 1\n  postgresql:\n    synchronous: { method: any, number: 1 }\n";
        assert_eq!(check("f.yaml", &cluster(single)).len(), 2);
        let other: Value = serde_norway::from_str("kind: Cluster\napiVersion: v1\n").unwrap();
        assert!(check("f.yaml", &other).is_empty());
    }
}
