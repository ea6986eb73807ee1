//! Coalescing of requests that arrive together: each caller queues its
//! item and waits for a turn, unless another turn takes its item first; a
//! turn takes everything waiting (the group) and runs it as one unit of
//! work (one statement, one transaction), and tells each caller its own
//! outcome. ("Batch" is a priority class here, never this.)
//!
//! Why: one request's work is a few round trips, each waking the server
//! and PostgreSQL; on two busy cores that per-round-trip cost, not the work
//! itself, bounded the rate. Nothing waits for a group to fill: a lone
//! request runs at once, and those arriving while the turns are taken
//! gather for the next one. Used by queue submissions
//! (`fairness::submissions`) and claims (`allocation::claims`).
//!
//! A turn that finds the database unavailable answers everything waiting
//! behind it with the same outcome at once: each would otherwise wait its
//! own turn's acquire timeout, one after another, for the same 503.

use std::future::Future;
use std::sync::{Mutex, MutexGuard};
use tokio::sync::oneshot;

/// A request waiting for a turn, and where its outcome goes.
type Waiter<T, O> = (T, oneshot::Sender<O>);

/// The requests of one kind waiting in this process.
#[derive(Debug)]
pub struct Coalescer<T, O> {
    /// Queued, not yet taken into a turn.
    waiting: Mutex<Vec<Waiter<T, O>>>,
    /// Held while a turn runs: a few at a time, so that requests
    /// arriving meanwhile gather for the next.
    turns: tokio::sync::Semaphore,
    /// At most this many requests in one turn.
    most: usize,
    /// Whether an outcome is one every waiting request shares (the
    /// database is unavailable).
    shared: fn(&O) -> bool,
}

impl<T: Send + 'static, O: Clone + Send + 'static> Coalescer<T, O> {
    /// Runs up to `turns` units of work at once, each of up to `most`
    /// requests; an outcome for which `shared` is true is also every
    /// waiting request's.
    pub fn new(turns: usize, most: usize, shared: fn(&O) -> bool) -> Self {
        Coalescer {
            waiting: Mutex::default(),
            turns: tokio::sync::Semaphore::new(turns),
            most,
            shared,
        }
    }

    /// Answers every request still waiting with `outcome`.
    fn answer_waiting(&self, outcome: &O) {
        let waiting = std::mem::take(&mut *lock(&self.waiting));
        for (_, sender) in waiting {
            let _ = sender.send(outcome.clone());
        }
    }

    /// Does `item` together with whatever else is waiting: `run` gets the
    /// turn's items and answers one outcome per item, in their order.
    /// None when the work ended without an outcome for this item (it
    /// panicked or answered too few).
    pub async fn submit<F, Fut>(&self, item: T, run: F) -> Option<O>
    where
        F: FnOnce(Vec<T>) -> Fut,
        Fut: Future<Output = Vec<O>> + Send + 'static,
    {
        let (sender, mut outcome) = oneshot::channel();
        lock(&self.waiting).push((item, sender));
        {
            // A request whose item another turn took waits for its outcome
            // only: were it to keep its place in the line for a turn, it
            // would run one for whatever arrived meanwhile (often a single
            // request) before answering its own client, and the requests
            // behind it would gather in ones. The semaphore is never
            // closed.
            let _turn = tokio::select! {
                biased;
                done = &mut outcome => return done.ok(),
                turn = self.turns.acquire() => turn,
            };
            let group = {
                let mut waiting = lock(&self.waiting);
                let taken = waiting.len().min(self.most);
                let rest = waiting.split_off(taken);
                std::mem::replace(&mut *waiting, rest)
            };
            // Every request takes a turn after queueing itself, so a turn
            // finding nothing means another turn took this one. The work
            // runs in its own task: a client that goes away must not take
            // the others' work with it.
            if !group.is_empty() {
                let (items, senders): (Vec<T>, Vec<_>) = group.into_iter().unzip();
                let work = run(items);
                let shared = self.shared;
                let failed = tokio::spawn(async move {
                    let outcomes = work.await;
                    let failed = outcomes.iter().find(|o| shared(o)).cloned();
                    for (outcome, sender) in outcomes.into_iter().zip(senders) {
                        // A request whose client went away no longer listens.
                        let _ = sender.send(outcome);
                    }
                    failed
                })
                .await;
                if let Ok(Some(failed)) = failed {
                    self.answer_waiting(&failed);
                }
            }
        }
        outcome.await.ok()
    }
}

