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
//!
//! The pool opens connections only within its budget (`pool_fit`): it
//! never tries to hold more than PostgreSQL has room for. Every COMMIT, and every
//! statement that commits on its own, marks the request's deadline
//! (`deadline`) before it is sent.

use super::deadline;
use super::pool_fit::Budget;
use sqlx::pool::PoolConnection;
use sqlx::{PgConnection, PgPool, Postgres, Transaction};
use std::ops::{Deref, DerefMut};
use std::sync::Arc;
use std::time::Duration;

/// SQLSTATE `too_many_connections`: a role's or the server's limit.
const TOO_MANY_CONNECTIONS: &str = "53300";

/// sqlx's pool within its budget; `acquire` and `begin` count their waiters.
#[derive(Clone, Debug)]
pub struct Pool {
    inner: PgPool,
    reads_in_transactions: bool,
    budget: Arc<Budget>,
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
#[derive(Debug)]
pub struct Conn {
    link: Link,
}

/// How a [`Conn`] holds its connection.
#[derive(Debug)]
enum Link {
    Plain(PoolConnection<Postgres>),
    InTransaction(Transaction<'static, Postgres>),
}

impl Deref for Conn {
    type Target = PgConnection;

    fn deref(&self) -> &PgConnection {
        match &self.link {
            Link::Plain(c) => c,
            Link::InTransaction(t) => t,
        }
    }
}

impl DerefMut for Conn {
    fn deref_mut(&mut self) -> &mut PgConnection {
        match &mut self.link {
            Link::Plain(c) => c,
            Link::InTransaction(t) => t,
        }
    }
}

impl Conn {
    /// Ends a single writing statement's connection from
    /// [`Pool::for_one_statement`]: nothing to do on its own (the statement
    /// committed as it ran), a commit inside a transaction.
    pub async fn commit(self) -> Result<(), sqlx::Error> {
        match self.link {
            Link::Plain(_) => Ok(()),
            Link::InTransaction(t) => t.commit().await,
        }
    }

    /// Whether the connection is outside any transaction (one that may be
    /// kept between reads, `kept`).
    pub fn is_plain(&self) -> bool {
        matches!(self.link, Link::Plain(_))
    }
}

/// A transaction. Its COMMIT marks the request's deadline
/// before it is sent: a deadline passing after that answers "outcome
/// unknown".
#[derive(Debug)]
pub struct Tx {
    inner: Transaction<'static, Postgres>,
}

impl Tx {
    /// Commits the transaction.
    pub async fn commit(self) -> Result<(), sqlx::Error> {
        deadline::write_sent();
        self.inner.commit().await
    }

    /// Rolls the transaction back (dropping it does the same, later).
    pub async fn rollback(self) -> Result<(), sqlx::Error> {
        self.inner.rollback().await
    }
}

impl Deref for Tx {
    type Target = PgConnection;

    fn deref(&self) -> &PgConnection {
        &self.inner
    }
}

impl DerefMut for Tx {
    fn deref_mut(&mut self) -> &mut PgConnection {
        &mut self.inner
    }
}

impl Pool {
    /// Wraps a pool that talks to PostgreSQL directly (or through a
    /// session pooler); its budget follows the room PostgreSQL has.
    pub fn new(pool: PgPool) -> Self {
        let pool = Self::budgeted(pool, false);
        tokio::spawn(pool.clone().keep_fitted());
        pool
    }

    /// Wraps a pool whose connections go through a transaction pooler.
    /// Its budget stays at `--db-max-connections`: what PostgreSQL shows
    /// is the pooler's connections, not this pool's.
    pub fn behind_transaction_pooler(pool: PgPool) -> Self {
        Self::budgeted(pool, true)
    }

    fn budgeted(inner: PgPool, reads_in_transactions: bool) -> Self {
        let most = inner.options().get_max_connections();
        crate::metrics::metrics().pool_budget.set(i64::from(most));
        Pool {
            inner,
            reads_in_transactions,
            budget: Arc::new(Budget::new(most)),
        }
    }

