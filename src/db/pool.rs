//! The database pool as the service uses it: sqlx's pool, counting the
//! callers waiting for a connection (the gauge an operator watches to size
//! `--max-connections` and PostgreSQL's `max_connections`).

use sqlx::pool::PoolConnection;
use sqlx::{PgPool, Postgres, Transaction};
use std::ops::Deref;

/// sqlx's pool; `acquire` and `begin` count their waiters.
#[derive(Clone, Debug)]
pub struct Pool(PgPool);

/// Decrements the waiting gauge when the wait ends, however it ends (a
/// client that goes away drops the future mid-wait).
struct Waiting;

impl Waiting {
    fn start() -> Self {
        crate::metrics::metrics().pool_waiting.inc();
        Waiting
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        crate::metrics::metrics().pool_waiting.dec();
    }
}

impl Pool {
    /// Wraps a pool.
    pub fn new(pool: PgPool) -> Self {
        Pool(pool)
    }

    /// A connection, counted as waiting until it arrives.
    pub async fn acquire(&self) -> Result<PoolConnection<Postgres>, sqlx::Error> {
        let _waiting = Waiting::start();
        self.0.acquire().await
    }

    /// A transaction, counted as waiting until its connection arrives.
    pub async fn begin(&self) -> Result<Transaction<'static, Postgres>, sqlx::Error> {
        let _waiting = Waiting::start();
        self.0.begin().await
    }
}

/// Everything else (size, idle count, close, options) is sqlx's own.
impl Deref for Pool {
    type Target = PgPool;

    fn deref(&self) -> &PgPool {
        &self.0
    }
}
