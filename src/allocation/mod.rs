//! Allocation writes, the one path PUT/POST /allocations, the reshaper and
//! deployments share: one transaction, run again when it loses a database
//! race, refusals mapped to Placement's errors (by
//! `db::allocations::AllocError::into_error`, beside the rules).

pub mod claims;

use crate::db::allocations::{self as db, AllocError};
use crate::db::Pool;
use crate::error::{with_retries, Error, Result};
use crate::types::ConsumerWrite;
use uuid::Uuid;

/// The allocation writes of one process, with what they need: the pool,
/// the claims it coalesces and how often a conflict is retried
/// (`AppState::allocations`), so a handler passes none of it.
pub struct Allocations<'a> {
    /// The database.
    pub pool: &'a Pool,
    /// Claims of new consumers waiting to be written by one statement.
    pub claims: &'a claims::Claims,
    /// Retries of a write that lost a race.
    pub retries: u32,
}

impl Allocations<'_> {
    /// One consumer's `PUT` (see [`put_one`]).
    pub async fn put_one(&self, write: ConsumerWrite) -> Result<()> {
        put_one(self.pool, self.claims, self.retries, write).await
    }
}

/// One consumer's `PUT`: a claim goes together with the other claims
/// arriving (see [`claims`]); what that does not write runs on its own.
async fn put_one(
    pool: &Pool,
    together: &claims::Claims,
    retries: u32,
    write: ConsumerWrite,
) -> Result<()> {
    let path = match together.claim(pool, &write).await {
        claims::Claimed::Written => return Ok(()),
        claims::Claimed::Refused => Path::Checked,
        claims::Claimed::Alone => Path::ClaimFirst,
        claims::Claimed::Unknown => return Err(Error::outcome_unknown()),
        claims::Claimed::Unavailable => {
            return Err(Error::database_unavailable(
                "a shared claim found the database unavailable",
            ))
        }
    };
    let consumer = write.consumer;
    write_on(path, pool, retries, &[write], Some(consumer)).await
}

/// The write inside `tx`: a claim of new consumers by one statement
/// first (on [`Path::ClaimFirst`]), then what it did not write by the
/// detailed checks.
async fn write_in(
    tx: &mut sqlx::PgConnection,
    path: Path,
    writes: &[ConsumerWrite],
) -> std::result::Result<(), AllocError> {
    if matches!(path, Path::ClaimFirst) && db::claim(tx, writes).await? {
        return Ok(());
    }
    db::write(tx, writes).await.map(drop)
}

/// Which of the write's paths a transaction takes.
#[derive(Debug, Clone, Copy)]
enum Path {
    /// A claim of new consumers first, then the detailed checks.
    ClaimFirst,
    /// The detailed checks only.
    Checked,
}

/// Runs an allocation write in its own transaction, running it again when
/// it loses a database race (a deadlock or serialisation failure between
/// writers) up to `allocation_conflict_retry_count` times, as Placement
/// retries generation races; `put_consumer` picks the PUT wording of errors.
/// A claim of new consumers goes by one statement first
/// (`db::allocations::claim`); deployments and admission rounds call
/// `db::allocations::write` inside their own transactions.
pub async fn write_with_retry(
    pool: &Pool,
    retries: u32,
    writes: &[ConsumerWrite],
    put_consumer: Option<Uuid>,
) -> Result<()> {
    write_on(Path::ClaimFirst, pool, retries, writes, put_consumer).await
}

async fn write_on(
    path: Path,
    pool: &Pool,
    retries: u32,
    writes: &[ConsumerWrite],
    put_consumer: Option<Uuid>,
) -> Result<()> {
    let metrics = crate::metrics::metrics();
    let mut attempts = 0u64;
    let result = with_retries(retries, || {
        attempts += 1;
        async {
            let mut tx = pool.begin_keyed().await?;
            write_in(&mut tx, path, writes)
                .await
                .map_err(|e| e.into_error(put_consumer))?;
            tx.commit().await.map_err(Error::commit_failed)
        }
    })
    .await;
    metrics.write_retries.inc_by(attempts.saturating_sub(1));
    if result.as_ref().is_err_and(Error::is_lost_race) {
        metrics.write_conflicts.inc();
    }
    result
}
