//! The durable servers the bench starts for itself (`fsync`,
//! `synchronous_commit` and `full_page_writes` on), shared by the sections
//! that measure durable commits (`durable`, `workloads`). The other figures
//! run on xtask's fast development settings (or `DATABASE_URL`).

use anyhow::Result;

use crate::pg::{self, PgMajor};

/// Provisioned PostgreSQL 17 binaries for durable servers.
pub struct Durable {
    server: pg::Server,
}

impl Durable {
    /// The binaries, or `None` (saying so) when `DATABASE_URL` is set: the
    /// durable figures come from servers the bench starts itself.
    pub fn provision(sections: &str) -> Result<Option<Self>> {
        if pg::external_database_url().is_some() {
            eprintln!(
                "xtask: durable runs of {sections} skipped: they provision their own servers (DATABASE_URL is set)"
            );
            return Ok(None);
        }
        Ok(Some(Self {
            server: pg::Server::provision(PgMajor::V17)?,
        }))
    }

    /// A durable server alone (stopped when the handle drops), with
    /// `pg_stat_statements` loaded, and its URL.
    pub fn single(&self) -> Result<(pg::RunningServer, String)> {
        let single = self.server.start_measured(true)?;
        let url = single.database_url();
        Ok((single, url))
    }

    /// A durable primary with a standby (stopped when the handle drops) and
    /// the primary's URL.
    pub fn pair(&self, replication: pg::Replication) -> Result<(pg::ReplicaPair, String)> {
        let pair = self.server.start_pair(replication)?;
        let url = pair.primary_url();
        Ok((pair, url))
    }
}
