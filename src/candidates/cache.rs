//! The per-process snapshot of provider data behind allocation candidates.
//!
//! Why a cache: loading every tree a request might use costs tens of
//! milliseconds at 10,000 providers; the solver itself needs a few. Why it is
//! still exact: each request runs in a repeatable-read transaction and asks
//! the change log which providers changed between the PostgreSQL snapshot
//! the cache reflects and the request's own snapshot (commit order does not
//! matter: visibility is decided by PostgreSQL's snapshot rules), then
//! reloads just those providers. Writes from any server process are seen.

use super::load;
use super::snapshot::Snapshot;
use crate::db::candidates::{self as db, Delta};
use sqlx::PgConnection;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use tokio::sync::Mutex;

/// How many searches skip the read at rest after one found the cache
/// behind its statement's snapshot.
const SKIP_AFTER_BEHIND: u32 = 8;

/// The cached snapshot and the PostgreSQL snapshot it reflects.
#[derive(Default)]
pub struct SnapshotCache {
    state: Mutex<Option<(String, Arc<Snapshot>)>>,
    /// Searches left that go straight to the transaction: under a stream
    /// of writes the cache is behind at nearly every search, and the
    /// statement at rest would be a wasted round trip before it.
    skip_at_rest: AtomicU32,
}

impl SnapshotCache {
    /// The provider data as of (at least) the transaction open on `conn`.
    pub async fn current(&self, conn: &mut PgConnection) -> Result<Arc<Snapshot>, sqlx::Error> {
        let now = db::current_snapshot(conn).await?;
        self.current_at(conn, now).await
    }

    /// The cached data when it reflects exactly the PostgreSQL snapshot
    /// `now` (read by the caller's own statement): then that statement
    /// needed no transaction around it. None when it does not.
    pub async fn exactly_at(&self, now: &str) -> Option<Arc<Snapshot>> {
        match self.state.lock().await.as_ref() {
            Some((at, snap)) if at == now => Some(snap.clone()),
            _ => {
                self.skip_at_rest
                    .store(SKIP_AFTER_BEHIND, Ordering::Relaxed);
                None
            }
        }
    }

    /// Whether a search should try the read at rest: not for the next
    /// few after one found the cache behind (both reads are exact; this
    /// only picks the cheaper one for the moment).
    pub fn worth_reading_at_rest(&self) -> bool {
        self.skip_at_rest
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
            .is_err()
    }

    /// The provider data as of (at least) `now`, the snapshot of the
    /// repeatable-read transaction open on `conn`.
    pub async fn current_at(
        &self,
        conn: &mut PgConnection,
        now: String,
    ) -> Result<Arc<Snapshot>, sqlx::Error> {
        let mut state = self.state.lock().await;
        let delta = match state.as_ref() {
            None => Delta::Full,
            Some((at, _)) if *at == now => Delta::None,
            Some((at, _)) => db::delta(conn, at, Some(&now)).await?,
        };
        match (delta, state.as_mut()) {
            (Delta::None, Some((at, snap))) => {
                // No provider changed in between: the data reflects `now`
                // too, so the next statement at `now` needs no delta.
                // (Should `now` be older than data already patched in,
                // the next delta re-reads those providers: idempotent.)
                *at = now;
                Ok(snap.clone())
            }
            (Delta::Providers(ids), Some((at, snap))) => {
                let started = std::time::Instant::now();
                let mut next = Snapshot::clone(snap);
                load::patch(conn, &mut next, &ids).await?;
                tracing::debug!(
                    providers = ids.len(),
                    ms = started.elapsed().as_secs_f64() * 1e3,
                    "candidate snapshot patched"
                );
                crate::metrics::metrics()
                    .snapshot_providers_patched
                    .inc_by(u64::try_from(ids.len()).unwrap_or(0));
                *snap = Arc::new(next);
                *at = now;
                Ok(snap.clone())
            }
            _ => {
                let snap = Arc::new(load::load(conn).await?);
                crate::metrics::metrics().snapshot_reloads.inc();
                *state = Some((now, snap.clone()));
                Ok(snap)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A look that finds the cache behind sends the next few searches
    /// straight to the transaction, and then the look at rest comes back.
    #[tokio::test]
    async fn a_cache_found_behind_skips_the_look_at_rest_for_a_while() {
        let cache = SnapshotCache::default();
        assert!(cache.worth_reading_at_rest());
        assert!(cache.exactly_at("10:10:").await.is_none());
        for _ in 0..SKIP_AFTER_BEHIND {
            assert!(!cache.worth_reading_at_rest());
        }
        assert!(cache.worth_reading_at_rest());
        assert!(cache.worth_reading_at_rest());
    }
}
