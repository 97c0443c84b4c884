//! The role profile: least privilege for the three kinds of connection.
//!
//! | role | connects as | may |
//! |---|---|---|
//! | owner | migrations (`PgStore::migrate`), `statek limits set\|clear` | own the `statek` schema and its tables; change tenant limits |
//! | runtime | scheduler replicas and enqueuers | register policies, reserve, use the run queue, read tenant limits |
//! | retention | the pruning job | read and delete reservation rows; delete finished runs and their expired claim history |
//!
//! The runtime role cannot write reservation rows or move a cursor except
//! through the SECURITY DEFINER functions `statek.reserve` and
//! `statek.reserve_batch` (it holds EXECUTE on them and no INSERT on
//! reservations, no UPDATE on shards), delete reservations, change policy
//! columns or delete shards; the retention role cannot reserve, register
//! or change runs, and may delete only finished runs and the claim rows the
//! database lets go (`statek.run_claim_deletable`, migration V9). The
//! runtime role reads tenant limits and locks their rows only through the
//! SECURITY DEFINER `statek.claim_allowance`; it cannot change them.
//! PostgreSQL needs an `UPDATE` grant on at least one column
//! to take a row lock (`FOR UPDATE`): the retention role holds it on
//! `reserved_at` only, and the immutability triggers refuse every actual
//! update of a reservation row, whoever asks.

use crate::statement::Db;
use crate::{PgStore, StoreError, SynchronousCommit};

/// The statements of the profile, with `{owner}`, `{runtime}` and
/// `{retention}` replaced by quoted role names. Idempotent: safe to apply
/// again after every migration.
const PROFILE_SQL: &str = include_str!("roles.sql");

/// The three role names a deployment uses. The roles must exist (create
/// them with `CREATE ROLE ... LOGIN PASSWORD ...` as you manage
/// credentials); [`PgStore::apply_role_profile`] only grants and revokes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoleProfile {
    owner: String,
    runtime: String,
    retention: String,
    runtime_synchronous_commit: Option<SynchronousCommit>,
}

impl RoleProfile {
    /// Three role names, each 1..=63 bytes of `[a-z0-9_]`, starting with a
    /// letter or `_`, all different.
    ///
    /// # Errors
    /// [`StoreError::InvalidArgument`] naming the bad role.
    pub fn new(owner: &str, runtime: &str, retention: &str) -> Result<Self, StoreError> {
        for (what, name) in [
            ("owner", owner),
            ("runtime", runtime),
            ("retention", retention),
        ] {
            check_role_name(what, name)?;
        }
        if owner == runtime || owner == retention || runtime == retention {
            return Err(StoreError::InvalidArgument(
                "the owner, runtime and retention roles must be three different roles".into(),
            ));
        }
        Ok(Self {
            owner: owner.to_owned(),
            runtime: runtime.to_owned(),
            retention: retention.to_owned(),
            runtime_synchronous_commit: None,
        })
    }

    /// Also sets `synchronous_commit` as the runtime role's default
    /// (`ALTER ROLE runtime SET synchronous_commit = level`): the value a
    /// new session of that role starts with, so a server connection a
    /// transaction-mode pooler opens for it commits durably by default
    /// even for a client that does not set it. statek's own writes set it
    /// per transaction anyway (`StoreConfig::synchronous_commit`); this
    /// covers everything else that writes as that role, and the check at
    /// register under transaction pooling reads it. Needs a role that may
    /// alter the runtime role (`CREATEROLE`, or a superuser).
    #[must_use]
    pub fn runtime_synchronous_commit(mut self, level: SynchronousCommit) -> Self {
        self.runtime_synchronous_commit = Some(level);
        self
    }

    /// The owner role (migrations).
    pub fn owner(&self) -> &str {
        &self.owner
    }

    /// The runtime role (register, reserve, run queue).
    pub fn runtime(&self) -> &str {
        &self.runtime
    }

    /// The retention role (prune only).
    pub fn retention(&self) -> &str {
        &self.retention
    }

    /// The SQL that [`PgStore::apply_role_profile`] runs, for review or for
    /// applying by hand.
    pub fn sql(&self) -> String {
        let mut sql = PROFILE_SQL
            .replace("{owner}", &quote(&self.owner))
            .replace("{runtime}", &quote(&self.runtime))
            .replace("{retention}", &quote(&self.retention));
        if let Some(level) = self.runtime_synchronous_commit {
            sql.push_str(&format!(
                "ALTER ROLE {} SET synchronous_commit = '{}';\n",
                quote(&self.runtime),
                level.as_str()
            ));
        }
        sql
    }
}

fn check_role_name(what: &str, name: &str) -> Result<(), StoreError> {
    let valid = (1..=63).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
        && !name.starts_with(|c: char| c.is_ascii_digit());
    if !valid {
        return Err(StoreError::InvalidArgument(format!(
            "{what} role {name:?} must be 1..=63 bytes of [a-z0-9_], not starting with a digit"
        )));
    }
    Ok(())
}

/// Double-quotes an identifier already restricted to `[a-z0-9_]`.
fn quote(name: &str) -> String {
    format!("\"{name}\"")
}

impl PgStore {
    /// Applies the role profile in one transaction: the owner role takes
    /// ownership of the schema and its objects, the runtime and retention
    /// roles get exactly their grants, and `PUBLIC` gets nothing. Run it
    /// after [`PgStore::migrate`] with a role that may change ownership
    /// (a superuser or the current owner who is a member of the owner role).
    ///
    /// # Errors
    /// [`StoreError::PermissionDenied`] when the connected role may not
    /// grant; server errors (e.g. a role that does not exist).
    pub async fn apply_role_profile(&self, profile: &RoleProfile) -> Result<(), StoreError> {
        let sql = profile.sql();
        self.in_transaction(
            self.config().effective_maintenance_timeout(),
            async |db: &Db<'_>| Ok(db.batch_execute(&sql).await?),
        )
        .await
        // The profile names every object of the newest migration.
        .map_err(|e| e.schema_behind(crate::migration::latest_version(), "the role profile"))?;
        tracing::info!(
            owner = profile.owner(),
            runtime = profile.runtime(),
            retention = profile.retention(),
            "applied role profile"
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(owner: &str, runtime: &str, retention: &str, ok: bool) {
        assert_eq!(
            RoleProfile::new(owner, runtime, retention).is_ok(),
            ok,
            "{owner} {runtime} {retention}"
        );
    }

    #[test]
    fn role_names() {
        check("statek_owner", "statek_runtime", "statek_retention", true);
        check("_o", "r1", "r_2", true);
        check("", "r", "t", false);
        check("Owner", "r", "t", false);
        check("o", "r; drop table x", "t", false);
        check("o", "r", "1t", false);
        check("o", "r", &"t".repeat(64), false);
        check("o", "o", "t", false);
        check("o", "r", "r", false);
    }

    #[test]
    fn sql_names_each_role_quoted() {
        let sql = RoleProfile::new("own", "run", "ret").unwrap().sql();
        assert!(sql.contains("ALTER SCHEMA statek OWNER TO \"own\""));
        assert!(sql.contains("GRANT USAGE ON SCHEMA statek TO \"run\", \"ret\""));
        assert!(!sql.contains('{'));
    }
}
