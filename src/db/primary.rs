//! The pool's database host across a failover: the pool connects to the
//! first host of the list that accepts writes; when a request finds the
//! database gone or read-only, a follower looks for the host that accepts
//! writes now, points the pool at it, and retires every connection made
//! before the switch, so no request is answered from the old primary.
//! Fencing a primary that comes back writable is the failover manager's
//! job (PostgreSQL's own rule); this follows whichever host accepts writes,
//! keeping to the current one while it does.

use super::target::DbTarget;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{Connection, PgConnection, PgPool, Row};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A request or a new connection found the database unreachable or
/// read-only: followers look for the primary at once rather than at their
/// next check.
pub fn suspect() {
    crate::error::DATABASE_FAILED.notify_waiters();
}

/// Without a suspicion, how often a follower checks that its host still
/// accepts writes.
const CHECK_EVERY: Duration = Duration::from_secs(5);

/// The longest pause between searches while no host accepts writes.
const MAX_RETRY_PAUSE: Duration = Duration::from_millis(500);

/// One query, in the simple protocol (safe through a transaction pooler),
/// that is true on a standby or a session that cannot write.
const READ_ONLY: &str =
    "SELECT pg_is_in_recovery() OR current_setting('transaction_read_only')::bool";

/// Adjusts every host's connect options for what sits in between (a
/// transaction pooler takes no named statements).
pub type Tune = fn(PgConnectOptions) -> PgConnectOptions;

/// How long a connection must have sat idle before it is pinged on its way
/// out of the pool. A ping is a round trip: always pinging cost a claim
/// two of its nine. A connection used this recently was alive then, and a
/// database that went away since fails the request's first statement,
/// which is answered 503 as it would be while the database is away.
pub(super) const PING_AFTER_IDLE: Duration = Duration::from_millis(100);

/// How many times a follower of this process has switched hosts: a
/// connection kept outside the pool (see `warm_connection`) is used again only
/// while this has not moved since it was taken.
static SWITCHES: AtomicU64 = AtomicU64::new(0);

/// The switches so far (see [`SWITCHES`]).
pub(super) fn switches() -> u64 {
    SWITCHES.load(Ordering::Acquire)
}

/// The pool's sizing, as `serve` takes it.
#[derive(Debug, Clone, Copy)]
pub struct PoolSettings {
    pub max_connections: u32,
    pub acquire_timeout: Duration,
    /// Whether a connection idle for [`PING_AFTER_IDLE`] is pinged before
    /// it is handed out. Off
    /// behind a transaction pooler: there a ping waits for a server
    /// connection of the pooler's few, and the pooler itself keeps its
    /// servers alive (a dead client connection still fails its query and
    /// is dropped, answered 503).
    pub ping_idle: bool,
}

/// Which host the pool uses, and since when.
#[derive(Debug)]
pub struct Follower {
    target: DbTarget,
    current: AtomicUsize,
    started: Instant,
    /// Milliseconds after `started` of the last switch (0: none yet).
    switched_at_ms: AtomicU64,
    /// How connections are adjusted for what is in between.
    tune: Tune,
}

impl Follower {
    /// Whether a connection made `age` ago predates the last switch.
    fn predates_switch(&self, age: Duration) -> bool {
        let switched = self.switched_at_ms.load(Ordering::Acquire);
        switched != 0
            && self.started.elapsed().saturating_sub(age).as_millis() < u128::from(switched)
    }

    /// Checks the current host, then every other in order, until one
    /// accepts writes, and points the pool at it.
    async fn settle(&self, pool: &PgPool) {
        let mut pause = Duration::from_millis(50);
        let mut last_error = String::new();
        loop {
            let current = self.current.load(Ordering::Acquire);
            match find_writable(&self.target, Some(current), self.tune).await {
                Ok((i, options)) => {
                    if i != current {
                        pool.set_connect_options(options);
                        self.current.store(i, Ordering::Release);
                        let now = self.started.elapsed().as_millis().max(1);
                        self.switched_at_ms
                            .store(u64::try_from(now).unwrap_or(u64::MAX), Ordering::Release);
                        SWITCHES.fetch_add(1, Ordering::AcqRel);
                        tracing::warn!(
                            from = %self.target.endpoints[current],
                            to = %self.target.endpoints[i],
                            "the database host that accepts writes changed: connections to the old one are retired"
                        );
                    }
                    return;
                }
                Err(e) => {
                    if e != last_error {
                        tracing::warn!(error = %e, "looking for the database host that accepts writes");
                        last_error = e;
                    }
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(MAX_RETRY_PAUSE);
                }
            }
        }
    }

