//! A speculative solve: a search solved on the cached snapshot as it
//! stands, with the ids past shared reads resolved its names to, while its
//! own shared read runs. The answer is kept only when the turn returns that very
//! snapshot and resolves the same ids: the solve's inputs are then the
//! ones it would have had after the turn, so the answer is the same.
//!
//! Why: a large search (1,000 results over 10,000 providers) waited for its
//! turn's round trip, half a millisecond on a quiet server (mostly the
//! wake-ups of two idle processes), and only then solved, for about a
//! millisecond; now the two overlap. It is tried only when the last turn
//! found the cache unchanged (a stream of writes changes it every turn,
//! and the solve would be thrown away) and only for searches that go to
//! the blocking pool (a small one solves in microseconds after its turn).

use super::shared_reads::Ids;
use super::shared_reads::Names;
use super::solving_threads::{self, Solved};
use crate::candidates::find::{rendering_of, solver_request, Engine, Search};
use crate::candidates::snapshot::Snapshot;
use crate::candidates::solve::Limits;
use crate::error::Result;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use tokio::sync::Semaphore;

/// A solve begun before its turn.
pub(in crate::candidates) struct SpeculativeSolve<'a> {
    /// What it solves on.
    snap: Arc<Snapshot>,
    /// The ids it guessed.
    ids: Ids,
    /// The solve; dropping it stops the job (see `solving_threads`).
    job: Pin<Box<dyn Future<Output = Result<Solved>> + Send + 'a>>,
    /// Its outcome, once it finished.
    done: Option<Result<Solved>>,
}

impl<'a> SpeculativeSolve<'a> {
    /// A solve of `job` on `snap` with the guessed `ids`; it runs while
    /// [`SpeculativeSolve::beside`] awaits the turn.
    pub fn new(
        snap: Arc<Snapshot>,
        ids: Ids,
        job: impl Future<Output = Result<Solved>> + Send + 'a,
    ) -> Self {
        SpeculativeSolve {
            snap,
            ids,
            job: Box::pin(job),
            done: None,
        }
    }

    /// Awaits `read`, the search's turn, while the solve goes on.
    pub async fn beside<T>(&mut self, read: impl Future<Output = T>) -> T {
        let mut read = std::pin::pin!(read);
        loop {
            tokio::select! {
                // The turn first: its statement goes out before the job
                // is handed to the pool.
                biased;
                out = &mut read => return out,
                solved = &mut self.job, if self.done.is_none() => self.done = Some(solved),
            }
        }
    }

    /// The answer, when the turn came to `snap` and resolved `ids`; None
    /// otherwise, and the solve is stopped.
    pub async fn answer_for(mut self, snap: &Arc<Snapshot>, ids: &Ids) -> Option<Result<Solved>> {
        let metrics = crate::metrics::metrics();
        if !Arc::ptr_eq(&self.snap, snap) || &self.ids != ids {
            metrics.solves_ahead_discarded.inc();
            return None;
        }
        metrics.searches_solved_ahead.inc();
        Some(match self.done.take() {
            Some(solved) => solved,
            None => self.job.await,
        })
    }
}

/// A solve of `search` begun on the settled cache with the ids past
/// shared reads guessed, while its own read runs; None when the cache moved at the last turn,
/// a name is new to this process, a reservation exists, the search is
/// batch work (its read withholds) or small.
pub(in crate::candidates) fn start<'a>(
    engine: &Engine<'a>,
    search: &Search,
    names: &Names,
    limits: &Limits,
) -> Option<SpeculativeSolve<'a>> {
    if search.priority.low() {
        return None;
    }
    let snap = engine.cache.settled()?;
    if solving_threads::is_small(limits, &snap) {
        return None;
    }
    let ids = engine.reads.guess(names)?;
    let request = solver_request(&snap, &search.query, &ids)?;
    let rendering = rendering_of(search, &ids);
    let cpu: &'a Semaphore = engine.cpu;
    let job = solving_threads::solve_search(cpu, snap.clone(), request, limits.clone(), rendering);
    Some(SpeculativeSolve::new(snap, ids, job))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;
    use std::time::Duration;

    fn ids(vcpu: i32) -> Ids {
        Ids {
            class: HashMap::from([("VCPU".to_string(), vcpu)]),
            trait_: HashMap::new(),
            agg: HashMap::new(),
        }
    }

    fn answered(body: &str) -> Result<Solved> {
        Ok(Solved {
            candidates: Vec::new(),
            cut: false,
            body: Some(body.to_string()),
        })
    }

    /// The solve runs while the read is awaited: a read that completes
    /// only once the solve has run does complete.
    #[tokio::test]
    async fn the_solve_goes_on_while_the_read_is_awaited() {
        let (solved, read) = tokio::sync::oneshot::channel::<()>();
        let mut ahead = SpeculativeSolve::new(Arc::new(Snapshot::default()), ids(0), async move {
            let _ = solved.send(());
            answered("ahead")
        });
        let read = tokio::time::timeout(Duration::from_secs(5), ahead.beside(read)).await;
        assert!(matches!(read, Ok(Ok(()))), "the solve was not polled");
        assert!(ahead.done.is_some(), "its outcome is kept");
    }

    /// The answer is kept for the very snapshot and ids it was begun on,
    /// and for nothing else: an equal copy of the snapshot is another one.
    #[tokio::test]
    async fn the_answer_is_kept_only_for_the_same_snapshot_and_ids() {
        let snap = Arc::new(Snapshot::default());
        let start = |snap: &Arc<Snapshot>| {
            SpeculativeSolve::new(snap.clone(), ids(0), async { answered("a") })
        };
        let copy = Arc::new(Snapshot::clone(&snap));
        assert!(start(&snap).answer_for(&copy, &ids(0)).await.is_none());
        assert!(start(&snap).answer_for(&snap, &ids(1)).await.is_none());
        let kept = start(&snap).answer_for(&snap, &ids(0)).await;
        let body = kept
            .and_then(|solved| solved.ok())
            .and_then(|solved| solved.body);
        assert_eq!(body.as_deref(), Some("a"));
    }
}
