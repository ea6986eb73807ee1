//! The largest room any provider has left, per class, so that a request
//! no provider can hold is answered without visiting every provider.
//!
//! A provider takes `n` units of a class only when `used + n ≤ capacity`
//! (reservations only tighten that), so a request for more than the
//! largest `capacity − used` fails the capacity check everywhere. A deep
//! queue behind a full pool is mostly such requests: a round over 80,000
//! of them on 10,000 providers spent its whole step budget (10 million
//! provider checks) learning that one at a time.

use super::{Class, Provider};

/// Per class: the largest `capacity − used` over the pool, how many
/// providers have exactly that, and whether it must be found again.
pub(super) struct LargestRoom {
    room: Vec<f64>,
    holders: Vec<usize>,
    stale: Vec<bool>,
}

impl LargestRoom {
    /// The pool's largest room per class.
    pub(super) fn of(providers: &[Provider], classes: usize) -> Self {
        let mut largest = LargestRoom {
            room: vec![f64::NEG_INFINITY; classes],
            holders: vec![0; classes],
            stale: vec![true; classes],
        };
        for c in 0..classes {
            largest.find(providers, c);
        }
        largest
    }

    /// A bound that refuses nothing.
    #[cfg(test)]
    pub(super) fn unbounded(classes: usize) -> Self {
        LargestRoom {
            room: vec![f64::INFINITY; classes],
            holders: vec![usize::MAX; classes],
            stale: vec![false; classes],
        }
    }

    fn find(&mut self, providers: &[Provider], c: Class) {
        let (mut room, mut holders) = (f64::NEG_INFINITY, 0);
        for s in providers.iter().filter_map(|p| p.stock.get(c)?.as_ref()) {
            let r = s.capacity - s.used as f64;
            if r > room {
                (room, holders) = (r, 1);
            } else if r == room {
                holders += 1;
            }
        }
        self.room[c] = room;
        self.holders[c] = holders;
        self.stale[c] = false;
    }

    /// False when no provider has room for `resources` (each class
    /// alone); true when one might.
    pub(super) fn may_fit(&mut self, providers: &[Provider], resources: &[(Class, i64)]) -> bool {
        for &(c, n) in resources {
            if self.stale.get(c) == Some(&true) {
                self.find(providers, c);
            }
            let Some(&room) = self.room.get(c) else {
                continue;
            };
            if room == f64::NEG_INFINITY {
                return false; // no provider has the class at all
            }
            // A margin for the rounding of `capacity − used`: only a
            // request clearly over the largest room is refused here.
            if n as f64 > room + 1e-9 * room.abs().max(1.0) {
                return false;
            }
        }
        true
    }

    /// A provider whose room of class `c` was `before` took more of it.
    pub(super) fn taken(&mut self, c: Class, before: f64) {
        if self.stale.get(c) == Some(&false) && self.room[c] == before {
            self.holders[c] -= 1;
            if self.holders[c] == 0 {
                self.stale[c] = true;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::state::State;
    use super::super::*;
    use super::LargestRoom;
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
        fn round()(providers in proptest::collection::vec(provider(), 1..7),
                   limits in proptest::collection::vec(proptest::option::of(0i64..12), 3),
                   guarantees in proptest::collection::vec(0i64..4, 3),
                   requests in proptest::collection::vec((0usize..3, 1i64..7, proptest::option::of(1i64..5), any::<bool>()), 1..30),
                   max_steps in prop_oneof![Just(u64::MAX), 1u64..80])
                   -> Round {
            let n = providers.len();
            let projects = (0..3)
                .map(|i| Project {
                    name: format!("p{i}"),
                    parent: None,
                    weight: 1.0 + i as f64,
                    allocation_count: 0,
                    allocated: vec![0, 0],
                    consumed: vec![0, 0],
                    limits: vec![limits[i], None],
                    guarantees: vec![guarantees[i], 0],
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
        /// The bound changes nothing a round decides, nor its steps; it
        /// only skips provider visits that could not succeed.
        #[test]
        fn the_bound_decides_as_the_full_scan_does(round in round()) {
            prop_assert_eq!(admit(&round), admit_scanning(&round));
        }
    }

    #[test]
    fn a_full_pool_refuses_at_once_and_a_freed_unit_is_found() {
        let full = Provider {
            stock: vec![stock(2.0, 2)],
            reservations: Vec::new(),
        };
        let mut providers = vec![full; 4];
        let mut largest = LargestRoom::of(&providers, 1);
        assert!(!largest.may_fit(&providers, &[(0, 1)]));
        providers[3].stock[0] = stock(2.0, 1);
        let mut largest = LargestRoom::of(&providers, 1);
        assert!(largest.may_fit(&providers, &[(0, 1)]));
        assert!(!largest.may_fit(&providers, &[(0, 2)]));
        // The one provider with room takes it: the bound is found again.
        providers[3].stock[0] = stock(2.0, 2);
        largest.taken(0, 1.0);
        assert!(!largest.may_fit(&providers, &[(0, 1)]));
        // A class no provider has refuses; one the bound does not know
        // is left to the scan.
        assert!(!LargestRoom::of(&[Provider::default()], 1).may_fit(&[], &[(0, 1)]));
        assert!(largest.may_fit(&providers, &[(5, 1)]));
    }
}
