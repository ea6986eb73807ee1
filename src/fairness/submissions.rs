//! Single `POST /queue` submissions that arrive together are stored by one
//! statement (`db::fairness::queue::insert_checked`), on its own, without
//! a transaction around it.
//!
//! A submission alone is a transaction of five round trips (begin, two
//! checks, the insert, commit), each waking the server and PostgreSQL.
//! Together, a free turn runs one statement for every submission waiting;
//! those arriving while the turns are taken wait for the next one. Nothing
//! waits for a group to fill: a lone submission runs at once. With 16
//! clients on two cores this took sustained submissions from 1,240 to
//! 2,000–2,276 a second (`cargo bench --bench admissions`).
//!
//! Each submission stays its own unit: the statement leaves out a request
//! whose checks fail without touching the others, and a request left out
//! takes the one-request path, in its own transaction, which says why.

use crate::coalescing::Coalescer;
use crate::db::fairness::queue::{self as db, CheckedQueued, QueuedRow};
use crate::db::Pool;
use crate::error::{classify, lost_in_flight, DbFailure};
use std::collections::HashMap;
use uuid::Uuid;

/// At most this many submissions in one statement.
const MOST_AT_ONCE: usize = 500;

/// At most this many statements running at once. With one, the next
/// statement waited for the last one's whole round trip, and on two busy
/// cores the submissions were held up there (1,334/s with 16 clients);
/// two kept PostgreSQL busy (2,000–2,276/s), four did no better
/// (1,894–2,071/s) with smaller batches.
const STATEMENTS_AT_ONCE: usize = 2;

/// What the shared statement did with one submission.
#[derive(Debug, Clone)]
pub enum Stored {
    /// Stored as this row.
    Row(Box<QueuedRow>),
    /// Not stored: a check failed, or the statement did.
    LeftOut,
    /// The connection was lost once the statement was sent: it may be
    /// stored. Submitting it again would answer 409 against itself, so the
    /// client is told the outcome is unknown.
    Unknown,
    /// Not stored: the database could not be reached. Every submission
    /// waiting behind is answered the same at once.
    Unavailable(std::sync::Arc<str>),
}

/// This process's submissions waiting for a statement.
#[derive(Debug)]
pub struct Submissions(Coalescer<CheckedQueued, Stored>);

impl Default for Submissions {
    fn default() -> Self {
        Submissions(Coalescer::new(STATEMENTS_AT_ONCE, MOST_AT_ONCE, |s| {
            matches!(s, Stored::Unavailable(_))
        }))
    }
}

impl Submissions {
    /// Stores `request` together with whatever else is waiting.
    /// `cap` is the most pending requests a project may have.
    pub async fn store(&self, pool: &Pool, request: CheckedQueued, cap: i64) -> Stored {
        let pool = pool.clone();
        // Once handed over it is stored whether or not this request
        // still waits for the outcome.
        crate::db::deadline::write_sent();
        self.0
            .submit(request, move |batch| store_all(pool, batch, cap))
            .await
            .unwrap_or(Stored::LeftOut)
    }
}

/// One statement for `requests`; what became of each.
async fn store_all(pool: Pool, requests: Vec<CheckedQueued>, cap: i64) -> Vec<Stored> {
    let started = std::time::Instant::now();
    let stored = match insert(&pool, &requests, cap).await {
        Ok(rows) => {
            tracing::debug!(
                submissions = requests.len(),
                stored = rows.len(),
                ms = started.elapsed().as_secs_f64() * 1e3,
                "queue submissions stored together"
            );
            rows
        }
        Err((e, true)) if lost_in_flight(&e) => {
            tracing::warn!(error = %e, submissions = requests.len(), "connection lost during a shared queue insert");
            crate::db::primary::suspect();
            return requests.iter().map(|_| Stored::Unknown).collect();
        }
        Err((e, false)) if classify(&e) == DbFailure::Unavailable => {
            let cause: std::sync::Arc<str> = std::sync::Arc::from(e.to_string());
            return requests
                .iter()
                .map(|_| Stored::Unavailable(cause.clone()))
                .collect();
        }
        Err((e, _)) => {
            // Each submission retries on its own path, which answers
            // with this failure if it persists.
            tracing::debug!(error = %e, submissions = requests.len(), "shared queue insert failed");
            Vec::new()
        }
    };
    let mut by_id: HashMap<Uuid, QueuedRow> = stored.into_iter().map(|r| (r.id, r)).collect();
    requests
        .iter()
        .map(|request| {
            by_id
                .remove(&request.row.id)
                .map_or(Stored::LeftOut, |row| Stored::Row(Box::new(row)))
        })
        .collect()
}

/// The statement for `requests`; on failure, also whether it was sent.
async fn insert(
    pool: &Pool,
    requests: &[CheckedQueued],
    cap: i64,
) -> Result<Vec<QueuedRow>, (sqlx::Error, bool)> {
    let mut conn = pool.for_one_statement().await.map_err(|e| (e, false))?;
    let rows = db::insert_checked(&mut conn, requests, cap)
        .await
        .map_err(|e| (e, true))?;
    conn.commit().await.map_err(|e| (e, true))?;
    Ok(rows)
}
