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
use crate::batching::Batcher;
use crate::candidates::find::{Adjustments, Engine, Read};
use crate::candidates::groups::CandidateQuery;
use crate::candidates::snapshot::Snapshot;
use crate::db::{candidates as db, warm_connection::WarmConnection, Pool};
use crate::error::{classify, DbFailure, Error, Result};
use crate::types::PriorityClass;
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

/// At most this many searches in one turn (their names go in one
/// statement).
const MOST_AT_ONCE: usize = 64;

/// One turn at a time per process: searches arriving meanwhile gather for
/// the next, and the cache is brought forward once for all of them.
const TURNS_AT_ONCE: usize = 1;

/// At most this many names remembered from past turns (see
/// [`SharedReads::guess`]); past it, the memory starts again from the last turn.
const MOST_KNOWN: usize = 4096;

/// The class, trait and aggregate names a query uses.
#[derive(Debug, Clone, Default)]
pub(in crate::candidates) struct Names {
    /// In the query's order (the first unknown one is the 400's).
    pub classes: Vec<String>,
    /// Sorted.
    pub traits: Vec<String>,
    pub aggregates: Vec<uuid::Uuid>,
}

/// Names of a query resolved to ids.
#[derive(Debug, PartialEq)]
pub(in crate::candidates) struct Ids {
    pub class: HashMap<String, i32>,
    pub trait_: HashMap<String, i32>,
    pub agg: HashMap<uuid::Uuid, i32>,
}

impl Ids {
    pub fn traits(&self, names: &BTreeSet<String>) -> Vec<i32> {
        names
            .iter()
            .filter_map(|n| self.trait_.get(n).copied())
            .collect()
    }

    pub fn aggs<'a>(&self, uuids: impl IntoIterator<Item = &'a uuid::Uuid>) -> Vec<i32> {
        uuids
            .into_iter()
            .filter_map(|u| self.agg.get(u).copied())
            .collect()
    }
}

impl Names {
    pub fn of(q: &CandidateQuery) -> Names {
        let mut traits: BTreeSet<String> = q.root_required.names();
        for g in &q.groups {
            traits.extend(g.traits.names());
        }
        Names {
            classes: q
                .groups
                .iter()
                .flat_map(|g| g.resources.iter().map(|(c, _)| c.clone()))
                .collect(),
            traits: traits.into_iter().collect(),
            aggregates: q
                .groups
                .iter()
                .flat_map(|g| {
                    let m = &g.member_of;
                    m.any_of.iter().flatten().chain(&m.forbidden).copied()
                })
                .collect(),
        }
    }

    /// Every name of `all`, each once.
    fn union(all: &[Names]) -> Names {
        let classes: BTreeSet<&String> = all.iter().flat_map(|n| &n.classes).collect();
        let traits: BTreeSet<&String> = all.iter().flat_map(|n| &n.traits).collect();
        let aggregates: BTreeSet<&uuid::Uuid> = all.iter().flat_map(|n| &n.aggregates).collect();
        Names {
            classes: classes.into_iter().cloned().collect(),
            traits: traits.into_iter().cloned().collect(),
            aggregates: aggregates.into_iter().copied().collect(),
        }
    }

    /// These names as ids, from a look that asked for them (and perhaps
    /// others: only these are kept). Unknown classes and traits are 400s;
    /// unknown aggregates simply match nothing.
    pub fn resolve(&self, look: &db::Look) -> Result<Ids> {
        if let Some(rc) = self.classes.iter().find(|c| !look.classes.contains_key(*c)) {
            return Err(Error::invalid(format!(
                "Invalid resource class in resources parameter: No such resource class {rc}."
            )));
        }
        let missing: Vec<&str> = self
            .traits
            .iter()
            .filter(|t| !look.traits.contains_key(*t))
            .map(String::as_str)
            .collect();
        if !missing.is_empty() {
            return Err(Error::invalid(format!(
                "No such trait(s): {}.",
                missing.join(", ")
            )));
        }
        let pick = |map: &HashMap<String, i32>, names: &[String]| -> HashMap<String, i32> {
            names
                .iter()
                .filter_map(|n| map.get(n).map(|&id| (n.clone(), id)))
                .collect()
        };
        Ok(Ids {
            class: pick(&look.classes, &self.classes),
            trait_: pick(&look.traits, &self.traits),
            agg: self
                .aggregates
                .iter()
                .filter_map(|u| look.aggregates.get(u).map(|&id| (*u, id)))
                .collect(),
        })
    }
}