    /// Fits the budget to the room PostgreSQL has, at start, a second
    /// later, every few seconds and when a connection was slow to come,
    /// for the pool's life.
    async fn keep_fitted(self) {
        loop {
            if self.inner.is_closed() {
                return;
            }
            match self.read_room().await {
                Ok((room, held)) => self.budget.fit(room, held),
                Err(e) => tracing::debug!(error = %e, "reading the room PostgreSQL has"),
            }
            self.budget.next_reason().await;
        }
    }

    /// The room PostgreSQL has, and the connections this pool held while
    /// it was read: the fewer of those held before and after, so that a
    /// connection opened meanwhile (PostgreSQL may count it, or not) is
    /// never counted twice, which would let the budget pass the limit.
    ///
    /// The room is read on one of the pool's connections when one comes
    /// soon. When none does, the pool may be stuck past a limit (a budget
    /// read too high: every request waits in sqlx, which retries refused
    /// connections until the acquire timeout), so waiting in that same line
    /// would keep the budget wrong until every waiter has failed. The room
    /// is then read on a connection of its own (which PostgreSQL counts in
    /// the room: the budget comes out one smaller until the next read),
    /// and a refusal for a limit is itself the answer: the room is full.
    async fn read_room(&self) -> Result<(super::pool_fit::Room, u32), sqlx::Error> {
        use super::pool_fit::{room, Room, SLOW_CONNECTION};
        use sqlx::Connection;
        let held_before = self.budget.held(self.inner.size());
        // Not counted as a waiter: the gauge is the requests'.
        let read = match tokio::time::timeout(SLOW_CONNECTION, self.connection()).await {
            Ok(conn) => room(&mut *conn?).await?,
            Err(_) => {
                let options = self.inner.connect_options();
                let own = async {
                    match PgConnection::connect_with(&options).await {
                        Ok(mut own) => {
                            let read = room(&mut own).await;
                            let _ = own.close().await;
                            read
                        }
                        Err(sqlx::Error::Database(e))
                            if e.code().as_deref() == Some(TOO_MANY_CONNECTIONS) =>
                        {
                            Ok(Room::FULL)
                        }
                        Err(e) => Err(e),
                    }
                };
                // A database that does not answer at all is the requests'
                // to report; the next reason reads the room again.
                let wait = self.inner.options().get_acquire_timeout();
                tokio::time::timeout(wait, own)
                    .await
                    .map_err(|_| sqlx::Error::PoolTimedOut)??
            }
        };
        let held_after = self.budget.held(self.inner.size());
        Ok((read, held_before.min(held_after)))
    }

