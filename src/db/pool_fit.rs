//! The pool's size as PostgreSQL allows it: a role's `CONNECTION LIMIT`
//! and the server's `max_connections` (shared with every other client)
//! can be below `--db-max-connections`.
//!
//! Why: past such a limit a new connection is refused with SQLSTATE 53300,
//! which sqlx retries until the acquire timeout, while the connections
//! this process already has come back idle and go to other waiters.
//! Every refused attempt also costs PostgreSQL a backend start. A pool of
//! 20 allowed 6 sessions served a fifth of what a pool of 6 serves, and
//! PUTs waited their whole acquire timeout for a 503.
//!
//! So the pool has a budget: the connections it held when the room was
//! last read plus the free room under both limits, read from `pg_roles`
//! and `pg_stat_activity` at start, a second later (once the background
//! work holds its connections), every few seconds, and at once when a
//! connection is slow to come. At the budget a request waits for one of
//! the pool's connections to come back idle instead of opening one more.
//! When the room is full, a request already waiting for a new connection
//! gives that attempt up and waits the same way.
//!
//! The reader never waits long in the requests' line: a budget read too
//! high leaves every request in sqlx's retries, the reader among them,
//! until the acquire timeout answers them all 503. When no connection of
//! the pool comes soon, the room is read on a connection of its own, and a
//! refusal for a limit (53300) says the room is full.

use sqlx::PgConnection;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;
use tokio::sync::{watch, Notify};

/// How often the room is read again without a reason.
pub const REFIT_EVERY: Duration = Duration::from_secs(5);

/// The room is read again this soon after start, once the background
/// work (the announcement listeners) holds its connections.
const FIRST_REFIT: Duration = Duration::from_secs(1);

/// A connection that takes this long to come is likely being refused for
/// a limit (sqlx retries such refusals until the acquire timeout): the
/// room is read again at once.
pub const SLOW_CONNECTION: Duration = Duration::from_millis(200);

/// Connections PostgreSQL has room for, as read at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Room {
    /// Free connections under the role's `CONNECTION LIMIT` (None: no limit).
    pub role: Option<i64>,
    /// Free connections under `max_connections`, less the slots reserved
    /// for superusers when this role is not one.
    pub server: i64,
}

impl Room {
    /// No room at all: PostgreSQL refused a connection for a limit.
    pub const FULL: Room = Room {
        role: None,
        server: 0,
    };

    /// The smaller of the two rooms.
    pub fn free(self) -> i64 {
        self.role.map_or(self.server, |r| r.min(self.server))
    }

    /// Whether no connection more would be let in.
    pub fn is_full(self) -> bool {
        self.free() <= 0
    }

    /// The budget of a pool that holds `held` connections and may hold at
    /// most `most`: what it holds plus the free room, at least one (a
    /// request must be able to find out that the database refuses it).
    pub fn budget(self, held: u32, most: u32) -> u32 {
        let budget = i64::from(held)
            .saturating_add(self.free())
            .clamp(1, i64::from(most.max(1)));
        u32::try_from(budget).unwrap_or(most)
    }
}

/// Reads the room PostgreSQL has for more connections of this role.
pub async fn room(conn: &mut PgConnection) -> Result<Room, sqlx::Error> {
    let (role_limit, role_used, server_limit, server_used): (i32, i64, i32, i64) = sqlx::query_as(
        "SELECT r.rolconnlimit,
                    (SELECT count(*) FROM pg_stat_activity
                      WHERE usename = current_user AND backend_type = 'client backend'),
                    current_setting('max_connections')::int
                      - CASE WHEN r.rolsuper THEN 0
                             ELSE current_setting('superuser_reserved_connections')::int
                                  + coalesce(current_setting('reserved_connections', true)::int, 0)
                        END,
                    (SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend')
               FROM pg_roles r WHERE r.rolname = current_user",
    )
    .fetch_one(conn)
    .await?;
    Ok(Room {
        // A superuser is not held to its role's limit; -1 is no limit.
        role: (role_limit >= 0).then(|| i64::from(role_limit) - role_used),
        server: i64::from(server_limit) - server_used,
    })
}

/// One pool's budget, and what tells its waiters to look again.
#[derive(Debug)]
pub struct Budget {
    /// Connections the pool may have in all.
    most_now: AtomicU32,
    /// `--db-max-connections`.
    most: u32,
    /// Woken when a connection was slow to come: the room is read at once.
    starved: Notify,
    /// Bumped when a read finds the room full: a request waiting for a
    /// new connection gives the attempt up and waits for an idle one.
    full: watch::Sender<u64>,
    /// Room reads so far.
    fits: AtomicU32,
    /// Requests waiting in sqlx's acquire now: each may be opening a
    /// connection that sqlx counts in its size but PostgreSQL does not
    /// (yet, or ever, when it is refused).
    opening: AtomicU32,
}

/// Counts one request in [`Budget::opening`] while it waits in sqlx.
#[derive(Debug)]
pub struct Opening<'a>(&'a AtomicU32);

