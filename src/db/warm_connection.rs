//! One connection kept out of the pool between one caller's back-to-back
//! reads: the candidate searches' turns, which run one at a time.
//!
//! Why: sqlx hands out its idle connections oldest first and pings each
//! one on its way back in. A stream of searches thus woke a different
//! PostgreSQL backend every turn, the one that had slept longest and was
//! coldest in the CPU's caches, and paid one more round trip per turn for
//! the ping. WarmConnection, the turn's connection and its backend stay warm.
//!
//! The pool's own rules still hold: a kept connection is used again only
//! within [`PING_AFTER_IDLE`] of its last use (the pool's rule for skipping
//! the ping) and only while the database host has not switched since it
//! was taken (the pool retires such connections). Otherwise it goes back
//! to the pool, which pings it, and the caller gets one from the pool.

use super::pool::{Conn, Pool};
use super::primary::{switches, PING_AFTER_IDLE};
use sqlx::PgConnection;
use std::ops::{Deref, DerefMut};
use std::sync::Mutex;
use std::time::Instant;

/// The slot for one kept connection.
#[derive(Debug, Default)]
pub struct WarmConnection {
    slot: Mutex<Option<Idle>>,
}

/// A connection waiting in the slot.
#[derive(Debug)]
struct Idle {
    /// Plain (outside any transaction).
    conn: Conn,
    /// When its last user gave it back.
    since: Instant,
    /// [`switches`] before it was taken from the pool.
    switches: u64,
}

/// A connection from [`WarmConnection::take`]; given back with [`WarmConnection::give_back`]
/// when every statement on it succeeded, else simply dropped (to the pool,
/// which checks it).
pub struct Taken {
    conn: Conn,
    switches: u64,
}

impl WarmConnection {
    /// The kept connection when it may be used again, else one from `pool`.
    pub async fn take(&self, pool: &Pool) -> Result<Taken, sqlx::Error> {
        let now = switches();
        if let Some(idle) = self.slot.lock().ok().and_then(|mut slot| slot.take()) {
            if idle.switches == now && idle.since.elapsed() < PING_AFTER_IDLE {
                return Ok(Taken {
                    conn: idle.conn,
                    switches: now,
                });
            }
            // Dropped here: back to the pool, which pings it when asked.
        }
        Ok(Taken {
            conn: pool.acquire().await?,
            switches: now,
        })
    }

    /// Keeps `taken` for the next caller. Only a plain connection is kept:
    /// behind a transaction pooler a read's transaction ends when it is
    /// dropped, and holding it would hold one of the pooler's servers.
    pub fn give_back(&self, taken: Taken) {
        if !taken.conn.is_plain() {
            return;
        }
        if let Ok(mut slot) = self.slot.lock() {
            *slot = Some(Idle {
                conn: taken.conn,
                since: Instant::now(),
                switches: taken.switches,
            });
        }
    }
}

impl Deref for Taken {
    type Target = PgConnection;

    fn deref(&self) -> &PgConnection {
        &self.conn
    }
}

impl DerefMut for Taken {
    fn deref_mut(&mut self) -> &mut PgConnection {
        &mut self.conn
    }
}