    /// A connection from sqlx's pool within the acquire timeout, counted
    /// as waiting until it arrives. At the budget it waits for one of the
    /// pool's connections to come back idle (sqlx frees a connection's
    /// place only after its check on the way in: the wait polls). A new
    /// connection slow to come has the room read again; when that finds
    /// the room full, the attempt (which PostgreSQL would go on refusing
    /// until the acquire timeout) is given up and the wait starts over.
    async fn connection(&self) -> Result<PoolConnection<Postgres>, sqlx::Error> {
        let wait: Duration = self.inner.options().get_acquire_timeout();
        let until = tokio::time::Instant::now() + wait;
        loop {
            while self.inner.num_idle() == 0 && self.inner.size() >= self.budget.get() {
                if tokio::time::Instant::now() >= until {
                    return Err(sqlx::Error::PoolTimedOut);
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            let mut full = self.budget.fulls();
            let _opening = self.budget.opening();
            let attempt = self.inner.acquire();
            tokio::pin!(attempt);
            let slow = tokio::time::sleep(super::pool_fit::SLOW_CONNECTION);
            tokio::pin!(slow);
            let mut told = false;
            loop {
                tokio::select! {
                    () = tokio::time::sleep_until(until) => return Err(sqlx::Error::PoolTimedOut),
                    acquired = &mut attempt => return acquired,
                    () = &mut slow, if !told => {
                        told = true;
                        self.budget.starving();
                    }
                    changed = full.changed() => {
                        if changed.is_ok() {
                            break;
                        }
                    }
                }
            }
        }
    }

    /// A connection for reads, counted as waiting until it arrives. Writes
    /// use [`Pool::begin`].
    pub async fn acquire(&self) -> Result<Conn, sqlx::Error> {
        let _waiting = Waiting::start();
        let link = self.connection().await?;
        let link = if self.reads_in_transactions {
            Link::InTransaction(begin_on(link, None).await?)
        } else {
            Link::Plain(link)
        };
        Ok(Conn { link })
    }

    /// A connection for one writing statement, which is atomic on its own:
    /// one round trip instead of three. Behind a transaction pooler it comes
    /// inside a transaction (sqlx's two round trips of a statement must
    /// reach the same server); either way the caller ends it with
    /// [`Conn::commit`]. The request's deadline is marked: the statement
    /// is sent next.
    pub async fn for_one_statement(&self) -> Result<Conn, sqlx::Error> {
        let conn = self.acquire().await?;
        deadline::write_sent();
        Ok(conn)
    }

    /// A transaction, counted as waiting until its connection arrives.
    pub async fn begin(&self) -> Result<Tx, sqlx::Error> {
        self.begin_with("BEGIN").await
    }

    /// A transaction whose statements each take their rows by key (`=
    /// ANY($1)` of uuids or ids; an allocation write, a queue submission),
    /// opened in one round trip. Its statements are planned once per
    /// connection (a generic plan): a plan for the values at hand is no
    /// better for them, and PostgreSQL's default would plan most of them
    /// anew on every call (an array's length changes the estimate), which
    /// cost a claim more than running them.
    pub async fn begin_keyed(&self) -> Result<Tx, sqlx::Error> {
        self.begin_with("BEGIN; SET LOCAL plan_cache_mode = force_generic_plan")
            .await
    }

    /// A transaction opened by `statement` (a `BEGIN` with its options:
    /// one round trip instead of `BEGIN` then `SET TRANSACTION`).
    pub async fn begin_with(&self, statement: &'static str) -> Result<Tx, sqlx::Error> {
        let _waiting = Waiting::start();
        let conn = self.connection().await?;
        let inner = begin_on(conn, Some(sqlx::SqlSafeStr::into_sql_str(statement))).await?;
        Ok(Tx { inner })
    }
}

/// Opens a transaction on `conn` with `statement` (sqlx's plain `BEGIN`
/// without one), in a task of its own that runs to the end even when the
/// request waiting for it is dropped (its deadline passed, its client
/// hung up). sqlx counts a transaction only once its BEGIN answered: a
/// BEGIN dropped on the way left the connection in a transaction nobody
/// ended, and the pool handed it on. The next `BEGIN ISOLATION LEVEL …`
/// on it failed, and every statement after that answered "current
/// transaction is aborted" (500s, for good). Run to the end, the
/// transaction is dropped in the task and sqlx rolls it back before the
/// connection is used again. (`Transaction::begin` is what sqlx's own
/// `Pool::begin_with` runs on the connection it acquired.)
async fn begin_on(
    conn: PoolConnection<Postgres>,
    statement: Option<sqlx::SqlStr>,
) -> Result<Transaction<'static, Postgres>, sqlx::Error> {
    let begin = Transaction::begin(
        sqlx::pool::MaybePoolConnection::PoolConnection(conn),
        statement,
    );
    tokio::spawn(begin)
        .await
        .map_err(|_| sqlx::Error::WorkerCrashed)?
}

/// Everything else (size, idle count, close, options) is sqlx's own.
impl Deref for Pool {
    type Target = PgPool;

    fn deref(&self) -> &PgPool {
        &self.inner
    }
}
