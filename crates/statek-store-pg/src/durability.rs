//! Durable commits: the `synchronous_commit` statek's sessions use, and the
//! durability check that refuses a server on which an acknowledged
//! reservation could be lost.
//!
//! A reservation is acknowledged when its commit returns. Whether it
//! survives depends on the server, not on statek:
//!
//! | the commit waited for | survives | source |
//! |---|---|---|
//! | nothing (`synchronous_commit = off`) | nothing: a crash of the server loses the last ~3 × `wal_writer_delay` of commits | PostgreSQL docs, "Asynchronous Commit" |
//! | the local WAL flush (`local`, or `on`/`remote_write`/`remote_apply` without synchronous standbys) | a crash of the server (with `fsync` and `full_page_writes` on); **not** a failover to an asynchronous standby | "WAL Configuration", "synchronous_commit" |
//! | + a synchronous standby's OS write (`remote_write`) | a crash of the primary and a failover; not a simultaneous OS crash of the standby | "synchronous_commit" |
//! | + a synchronous standby's flush (`on`) | a crash of the primary and a failover to that standby | "Synchronous Replication" |
//! | + a synchronous standby's replay (`remote_apply`) | as `on`, and reads on that standby see the reservation | "synchronous_commit" |
//!
//! statek sets the level itself ([`crate::StoreConfig::synchronous_commit`],
//! default `on`): a server default of `off` does not make statek unsafe.

use crate::DurabilityError;
use std::str::FromStr;

use tokio_postgres::Row;

use crate::durability_report::{DurabilityReport, DurabilityRisk, Standby, SynchronousCommit};
use crate::statement::Db;
use crate::{PgStore, StoreError};

/// Gauge `{risk}`: 1 when the last durability check found the risk
/// ([`DurabilityRisk::label`]), else 0.
pub const DURABILITY_RISK: &str = "statek_durability_risk";

impl FromStr for SynchronousCommit {
    type Err = StoreError;

    /// Parses a value as PostgreSQL reports it (`SHOW synchronous_commit`),
    /// including its synonyms `true`/`yes`/`1` for `on` and
    /// `false`/`no`/`0` for `off`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s.to_ascii_lowercase().as_str() {
            "off" | "false" | "no" | "0" => SynchronousCommit::Off,
            "local" => SynchronousCommit::Local,
            "remote_write" => SynchronousCommit::RemoteWrite,
            "on" | "true" | "yes" | "1" => SynchronousCommit::On,
            "remote_apply" => SynchronousCommit::RemoteApply,
            _ => {
                return Err(StoreError::InvalidArgument(format!(
                    "unknown synchronous_commit value {:?}",
                    crate::error::truncated(s)
                )))
            }
        })
    }
}

/// The server's settings as statek's pooled session sees them.
const SETTINGS: &str = "
    SELECT current_setting('fsync')::boolean AS fsync,
           current_setting('full_page_writes')::boolean AS full_page_writes,
           current_setting('synchronous_commit') AS synchronous_commit,
           current_setting('synchronous_standby_names') AS synchronous_standby_names,
           CASE WHEN pg_is_in_recovery() THEN NULL
                ELSE ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::integer
           END AS timeline";

/// Walsenders: physical ones have no database (logical replication
/// connects to one); a standby reports a replay position, `pg_receivewal`
/// and `pg_basebackup` never do. `state` is NULL for a role without the
/// privileges of `pg_read_all_stats`. Ordered by name, so that reports
/// (and the failover condition they state) read the same every time.
const WALSENDERS: &str = "
    SELECT r.application_name, r.state, r.sync_state,
           r.replay_lsn IS NOT NULL AS replays,
           a.datname IS NULL AS physical
    FROM pg_stat_replication AS r
    LEFT JOIN pg_stat_activity AS a ON a.pid = r.pid
    ORDER BY r.application_name, r.pid";

