//! Where a search's CPU work runs: on the blocking pool, one job per core,
//! so a burst of expensive searches queues instead of crowding out the
//! async workers that answer everything else; but small work in place.
//!
//! Why small work stays: handing a job to the blocking pool and back wakes
//! two threads. A scheduler's search (`limit=10`) solves in about 15 µs and
//! renders in as much, and under 32 claiming clients the hand-offs took
//! more of the server's CPU than the solving and rendering together (7 %
//! against 6 %), and the wait for a permit was a millisecond of each
//! search's latency. Small is bounded twice: by what the search asks for
//! (a few results over a snapshot of a size whose fixed costs, such as the
//! shuffled copy of the roots, stay in microseconds), and by a step budget
//! that sends a search that turns out larger to the pool after all.

use crate::candidates::engine::{Job, Pending, Solved, SolvingStep};
use crate::candidates::snapshot::Snapshot;
use crate::candidates::solve::{self, Candidate, Limits, Solution, Stopped};
use crate::error::{Error, Result};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use tokio::sync::Semaphore;

/// At most this many results for a search to be tried in place.
pub const SMALL_RESULTS: usize = 64;

/// At most this many providers in the snapshot for a search to be tried
/// in place (its fixed costs grow with the snapshot, not with its steps).
pub const SMALL_SNAPSHOT: usize = 10_000;

/// The steps a search tried in place may take; one that needs more is
/// solved again on the pool (at most this much work is done twice).
pub const SMALL_STEPS: u64 = 512;

/// Whether a search of `limits` over `snap` is tried in place.
pub fn is_small(limits: &Limits, snap: &Snapshot) -> bool {
    limits.max_results.is_some_and(|n| n <= SMALL_RESULTS) && snap.nodes.len() <= SMALL_SNAPSHOT
}

/// Runs CPU-heavy work on the blocking pool, one job per permit.
pub async fn on_cpu<T: Send + 'static>(
    cpu: &Semaphore,
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<T> {
    let _permit = cpu.acquire().await.map_err(Error::internal)?;
    tokio::task::spawn_blocking(work)
        .await
        .map_err(Error::internal)
}

/// Runs `work` in place when `small`, else as [`on_cpu`].
async fn on_cpu_unless_small<T: Send + 'static>(
    cpu: &Semaphore,
    small: bool,
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<T> {
    match small {
        true => Ok(work()),
        false => on_cpu(cpu, work).await,
    }
}

/// Sets its flag when dropped: the request future that owns it is dropped
/// when the client goes away, and the solver, on a blocking thread, reads
/// the flag and stops.
struct CancelOnDrop(Arc<AtomicBool>);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// Solves `job` (and renders its answer when asked): in place first when
/// the search is small (see the module's note), with at most
/// `small_steps` steps, else (or when that budget ran out before the
/// search's own) on the blocking pool, where a client that goes away
/// stops it, and where the answer is rendered in the same job. The same
/// answer either way: the solver is deterministic for a given shuffle seed.
pub async fn solve(
    cpu: &Semaphore,
    job: Job,
    small_steps: u64,
) -> Result<(Solution, Option<String>)> {
    let Job {
        snap,
        request,
        limits,
        rendering,
    } = job;
    let small = is_small(&limits, &snap);
    // 0 is an unbounded budget.
    let own = if limits.max_steps == 0 {
        u64::MAX
    } else {
        limits.max_steps
    };
    if small {
        let capped = Limits {
            max_steps: own.min(small_steps),
            ..limits.clone()
        };
        let solution = solve::solve(&snap, &request, &capped);
        if solution.stopped != Some(Stopped::Budget) || own <= small_steps {
            let Some(r) = rendering else {
                return Ok((solution, None));
            };
            let small = small_render(&snap, &solution.candidates, r.writer.whole_trees);
            let render = move || {
                let body = r.render(&snap, &solution.candidates);
                (solution, Some(body))
            };
            return on_cpu_unless_small(cpu, small, render).await;
        }
    }
    let cancel = CancelOnDrop(Arc::new(AtomicBool::new(false)));
    let limits = Limits {
        cancel: Some(cancel.0.clone()),
        ..limits
    };
    let solved = on_cpu(cpu, move || {
        let solution = solve::solve(&snap, &request, &limits);
        let body = rendering.map(|r| r.render(&snap, &solution.candidates));
        (solution, body)
    })
    .await?;
    drop(cancel);
    Ok(solved)
}

