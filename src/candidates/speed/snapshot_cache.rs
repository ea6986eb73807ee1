//! The per-process snapshot of provider data behind allocation candidates.
//!
//! Why a cache: loading every tree a request might use costs tens of
//! milliseconds at 10,000 providers; the solver itself needs a few. Why it is
//! still exact: a search reads its PostgreSQL snapshot first, and is served
//! from the cache only once the cache reflects a snapshot that sees every
//! transaction the search's sees (see `visibility`). Bringing it there asks
//! the change log which providers changed in between (commit order does not
//! matter: visibility is decided by PostgreSQL's snapshot rules) and reloads
//! just those. Writes from any server process are seen.
//!
//! When only allocations changed in between (every claim), the change log
//! itself says by how many units, and the cache adds them: one short
//! statement, where reading the changed providers again is seven reads.
//!
//! One search at a time brings the cache forward, to the snapshot of its
//! own statement, which is later than every search waiting: under a stream
//! of writes, one round trip serves all the searches that arrived meanwhile
//! instead of one round trip each, in turn.

use super::snapshot_visibility::covers;
use crate::candidates::engine::{Pending, ProviderSnapshots};
use crate::candidates::snapshot::Snapshot;
use crate::candidates::snapshot_build;
use crate::db::candidates::{self as db, Delta, Seen};
use sqlx::PgConnection;
use std::sync::Arc;
use tokio::sync::Mutex;

impl ProviderSnapshots for SnapshotCache {
    fn at<'a>(
        &'a self,
        conn: &'a mut PgConnection,
        seen: Seen,
    ) -> Pending<'a, Result<Arc<Snapshot>, sqlx::Error>> {
        Box::pin(self.current_at(conn, seen))
    }
}

/// After a window the units could not bring forward (other changes than
/// allocations, or allocations on a provider with a usage report), this
/// many turns go straight to reading the changed providers again: a
/// workload that changes inventories or reports as often as it searches
/// pays the usage statement for nothing at most once in this many turns.
const SKIP_USAGE_AFTER_OTHER: u32 = 8;

/// The cached snapshot and the PostgreSQL snapshot it reflects (and the
/// server that snapshot was taken on: the cache is loaded again, whole,
/// on another).
#[derive(Default)]
pub struct SnapshotCache {
    state: Mutex<Option<(Seen, Arc<Snapshot>)>>,
    /// Turns left before [`SnapshotCache::covering`] tries the usage
    /// statement first again.
    usage_skip: std::sync::atomic::AtomicU32,
    /// Windows brought forward by units alone.
    usage_patches: std::sync::atomic::AtomicU64,
    /// Whether the last turn found the cached data unchanged (covering its
    /// snapshot already, or a window that changed nothing here): then a
    /// search may start solving on it before its own turn confirms it
    /// (see [`SnapshotCache::settled`]).
    unchanged: std::sync::atomic::AtomicBool,
}

impl SnapshotCache {
    /// The provider data as of (at least) the transaction open on `conn`.
    pub async fn current(&self, conn: &mut PgConnection) -> Result<Arc<Snapshot>, sqlx::Error> {
        let now = db::seen(conn).await?;
        self.current_at(conn, now).await
    }

    /// The cached data brought up to a snapshot that covers `now` (a
    /// snapshot the caller read): as it is when it already does, else
    /// patched on `conn`, which must not be inside a repeatable-read
    /// transaction (its statements' snapshots must be later than `now`):
    /// by the units the log records when only allocations changed, else by
    /// one statement reading the changed providers again. None when only a
    /// full load would do (providers were created or moved, the log was
    /// pruned, a class is new): the caller reads in a transaction instead.
    ///
    /// Whoever holds the lock asks the pool for nothing (its statements
    /// run on the connection it came with), so waiting searches, each
    /// holding a connection, never deadlock the pool.
    pub async fn covering(
        &self,
        conn: &mut PgConnection,
        now: &Seen,
    ) -> Result<Option<Arc<Snapshot>>, sqlx::Error> {
        // Searches that wait here have mostly been covered by the time
        // they get the lock: the one before them patched to a later snapshot.
        let mut state = self.state.lock().await;
        let Some((at, snap)) = state.as_mut() else {
            return Ok(None);
        };
        if at.server != now.server {
            return Ok(None);
        }
        let at = &mut at.snapshot;
        if covers(at, &now.snapshot) {
            self.mark_unchanged(true);
            return Ok(Some(snap.clone()));
        }
        // Set again below when the window changed nothing here.
        self.mark_unchanged(false);
        if self.usage_first() {
            let usage = db::usage_since(conn, at).await?;
            if let Some(next) = by_units(snap, &usage) {
                match next {
                    None => self.mark_unchanged(true),
                    Some(next) => {
                        *snap = Arc::new(next);
                        self.usage_patches
                            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        crate::metrics::metrics().snapshot_usage_patches.inc();
                    }
                }
                *at = usage.snapshot;
                return Ok(Some(snap.clone()));
            }
            self.usage_skip
                .store(SKIP_USAGE_AFTER_OTHER, std::sync::atomic::Ordering::Relaxed);
        }
        let patch = db::patch_since(conn, at).await?;
        if patch.full {
            return Ok(None);
        }
        if !patch.ids.is_empty() {
            let mut next = Snapshot::clone(snap);
            if !snapshot_build::apply(&mut next, &patch.ids, patch.data) {
                return Ok(None);
            }
            count_patched(patch.ids.len());
            *snap = Arc::new(next);
        } else {
            self.mark_unchanged(true);
        }
        *at = patch.snapshot;
        Ok(Some(snap.clone()))
    }

