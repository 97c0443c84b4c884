//! Servers that this xtask process started for a test run or the demo. They
//! are stopped (and their throw-away clusters deleted) when their
//! `RunningServer` is dropped, or all at once by the Ctrl-C handler.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

use super::cluster::Cluster;

static STARTED: Mutex<Vec<(u64, Cluster)>> = Mutex::new(Vec::new());
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

fn started() -> MutexGuard<'static, Vec<(u64, Cluster)>> {
    STARTED
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Records a started cluster; returns its registration id.
pub fn register(cluster: Cluster) -> u64 {
    let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    started().push((id, cluster));
    id
}

/// Stops and deletes one registered cluster (if the Ctrl-C handler has not
/// already). The registry stays locked meanwhile, so the handler waits.
pub fn destroy(id: u64) -> anyhow::Result<()> {
    let mut started = started();
    let Some(index) = started.iter().position(|(entry, _)| *entry == id) else {
        return Ok(());
    };
    let (_, cluster) = started.remove(index);
    cluster.destroy()
}

/// Stops and deletes every registered cluster; reports, never fails.
pub fn destroy_all() {
    let mut started = started();
    for (_, cluster) in started.drain(..) {
        eprintln!("xtask: stopping PostgreSQL in {}", cluster.dir.display());
        if let Err(error) = cluster.destroy() {
            eprintln!(
                "xtask: could not stop PostgreSQL in {}: {error:#}",
                cluster.dir.display()
            );
        }
    }
}