fn standby_from_row(row: &Row) -> Result<Option<Standby>, StoreError> {
    let state: Option<String> = row.try_get("state")?;
    let Some(state) = state else {
        return Ok(None);
    };
    let physical: bool = row.try_get("physical")?;
    let replays: bool = row.try_get("replays")?;
    let sync_state: String = row
        .try_get::<_, Option<String>>("sync_state")?
        .unwrap_or_default();
    let streams = matches!(state.as_str(), "streaming" | "catchup");
    let synchronous = matches!(sync_state.as_str(), "sync" | "quorum");
    if !(physical && streams && (replays || synchronous)) {
        return Ok(None);
    }
    Ok(Some(Standby {
        application_name: row
            .try_get::<_, Option<String>>("application_name")?
            .unwrap_or_default(),
        state,
        sync_state,
    }))
}

impl PgStore {
    /// Reads the server's durability on one of this store's pooled
    /// connections: `fsync`, `full_page_writes`, the effective
    /// `synchronous_commit` of statek's session, `synchronous_standby_names`,
    /// the physical streaming standbys and the timeline. Reports only; see
    /// [`PgStore::ensure_durable`] for the check that refuses.
    ///
    /// # Errors
    /// Connection and server errors.
    pub async fn durability_report(&self) -> Result<DurabilityReport, StoreError> {
        let (settings, walsenders) = self
            .with_response_timeout(async |db: &Db<'_>| {
                let settings = db.query_one(SETTINGS, &[]).await?;
                let walsenders = db.query(WALSENDERS, &[]).await?;
                Ok((settings, walsenders))
            })
            .await?;
        let mut standbys = Vec::new();
        let mut hidden_walsenders = 0_u32;
        for row in &walsenders {
            if row.try_get::<_, Option<String>>("state")?.is_none() {
                hidden_walsenders += 1;
            } else if let Some(standby) = standby_from_row(row)? {
                standbys.push(standby);
            }
        }
        let synchronous_commit: String = settings.try_get("synchronous_commit")?;
        let timeline: Option<i32> = settings.try_get("timeline")?;
        Ok(DurabilityReport {
            fsync: settings.try_get("fsync")?,
            full_page_writes: settings.try_get("full_page_writes")?,
            synchronous_commit: synchronous_commit.parse()?,
            synchronous_standby_names: settings.try_get("synchronous_standby_names")?,
            standbys,
            hidden_walsenders,
            timeline: timeline.and_then(|t| u32::try_from(t).ok()),
        })
    }

    /// The durability check of `register` and of a Worker's start: reads
    /// [`durability_report`](Self::durability_report), logs it (a warning
    /// when it finds a risk), sets the gauge `statek_durability_risk{risk}`
    /// to 1 for each risk found and 0 for the others, and applies the
    /// store's [`DurabilityPolicy`](crate::DurabilityPolicy).
    ///
    /// # Errors
    /// [`DurabilityError::Refused`](crate::DurabilityError::Refused) naming every refused risk and its
    /// setting (not retryable: a configuration must change); connection
    /// and server errors.
    pub async fn ensure_durable(&self) -> Result<DurabilityReport, StoreError> {
        let report = self.durability_report().await?;
        let risks = report.risks();
        for label in DurabilityRisk::LABELS {
            let found = risks.iter().any(|risk| risk.label() == label);
            metrics::gauge!(DURABILITY_RISK, "risk" => label).set(if found { 1.0 } else { 0.0 });
        }
        let policy = self.config().configured_durability_policy();
        let refused = report.refused_by(policy);
        if risks.is_empty() {
            tracing::info!(durability = %report, "durability check: no risk found");
        } else {
            let accepted = if refused.is_empty() {
                format!("accepted by {policy:?}")
            } else {
                format!("refused by {policy:?}")
            };
            tracing::warn!(
                durability = %report,
                risks = %risks.iter().map(DurabilityRisk::label).collect::<Vec<_>>().join(","),
                "durability check: acknowledged reservations can be lost on this server ({accepted})"
            );
        }
        if refused.is_empty() {
            Ok(report)
        } else {
            Err(StoreError::Durability(DurabilityError::Refused {
                risks: refused,
                report: Box::new(report),
            }))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::durability_report::DurabilityPolicy;

    fn standby(name: &str, sync_state: &str) -> Standby {
        Standby {
            application_name: name.to_owned(),
            state: "streaming".to_owned(),
            sync_state: sync_state.to_owned(),
        }
    }

    fn report(level: SynchronousCommit, standbys: Vec<Standby>) -> DurabilityReport {
        DurabilityReport {
            fsync: true,
            full_page_writes: true,
            synchronous_commit: level,
            synchronous_standby_names: String::new(),
            standbys,
            hidden_walsenders: 0,
            timeline: Some(1),
        }
    }

    fn labels(risks: &[DurabilityRisk]) -> Vec<&'static str> {
        risks.iter().map(DurabilityRisk::label).collect()
    }

    #[test]
    fn levels_parse_as_postgres_reports_them() {
        for (text, level) in [
            ("off", SynchronousCommit::Off),
            ("false", SynchronousCommit::Off),
            ("local", SynchronousCommit::Local),
            ("remote_write", SynchronousCommit::RemoteWrite),
            ("on", SynchronousCommit::On),
            ("ON", SynchronousCommit::On),
            ("remote_apply", SynchronousCommit::RemoteApply),
        ] {
            assert_eq!(text.parse::<SynchronousCommit>().unwrap(), level, "{text}");
        }
        assert!("sometimes".parse::<SynchronousCommit>().is_err());
        assert!(SynchronousCommit::Off < SynchronousCommit::Local);
        assert!(SynchronousCommit::On < SynchronousCommit::RemoteApply);
    }

    #[test]
    fn risks_of_settings_and_standbys() {
        use SynchronousCommit::*;
        assert!(report(On, vec![]).risks().is_empty());
        assert!(report(On, vec![standby("s1", "sync")]).risks().is_empty());
        assert!(report(RemoteWrite, vec![standby("s1", "quorum")])
            .risks()
            .is_empty());
        assert_eq!(
            report(On, vec![standby("s1", "sync"), standby("s2", "async")]).risks(),
            vec![DurabilityRisk::AsynchronousStandbys {
                standbys: vec!["s2".to_owned()]
            }]
        );
        assert_eq!(
            labels(&report(On, vec![standby("s1", "potential")]).risks()),
            ["asynchronous_standbys"]
        );
        // `local` waits for no standby, even a synchronous one.
        assert_eq!(
            labels(&report(Local, vec![standby("s1", "sync")]).risks()),
            ["asynchronous_standbys"]
        );
        let mut unsafe_server = report(Off, vec![]);
        unsafe_server.fsync = false;
        unsafe_server.full_page_writes = false;
        unsafe_server.hidden_walsenders = 2;
        assert_eq!(
            labels(&unsafe_server.risks()),
            [
                "fsync",
                "full_page_writes",
                "synchronous_commit",
                "standbys_not_visible"
            ]
        );
        assert_eq!(
            labels(&unsafe_server.refused_by(DurabilityPolicy::AllowAsynchronousStandbys)),
            ["fsync", "full_page_writes", "synchronous_commit"]
        );
        assert!(unsafe_server
            .refused_by(DurabilityPolicy::AllowNoDurability)
            .is_empty());
        assert_eq!(unsafe_server.refused_by(DurabilityPolicy::Require).len(), 4);
    }

    #[test]
    fn report_line() {
        let mut r = report(
            SynchronousCommit::On,
            vec![standby("s1", "sync"), standby("s2", "async")],
        );
        assert_eq!(
            r.to_string(),
            "fsync=on full_page_writes=on synchronous_commit=on standbys=s1(sync),s2(async) timeline=1"
        );
        r.standbys.clear();
        r.fsync = false;
        r.timeline = None;
        assert_eq!(
            r.to_string(),
            "fsync=off full_page_writes=on synchronous_commit=on standbys=none timeline=in-recovery"
        );
    }
}