    /// The cached data as it is, without a round trip, when the last turn
    /// found it unchanged and no one is bringing it forward: what a search
    /// may solve on ahead of its turn, to keep the answer only if the turn
    /// returns this very snapshot. None otherwise (a stream of writes
    /// changes it every turn, and a solve ahead would be thrown away).
    pub fn settled(&self) -> Option<Arc<Snapshot>> {
        if !self.unchanged.load(std::sync::atomic::Ordering::Relaxed) {
            return None;
        }
        let state = self.state.try_lock().ok()?;
        state.as_ref().map(|(_, snap)| snap.clone())
    }

    fn mark_unchanged(&self, unchanged: bool) {
        self.unchanged
            .store(unchanged, std::sync::atomic::Ordering::Relaxed);
    }

    /// The provider data as of (at least) `now`, the snapshot of the
    /// repeatable-read transaction open on `conn`.
    pub async fn current_at(
        &self,
        conn: &mut PgConnection,
        now: Seen,
    ) -> Result<Arc<Snapshot>, sqlx::Error> {
        let mut state = self.state.lock().await;
        let delta = match state.as_ref() {
            Some((at, _)) if at.server != now.server => Delta::Full,
            None => Delta::Full,
            // Already as new as `now`, or newer: serve it as it is (moving
            // `at` back would make the next search re-read what it has).
            Some((at, snap)) if covers(&at.snapshot, &now.snapshot) => return Ok(snap.clone()),
            Some((at, _)) => db::delta(conn, &at.snapshot, Some(&now.snapshot)).await?,
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
                snapshot_build::patch(conn, &mut next, &ids).await?;
                tracing::debug!(
                    providers = ids.len(),
                    ms = started.elapsed().as_secs_f64() * 1e3,
                    "candidate snapshot patched"
                );
                count_patched(ids.len());
                *snap = Arc::new(next);
                self.mark_unchanged(false);
                *at = now;
                Ok(snap.clone())
            }
            _ => {
                let snap = Arc::new(snapshot_build::load(conn).await?);
                crate::metrics::metrics().snapshot_reloads.inc();
                self.mark_unchanged(false);
                *state = Some((now, snap.clone()));
                Ok(snap)
            }
        }
    }

    /// How many times this cache was brought forward by the units of a
    /// window in which only allocations changed.
    pub fn usage_patches(&self) -> u64 {
        self.usage_patches
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Whether to try bringing the cache forward by usage deltas first
    /// (counts down the turns skipped since one that had other changes).
    fn usage_first(&self) -> bool {
        use std::sync::atomic::Ordering::Relaxed;
        let skip = &self.usage_skip;
        skip.fetch_update(Relaxed, Relaxed, |n| n.checked_sub(1))
            .is_err()
    }
}

/// The cached data brought forward by a window's units: Some(None) when
/// the window changed nothing, None when its changes need the providers
/// read again.
fn by_units(snap: &Snapshot, usage: &db::UsageSince) -> Option<Option<Snapshot>> {
    match (usage.other, usage.deltas.is_empty()) {
        (true, _) => None,
        (false, true) => Some(None),
        (false, false) => snapshot_build::add_usage(snap, &usage.deltas).map(Some),
    }
}

/// Counts providers patched into the cache.
fn count_patched(n: usize) {
    crate::metrics::metrics()
        .snapshot_providers_patched
        .inc_by(u64::try_from(n).unwrap_or(0));
}