/// Whether rendering `cands` is small enough to do in place: a few
/// candidates whose summaries are a few providers.
pub fn small_render(snap: &Snapshot, cands: &[Candidate], whole_trees: bool) -> bool {
    if cands.len() > SMALL_RESULTS {
        return false;
    }
    let providers: usize = cands
        .iter()
        .map(|c| match whole_trees && snap.any_nested {
            true => c
                .allocations
                .iter()
                .map(|a| snap.tree(snap.nodes[a.0].root).len())
                .sum(),
            false => c.allocations.len(),
        })
        .sum();
    providers <= 4 * SMALL_RESULTS
}

/// The engine's [`SolvingStep`]: one permit per core for CPU-heavy work
/// (solve, render), so that a burst of expensive searches queues instead
/// of crowding out the async workers that answer everything else.
#[derive(Debug)]
pub struct SolvingThreads {
    cpu: Semaphore,
}

impl Default for SolvingThreads {
    fn default() -> Self {
        SolvingThreads {
            cpu: Semaphore::new(std::thread::available_parallelism().map_or(2, usize::from)),
        }
    }
}

impl SolvingStep for SolvingThreads {
    fn solve(&self, job: Job) -> Pending<'_, Result<Solved>> {
        Box::pin(solve_search(&self.cpu, job))
    }

    /// Only searches that go to the blocking pool: a small one solves in
    /// microseconds once its read is in.
    fn pays_ahead(&self, job: &Job) -> bool {
        !is_small(&job.limits, &job.snap)
    }
}

