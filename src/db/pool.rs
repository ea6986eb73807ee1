//! The database pool as the service uses it: sqlx's pool, counting the
//! callers waiting for a connection (the gauge an operator watches to size
//! `--max-connections` and PostgreSQL's `max_connections`), and, behind a
//! transaction pooler, keeping every statement inside a transaction.
//!
//! A transaction pooler (PgBouncer's `pool_mode = transaction`) hands the
//! client's next statement to any server connection once a transaction
//! ends. sqlx runs each statement in two round trips (parse and describe,
//! then bind and execute), so outside a transaction the second could reach
//! another server than the first. Behind such a pooler, connections for
//! reads therefore come inside a transaction, rolled back when released;
//! writes always use [`Pool::begin`] and commit.

use sqlx::pool::PoolConnection;
use sqlx::{PgConnection, PgPool, Postgres, Transaction};
use std::ops::{Deref, DerefMut};

/// sqlx's pool; `acquire` and `begin` count their waiters.
#[derive(Clone, Debug)]
pub struct Pool {
    inner: PgPool,
    reads_in_transactions: bool,
}

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

/// A connection for reads: plain, or (behind a transaction pooler) inside
/// a transaction that is rolled back when it is released.
pub enum Conn {
    Plain(PoolConnection<Postgres>),
    InTransaction(Transaction<'static, Postgres>),
}

impl Deref for Conn {
    type Target = PgConnection;

    fn deref(&self) -> &PgConnection {
        match self {
            Conn::Plain(c) => c,
            Conn::InTransaction(t) => t,
        }
    }
}

impl DerefMut for Conn {
    fn deref_mut(&mut self) -> &mut PgConnection {
        match self {
            Conn::Plain(c) => c,
            Conn::InTransaction(t) => t,
        }
    }
}

impl Conn {
    /// Ends a single writing statement's connection from
    /// [`Pool::for_one_statement`]: nothing to do on its own (the statement
    /// committed as it ran), a commit inside a transaction.
    pub async fn commit(self) -> Result<(), sqlx::Error> {
        match self {
            Conn::Plain(_) => Ok(()),
            Conn::InTransaction(t) => t.commit().await,
        }
    }
}

impl Pool {
    /// Wraps a pool that talks to PostgreSQL directly (or through a
    /// session pooler).
    pub fn new(pool: PgPool) -> Self {
        Pool {
            inner: pool,
            reads_in_transactions: false,
        }
    }

    /// Wraps a pool whose connections go through a transaction pooler.
    pub fn behind_transaction_pooler(pool: PgPool) -> Self {
        Pool {
            inner: pool,
            reads_in_transactions: true,
        }
    }

    /// A connection for reads, counted as waiting until it arrives. Writes
    /// use [`Pool::begin`].
    pub async fn acquire(&self) -> Result<Conn, sqlx::Error> {
        let _waiting = Waiting::start();
        if self.reads_in_transactions {
            Ok(Conn::InTransaction(self.inner.begin().await?))
        } else {
            Ok(Conn::Plain(self.inner.acquire().await?))
        }
    }

    /// A connection for one writing statement, which is atomic on its own:
    /// one round trip instead of three. Behind a transaction pooler it comes
    /// inside a transaction (sqlx's two round trips of a statement must
    /// reach the same server); either way the caller ends it with
    /// [`Conn::commit`].
    pub async fn for_one_statement(&self) -> Result<Conn, sqlx::Error> {
        self.acquire().await
    }

    /// A transaction, counted as waiting until its connection arrives.
    pub async fn begin(&self) -> Result<Transaction<'static, Postgres>, sqlx::Error> {
        let _waiting = Waiting::start();
        self.inner.begin().await
    }

    /// A transaction whose statements each take their rows by key (`=
    /// ANY($1)` of uuids or ids; an allocation write, a queue submission),
    /// opened in one round trip. Its statements are planned once per
    /// connection (a generic plan): a plan for the values at hand is no
    /// better for them, and PostgreSQL's default would plan most of them
    /// anew on every call (an array's length changes the estimate), which
    /// cost a claim more than running them.
    pub async fn begin_keyed(&self) -> Result<Transaction<'static, Postgres>, sqlx::Error> {
        self.begin_with("BEGIN; SET LOCAL plan_cache_mode = force_generic_plan")
            .await
    }

    /// A transaction opened by `statement` (a `BEGIN` with its options:
    /// one round trip instead of `BEGIN` then `SET TRANSACTION`).
    pub async fn begin_with(
        &self,
        statement: &'static str,
    ) -> Result<Transaction<'static, Postgres>, sqlx::Error> {
        let _waiting = Waiting::start();
        self.inner.begin_with(statement).await
    }
}

/// Everything else (size, idle count, close, options) is sqlx's own.
impl Deref for Pool {
    type Target = PgPool;

    fn deref(&self) -> &PgPool {
        &self.inner
    }
}
