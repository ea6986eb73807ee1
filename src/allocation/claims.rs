//! `PUT /allocations/{consumer}` claims that arrive together are written by
//! one statement: a scheduler's claims of new consumers, the common write.
//!
//! A claim is one call of `placement_claim` (see `db::allocations::claim`),
//! atomic on its own: one round trip where begin, lock, claim and commit
//! were four, each waking the server and PostgreSQL. Together (`coalescing`),
//! the claims waiting share that call: it locks every provider they name,
//! in id order as every writer does, and checks and writes them all, or
//! writes nothing.
//!
//! Each claim stays its own unit: when the shared call writes nothing (one
//! claim of the turn does not fit, names an unknown class, or needs a
//! quota check), the turn is split in halves, each tried again, down to
//! single claims; a claim refused alone goes to the detailed checks, in
//! its own transaction, which write it (a first claim of a new project)
//! or say why not. A call that fails (the database) sends each of its
//! claims down that path whole, and claims of projects under a limit go
//! there straight. A client is answered only once the statement that
//! wrote its claim committed.

use crate::coalescing::Coalescer;
use crate::db::allocations as db;
use crate::db::Pool;
use crate::error::{classify, lost_in_flight, DbFailure};
use crate::types::ConsumerWrite;
use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// At most this many claims in one call.
const MOST_AT_ONCE: usize = 64;

/// At most this many shared calls running at once per process. One
/// gathers more claims per call than two (2.5 against 1.4 with 32
/// clients over two processes) and made more claims a second.
const CALLS_AT_ONCE: usize = 1;

/// What the shared call did with one claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Claimed {
    /// Written and committed.
    Written,
    /// The call refused it alone, or its project is under a limit (which
    /// the call does not check): only the detailed checks remain.
    Refused,
    /// Not written: the claim runs on its own path.
    Alone,
    /// The connection was lost while the call ran: it may have committed.
    /// Running the claim again would answer for a write that may exist
    /// (a 503 for a stored claim, or a 409 against itself), so the client
    /// is told the outcome is unknown.
    Unknown,
    /// Not written: the database could not be reached. Every claim waiting
    /// behind is answered the same at once, and none is tried again alone
    /// (that would wait for another connection that is not coming).
    Unavailable,
}

/// Why a shared call wrote nothing it can vouch for.
enum CallFailed {
    /// Before its statement was sent, or answered with an error by
    /// PostgreSQL: nothing was written.
    Nothing(db::AllocError),
    /// The connection failed once the statement was sent.
    Lost(sqlx::Error),
}

impl CallFailed {
    /// The failure of a sent statement (or of its commit).
    fn sent(e: db::AllocError) -> Self {
        match e {
            db::AllocError::Db(e) if lost_in_flight(&e) => CallFailed::Lost(e),
            e => CallFailed::Nothing(e),
        }
    }
}

/// How long this process trusts its list of projects under a limit.
const LIMITED_FOR: Duration = Duration::from_secs(2);

/// This process's claims waiting for a call.
#[derive(Debug)]
pub struct Claims {
    waiting: Coalescer<ConsumerWrite, Claimed>,
    /// The projects under a limit. Their claims need the detailed path's
    /// quota check, which the call refuses to make: going there straight
    /// saves them a refused call each (and the halving of every turn they
    /// are in). A stale list only picks the slower path for a moment; the
    /// call checks limits itself.
    limited: std::sync::Mutex<Limited>,
}

/// The list of projects under a limit, as last read.
#[derive(Debug, Default)]
struct Limited {
    /// The list and when it was read.
    read: Option<(Instant, Arc<HashSet<String>>)>,
    /// A claim is reading it again: the others use the old one meanwhile
    /// (no claim waits on another's database read).
    refreshing: bool,
}

impl Default for Claims {
    fn default() -> Self {
        Claims {
            waiting: Coalescer::new(CALLS_AT_ONCE, MOST_AT_ONCE, |c| *c == Claimed::Unavailable),
            limited: std::sync::Mutex::default(),
        }
    }
}

