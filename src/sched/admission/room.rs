//! The room each provider has left, per class, in a max-tree over the
//! cluster's order, so that a request passes over the providers that cannot
//! hold it instead of visiting them one by one.
//!
//! A provider takes `n` units of a class only when `used + n ≤ capacity`
//! (reservations only tighten that), so where `capacity − used` is less
//! than `n` the capacity check fails. Two scans are cut short this way: a
//! deep queue behind a full cluster (a round over 80,000 requests on 10,000
//! full providers spent its 10-million step budget learning that one
//! provider at a time), and requests that fill the cluster in order (each
//! visited every provider the ones before it had filled: 25 and 50 million
//! steps for 10,000 requests). The round charges the visits it passes over
//! as steps, so every decision and `not_reached` stays the full scan's.

use super::{Class, Provider};

/// Per class, a max-tree of `capacity − used` over the providers in the
/// round's order (no stock of the class: −∞).
pub(super) struct Rooms {
    /// Providers in the cluster.
    len: usize,
    /// Leaves (a power of two, ≥ `len`; padding is −∞).
    leaves: usize,
    /// Per class: node `i` is the max of `2i` and `2i + 1`; leaves from `leaves`.
    trees: Vec<Vec<f64>>,
    /// False: pass over nothing (tests compare with the full scan).
    skips: bool,
    /// Per class: the most one provider could give one request when empty
    /// (its capacity, at most its `max_unit`; −∞ where none stocks it).
    largest: Vec<f64>,
}

/// True when `n` units certainly do not fit in `room`: a margin for the
/// rounding of `capacity − used` leaves borderline providers to the check.
fn clearly_over(n: i64, room: f64) -> bool {
    room == f64::NEG_INFINITY || n as f64 > room + 1e-9 * room.abs().max(1.0)
}

impl Rooms {
    /// The cluster's rooms.
    pub(super) fn of(providers: &[Provider], classes: usize) -> Self {
        let leaves = providers.len().next_power_of_two().max(1);
        let trees = (0..classes)
            .map(|c| {
                let mut tree = vec![f64::NEG_INFINITY; 2 * leaves];
                for (i, p) in providers.iter().enumerate() {
                    if let Some(s) = p.stock.get(c).and_then(Option::as_ref) {
                        tree[leaves + i] = s.capacity - s.used as f64;
                    }
                }
                for node in (1..leaves).rev() {
                    tree[node] = tree[2 * node].max(tree[2 * node + 1]);
                }
                tree
            })
            .collect();
        let largest = (0..classes)
            .map(|c| {
                providers
                    .iter()
                    .filter_map(|p| p.stock.get(c).and_then(Option::as_ref))
                    .map(|s| s.capacity.min(s.max_unit as f64))
                    .fold(f64::NEG_INFINITY, f64::max)
            })
            .collect();
        Rooms {
            len: providers.len(),
            leaves,
            trees,
            skips: true,
            largest,
        }
    }

    /// Rooms that pass over nothing.
    #[cfg(test)]
    pub(super) fn passing_nothing(providers: &[Provider], classes: usize) -> Self {
        Rooms {
            skips: false,
            ..Rooms::of(providers, classes)
        }
    }

    /// True when no provider could hold `resources` even empty (each class
    /// alone). Classes the cluster does not know are left to the provider
    /// checks.
    pub(super) fn never_fits(&self, resources: &[(Class, i64)]) -> bool {
        resources.iter().any(|&(c, n)| {
            self.largest
                .get(c)
                .is_some_and(|&most| clearly_over(n, most))
        })
    }

    /// False when no provider has room for `resources` (each class alone);
    /// true when one might. Classes the cluster does not know are left to the
    /// provider checks.
    pub(super) fn may_fit(&self, resources: &[(Class, i64)]) -> bool {
        !self.skips
            || resources
                .iter()
                .all(|&(c, n)| self.trees.get(c).is_none_or(|t| !clearly_over(n, t[1])))
    }

    /// The first provider at or after `from` that may hold `resources`
    /// (every class at once), or the cluster's size when none may.
    pub(super) fn next_open(&self, from: usize, resources: &[(Class, i64)]) -> usize {
        if !self.skips {
            return from;
        }
        let mut at = from;
        // Each class moves `at` to its own next open provider, until one
        // position suits them all (or the cluster ends).
        loop {
            let mut moved = false;
            for &(c, n) in resources {
                let Some(tree) = self.trees.get(c) else {
                    continue;
                };
                let next = first_open(tree, 1, 0, self.leaves, at, n).unwrap_or(self.len);
                if next > at {
                    (at, moved) = (next, true);
                }
            }
            if !moved || at >= self.len {
                return at.min(self.len);
            }
        }
    }

    /// Provider `rp` has `room` of class `c` left now.
    pub(super) fn set(&mut self, rp: usize, c: Class, room: f64) {
        let Some(tree) = self.trees.get_mut(c) else {
            return;
        };
        let mut node = self.leaves + rp;
        tree[node] = room;
        while node > 1 {
            node /= 2;
            tree[node] = tree[2 * node].max(tree[2 * node + 1]);
        }
    }
}

/// The first leaf at or after `from`, under `node` (covering `lo..hi`),
/// whose room may hold `n`.
fn first_open(
    tree: &[f64],
    node: usize,
    lo: usize,
    hi: usize,
    from: usize,
    n: i64,
) -> Option<usize> {
    if hi <= from || clearly_over(n, tree[node]) {
        return None;
    }
    if hi - lo == 1 {
        return Some(lo);
    }
    let mid = (lo + hi) / 2;
    first_open(tree, 2 * node, lo, mid, from, n)
        .or_else(|| first_open(tree, 2 * node + 1, mid, hi, from, n))
}