/// Solves a search (and renders it, when asked) as [`solve()`] does, and
/// logs how it went: a cut at the step budget is a warning.
async fn solve_search(cpu: &Semaphore, job: Job) -> Result<Solved> {
    let started = std::time::Instant::now();
    let (solution, body) = solve(cpu, job, SMALL_STEPS).await?;
    let solve_ms = started.elapsed().as_secs_f64() * 1e3;
    match solution.stopped {
        Some(Stopped::Budget) => tracing::warn!(
            solve_ms,
            steps = solution.steps,
            candidates = solution.candidates.len(),
            "allocation candidates cut at the step budget (allocation_candidates_max_steps)"
        ),
        Some(Stopped::Cancelled) => tracing::info!(solve_ms, "allocation candidates cancelled"),
        None => tracing::debug!(
            solve_ms,
            steps = solution.steps,
            candidates = solution.candidates.len(),
            "solved"
        ),
    }
    Ok(Solved {
        cut: solution.stopped == Some(Stopped::Budget),
        candidates: solution.candidates,
        body,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::candidates::answer::{AnswerWriter, Asked, Rendering};
    use crate::candidates::snapshot::{Node, Stock};
    use crate::candidates::solve::Group;

    fn uuid(i: usize) -> uuid::Uuid {
        uuid::Uuid::from_u128(u128::try_from(i).unwrap_or(0) + 1)
    }

    /// `n` lone providers with VCPU 4, of which the first `full` have
    /// none left.
    fn providers(n: usize, full: usize) -> Snapshot {
        let nodes = (0..n)
            .map(|i| {
                Arc::new(Node {
                    id: i64::try_from(i).unwrap_or(0) + 1,
                    uuid: uuid(i),
                    json_uuid: crate::candidates::snapshot::JsonUuid::of(uuid(i)),
                    parent: None,
                    root: i,
                    traits: vec![],
                    aggs: vec![],
                    stamp: 0,
                    stock: vec![Stock {
                        class: 0,
                        inventory: crate::types::Inventory::whole(4),
                        used: if i < full { 4 } else { 0 },
                    }],
                    report: None,
                })
            })
            .collect();
        let mut s = Snapshot {
            nodes,
            ..Default::default()
        };
        s.index();
        s
    }

    fn vcpu(n: i64) -> solve::Request {
        solve::Request {
            groups: vec![Group {
                resources: vec![(0, n)],
                ..Default::default()
            }],
            ..Default::default()
        }
    }

    fn limits(max_results: Option<usize>, max_steps: u64, seed: Option<u64>) -> Limits {
        Limits {
            max_results,
            max_steps,
            shuffle_seed: seed,
            ..Default::default()
        }
    }

    fn job(snap: &Arc<Snapshot>, request: solve::Request, limits: Limits) -> Job {
        Job {
            snap: snap.clone(),
            request,
            limits,
            rendering: None,
        }
    }

    fn uuids(s: &Solution, snap: &Snapshot) -> Vec<uuid::Uuid> {
        s.candidates
            .iter()
            .map(|c| snap.nodes[c.allocations[0].0].uuid)
            .collect()
    }

    #[tokio::test]
    async fn a_search_larger_than_its_small_budget_is_solved_whole_on_the_pool() {
        let cpu = Semaphore::new(1);
        let snap = Arc::new(providers(100, 90));
        for seed in [None, Some(7)] {
            let whole = solve::solve(&snap, &vcpu(1), &limits(Some(5), 0, seed));
            assert_eq!(whole.candidates.len(), 5);
            // 90 full providers before the first fit: 10 steps in place
            // stop short, and the pool's answer is the whole search's.
            let got = solve(&cpu, job(&snap, vcpu(1), limits(Some(5), 0, seed)), 10)
                .await
                .expect("solved")
                .0;
            assert_eq!(got.stopped, None);
            assert_eq!(uuids(&got, &snap), uuids(&whole, &snap));
            assert_eq!(got.steps, whole.steps);
        }
    }

    #[tokio::test]
    async fn a_budget_smaller_than_the_small_one_is_the_searchs_own() {
        let cpu = Semaphore::new(1);
        let snap = Arc::new(providers(100, 90));
        let got = solve(&cpu, job(&snap, vcpu(1), limits(Some(5), 20, None)), 512)
            .await
            .expect("solved")
            .0;
        assert_eq!(got.stopped, Some(Stopped::Budget));
        assert_eq!(got.steps, 20);
    }

    #[tokio::test]
    async fn small_searches_and_large_ones_answer_alike() {
        let cpu = Semaphore::new(1);
        let snap = Arc::new(providers(300, 0));
        for (max_results, seed) in [(Some(10), Some(3)), (Some(64), None), (None, Some(3))] {
            let l = limits(max_results, 0, seed);
            let whole = solve::solve(&snap, &vcpu(2), &l);
            let got = solve(&cpu, job(&snap, vcpu(2), l), SMALL_STEPS)
                .await
                .expect("solved")
                .0;
            assert_eq!(uuids(&got, &snap), uuids(&whole, &snap));
        }
    }

    #[tokio::test]
    async fn the_answer_is_rendered_alike_in_place_and_on_the_pool() {
        let cpu = Semaphore::new(1);
        let snap = Arc::new(providers(300, 0));
        // Any writer: what matters is that it runs, in place or on the
        // pool, over the same candidates.
        let rendering = Rendering {
            asked: Asked {
                suffixes: vec![String::new()],
                requested: [0].into(),
            },
            writer: AnswerWriter {
                write: Arc::new(|snap: &Snapshot, cands: &[Candidate], asked: &Asked| {
                    let first = cands.first().map(|c| snap.nodes[c.allocations[0].0].uuid);
                    format!("{} {:?} {:?}", cands.len(), first, asked.suffixes)
                }),
                whole_trees: false,
            },
        };
        // A small search rendered in place, a larger one rendered on the
        // pool after it is solved there, and a small one that outgrew its
        // steps in place.
        for (max_results, small_steps) in
            [(Some(3), SMALL_STEPS), (None, SMALL_STEPS), (Some(64), 1)]
        {
            let l = limits(max_results, 0, None);
            let whole = solve::solve(&snap, &vcpu(1), &l);
            let want = rendering.render(&snap, &whole.candidates);
            let j = Job {
                rendering: Some(rendering.clone()),
                ..job(&snap, vcpu(1), l)
            };
            let (got, body) = solve(&cpu, j, small_steps).await.expect("solved");
            assert_eq!(got.candidates.len(), whole.candidates.len());
            assert_eq!(body.as_deref(), Some(want.as_str()));
        }
    }

    #[test]
    fn renders_of_many_candidates_or_large_trees_are_not_small() {
        let snap = providers(300, 0);
        let cand = |p: usize| Candidate {
            allocations: vec![(p, 0, 1)],
            mappings: vec![vec![p]],
        };
        let few: Vec<Candidate> = (0..10).map(cand).collect();
        let many: Vec<Candidate> = (0..65).map(cand).collect();
        assert!(small_render(&snap, &few, true));
        assert!(!small_render(&snap, &many, true));
    }
}