impl Drop for Opening<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Budget {
    /// `most` connections, until the room is read.
    pub fn new(most: u32) -> Self {
        Budget {
            most_now: AtomicU32::new(most),
            most,
            starved: Notify::new(),
            full: watch::Sender::new(0),
            fits: AtomicU32::new(0),
            opening: AtomicU32::new(0),
        }
    }

    /// Counts a request waiting in sqlx's acquire until dropped.
    pub fn opening(&self) -> Opening<'_> {
        self.opening.fetch_add(1, Ordering::AcqRel);
        Opening(&self.opening)
    }

    /// Connections the pool may have in all now.
    pub fn get(&self) -> u32 {
        self.most_now.load(Ordering::Acquire)
    }

    /// Told whenever a read finds the room full.
    pub fn fulls(&self) -> watch::Receiver<u64> {
        self.full.subscribe()
    }

    /// A connection is slow to come: the room is read again at once.
    pub fn starving(&self) {
        self.starved.notify_one();
    }

    /// The connections a pool of `size` connections, as sqlx counts them,
    /// holds. Those that requests are opening are left out: PostgreSQL
    /// counts them in the room only once they are open, and one refused
    /// for the limit never is (an undercount only makes the budget smaller
    /// for a moment).
    pub fn held(&self, size: u32) -> u32 {
        size.saturating_sub(self.opening.load(Ordering::Acquire))
    }

    /// Sets the budget from `room`, for a pool that holds `held`
    /// connections ([`Budget::held`]) while the room was read.
    pub fn fit(&self, room: Room, held: u32) {
        let budget = room.budget(held, self.most);
        if room.is_full() {
            self.full.send_modify(|n| *n += 1);
        }
        let old = self.most_now.swap(budget, Ordering::AcqRel);
        if old == budget {
            return;
        }
        crate::metrics::metrics().pool_budget.set(i64::from(budget));
        if budget < self.most && old == self.most {
            tracing::warn!(
                connections = budget,
                configured = self.most,
                role_room = ?room.role,
                server_room = room.server,
                "PostgreSQL has room for fewer connections than --db-max-connections: the pool stops growing at what it has"
            );
        } else if budget == self.most {
            tracing::info!(
                connections = budget,
                "the pool may grow to --db-max-connections again"
            );
        } else {
            tracing::debug!(connections = budget, "the pool's budget changed");
        }
    }

    /// Waits for the next reason to read the room again: a connection
    /// slow to come, [`FIRST_REFIT`] after the first read, or
    /// [`REFIT_EVERY`].
    pub async fn next_reason(&self) {
        let every = match self.fits.fetch_add(1, Ordering::AcqRel) {
            0 => FIRST_REFIT,
            _ => REFIT_EVERY,
        };
        tokio::select! {
            () = self.starved.notified() => {},
            () = tokio::time::sleep(every) => {},
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_budget_is_what_is_held_plus_the_smaller_room_within_bounds() {
        let room = |role, server| Room { role, server };
        assert_eq!(room(None, 100).budget(3, 20), 20);
        assert_eq!(room(Some(3), 100).budget(3, 20), 6);
        assert_eq!(room(Some(50), 2).budget(3, 20), 5);
        assert_eq!(room(Some(-4), 100).budget(3, 20), 1);
        assert_eq!(room(Some(0), 0).budget(0, 20), 1);
        assert!(room(Some(0), 10).is_full() && !room(None, 1).is_full());
    }

    #[tokio::test]
    async fn a_full_room_tells_the_waiters_and_a_change_is_kept() {
        let budget = Budget::new(20);
        let mut told = budget.fulls();
        budget.fit(
            Room {
                role: Some(0),
                server: 90,
            },
            6,
        );
        assert_eq!(budget.get(), 6);
        assert!(told.has_changed().unwrap());
        told.mark_unchanged();
        budget.fit(
            Room {
                role: None,
                server: 90,
            },
            6,
        );
        assert_eq!(budget.get(), 20);
        assert!(!told.has_changed().unwrap());
    }
}
