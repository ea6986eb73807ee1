//! Whether one PostgreSQL snapshot sees every transaction another sees,
//! from their text (`pg_current_snapshot()::text`: `xmin:xmax:xip,…`).
//!
//! A transaction is visible in a snapshot when its id is below the
//! snapshot's `xmax` and not in its in-progress list. A snapshot taken
//! later sees all an earlier one sees (a commit is never undone), so the
//! candidate cache, once brought up to a later snapshot, serves every
//! search whose own snapshot it covers without asking the database.

/// A parsed snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
struct PgSnapshot {
    xmax: u64,
    in_progress: Vec<u64>,
}

impl PgSnapshot {
    fn parse(text: &str) -> Option<Self> {
        let mut parts = text.split(':');
        let _xmin: u64 = parts.next()?.parse().ok()?;
        let xmax = parts.next()?.parse().ok()?;
        let xip = parts.next()?;
        if parts.next().is_some() {
            return None;
        }
        let in_progress = match xip {
            "" => Vec::new(),
            list => list
                .split(',')
                .map(str::parse)
                .collect::<Result<_, _>>()
                .ok()?,
        };
        Some(PgSnapshot { xmax, in_progress })
    }
}

/// True when every transaction visible in `other` is visible in `cover`.
/// Unreadable text covers nothing (the caller asks the database instead).
pub fn covers(cover: &str, other: &str) -> bool {
    let (Some(cover), Some(other)) = (PgSnapshot::parse(cover), PgSnapshot::parse(other)) else {
        return false;
    };
    // Visible in `other`: below its xmax and not in progress there. Each
    // must be below `cover`'s xmax and not in progress in `cover`. (The
    // ids from `cover`'s xmax up are few when it covers: all in progress
    // in `other`.)
    let unseen = other.xmax.saturating_sub(cover.xmax);
    unseen <= u64::try_from(other.in_progress.len()).unwrap_or(u64::MAX)
        && (cover.xmax..other.xmax).all(|x| other.in_progress.contains(&x))
        && cover
            .in_progress
            .iter()
            .all(|x| *x >= other.xmax || other.in_progress.contains(x))
}

#[cfg(test)]
mod tests {
    use super::covers;
    use proptest::prelude::*;

    #[test]
    fn a_later_snapshot_covers_an_earlier_one() {
        assert!(covers("10:12:10", "10:11:10"));
        assert!(covers("12:12:", "10:12:10,11"));
        assert!(covers("10:12:", "10:12:"));
    }

    #[test]
    fn a_snapshot_missing_a_commit_the_other_sees_does_not_cover() {
        // 11 committed before `other` was taken but is in progress in `cover`.
        assert!(!covers("10:12:11", "10:12:"));
        // `other` sees 12, which `cover` has not reached.
        assert!(!covers("10:12:", "10:13:"));
        // ... unless 12 is in progress there.
        assert!(covers("10:12:", "10:13:12"));
        // Concurrent snapshots: each sees one the other does not.
        assert!(!covers("10:13:12", "10:13:11"));
        assert!(covers("10:13:11,12", "10:13:11,12"));
    }

    #[test]
    fn unreadable_text_covers_nothing() {
        for bad in ["", "10", "10:12", "10:12:x", "10:12:1:2", "a:b:"] {
            assert!(!covers(bad, "10:12:"), "{bad}");
            assert!(!covers("10:12:", bad), "{bad}");
        }
    }

    /// The visibility rule itself, per transaction id.
    fn visible(xmax: u64, xip: &[u64], x: u64) -> bool {
        x < xmax && !xip.contains(&x)
    }

    fn text(xmin: u64, xmax: u64, xip: &[u64]) -> String {
        let list: Vec<String> = xip.iter().map(u64::to_string).collect();
        format!("{xmin}:{xmax}:{}", list.join(","))
    }

    proptest! {
        /// `covers` says yes exactly when every id visible in the other
        /// snapshot is visible in the cover.
        #[test]
        fn covers_is_the_visibility_rule(
            a_xmax in 5u64..20, a_mask in 0u32..(1 << 15),
            b_xmax in 5u64..20, b_mask in 0u32..(1 << 15),
        ) {
            let xip = |xmax: u64, mask: u32| -> Vec<u64> {
                (5..xmax).filter(|x| mask & (1 << (x - 5)) != 0).collect()
            };
            let (a, b) = (xip(a_xmax, a_mask), xip(b_xmax, b_mask));
            let expected = (0..25).all(|x| !visible(b_xmax, &b, x) || visible(a_xmax, &a, x));
            let a_min = a.first().copied().unwrap_or(a_xmax);
            let b_min = b.first().copied().unwrap_or(b_xmax);
            prop_assert_eq!(covers(&text(a_min, a_xmax, &a), &text(b_min, b_xmax, &b)), expected);
        }
    }
}
