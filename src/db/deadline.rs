//! One deadline per request for its database work: every acquire and
//! every round trip a request makes runs inside it, so a PostgreSQL that
//! hangs (stopped, or behind a partition that drops packets) costs a
//! request at most the deadline, answered 503, never as long as the hang.
//!
//! The deadline is carried in a task-local, set by the request pipeline
//! around the handler. Two things refine it:
//! - a write that may have reached PostgreSQL (a COMMIT sent, a statement
//!   that commits on its own, a claim handed to a shared turn) marks the
//!   request, so a deadline passing after it answers "outcome unknown"
//!   rather than "not written";
//! - a wait that is not database work (a long poll's wait for a decision)
//!   pauses the deadline, which starts afresh once the wait ends.

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

/// A request's deadline and what its work has done so far.
#[derive(Debug)]
struct Deadline {
    /// How long each stretch of database work may take.
    budget: Duration,
    /// When the current stretch runs out.
    end: Mutex<Instant>,
    /// Waits in progress that are not database work.
    paused: AtomicUsize,
    /// Whether a write may have reached PostgreSQL.
    write_sent: AtomicBool,
}

impl Deadline {
    fn end(&self) -> Instant {
        *self.end.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn restart(&self) {
        *self.end.lock().unwrap_or_else(|e| e.into_inner()) = Instant::now() + self.budget;
    }
}

tokio::task_local! {
    static DEADLINE: Arc<Deadline>;
}

/// The deadline passed before the work ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Passed {
    /// A write may have reached PostgreSQL before it passed: whether it is
    /// stored is unknown.
    pub write_sent: bool,
}

/// Runs `work` with a deadline of `budget` for its database work. The
/// work is dropped when the deadline passes (its connections go back to
/// the pool, which checks them; a transaction never committed is rolled
/// back by PostgreSQL when the connection ends).
pub async fn within<F: Future>(budget: Duration, work: F) -> Result<F::Output, Passed> {
    let deadline = Arc::new(Deadline {
        budget,
        end: Mutex::new(Instant::now() + budget),
        paused: AtomicUsize::new(0),
        write_sent: AtomicBool::new(false),
    });
    let watch = deadline.clone();
    let work = DEADLINE.scope(deadline, work);
    tokio::pin!(work);
    loop {
        let end = watch.end();
        tokio::select! {
            biased;
            out = &mut work => return Ok(out),
            () = tokio::time::sleep_until(end) => {
                if watch.paused.load(Ordering::Acquire) > 0 {
                    watch.restart();
                } else if watch.end() <= Instant::now() {
                    return Err(Passed {
                        write_sent: watch.write_sent.load(Ordering::Acquire),
                    });
                }
            }
        }
    }
}

/// Marks the current request: a write may reach PostgreSQL from here on.
/// Outside a request (start-up, background work) it does nothing.
pub fn write_sent() {
    let _ = DEADLINE.try_with(|d| d.write_sent.store(true, Ordering::Release));
}

/// Runs `wait`, which is not database work (a long poll's wait for a
/// decision), with the request's deadline paused; the deadline starts
/// afresh when it ends.
pub async fn paused_while<F: Future>(wait: F) -> F::Output {
    struct Resume(Option<Arc<Deadline>>);
    impl Drop for Resume {
        fn drop(&mut self) {
            if let Some(d) = &self.0 {
                d.restart();
                d.paused.fetch_sub(1, Ordering::AcqRel);
            }
        }
    }
    let current = DEADLINE.try_with(Arc::clone).ok();
    if let Some(d) = &current {
        d.paused.fetch_add(1, Ordering::AcqRel);
    }
    let _resume = Resume(current);
    wait.await
}

#[cfg(test)]
mod tests {
    use super::*;

    const BUDGET: Duration = Duration::from_millis(200);

    #[tokio::test]
    async fn work_past_the_deadline_is_cut_and_says_whether_a_write_was_sent() {
        let quick = within(BUDGET, async { 7 }).await;
        assert_eq!(quick, Ok(7));
        let hung = within(BUDGET, std::future::pending::<()>()).await;
        assert_eq!(hung, Err(Passed { write_sent: false }));
        let sent = within(BUDGET, async {
            write_sent();
            std::future::pending::<()>().await
        })
        .await;
        assert_eq!(sent, Err(Passed { write_sent: true }));
    }

    #[tokio::test]
    async fn a_paused_wait_does_not_count_and_the_deadline_restarts_after_it() {
        let polled = within(BUDGET, async {
            tokio::time::sleep(BUDGET * 3 / 4).await;
            paused_while(tokio::time::sleep(BUDGET * 4)).await;
            tokio::time::sleep(BUDGET * 3 / 4).await;
            "decided"
        })
        .await;
        assert_eq!(polled, Ok("decided"));
        let after = within(BUDGET, async {
            paused_while(tokio::time::sleep(BUDGET * 2)).await;
            std::future::pending::<()>().await
        })
        .await;
        assert!(after.is_err());
    }

    #[tokio::test]
    async fn outside_a_request_marks_and_pauses_do_nothing() {
        write_sent();
        assert_eq!(paused_while(async { 3 }).await, 3);
    }
}
