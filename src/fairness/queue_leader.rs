//! Who runs the fair queue's rounds, and when. One process at a time
//! leads, by a session advisory lock; it runs a round every
//! `--admission-interval` and at once when requests arrive in an empty
//! queue or allocations are deleted while requests wait (NOTIFY from
//! triggers). Every process listens for `decided`, so a long poll in any
//! process wakes at once (`long_polls.rs`).

use super::admission::RoundSettings;
use super::long_polls::QueueSignals;
use super::queue_round::{round, Holds};
use crate::candidates::engine::ProviderSnapshots;
use crate::db::fairness::queue as db;
use crate::db::Pool;
use crate::error::Result;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How the leader runs.
#[derive(Clone)]
pub struct Leader {
    /// The database.
    pub pool: Pool,
    /// This process's provider snapshot, which rounds place on.
    pub snapshots: Arc<dyn ProviderSnapshots>,
    /// Connections with sessions of their own (the lock and the listener).
    pub sessions: sqlx::PgPool,
    /// The round's limits.
    pub settings: RoundSettings,
    /// Between periodic rounds (zero: rounds only when woken).
    pub interval: Duration,
    /// How room is held for waiting requests.
    pub holds: Holds,
    /// This process's long polls.
    pub signals: Arc<QueueSignals>,
}

/// Listens and, while it holds the lock, leads, for the life of the
/// process. A lost connection is opened again after a pause.
pub async fn run(leader: Leader) {
    loop {
        if let Err(e) = listen_and_lead(&leader).await {
            tracing::warn!(error = %e, "the fair queue's listener or leader failed");
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// How often a follower tries to take the lead (and the leader checks it
/// still holds it).
fn takeover_period(interval: Duration) -> Duration {
    match interval.is_zero() {
        true => Duration::from_secs(1),
        false => interval.min(Duration::from_secs(1)),
    }
}

async fn listen_and_lead(leader: &Leader) -> Result<()> {
    // One session per process: it listens, and it holds the leader's lock.
    let mut listener = crate::db::deployments::listen(&leader.sessions, db::QUEUE_CHANNEL).await?;
    let mut leads = false;
    let period = takeover_period(leader.interval);
    let mut next_check = Instant::now();
    let mut next_round = Instant::now() + leader.interval;
    loop {
        if Instant::now() >= next_check {
            leads = keep_or_take_lead(&mut listener, leads).await?;
            crate::metrics::metrics().queue_leader.set(i64::from(leads));
            next_check = Instant::now() + period;
        }
        let periodic = !leader.interval.is_zero() && Instant::now() >= next_round;
        let woken = tokio::select! {
            n = listener.try_recv() => match n? {
                Some(n) if n.payload() == "decided" => { leader.signals.wake(); false }
                Some(_) => true,
                // The session was lost (and is opened again): so is the lock.
                None => { leads = false; false }
            },
            _ = tokio::time::sleep(Duration::from_millis(50).min(period)) => false,
        };
        if leads && (woken || periodic) {
            while listener.next_buffered().is_some() {}
            next_round = Instant::now() + leader.interval;
            lead_one(leader).await;
        }
    }
}

/// Checks the lock is still held (a session opened again has lost it),
/// or tries to take it.
async fn keep_or_take_lead(session: &mut sqlx::postgres::PgListener, leads: bool) -> Result<bool> {
    if leads {
        let held = db::still_leads(&mut *session).await?;
        if !held {
            tracing::warn!("the fair queue's leader lost its lock");
        }
        return Ok(held);
    }
    let taken = db::try_lead(&mut *session).await?;
    if taken {
        tracing::info!("leading the fair queue's rounds");
    }
    Ok(taken)
}

async fn lead_one(leader: &Leader) {
    let started = Instant::now();
    match round(
        &leader.pool,
        &*leader.snapshots,
        &leader.settings,
        leader.holds,
    )
    .await
    {
        Ok(o) => {
            tracing::debug!(
                admitted = o.admitted,
                deferred = o.deferred,
                advised = o.advised,
                took_ms = started.elapsed().as_secs_f64() * 1e3,
                "queue round"
            );
        }
        Err(e) => tracing::warn!(error = %e, "a fair queue round failed"),
    }
    // Only the pending counts: they read the pending index, while the
    // decided rows grow with the retention window.
    if let Ok(mut conn) = leader.pool.acquire().await {
        if let Ok(n) = db::pending_count(&mut conn).await {
            crate::metrics::metrics().queue_pending.set(n);
            let top = crate::metrics::QUEUE_TOP_PROJECTS;
            if let Ok(top) = db::pending_by_project(&mut conn, top).await {
                crate::metrics::metrics().set_pending_by_project(&top);
            }
        }
    }
}