/// What one turn read for the searches in it.
pub(in crate::candidates) struct AtRest {
    /// The names of every search in the turn, and the snapshot of the
    /// statement that read them.
    pub look: db::Look,
    /// The cached provider data, brought to cover `look`'s snapshot;
    /// None when only a full load would (or a reservation exists, which
    /// the shared read does not withhold).
    pub snap: Option<Arc<Snapshot>>,
}

/// What a turn answers each of its searches: the read, or why the
/// database could not be reached (each search then answers 503 at once,
/// instead of each waiting for a connection of its own in turn).
type Outcome = std::result::Result<Arc<AtRest>, Arc<str>>;

/// This process's searches waiting for a turn.
#[derive(Debug)]
pub struct SharedReads {
    waiting: Batcher<Names, Outcome>,
    /// The names past turns resolved, and whether the last one found a
    /// reservation (its snapshot is not used).
    known: std::sync::Mutex<db::Look>,
    /// The turns' connection, kept between back-to-back turns.
    kept: Arc<WarmConnection>,
}

impl Default for SharedReads {
    fn default() -> Self {
        SharedReads {
            waiting: Batcher::new(TURNS_AT_ONCE, MOST_AT_ONCE, |o: &Outcome| o.is_err()),
            known: std::sync::Mutex::new(db::Look {
                seen: db::Seen {
                    snapshot: String::new(),
                    server: String::new(),
                },
                classes: HashMap::new(),
                traits: HashMap::new(),
                aggregates: HashMap::new(),
                reservations: true,
            }),
            kept: Arc::default(),
        }
    }
}

impl std::fmt::Debug for AtRest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AtRest")
            .field("snapshot", &self.look.seen.snapshot)
            .finish_non_exhaustive()
    }
}

