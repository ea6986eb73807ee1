//! Whether a request, or a gang, could be placed even on empty providers:
//! the test behind `never_fits`, from the whole request. A request whose
//! traits or aggregates allow no provider, whose classes no allowed
//! provider could hold, or a gang larger than the providers can ever hold
//! whole, waits for nothing: it says `never_fits` and leaves the head of
//! its project's queue instead of blocking the work behind it.
//!
//! The capacity figures are the providers' when empty (capacity, at most
//! `max_unit`), so nothing that frees can change the answer; only a change
//! to the inventories, which the next round reads, can.

use super::{Class, Provider, Request};
use std::collections::HashMap;

/// The providers' empty capacities, with the per-class largest over each
/// list of allowed providers worked out once a round.
pub(super) struct EmptyCapacity<'a> {
    providers: &'a [Provider],
    classes: usize,
    /// Per allowed list (by its address; the lists live for the round):
    /// per class, the most one allowed provider could give one request.
    largest_by_list: HashMap<usize, Vec<f64>>,
}

/// The most `stock` gives one request when empty, or −∞ without one.
fn most(provider: &Provider, c: Class) -> f64 {
    provider
        .stock
        .get(c)
        .and_then(Option::as_ref)
        .map_or(f64::NEG_INFINITY, |s| s.capacity.min(s.max_unit as f64))
}

/// True when `n` units certainly exceed `room` (a margin for rounding).
fn over(n: i64, room: f64) -> bool {
    room == f64::NEG_INFINITY || n as f64 > room + 1e-9 * room.abs().max(1.0)
}

impl<'a> EmptyCapacity<'a> {
    /// The empty capacities of `providers` (as they stand before the round), with
    /// `classes` classes.
    pub(super) fn of(providers: &'a [Provider], classes: usize) -> Self {
        EmptyCapacity {
            providers,
            classes,
            largest_by_list: HashMap::new(),
        }
    }

    /// True when no provider `r` may use could hold it even empty, class
    /// by class: its allowed list is empty, or a class it asks is more
    /// than any allowed provider holds. (A request without a list is the
    /// round's `Rooms::never_fits`.)
    pub(super) fn never_fits(&mut self, r: &Request) -> bool {
        let Some(list) = &r.allowed else {
            return false;
        };
        let key = list.as_ptr() as usize;
        let (providers, classes) = (self.providers, self.classes);
        let largest = self.largest_by_list.entry(key).or_insert_with(|| {
            (0..classes)
                .map(|c| {
                    list.iter()
                        .filter_map(|&p| providers.get(p))
                        .map(|p| most(p, c))
                        .fold(f64::NEG_INFINITY, f64::max)
                })
                .collect()
        });
        list.is_empty()
            || r.resources
                .iter()
                .any(|&(c, n)| largest.get(c).is_some_and(|&room| over(n, room)))
    }

    /// True when the gang `members` could never be placed whole, even on
    /// the empty providers: for some class, more than every provider together
    /// holds; or, for members all alike, more members than the providers
    /// have places for (each provider's places: the fewest, over the
    /// classes, of its capacity over one member's need).
    pub(super) fn gang_never_fits(&self, members: &[&Request]) -> bool {
        if members.len() < 2 {
            return false;
        }
        let allowed = |p: usize| {
            members
                .iter()
                .any(|m| m.allowed.as_ref().is_none_or(|a| a.contains(&p)))
        };
        let usable: Vec<&Provider> = (0..self.providers.len())
            .filter(|&p| allowed(p))
            .map(|p| &self.providers[p])
            .collect();
        let mut asked: HashMap<Class, i64> = HashMap::new();
        for m in members {
            for &(c, n) in &m.resources {
                *asked.entry(c).or_default() += n;
            }
        }
        let too_much = asked.iter().any(|(&c, &n)| {
            let total: f64 = usable
                .iter()
                .map(|p| most(p, c))
                .filter(|m| m.is_finite())
                .sum();
            over(n, total)
        });
        if too_much {
            return true;
        }
        let first = members[0];
        let alike = members
            .iter()
            .all(|m| m.resources == first.resources && m.allowed == first.allowed);
        if !alike || first.resources.is_empty() {
            return false;
        }
        let places: usize = usable
            .iter()
            .map(|p| {
                first
                    .resources
                    .iter()
                    .map(|&(c, n)| {
                        let room = most(p, c);
                        match room.is_finite() && n > 0 {
                            // Whole places only; a margin for rounding.
                            true => (room / n as f64 + 1e-9).floor().max(0.0) as usize,
                            false => 0,
                        }
                    })
                    .min()
                    .unwrap_or(0)
            })
            .sum();
        places < members.len()
    }
}