impl Claims {
    /// Writes `write` together with the other claims waiting, when it is
    /// one that can go with others ([`db::claimable`]).
    pub async fn claim(&self, pool: &Pool, write: &ConsumerWrite) -> Claimed {
        if !db::claimable(write) {
            return Claimed::Alone;
        }
        match self.limited(pool).await {
            Ok(limited) if limited.contains(&write.project_id) => return Claimed::Refused,
            Ok(_) => {}
            Err(e) if classify(&e) == DbFailure::Unavailable => return Claimed::Unavailable,
            // The call checks limits itself.
            Err(_) => {}
        }
        let pool = pool.clone();
        // Once handed over it is written whether or not this request still
        // waits for the outcome.
        crate::db::deadline::write_sent();
        self.waiting
            .submit(write.clone(), |batch| write_all(pool, batch))
            .await
            .unwrap_or(Claimed::Alone)
    }

    /// The projects under a limit, read again by one claim when the list
    /// is older than [`LIMITED_FOR`]; the others take the old list (empty
    /// before the first read: the call checks limits itself). No lock is
    /// held across the read.
    async fn limited(&self, pool: &Pool) -> Result<Arc<HashSet<String>>, sqlx::Error> {
        let lock = || self.limited.lock().unwrap_or_else(|e| e.into_inner());
        {
            let mut limited = lock();
            let old = limited.read.as_ref();
            if old.is_some_and(|(at, _)| at.elapsed() < LIMITED_FOR) || limited.refreshing {
                return Ok(old.map(|(_, list)| list.clone()).unwrap_or_default());
            }
            limited.refreshing = true;
        }
        // Cleared however the read ends (a client going away drops it).
        struct Refreshed<'a>(&'a std::sync::Mutex<Limited>);
        impl Drop for Refreshed<'_> {
            fn drop(&mut self) {
                self.0.lock().unwrap_or_else(|e| e.into_inner()).refreshing = false;
            }
        }
        let _refreshed = Refreshed(&self.limited);
        let mut conn = pool.acquire().await?;
        let list: Arc<HashSet<String>> = Arc::new(
            crate::db::fairness::limited_projects(&mut conn)
                .await?
                .into_iter()
                .collect(),
        );
        lock().read = Some((Instant::now(), Arc::clone(&list)));
        Ok(list)
    }
}

/// Shared calls for `writes`; what became of each. A call that writes
/// nothing is split in two and each half tried again, so one claim that
/// does not fit costs its turn a few calls, not every claim its own
/// transaction; a claim refused alone is [`Claimed::Refused`].
async fn write_all(pool: Pool, writes: Vec<ConsumerWrite>) -> Vec<Claimed> {
    let mut outcomes = vec![Claimed::Alone; writes.len()];
    let mut groups: Vec<std::ops::Range<usize>> = Vec::new();
    groups.push(0..writes.len());
    while let Some(group) = groups.pop() {
        let outcome = match write_together(&pool, &writes[group.clone()]).await {
            Ok(true) => {
                if group.len() > 1 {
                    let n = u64::try_from(group.len()).unwrap_or(u64::MAX);
                    crate::metrics::metrics().claims_together.inc_by(n);
                }
                Claimed::Written
            }
            Ok(false) if group.len() == 1 => Claimed::Refused,
            Ok(false) => {
                let middle = group.start + group.len() / 2;
                groups.push(middle..group.end);
                groups.push(group.start..middle);
                continue;
            }
            Err(CallFailed::Nothing(db::AllocError::Db(e)))
                if classify(&e) == DbFailure::Unavailable =>
            {
                tracing::debug!(error = %e, claims = group.len(), "shared claim found the database unavailable");
                Claimed::Unavailable
            }
            Err(CallFailed::Nothing(e)) => {
                // Each claim retries on its own path, which answers with
                // this failure if it persists.
                tracing::debug!(error = %e, claims = group.len(), "shared claim failed");
                Claimed::Alone
            }
            Err(CallFailed::Lost(e)) => {
                tracing::warn!(error = %e, claims = group.len(), "connection lost during a shared claim");
                crate::db::primary::suspect();
                Claimed::Unknown
            }
        };
        outcomes[group].fill(outcome);
        if outcome == Claimed::Unavailable {
            // The rest would each wait for a connection that is not coming.
            for rest in groups.drain(..) {
                outcomes[rest].fill(Claimed::Unavailable);
            }
        }
    }
    outcomes
}

async fn write_together(pool: &Pool, writes: &[ConsumerWrite]) -> Result<bool, CallFailed> {
    let mut conn = pool
        .for_one_statement()
        .await
        .map_err(|e| CallFailed::Nothing(e.into()))?;
    let written = db::claim(&mut conn, writes)
        .await
        .map_err(CallFailed::sent)?;
    conn.commit()
        .await
        .map_err(|e| CallFailed::sent(e.into()))?;
    Ok(written)
}