impl SharedReads {
    /// The names and the provider data for a search of `names`, read with
    /// the searches waiting beside it. A 503 when the turn could not reach
    /// the database; None when it failed otherwise: the caller's own read
    /// then says why.
    pub(in crate::candidates) async fn read(
        &self,
        pool: &Pool,
        cache: &Arc<SnapshotCache>,
        names: Names,
    ) -> Result<Option<Arc<AtRest>>> {
        let (pool, cache, kept) = (pool.clone(), Arc::clone(cache), self.kept.clone());
        let outcome = self
            .waiting
            .submit(names, move |all| async move {
                match turn(&pool, &kept, &cache, &all).await {
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
                self.learn(&read.look);
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
    pub(in crate::candidates) fn guess(&self, names: &Names) -> Option<Ids> {
        let known = self.known.lock().ok()?;
        match known.reservations {
            true => None,
            false => names.resolve(&known).ok(),
        }
    }

    /// Remembers what a turn resolved.
    fn learn(&self, look: &db::Look) {
        let Ok(mut known) = self.known.lock() else {
            return;
        };
        known.reservations = look.reservations;
        for fresh in [false, true] {
            if fresh {
                known.classes.clear();
                known.traits.clear();
                known.aggregates.clear();
            }
            remember(&mut known.classes, &look.classes);
            remember(&mut known.traits, &look.traits);
            remember(&mut known.aggregates, &look.aggregates);
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
    kept: &WarmConnection,
    cache: &SnapshotCache,
    all: &[Names],
) -> std::result::Result<Arc<AtRest>, sqlx::Error> {
    let names = Names::union(all);
    let mut conn = kept.take(pool).await?;
    let look = db::look(&mut conn, &names.classes, &names.traits, &names.aggregates).await?;
    let snap = match look.reservations {
        true => None,
        false => cache.covering(&mut conn, &look.seen).await?,
    };
    kept.give_back(conn);
    Ok(Arc::new(AtRest { look, snap }))
}

/// A search's read through the shared statement: no transaction. The
/// names come from one statement, shared with the searches waiting
/// beside it, and the cached
/// providers from a snapshot that sees all that statement saw (brought
/// forward by one more statement when it is behind). None when it does
/// not apply (a project holds a reservation, batch work, only a full load
/// would bring the cache forward, or the shared turn failed for another
/// reason than a lost database, which is a 503); unknown names are the
/// same 400s either way.
pub(in crate::candidates) async fn read_shared(
    engine: &Engine<'_>,
    names: &Names,
    priority: PriorityClass,
) -> Result<Option<Read>> {
    if priority.low() {
        return Ok(None);
    }
    let Some(read) = engine
        .reads
        .read(engine.pool, engine.cache, names.clone())
        .await?
    else {
        // The shared turn failed: the full read says why.
        return Ok(None);
    };
    let ids = names.resolve(&read.look)?;
    Ok(read.snap.clone().map(|snap| Read {
        snap,
        ids,
        adjusted: Adjustments::default(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(classes: &[&str], traits: &[&str]) -> Names {
        Names {
            classes: classes.iter().map(|c| c.to_string()).collect(),
            traits: traits.iter().map(|t| t.to_string()).collect(),
            aggregates: Vec::new(),
        }
    }

    /// A search sharing a turn resolves only its own names: the turn's
    /// other names neither reach its ids (they would count as requested
    /// classes) nor hide its own unknown ones.
    #[test]
    fn a_search_resolves_only_its_own_names_from_a_shared_look() {
        let all = [
            names(&["VCPU"], &["HW_CPU_X86_AVX2"]),
            names(&["DISK_GB"], &[]),
        ];
        let union = Names::union(&all);
        assert_eq!(union.classes, ["DISK_GB", "VCPU"]);
        let look = db::Look {
            seen: db::Seen {
                snapshot: "1:1:".into(),
                server: String::new(),
            },
            classes: HashMap::from([("VCPU".into(), 0), ("DISK_GB".into(), 2)]),
            traits: HashMap::from([("HW_CPU_X86_AVX2".into(), 7)]),
            aggregates: HashMap::new(),
            reservations: false,
        };
        let ids = all[1].resolve(&look).unwrap_or_else(|e| panic!("{e:?}"));
        assert_eq!(ids.class, HashMap::from([("DISK_GB".into(), 2)]));
        assert!(ids.trait_.is_empty());
        let unknown = names(&["VCPU", "CUSTOM_NOPE"], &[]).resolve(&look);
        assert!(
            unknown.is_err_and(|e| e.to_string().contains("No such resource class CUSTOM_NOPE"))
        );
    }

    fn look(classes: &[(&str, i32)], reservations: bool) -> db::Look {
        db::Look {
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
        let reads = SharedReads::default();
        let vcpu = names(&["VCPU"], &[]);
        assert!(reads.guess(&vcpu).is_none(), "nothing learnt yet");
        reads.learn(&look(&[("VCPU", 0)], false));
        let guessed = reads.guess(&vcpu).map(|ids| ids.class);
        assert_eq!(guessed, Some(HashMap::from([("VCPU".into(), 0)])));
        assert!(reads
            .guess(&names(&["VCPU"], &["HW_CPU_X86_AVX2"]))
            .is_none());
        reads.learn(&look(&[("VCPU", 5)], false));
        assert_eq!(reads.guess(&vcpu).map(|ids| ids.class["VCPU"]), Some(5));
        reads.learn(&look(&[], true));
        assert!(reads.guess(&vcpu).is_none(), "a reservation exists");
    }

    /// Past its bound the memory starts again from the last turn.
    #[test]
    fn the_memory_of_names_is_bounded() {
        let reads = SharedReads::default();
        let many: Vec<(String, i32)> = (0..MOST_KNOWN)
            .map(|i| (format!("CUSTOM_{i}"), 10))
            .collect();
        let many: Vec<(&str, i32)> = many.iter().map(|(c, id)| (c.as_str(), *id)).collect();
        reads.learn(&look(&many, false));
        reads.learn(&look(&[("VCPU", 0)], false));
        assert!(reads.guess(&names(&["VCPU"], &[])).is_some());
        assert!(
            reads.guess(&names(&["CUSTOM_0"], &[])).is_none(),
            "forgotten"
        );
    }
}
