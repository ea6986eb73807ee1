//! A solve begun before its read: on a guess of what the read will
//! return (the provider data as it stands, the ids past reads gave the
//! search's names), while the read runs. Its answer counts only when the
//! read returns that very snapshot and resolves the same ids: the solve's
//! inputs are then the ones it would have had after the read, so the
//! answer is the same. That rule is the core's; when to guess, and whether
//! a search is large enough to pay for it, is the speed machinery's
//! (`ProviderRead::guess`, `SolvingStep::pays_ahead`).
//!
//! Why: a large search (1,000 results over 10,000 providers) waited for its
//! read's round trip, half a millisecond on a quiet server (mostly the
//! wake-ups of two idle processes), and only then solved, for about a
//! millisecond; now the two overlap.

use super::engine::{Pending, Solved};
use super::names::Ids;
use super::snapshot::Snapshot;
use crate::error::Result;
use std::future::Future;
use std::sync::Arc;

/// A solve begun before its read.
pub struct SolveAhead<'a> {
    /// What it solves on.
    snap: Arc<Snapshot>,
    /// The ids it guessed.
    ids: Ids,
    /// The solve; dropping it stops the job (see `solving_threads`).
    job: Pending<'a, Result<Solved>>,
    /// Its outcome, once it finished.
    done: Option<Result<Solved>>,
}

impl<'a> SolveAhead<'a> {
    /// A solve of `job` on `snap` with the guessed `ids`; it runs while
    /// [`SolveAhead::beside`] awaits the read.
    pub fn new(snap: Arc<Snapshot>, ids: Ids, job: Pending<'a, Result<Solved>>) -> Self {
        SolveAhead {
            snap,
            ids,
            job,
            done: None,
        }
    }

    /// Awaits `read`, the search's own read, while the solve goes on.
    pub async fn beside<T>(&mut self, read: impl Future<Output = T>) -> T {
        let mut read = std::pin::pin!(read);
        loop {
            tokio::select! {
                // The read first: its statement goes out before the job
                // is handed to the pool.
                biased;
                out = &mut read => return out,
                solved = &mut self.job, if self.done.is_none() => self.done = Some(solved),
            }
        }
    }

    /// The answer, when the read came to `snap` and resolved `ids`; None
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
        let mut ahead = SolveAhead::new(
            Arc::new(Snapshot::default()),
            ids(0),
            Box::pin(async move {
                let _ = solved.send(());
                answered("ahead")
            }),
        );
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
            SolveAhead::new(snap.clone(), ids(0), Box::pin(async { answered("a") }))
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