/// The waiting list, whatever a panicking holder left in it (each entry
/// is whole: pushes and splits do not unwind halfway).
fn lock<T>(waiting: &Mutex<T>) -> MutexGuard<'_, T> {
    waiting.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::Coalescer;
    use std::sync::Arc;

    /// Requests arriving while the only turn is taken are done together,
    /// each with its own outcome; a lone request runs at once.
    #[tokio::test]
    async fn requests_arriving_together_share_a_turn_and_keep_their_outcomes() {
        let gather: Arc<Coalescer<u32, (u32, usize)>> = Arc::new(Coalescer::new(1, 100, |_| false));
        let alone = gather
            .submit(7, |items| async move { vec![(items[0] * 2, items.len())] })
            .await;
        assert_eq!(alone, Some((14, 1)));
        let (release, held) = tokio::sync::oneshot::channel::<()>();
        let first = {
            let g = gather.clone();
            tokio::spawn(async move {
                g.submit(1, |items| async move {
                    let _ = held.await;
                    items.iter().map(|i| (i * 2, items.len())).collect()
                })
                .await
            })
        };
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        let rest: Vec<_> = (2..6)
            .map(|n| {
                let g = gather.clone();
                tokio::spawn(async move {
                    g.submit(n, |items| async move {
                        items.iter().map(|i| (i * 2, items.len())).collect()
                    })
                    .await
                })
            })
            .collect();
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        let _ = release.send(());
        assert_eq!(first.await.ok().flatten(), Some((2, 1)));
        for (n, r) in (2..6).zip(rest) {
            assert_eq!(r.await.ok().flatten(), Some((n * 2, 4)));
        }
    }

    /// Clients that each send their next request once the last is
    /// answered still gather: a request whose item a turn took is answered
    /// when that turn ends, not after running a turn of its own for the
    /// requests that arrived meanwhile (which made every turn one request
    /// long and every request wait for all the others' turns).
    #[tokio::test]
    async fn clients_in_a_loop_gather_in_groups() {
        let gather: Arc<Coalescer<u32, usize>> = Arc::new(Coalescer::new(1, 100, |_| false));
        let clients: Vec<_> = (0..16)
            .map(|_| {
                let g = gather.clone();
                tokio::spawn(async move {
                    let mut sizes = Vec::new();
                    for n in 0..20 {
                        let size = g
                            .submit(n, |items| async move {
                                tokio::time::sleep(std::time::Duration::from_millis(2)).await;
                                vec![items.len(); items.len()]
                            })
                            .await;
                        sizes.push(size.unwrap_or(0));
                    }
                    sizes
                })
            })
            .collect();
        let mut sizes = Vec::new();
        for c in clients {
            sizes.extend(c.await.unwrap_or_default());
        }
        let mean = sizes.iter().sum::<usize>() as f64 / sizes.len() as f64;
        assert!(
            mean > 4.0,
            "requests gathered {mean:.1} to a turn on average"
        );
    }

    /// Work that answers too few outcomes leaves the rest with none.
    #[tokio::test]
    async fn a_request_without_an_outcome_gets_none() {
        let gather: Coalescer<u32, u32> = Coalescer::new(1, 100, |_| false);
        assert_eq!(gather.submit(1, |_| async { Vec::new() }).await, None);
    }

    /// A turn whose outcome is shared answers the requests waiting behind
    /// it at once, without running them.
    #[tokio::test]
    async fn a_shared_failure_answers_everyone_waiting() {
        let gather: Arc<Coalescer<u32, i32>> = Arc::new(Coalescer::new(1, 1, |o| *o < 0));
        let runs = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let tasks: Vec<_> = (0..5)
            .map(|n| {
                let (g, runs) = (gather.clone(), runs.clone());
                tokio::spawn(async move {
                    g.submit(n, move |items| async move {
                        runs.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        tokio::time::sleep(std::time::Duration::from_millis(30)).await;
                        items.iter().map(|_| -1).collect()
                    })
                    .await
                })
            })
            .collect();
        for t in tasks {
            assert_eq!(t.await.ok().flatten(), Some(-1));
        }
        assert!(runs.load(std::sync::atomic::Ordering::SeqCst) < 5);
    }
}
