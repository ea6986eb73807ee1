//! The providers an admission round places on, from this process's
//! candidate snapshot instead of a read of every inventory and allocation.
//!
//! Why it is exact: the cache is first brought up to date in its own
//! repeatable-read transaction (before the round's transaction opens, so a
//! round never holds two connections). Inside the round's transaction,
//! after its lock, one statement asks the change log which providers
//! changed since the cache's PostgreSQL snapshot; those are read again into
//! a private copy. Unchanged providers are the same at both moments. And
//! should a plain write take what the round planned to use after that, the
//! allocation write refuses it and the round is decided again
//! (`admission::commit`).

use crate::candidates::engine::ProviderSnapshots;
use crate::candidates::snapshot::Snapshot;
use crate::candidates::snapshot_build;
use crate::db::candidates::{self as db, Delta};
use crate::db::Pool;
use crate::error::Result;
use sqlx::PgConnection;
use std::sync::Arc;

/// The cache as of one PostgreSQL snapshot.
pub struct Cached {
    /// The PostgreSQL snapshot the data reflects (at least).
    at: String,
    /// The data.
    snap: Arc<Snapshot>,
}

/// Brings this process's cache up to date; call it before the round's
/// transaction opens.
pub async fn refresh(pool: &Pool, snapshots: &dyn ProviderSnapshots) -> Result<Cached> {
    let mut tx = db::begin_snapshot(pool).await?;
    let seen = db::seen(&mut tx).await?;
    let at = seen.snapshot.clone();
    let snap = snapshots.at(&mut tx, seen).await?;
    tx.commit().await?;
    Ok(Cached { at, snap })
}

/// The providers as of the round's transaction now (after its lock): the
/// cached data with the providers changed since read again, or a full read
/// when providers were created, deleted or moved since.
pub async fn as_of_now(conn: &mut PgConnection, cached: Cached) -> Result<Arc<Snapshot>> {
    Ok(match db::delta(conn, &cached.at, None).await? {
        Delta::None => cached.snap,
        Delta::Providers(ids) => {
            let mut copy = Snapshot::clone(&cached.snap);
            snapshot_build::patch(conn, &mut copy, &ids).await?;
            Arc::new(copy)
        }
        Delta::Full => Arc::new(snapshot_build::load(conn).await?),
    })
}
