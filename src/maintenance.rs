//! The periodic maintenance every server process runs beside the
//! requests: pruning what has served its time (the candidates change log,
//! the queue's reasons, rounds, decided requests and preemption events
//! past their retention) and the colocation sweep of stale batch
//! inventory. Each pass is one transaction and safe to run in several
//! processes at once.

use crate::db;

/// Every minute (and at start): keeps the candidates change log short
/// (entries older than ten minutes go; a cache that far behind reloads in
/// full), drops the queue's reasons of requests no longer pending, and
/// drops admission rounds past their retention (0: kept).
pub async fn housekeeping(pool: sqlx::PgPool, round_retention: u64) {
    let mut tick = tokio::time::interval(std::time::Duration::from_secs(60));
    loop {
        tick.tick().await;
        let pruned = async {
            let mut tx = pool.begin().await?;
            db::candidates::prune_change_log(&mut tx, 600.0).await?;
            db::fairness::queue::prune_reasons(&mut tx).await?;
            let rounds = match round_retention {
                0 => 0,
                retention => {
                    db::fairness::queue::prune(&mut tx, retention).await?;
                    db::fairness::preemptions::prune_events(&mut tx, retention).await?;
                    db::fairness::prune_rounds(&mut tx, retention).await?
                }
            };
            tx.commit().await?;
            Ok::<u64, sqlx::Error>(rounds)
        };
        match pruned.await {
            Ok(0) => {}
            Ok(n) => tracing::info!(rounds = n, "admission rounds past their retention pruned"),
            Err(e) => tracing::warn!(error = %e, "housekeeping failed"),
        }
    }
}

/// Sets to 0 the batch inventory of providers whose reports stopped for
/// longer than their degradeTimeMinutes (Koordinator resets batch
/// resources on a stale NodeMetric), every `every`.
pub async fn degrade_stale_batch(pool: sqlx::PgPool, every: std::time::Duration) {
    let mut tick = tokio::time::interval(every);
    loop {
        tick.tick().await;
        let Ok(mut tx) = pool.begin().await else {
            continue;
        };
        let degraded = match crate::colocation::reports::degrade_stale(&mut tx).await {
            Ok(n) => tx
                .commit()
                .await
                .map(|()| n)
                .map_err(crate::error::Error::from),
            Err(e) => Err(e),
        };
        match degraded {
            Ok(0) => {}
            Ok(n) => tracing::info!(inventories = n, "batch inventory set to 0 on stale reports"),
            Err(e) => tracing::warn!(error = %e, "degrading stale batch inventory failed"),
        }
    }
}
