//! The measured window of one side, read from the database so that every
//! side is measured the same way: runs completed between two database
//! clock readings, the shard's cursor (slots consumed), its reservation
//! rows, and the service lag of the fed tenants.

use std::time::SystemTime;

use anyhow::Result;

use super::lag::Lag;

/// The database's view at one edge of the window.
#[derive(Debug, Clone, Copy)]
pub struct Edge {
    /// `clock_timestamp()`.
    pub at: SystemTime,
    /// The shard's cursor (`next_sequence`), 0 for a shard not registered.
    pub cursor: i64,
    /// The shard's reservation rows.
    pub rows: i64,
}

/// Reads the edge for `shard`.
pub async fn edge(client: &tokio_postgres::Client, shard: &str) -> Result<Edge> {
    let row = client
        .query_one(
            "SELECT clock_timestamp() AS at,
                    coalesce((SELECT next_sequence FROM statek.scheduler_shards
                              WHERE shard_id = $1), 0) AS cursor,
                    (SELECT count(*) FROM statek.scheduler_reservations
                     WHERE shard_id = $1) AS rows",
            &[&shard],
        )
        .await?;
    Ok(Edge {
        at: row.try_get("at")?,
        cursor: row.try_get("cursor")?,
        rows: row.try_get("rows")?,
    })
}

/// Seconds from `from` to `to` (database clock).
pub fn seconds(from: &Edge, to: &Edge) -> f64 {
    to.at
        .duration_since(from.at)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// Runs completed in `[from, to)`.
pub async fn completed(client: &tokio_postgres::Client, from: &Edge, to: &Edge) -> Result<i64> {
    Ok(client
        .query_one(
            "SELECT count(*) AS runs FROM statek.runs
             WHERE state = 'completed' AND finished_at >= $1 AND finished_at < $2",
            &[&from.at, &to.at],
        )
        .await?
        .try_get("runs")?)
}

/// Available runs of each of `tenants` now, in their order.
pub async fn available_of(client: &tokio_postgres::Client, tenants: &[String]) -> Result<Vec<i64>> {
    Ok(client
        .query(
            "SELECT b.ord, count(r.run_id) AS runs
             FROM unnest($1::text[]) WITH ORDINALITY AS b (tenant, ord)
             LEFT JOIN statek.runs AS r ON r.tenant_id = b.tenant AND r.state = 'available'
             GROUP BY b.ord ORDER BY b.ord",
            &[&tenants],
        )
        .await?
        .iter()
        .map(|row| row.try_get("runs"))
        .collect::<Result<_, _>>()?)
}

/// The service lag of `tenants`' runs that became claimable in
/// `[from, to)`: `claimed_at - available_at`, and for a run still unclaimed
/// when the side stopped (`stopped`), `stopped - available_at` (a lower
/// bound). `None` without such runs.
pub async fn lag(
    client: &tokio_postgres::Client,
    tenants: &[String],
    from: &Edge,
    to: &Edge,
    stopped: SystemTime,
) -> Result<Option<Lag>> {
    if tenants.is_empty() {
        return Ok(None);
    }
    let rows = client
        .query(
            "SELECT (extract(epoch FROM coalesce(claimed_at, $4) - available_at) * 1000)::float8
                        AS lag_ms,
                    claimed_at IS NULL AS unclaimed
             FROM statek.runs
             WHERE tenant_id = ANY($1) AND available_at >= $2 AND available_at < $3",
            &[&tenants, &from.at, &to.at, &stopped],
        )
        .await?;
    let mut lags = Vec::with_capacity(rows.len());
    let mut unclaimed = 0;
    for row in rows {
        lags.push(row.try_get::<_, f64>("lag_ms")?);
        if row.try_get::<_, bool>("unclaimed")? {
            unclaimed += 1;
        }
    }
    Ok(Lag::of(lags, unclaimed))
}

/// Calls of `statek.reserve` and `statek.reserve_batch` (one per batch or
/// single reservation) counted by the server, or `None` when it does not
/// track them (`track_functions` must be `pl`; see [`track_functions`]).
pub async fn reserve_calls(client: &tokio_postgres::Client) -> Result<Option<i64>> {
    let row = client
        .query_one(
            "SELECT current_setting('track_functions') AS tracking,
                    (SELECT coalesce(sum(calls), 0) FROM pg_stat_user_functions
                     WHERE schemaname = 'statek'
                       AND funcname IN ('reserve', 'reserve_batch'))::bigint AS calls",
            &[],
        )
        .await?;
    let tracking: String = row.try_get("tracking")?;
    Ok((tracking != "none").then_some(row.try_get("calls")?))
}

/// Makes new sessions of this database count PL/pgSQL function calls
/// (needs a superuser; `false`, saying why, when refused).
pub async fn track_functions(client: &tokio_postgres::Client) -> Result<bool> {
    let database: String = client
        .query_one("SELECT current_database() AS db", &[])
        .await?
        .try_get("db")?;
    let statement = format!("ALTER DATABASE \"{database}\" SET track_functions = 'pl'");
    match client.batch_execute(&statement).await {
        Ok(()) => {
            client.batch_execute("SET track_functions = 'pl'").await?;
            Ok(true)
        }
        Err(e) => {
            eprintln!("xtask: cannot count batches ({statement}: {e}); batches/s not measured");
            Ok(false)
        }
    }
}

/// Waits (up to 10 s) until no client backend of this database but the
/// ones in `keep` is left, so the statistics of the side's sessions have
/// been flushed (a backend flushes them when it exits).
pub async fn sessions_gone(client: &tokio_postgres::Client, keep: &[i32]) -> Result<()> {
    for _ in 0..100 {
        let left: i64 = client
            .query_one(
                "SELECT count(*) AS left FROM pg_stat_activity
                 WHERE datname = current_database() AND backend_type = 'client backend'
                   AND NOT (pid = ANY($1))",
                &[&keep],
            )
            .await?
            .try_get("left")?;
        if left == 0 {
            return Ok(());
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    eprintln!("xtask: sessions of the measured side still open after 10 s; its statistics (batches, rows, WAL) may be undercounted");
    Ok(())
}

/// Pids of the client backends of this database now.
pub async fn sessions(client: &tokio_postgres::Client) -> Result<Vec<i32>> {
    Ok(client
        .query(
            "SELECT pid FROM pg_stat_activity
             WHERE datname = current_database() AND backend_type = 'client backend'",
            &[],
        )
        .await?
        .iter()
        .map(|r| r.try_get("pid"))
        .collect::<Result<_, _>>()?)
}
