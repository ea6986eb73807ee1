//! One clock for every process: the database's. Report freshness, batch
//! capacity's degradation and eviction cooldowns compare times that other
//! processes (and the nodes) wrote; measured on each server's own clock, a
//! server 20 minutes fast found every report stale and wrote batch
//! inventory 0 for every node.
//!
//! Reading PostgreSQL's clock on every comparison would cost a round
//! trip, so each process measures its offset from the database's clock
//! (`db::time_offset`, to half a round trip) at start and every few
//! seconds, and [`now`] is this process's clock corrected by it.

use chrono::{DateTime, Duration, Utc};
use std::sync::atomic::{AtomicI64, Ordering};

/// The database's clock minus this process's, in milliseconds.
static OFFSET_MS: AtomicI64 = AtomicI64::new(0);

/// Now, on the database's clock.
pub fn now() -> DateTime<Utc> {
    Utc::now() + Duration::milliseconds(OFFSET_MS.load(Ordering::Relaxed))
}

/// Records the database's time `theirs`, read by a round trip from
/// `before` to `after` on this process's clock; the offset and the one it
/// replaces, in milliseconds.
pub fn observe(theirs: DateTime<Utc>, before: DateTime<Utc>, after: DateTime<Utc>) -> (i64, i64) {
    let offset = offset_ms(theirs, before, after);
    (offset, OFFSET_MS.swap(offset, Ordering::Relaxed))
}

/// The offset of `theirs` from the middle of the round trip that read it.
fn offset_ms(theirs: DateTime<Utc>, before: DateTime<Utc>, after: DateTime<Utc>) -> i64 {
    let ours = before + (after - before) / 2;
    (theirs - ours).num_milliseconds()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_offset_is_taken_against_the_middle_of_the_round_trip() {
        let before = Utc::now();
        let after = before + Duration::milliseconds(10);
        let theirs = before + Duration::minutes(-20);
        assert_eq!(offset_ms(theirs, before, after), -20 * 60 * 1000 - 5);
    }
}
