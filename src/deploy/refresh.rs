//! Eager refresh after large deployments. A deployment over many nodes
//! notifies every server process at its commit (PostgreSQL NOTIFY), and
//! each process brings its candidate snapshot and its node states up to
//! date at once, instead of leaving its next deployment request to re-read
//! every changed node on its critical path. What is read is what that
//! request would have read, under the caches' own rules, so they stay
//! exact: only the moment of reading moves.

use super::node_cache::NodeCache;
use crate::candidates::engine::{providers_now, ProviderSnapshots};
use crate::db::deployments as db;
use std::sync::Arc;
use std::time::Duration;

/// The channel large deployments notify on.
pub const CHANNEL: &str = "placement_deploy_nodes";

/// Deployments over at least this many nodes notify. Re-reading a few
/// nodes costs the next request well under a millisecond; re-reading
/// hundreds costs it tens, and all the requests queued behind it.
pub const EAGER_NODES: usize = 32;

/// Tells every process, when the caller's transaction commits, that a
/// deployment changed `nodes` nodes (nothing below [`EAGER_NODES`]).
pub async fn announce(tx: &mut sqlx::PgConnection, nodes: usize) -> Result<(), sqlx::Error> {
    if nodes >= EAGER_NODES {
        db::notify(tx, CHANNEL).await?;
    }
    Ok(())
}

/// The caches one process keeps current.
pub struct Caches {
    /// The database.
    pub pool: crate::db::Pool,
    /// Connections with sessions of their own, for the listener (the same
    /// database as `pool`, not through a transaction pooler).
    pub sessions: sqlx::PgPool,
    /// The candidate snapshot.
    pub snapshots: Arc<dyn ProviderSnapshots>,
    /// The deployment nodes' states.
    pub nodes: Arc<NodeCache>,
}

/// Listens for announcements for the life of the process and refreshes on
/// each burst of them (several commits close together refresh once). A
/// lost connection is opened again after a pause.
pub async fn run(caches: Caches) {
    loop {
        match listen_and_refresh(&caches).await {
            Ok(()) => {}
            Err(e) => tracing::warn!(error = %e, "refreshing node states on announcements failed"),
        }
        tokio::time::sleep(Duration::from_secs(5)).await;
    }
}

async fn listen_and_refresh(caches: &Caches) -> Result<(), sqlx::Error> {
    let mut listener = db::listen(&caches.sessions, CHANNEL).await?;
    loop {
        listener.recv().await?;
        while listener.next_buffered().is_some() {}
        let started = std::time::Instant::now();
        let nodes = refresh(caches).await?;
        crate::metrics::metrics().node_refreshes.inc();
        tracing::debug!(
            nodes,
            ms = started.elapsed().as_secs_f64() * 1e3,
            "node states refreshed on an announcement"
        );
    }
}

/// Brings the snapshot and every node state this process holds up to
/// date; returns how many node states it holds.
async fn refresh(caches: &Caches) -> Result<usize, sqlx::Error> {
    let mut tx = crate::db::candidates::begin_snapshot(&caches.pool).await?;
    let snap = providers_now(&*caches.snapshots, &mut tx).await?;
    tx.commit().await?;
    let wanted: Vec<(i64, u64)> = caches
        .nodes
        .ids()
        .into_iter()
        .filter_map(|id| Some((id, snap.stamp_of(id)?)))
        .collect();
    caches.nodes.current(&caches.pool, &wanted).await?;
    Ok(wanted.len())
}
