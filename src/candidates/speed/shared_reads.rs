//! Shared reads: the searches waiting in this process share one
//! statement that resolves all their names and reads the snapshot they
//! are served at, and one bringing the cache forward to it. One such
//! shared read at a time (a "turn"); searches arriving meanwhile wait for
//! the next.
//!
//! Why: each search read its own names and snapshot, one round trip each,
//! and the cache was brought forward under a lock the others waited on.
//! Under a stream of claims most searches found it behind. Now one turn
//! serves every search that arrived before its statement ran: PostgreSQL
//! took that statement's snapshot after each of them arrived, so a write
//! acknowledged before any of them arrived is seen (the guarantee a
//! search's own statement gave). Nothing waits for a turn to fill: a lone
//! search runs at once.

use super::snapshot_cache::SnapshotCache;
use crate::candidates::engine::{Pending, ProviderRead, ProviderSnapshots, SharedRead};
use crate::candidates::names::{Ids, Names};
use crate::candidates::snapshot::Snapshot;
use crate::coalescing::Coalescer;
use crate::db::{candidates as db, warm_connection::WarmConnection, Pool};
use crate::error::{classify, DbFailure, Error, Result};
use std::collections::HashMap;
use std::sync::Arc;

/// At most this many searches in one turn (their names go in one
/// statement).
const MOST_AT_ONCE: usize = 64;

/// One turn at a time per process: searches arriving meanwhile gather for
/// the next, and the cache is brought forward once for all of them.
const TURNS_AT_ONCE: usize = 1;

/// At most this many names remembered from past turns (see
/// [`SharedReads::guess_ids`]); past it, the memory starts again from the last turn.
const MOST_KNOWN: usize = 4096;

/// What a turn answers each of its searches: the read, or why the
/// database could not be reached (each search then answers 503 at once,
/// instead of each waiting for a connection of its own in turn).
type Outcome = std::result::Result<Arc<SharedRead>, Arc<str>>;

/// This process's searches waiting for a turn, and the provider data
/// they are served from: the engine's [`ProviderRead`].
pub struct SharedReads {
    /// The provider data, kept current.
    cache: Arc<SnapshotCache>,
    waiting: Coalescer<Names, Outcome>,
    /// The names past turns resolved, and whether the last one found a
    /// reservation (its snapshot is not used).
    known: std::sync::Mutex<db::NamesRead>,
    /// The turns' connection, kept between back-to-back turns.
    warm: Arc<WarmConnection>,
}

impl std::fmt::Debug for SharedReads {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedReads")
            .field("waiting", &self.waiting)
            .finish_non_exhaustive()
    }
}

impl SharedReads {
    /// Reads served from `cache`.
    pub fn new(cache: Arc<SnapshotCache>) -> Self {
        SharedReads {
            cache,
            waiting: Coalescer::new(TURNS_AT_ONCE, MOST_AT_ONCE, |o: &Outcome| o.is_err()),
            known: std::sync::Mutex::new(db::NamesRead {
                seen: db::Seen {
                    snapshot: String::new(),
                    server: String::new(),
                },
                classes: HashMap::new(),
                traits: HashMap::new(),
                aggregates: HashMap::new(),
                reservations: true,
            }),
            warm: Arc::default(),
        }
    }
}

impl SharedReads {
    /// The names and the provider data for a search of `names`, read with
    /// the searches waiting beside it. A 503 when the turn could not reach
    /// the database; None when it failed otherwise: the caller's own read
    /// then says why.
    async fn read(&self, pool: &Pool, names: Names) -> Result<Option<Arc<SharedRead>>> {
        let (pool, cache, warm) = (pool.clone(), self.cache.clone(), self.warm.clone());
        let outcome = self
            .waiting
            .submit(names, move |all| async move {
                match turn(&pool, &warm, &cache, &all).await {
                    Ok(read) => {
                        if all.len() > 1 {
                            let n = u64::try_from(all.len()).unwrap_or(u64::MAX);
                            crate::metrics::metrics().searches_together.inc_by(n);
                        }
                        vec![Ok(read); all.len()]
                    }
                    Err(e) if classify(&e) == DbFailure::Unavailable => {
                        vec![Err(Arc::from(e.to_string())); all.len()]
                    }
                    Err(e) => {
                        tracing::debug!(error = %e, searches = all.len(), "shared read failed");
                        Vec::new()
                    }
                }
            })
            .await;
        match outcome {
            Some(Ok(read)) => {
                self.learn(&read.named);
                Ok(Some(read))
            }
            Some(Err(cause)) => Err(Error::database_unavailable(cause)),
            None => Ok(None),
        }
    }

    /// The ids of `names` as past turns resolved them, when every class
    /// and trait is known and the last turn found no reservation: a guess
    /// that a search may solve ahead on, kept only when its own turn
    /// resolves the same ids (names can be deleted and made again).
    fn guess_ids(&self, names: &Names) -> Option<Ids> {
        let known = self.known.lock().ok()?;
        match known.reservations {
            true => None,
            false => names.resolve(&known).ok(),
        }
    }

