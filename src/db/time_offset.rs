//! Measures this process's offset from the database's clock for `clock`:
//! at start and every [`MEASURE_EVERY`], reported as the metric
//! `placement_clock_offset_milliseconds` and, past a second, a warning.

use chrono::Utc;

/// How often the offset is measured again.
pub const MEASURE_EVERY: std::time::Duration = std::time::Duration::from_secs(10);

/// An offset this large is logged: some host's clock is not synchronised.
const WARN_PAST_MS: i64 = 1000;

/// Measures the offset once; the offset in milliseconds.
pub async fn measure(pool: &sqlx::PgPool) -> Result<i64, sqlx::Error> {
    let mut conn = pool.acquire().await?;
    let before = Utc::now();
    let theirs: chrono::DateTime<Utc> = sqlx::query_scalar("SELECT clock_timestamp()")
        .fetch_one(&mut *conn)
        .await?;
    let after = Utc::now();
    let (offset, old) = crate::clock::observe(theirs, before, after);
    crate::metrics::metrics().clock_offset_ms.set(offset);
    if offset.abs() > WARN_PAST_MS && (old - offset).abs() > WARN_PAST_MS / 2 {
        tracing::warn!(
            offset_ms = offset,
            "this host's clock differs from the database's: times are taken from the database's clock; synchronise the clocks (NTP)"
        );
    }
    Ok(offset)
}

/// Measures the offset every [`MEASURE_EVERY`] for the life of the pool.
pub async fn follow(pool: sqlx::PgPool) {
    loop {
        tokio::time::sleep(MEASURE_EVERY).await;
        if pool.is_closed() {
            return;
        }
        if let Err(e) = measure(&pool).await {
            tracing::debug!(error = %e, "measuring the clock offset from the database");
        }
    }
}
