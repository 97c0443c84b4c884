//! docs/operations.md's role table against the role profile
//! (statek-store-pg's `src/roles.sql`): every function the profile lets a
//! role execute is named, as `statek.NAME`, in that role's row of the
//! table, so an operator reading what a role "may" do sees every function
//! it can call.

use std::collections::{BTreeMap, BTreeSet};

/// `role -> functions` the profile grants EXECUTE on (`{runtime}` is
/// `runtime`), from its `GRANT EXECUTE ON FUNCTION statek.NAME(...) TO
/// {role}, ...;` statements, comments left out.
fn profile_grants(profile: &str) -> BTreeMap<String, BTreeSet<String>> {
    let sql: String = profile
        .lines()
        .map(|line| line.split("--").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join(" ");
    let mut grants: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for statement in sql.split(';') {
        let statement = statement.split_whitespace().collect::<Vec<_>>().join(" ");
        let Some(rest) = statement.strip_prefix("GRANT EXECUTE ON FUNCTION statek.") else {
            continue;
        };
        let name = rest.split('(').next().unwrap_or(rest).trim().to_owned();
        let Some((_, roles)) = rest.rsplit_once(" TO ") else {
            continue;
        };
        for role in roles.split(',') {
            let role = role.trim().trim_start_matches('{').trim_end_matches('}');
            grants
                .entry(role.to_owned())
                .or_default()
                .insert(name.clone());
        }
    }
    grants
}

/// The `statek.NAME` names (backticked, any arguments dropped) in the row
/// of `role` of the table that starts with `| role | used by |`.
fn table_names(operations: &str, role: &str) -> Result<BTreeSet<String>, String> {
    let table = operations
        .find("| role | used by |")
        .ok_or("docs/operations.md has no role table (\"| role | used by |\")")?;
    let row = operations[table..]
        .lines()
        .take_while(|line| line.starts_with('|'))
        .find(|line| line.starts_with(&format!("| {role} |")))
        .ok_or_else(|| format!("docs/operations.md's role table has no row for {role}"))?;
    Ok(row
        .split('`')
        .skip(1)
        .step_by(2)
        .filter_map(|name| name.strip_prefix("statek."))
        .map(|name| name.split('(').next().unwrap_or(name).to_owned())
        .collect())
}

/// What the table leaves out: `role: statek.NAME` per function granted to
/// a role whose row does not name it.
fn missing(profile: &str, operations: &str) -> Result<Vec<String>, String> {
    let mut missing = Vec::new();
    for (role, functions) in profile_grants(profile) {
        let named = table_names(operations, &role)?;
        missing.extend(
            functions
                .iter()
                .filter(|f| !named.contains(*f))
                .map(|f| format!("{role}: statek.{f}")),
        );
    }
    Ok(missing)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_role_table_names_every_function_the_profile_grants() {
        let root = crate::workspace::root();
        let profile =
            std::fs::read_to_string(root.join("crates/statek-store-pg/src/roles.sql")).unwrap();
        let operations = std::fs::read_to_string(root.join("docs/operations.md")).unwrap();
        let grants = profile_grants(&profile);
        // The profile grants functions to both of its non-owner roles.
        assert_eq!(
            grants.keys().map(String::as_str).collect::<Vec<_>>(),
            ["retention", "runtime"]
        );
        assert_eq!(
            missing(&profile, &operations).unwrap(),
            Vec::<String>::new(),
            "docs/operations.md's role table does not name these functions the role profile \
             grants (name them in the role's row, as `statek.NAME`)"
        );
    }

    #[test]
    fn a_function_missing_from_the_table_is_seen() {
        let profile = "-- a comment; GRANT EXECUTE ON FUNCTION statek.nope() TO {x};\n\
                       GRANT EXECUTE ON FUNCTION\n    statek.reserve(uuid, text)\n    TO {runtime};\n\
                       GRANT EXECUTE ON FUNCTION statek.prune(int) TO {runtime}, {retention};\n\
                       GRANT SELECT ON statek.runs TO {runtime};";
        let operations = "| role | used by | may |\n|---|---|---|\n\
                          | runtime | replicas | `statek.reserve` only |\n\
                          | retention | prune | `statek.prune(int)` |\n";
        assert_eq!(
            profile_grants(profile),
            BTreeMap::from([
                ("retention".to_owned(), BTreeSet::from(["prune".to_owned()])),
                (
                    "runtime".to_owned(),
                    BTreeSet::from(["prune".to_owned(), "reserve".to_owned()])
                ),
            ])
        );
        assert_eq!(
            missing(profile, operations).unwrap(),
            ["runtime: statek.prune"]
        );
        assert!(missing(profile, "no table").is_err());
    }
}