    /// Remembers what a turn resolved.
    fn learn(&self, named: &db::NamesRead) {
        let Ok(mut known) = self.known.lock() else {
            return;
        };
        known.reservations = named.reservations;
        for fresh in [false, true] {
            if fresh {
                known.classes.clear();
                known.traits.clear();
                known.aggregates.clear();
            }
            remember(&mut known.classes, &named.classes);
            remember(&mut known.traits, &named.traits);
            remember(&mut known.aggregates, &named.aggregates);
            if known.classes.len() + known.traits.len() + known.aggregates.len() <= MOST_KNOWN {
                return;
            }
        }
    }
}

/// Adds `learnt` to `known`, copying a name only when it is new or its id
/// changed (every search of a turn learns the same names).
fn remember<K: Clone + Eq + std::hash::Hash>(
    known: &mut HashMap<K, i32>,
    learnt: &HashMap<K, i32>,
) {
    for (name, id) in learnt {
        if known.get(name) != Some(id) {
            known.insert(name.clone(), *id);
        }
    }
}

/// One turn: the names of `all` and the statement's snapshot, then the
/// cache brought to cover it, on one connection (kept for the next turn
/// when both statements succeed).
async fn turn(
    pool: &Pool,
    warm: &WarmConnection,
    cache: &SnapshotCache,
    all: &[Names],
) -> std::result::Result<Arc<SharedRead>, sqlx::Error> {
    let names = Names::union(all);
    let mut conn = warm.take(pool).await?;
    let named = db::read_names(&mut conn, &names.classes, &names.traits, &names.aggregates).await?;
    let snap = match named.reservations {
        true => None,
        false => cache.covering(&mut conn, &named.seen).await?,
    };
    warm.give_back(conn);
    Ok(Arc::new(SharedRead { named, snap }))
}

impl ProviderRead for SharedReads {
    fn snapshots(&self) -> &dyn ProviderSnapshots {
        &*self.cache
    }

    /// No transaction: the names come from one statement, shared with the
    /// searches waiting beside it, and the cached providers from a
    /// snapshot that sees all that statement saw (brought forward by one
    /// more statement when it is behind).
    fn shared<'a>(
        &'a self,
        pool: &'a Pool,
        names: &'a Names,
    ) -> Pending<'a, Result<Option<Arc<SharedRead>>>> {
        Box::pin(self.read(pool, names.clone()))
    }

    /// The cached data when the last turn found it unchanged (a stream of
    /// writes changes it every turn, and a solve ahead would be thrown
    /// away), with the ids past turns resolved.
    fn guess(&self, names: &Names) -> Option<(Arc<Snapshot>, Ids)> {
        let snap = self.cache.settled()?;
        Some((snap, self.guess_ids(names)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(classes: &[&str], traits: &[&str]) -> Names {
        Names::of_classes_and_traits(classes, traits)
    }

    fn named(classes: &[(&str, i32)], reservations: bool) -> db::NamesRead {
        db::NamesRead {
            seen: db::Seen {
                snapshot: "1:1:".into(),
                server: String::new(),
            },
            classes: classes.iter().map(|(c, id)| (c.to_string(), *id)).collect(),
            traits: HashMap::new(),
            aggregates: HashMap::new(),
            reservations,
        }
    }

    /// A guess comes only from names past turns resolved, with no
    /// reservation at the last turn, and follows an id that changed.
    #[test]
    fn a_guess_is_what_past_turns_resolved() {
        let reads = SharedReads::new(Arc::default());
        let vcpu = names(&["VCPU"], &[]);
        assert!(reads.guess_ids(&vcpu).is_none(), "nothing learnt yet");
        reads.learn(&named(&[("VCPU", 0)], false));
        let guessed = reads.guess_ids(&vcpu).map(|ids| ids.class);
        assert_eq!(guessed, Some(HashMap::from([("VCPU".into(), 0)])));
        assert!(reads
            .guess_ids(&names(&["VCPU"], &["HW_CPU_X86_AVX2"]))
            .is_none());
        reads.learn(&named(&[("VCPU", 5)], false));
        assert_eq!(reads.guess_ids(&vcpu).map(|ids| ids.class["VCPU"]), Some(5));
        reads.learn(&named(&[], true));
        assert!(reads.guess_ids(&vcpu).is_none(), "a reservation exists");
    }

    /// Past its bound the memory starts again from the last turn.
    #[test]
    fn the_memory_of_names_is_bounded() {
        let reads = SharedReads::new(Arc::default());
        let many: Vec<(String, i32)> = (0..MOST_KNOWN)
            .map(|i| (format!("CUSTOM_{i}"), 10))
            .collect();
        let many: Vec<(&str, i32)> = many.iter().map(|(c, id)| (c.as_str(), *id)).collect();
        reads.learn(&named(&many, false));
        reads.learn(&named(&[("VCPU", 0)], false));
        assert!(reads.guess_ids(&names(&["VCPU"], &[])).is_some());
        assert!(
            reads.guess_ids(&names(&["CUSTOM_0"], &[])).is_none(),
            "forgotten"
        );
    }
}