#[cfg(test)]
mod tests {
    use super::super::state::State;
    use super::super::*;
    use super::Rooms;
    use proptest::prelude::*;

    fn admit_scanning(round: &Round) -> Admitted {
        let mut state = State::scanning(round);
        state.stage(Stage::Guarantee);
        state.stage(Stage::Fair);
        state.finish()
    }

    fn stock(capacity: f64, used: i64) -> Option<Stock> {
        Some(Stock {
            capacity,
            used,
            min_unit: 1,
            max_unit: 1_000,
            step_size: 1,
        })
    }

    prop_compose! {
        fn provider()(vcpu in proptest::option::of((0u8..12, 0u8..12, prop_oneof![Just(1.0), Just(1.5)])),
                      mem in proptest::option::of((0u8..8, 0u8..8)),
                      reserved in proptest::option::of((0usize..3, 0usize..2, 0i64..3)))
                      -> Provider {
            let vcpu = vcpu.map(|(t, u, ratio)| (f64::from(t) * ratio, i64::from(u.min(t))));
            let mem = mem.map(|(t, u)| (f64::from(t), i64::from(u.min(t))));
            Provider {
                stock: vec![vcpu.and_then(|(c, u)| stock(c, u)), mem.and_then(|(c, u)| stock(c, u))],
                reservations: reserved
                    .map(|(owner, class, unused)| vec![Reservation { owner, class, unused }])
                    .unwrap_or_default(),
            }
        }
    }

    prop_compose! {
        fn round()(providers in proptest::collection::vec(provider(), 1..12),
                   limits in proptest::collection::vec(proptest::option::of(0i64..12), 3),
                   guarantees in proptest::collection::vec(0i64..4, 3),
                   requests in proptest::collection::vec((0usize..3, 1i64..7, proptest::option::of(1i64..5), any::<bool>()), 1..30),
                   max_steps in prop_oneof![Just(u64::MAX), 1u64..80],
                   nested in any::<bool>())
                   -> Round {
            let n = providers.len();
            let projects = (0..3)
                .map(|i| Project {
                    name: format!("p{i}"),
                    // The last project may sit under the first.
                    parent: (nested && i == 2).then_some(0),
                    weight: 1.0 + i as f64,
                    allocation_count: 0,
                    allocated: vec![0, 0],
                    consumed: vec![0, 0],
                    limits: vec![limits[i], None],
                    guarantees: vec![guarantees[i], 0],
                    lending_limits: vec![0, 0],
                    queueing: crate::sched::admission::Queueing::Strict,
                })
                .collect();
            let requests = requests
                .into_iter()
                .map(|(project, vcpu, mem, some)| Request {
                    project,
                    user: "u".into(),
                    resources: std::iter::once((0, vcpu)).chain(mem.map(|m| (1, m))).collect(),
                    // Some requests may use only the even providers.
                    allowed: some.then(|| (0..n).step_by(2).collect()),
                    precedence: Default::default(),
                    gang: None,
                })
                .collect();
            Round {
                classes: 2,
                totals: vec![64.0, 32.0],
                excluded: vec![false, false],
                providers,
                projects,
                requests,
                declines: Vec::new(),
                max_steps,
            }
        }
    }

    proptest! {
        /// Passing over providers without room and keeping the sorter's
        /// inputs as admissions change them decide what the full scan
        /// with everything worked out again decides, steps included.
        #[test]
        fn the_bound_decides_as_the_full_scan_does(round in round()) {
            prop_assert_eq!(admit(&round), admit_scanning(&round));
        }
    }

    #[test]
    fn full_providers_are_passed_over_and_a_freed_unit_is_found() {
        let full = Provider {
            stock: vec![stock(2.0, 2)],
            reservations: Vec::new(),
        };
        let mut providers = vec![full; 5];
        let rooms = Rooms::of(&providers, 1);
        assert!(!rooms.may_fit(&[(0, 1)]));
        assert_eq!(rooms.next_open(0, &[(0, 1)]), 5);
        providers[3].stock[0] = stock(2.0, 1);
        let mut rooms = Rooms::of(&providers, 1);
        assert!(rooms.may_fit(&[(0, 1)]));
        assert!(!rooms.may_fit(&[(0, 2)]));
        assert_eq!(rooms.next_open(0, &[(0, 1)]), 3);
        assert_eq!(rooms.next_open(3, &[(0, 1)]), 3);
        assert_eq!(rooms.next_open(4, &[(0, 1)]), 5);
        // The one provider with room takes it; another frees two units.
        rooms.set(3, 0, 0.0);
        rooms.set(1, 0, 2.0);
        assert_eq!(rooms.next_open(0, &[(0, 1)]), 1);
        assert_eq!(rooms.next_open(2, &[(0, 1)]), 5);
        // Two classes: the first position where both fit.
        let two = |vcpu: i64, mem: i64| Provider {
            stock: vec![stock(4.0, vcpu), stock(4.0, mem)],
            reservations: Vec::new(),
        };
        let pool = [two(4, 0), two(0, 4), two(3, 3), two(1, 1)];
        let rooms = Rooms::of(&pool, 2);
        assert_eq!(rooms.next_open(0, &[(0, 1), (1, 1)]), 2);
        assert_eq!(rooms.next_open(0, &[(0, 2), (1, 2)]), 3);
        // A class no provider has refuses; one the cluster does not know is
        // left to the checks.
        assert!(!Rooms::of(&[Provider::default()], 1).may_fit(&[(0, 1)]));
        assert!(rooms.may_fit(&[(5, 1)]));
        assert_eq!(rooms.next_open(1, &[(5, 1)]), 1);
    }
}