    /// Runs for the life of the pool: on every suspicion, and every few
    /// seconds, makes sure the pool's host still accepts writes.
    pub async fn follow(self: Arc<Self>, pool: PgPool) {
        loop {
            tokio::select! {
                _ = crate::error::DATABASE_FAILED.notified() => {},
                _ = tokio::time::sleep(CHECK_EVERY) => {},
            }
            if pool.is_closed() {
                return;
            }
            self.settle(&pool).await;
        }
    }
}

/// The first host, the preferred one first, that accepts writes; the
/// error names every host and why it was passed over.
pub async fn find_writable(
    target: &DbTarget,
    prefer: Option<usize>,
    tune: Tune,
) -> Result<(usize, PgConnectOptions), String> {
    let n = target.endpoints.len();
    let order = prefer
        .into_iter()
        .chain((0..n).filter(|i| Some(*i) != prefer));
    let mut passed = Vec::new();
    for i in order {
        let options = tune(target.options(i)?);
        match probe(&options, target.connect_timeout).await {
            Ok(()) => return Ok((i, options)),
            Err(why) => passed.push(format!("{}: {why}", target.endpoints[i])),
        }
    }
    Err(match passed.as_slice() {
        [one] if n == 1 => format!(
            "connecting to {}: {}",
            target.describe(),
            one.split_once(": ").map_or(one.as_str(), |(_, why)| why)
        ),
        _ => format!(
            "no host of {} accepts writes ({})",
            target.describe(),
            passed.join("; ")
        ),
    })
}

/// Connects to one host and asks whether it accepts writes.
async fn probe(options: &PgConnectOptions, timeout: Duration) -> Result<(), String> {
    let attempt = async {
        let mut conn = PgConnection::connect_with(options).await?;
        let read_only = is_read_only(&mut conn).await;
        let _ = conn.close().await;
        read_only
    };
    match tokio::time::timeout(timeout, attempt).await {
        Err(_) => Err(format!("no answer within {} s", timeout.as_secs())),
        Ok(Err(e)) => Err(e.to_string()),
        Ok(Ok(true)) => Err("read-only (a standby, or writes are turned off)".into()),
        Ok(Ok(false)) => Ok(()),
    }
}

async fn is_read_only(conn: &mut PgConnection) -> Result<bool, sqlx::Error> {
    let row = sqlx::raw_sql(READ_ONLY).fetch_one(&mut *conn).await?;
    row.try_get::<bool, _>(0)
}

/// Opens the pool on the first host that accepts writes and, when there
/// are several hosts, starts following the primary. Every new connection
/// is checked: one that lands on a read-only host is refused (and raises a
/// suspicion), so the pool never holds a session that cannot write.
pub async fn open(target: DbTarget, settings: PoolSettings, tune: Tune) -> Result<PgPool, String> {
    let (index, options) = find_writable(&target, None, tune).await?;
    let follower = Arc::new(Follower {
        target,
        current: AtomicUsize::new(index),
        started: Instant::now(),
        switched_at_ms: AtomicU64::new(0),
        tune,
    });
    let retire = follower.clone();
    let pool = PgPoolOptions::new()
        .max_connections(settings.max_connections)
        // While the database is down a request waits this long, then 503.
        .acquire_timeout(settings.acquire_timeout)
        // Pinged only after a pause (see PING_AFTER_IDLE), below.
        .test_before_acquire(false)
        .after_connect(|conn, _meta| {
            Box::pin(async move {
                if is_read_only(conn).await? {
                    suspect();
                    return Err(sqlx::Error::Protocol(
                        "the database host is read-only (a standby?): not used".into(),
                    ));
                }
                Ok(())
            })
        })
        .before_acquire(move |conn, meta| {
            let keep = !retire.predates_switch(meta.age);
            let ping = keep && settings.ping_idle && meta.idle_for >= PING_AFTER_IDLE;
            Box::pin(async move {
                if ping {
                    // A dead connection is closed and the next one tried.
                    conn.ping().await?;
                }
                Ok(keep)
            })
        })
        .connect_with(options)
        .await
        .map_err(|e| format!("connecting to {}: {e}", follower.target.describe()))?;
    if follower.target.endpoints.len() > 1 {
        tokio::spawn(follower.follow(pool.clone()));
    }
    Ok(pool)
}

/// One connection to the host of `url` that accepts writes (the audit and
/// the import use one connection, not a pool).
pub async fn connect_writable(url: &str) -> Result<PgConnection, String> {
    let target = DbTarget::parse(url)?;
    let (_, options) = find_writable(&target, None, |o| o).await?;
    PgConnection::connect_with(&options)
        .await
        .map_err(|e| format!("connecting to {}: {e}", target.describe()))
}
