//! CPU plans for one group of cores (eru.md §7.1–7.7, 7.9): whole cores plus one fragment core per instance.
//!
//! This is Eru's `schedule.go` host: cores with a whole multiple of `share_base` free are
//! *full* cores, any other positive amount is a *fragment* core; a request of X.Y CPUs takes
//! X full cores and one fragment. Counting ([`group_count`]) avoids building plans so that
//! capacity over thousands of nodes stays cheap; [`group_plans`] builds them in Eru's order.

use std::collections::{BTreeMap, BinaryHeap};

use super::error::{SchedError, SchedResult};
use super::types::{CoreId, CpuMap, SchedConfig};

/// A request split into whole cores and the pieces of the one fragment core.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Split {
    /// Whole cores per instance.
    pub full: i64,
    /// Pieces on the fragment core per instance (0 = integral request).
    pub fragment: i64,
}

/// Split a CPU request into whole cores and fragment pieces (§7.1).
///
/// `pieces = trunc(cpu × share_base)` in f64, as Eru does (0.29 → 28). A bound request below
/// one piece is rejected: Go loops forever on it (anomaly `bind_request_below_one_piece_hangs`).
pub fn split_request(cpu: f64, cfg: &SchedConfig) -> SchedResult<Split> {
    let base = cfg.base();
    let raw = (cpu * base as f64).trunc();
    if !raw.is_finite() || raw < 1.0 {
        return Err(SchedError::InvalidCpu(format!(
            "bound cpu request {cpu} is below one piece (1/{base} of a core)"
        )));
    }
    if raw >= i64::MAX as f64 {
        return Err(SchedError::InvalidCpu(format!(
            "cpu request {cpu} is too large"
        )));
    }
    let pieces = raw as i64;
    Ok(Split {
        full: pieces / base,
        fragment: pieces % base,
    })
}

/// One core as the planner sees it.
#[derive(Debug, Clone, Copy)]
struct Core<'a> {
    id: &'a CoreId,
    /// Position of the id in string order, so heap ties compare ids without string compares.
    key: u32,
    pieces: i64,
}

/// A group of cores classified into full and fragment lists (Eru `host`).
struct Host<'a> {
    base: i64,
    max_fragment_cores: Option<u32>,
    full: Vec<Core<'a>>,
    fragment: Vec<Core<'a>>,
    affinity: bool,
}

impl<'a> Host<'a> {
    /// `cores` must come in id (string) order, as a [`CpuMap`] iterates.
    fn new(cores: impl IntoIterator<Item = (&'a CoreId, i64)>, cfg: &SchedConfig) -> Self {
        let base = cfg.base();
        let mut full = Vec::new();
        let mut fragment = Vec::new();
        // Cores arrive in string order of ids, so a stable sort by pieces yields Eru's
        // (pieces, id-as-string) order: most-used cores first.
        for (key, (id, pieces)) in cores.into_iter().enumerate() {
            let core = Core {
                id,
                key: u32::try_from(key).unwrap_or(u32::MAX),
                pieces,
            };
            if pieces >= base && pieces % base == 0 {
                full.push(core);
            } else if pieces > 0 {
                fragment.push(core);
            }
        }
        full.sort_by_key(|c| c.pieces);
        fragment.sort_by_key(|c| c.pieces);
        Host {
            base,
            max_fragment_cores: cfg.max_fragment_cores,
            full,
            fragment,
            affinity: false,
        }
    }

    /// Realloc affinity (§7.9): cores the workload held keep the front of their lists, in the
    /// order they had in the origin map; the rest keep their order.
    fn reorder_by_affinity(&mut self, origin: &CpuMap, cfg: &SchedConfig) {
        let old = Host::new(origin.iter().map(|(k, v)| (k, *v)), cfg);
        let rank = |cores: &[Core<'_>]| -> BTreeMap<CoreId, usize> {
            cores
                .iter()
                .enumerate()
                .map(|(i, c)| (c.id.clone(), i))
                .collect()
        };
        let full_rank = rank(&old.full);
        let fragment_rank = rank(&old.fragment);
        let sort = |cores: &mut Vec<Core<'a>>, ranks: &BTreeMap<CoreId, usize>| {
            cores.sort_by_key(|c| match ranks.get(c.id) {
                Some(r) => (0, *r),
                None => (1, 0),
            });
        };
        sort(&mut self.full, &full_rank);
        sort(&mut self.fragment, &fragment_rank);
        self.affinity = true;
    }

    /// Effective max fragment cores (§7.3): the configured limit, never above
    /// `#full + #fragment − full`.
    fn max_fragment(&self, split: Split) -> i64 {
        let cap = (self.full.len() + self.fragment.len()) as i64 - split.full;
        match self.max_fragment_cores {
            Some(m) if i64::from(m) < cap => i64::from(m),
            _ => cap,
        }
    }

    /// Full cores moved to the fragment list for a fractional-only request. Clamped at 0:
    /// Go panics when the limit is below the existing fragment cores (anomaly
    /// `max_fragment_cores_below_existing_fragments_panics`); we use the existing ones only.
    fn fragment_only_moves(&self, split: Split) -> usize {
        let diff = self.max_fragment(split) - self.fragment.len() as i64;
        usize::try_from(diff.max(0))
            .unwrap_or(0)
            .min(self.full.len())
    }

    fn fragment_count(cores: &[Core<'_>], fragment: i64) -> i64 {
        cores.iter().map(|c| c.pieces / fragment).sum()
    }

    /// Count whole-core plans over `full[moved..]`.
    fn full_count(&self, counter: &FullCounter, moved: usize, full: i64) -> i64 {
        if self.affinity {
            let mut n = 0;
            self.walk_affinity(&self.full[moved..], full, |_| n += 1);
            n
        } else {
            counter.count_suffix(moved, full)
        }
    }

    /// Pick the number of full cores to convert into fragment cores (§7.6, both parts > 0):
    /// the first split whose capacity is strictly larger than every earlier one.
    fn best_split(&self, split: Split) -> (usize, i64) {
        let counter = FullCounter::new(&self.full, self.base);
        let max_fragment = self.max_fragment(split);
        let mut fragment_capacity = Self::fragment_count(&self.fragment, split.fragment);
        let mut best = self
            .full_count(&counter, 0, split.full)
            .min(fragment_capacity);
        let mut best_moved = 0;
        let mut moved = 0;
        while ((self.fragment.len() + moved) as i64) < max_fragment && moved < self.full.len() {
            fragment_capacity += self.full[moved].pieces / split.fragment;
            moved += 1;
            let full_count = self.full_count(&counter, moved, split.full);
            let capacity = full_count.min(fragment_capacity);
            if capacity > best {
                best = capacity;
                best_moved = moved;
            } else if !self.affinity && full_count <= best {
                // The greedy count is optimal, so dropping cores never raises it: no later
                // split can beat `best`. (The affinity walk is not optimal; it runs to the end.)
                break;
            }
        }
        (best_moved, best)
    }

    fn count(&self, split: Split) -> i64 {
        if split.fragment == 0 {
            let counter = FullCounter::new(&self.full, self.base);
            return self.full_count(&counter, 0, split.full);
        }
        if split.full == 0 {
            let moved = self.fragment_only_moves(split);
            return Self::fragment_count(&self.fragment, split.fragment)
                + Self::fragment_count(&self.full[..moved], split.fragment);
        }
        self.best_split(split).1
    }

    fn plans(&self, split: Split) -> Vec<CpuMap> {
        if split.fragment == 0 {
            return self.full_plans(&self.full, split.full);
        }
        if split.full == 0 {
            let moved = self.fragment_only_moves(split);
            let cores: Vec<Core<'_>> = self
                .fragment
                .iter()
                .chain(&self.full[..moved])
                .copied()
                .collect();
            return fragment_plans(&cores, split.fragment);
        }
        let (moved, best) = self.best_split(split);
        let best = usize::try_from(best).unwrap_or(0);
        let full_plans = self.full_plans(&self.full[moved..], split.full);
        let cores: Vec<Core<'_>> = self
            .fragment
            .iter()
            .chain(&self.full[..moved])
            .copied()
            .collect();
        // Only the first `best` fragment plans are paired; build no more than that.
        let mut fragment_plans = fragment_plans_upto(&cores, split.fragment, best);
        full_plans
            .into_iter()
            .zip(fragment_plans.iter_mut())
            .take(best)
            .map(|(mut plan, frag)| {
                for (id, pieces) in std::mem::take(frag) {
                    *plan.entry(id).or_insert(0) += pieces;
                }
                plan
            })
            .collect()
    }

    /// Whole-core plans (§7.4). Without affinity: repeatedly take the `full` cores with the
    /// most free pieces (ties: larger id), then order plans by the sum of their cores'
    /// positions so plans on the busiest cores come first. With affinity: §7.9 chunk walk.
    fn full_plans(&self, cores: &[Core<'_>], full: i64) -> Vec<CpuMap> {
        let width = usize::try_from(full).unwrap_or(0);
        if self.affinity {
            let mut plans = Vec::new();
            self.walk_affinity(cores, full, |picked| {
                plans.push(
                    picked
                        .iter()
                        .map(|&i| (cores[i].id.clone(), self.base))
                        .collect(),
                );
            });
            return plans;
        }
        if width == 0 {
            return Vec::new();
        }
        // Max-heap on (pieces, id order): the freest core first, ties to the larger id string.
        let mut heap: BinaryHeap<(i64, u32, usize)> = cores
            .iter()
            .enumerate()
            .map(|(pos, c)| (c.pieces, c.key, pos))
            .collect();
        let mut ranked: Vec<(usize, Vec<usize>)> = Vec::new();
        let mut picked = Vec::with_capacity(width);
        let mut back = Vec::with_capacity(width);
        while heap.len() >= width {
            picked.clear();
            back.clear();
            for _ in 0..width {
                let Some((pieces, key, pos)) = heap.pop() else {
                    break;
                };
                picked.push(pos);
                let left = pieces - self.base;
                if left > 0 {
                    back.push((left, key, pos));
                }
            }
            ranked.push((picked.iter().sum(), picked.clone()));
            heap.extend(back.iter().copied());
        }
        // Stable, unlike Go's sort.Slice: equal-rank plans keep generation order.
        ranked.sort_by_key(|(rank, _)| *rank);
        ranked
            .into_iter()
            .map(|(_, picked)| {
                picked
                    .into_iter()
                    .map(|pos| (cores[pos].id.clone(), self.base))
                    .collect()
            })
            .collect()
    }

    /// Affinity whole-core walk (§7.9): consecutive chunks of `full` cores, cores with pieces
    /// left go to the front of the next pass followed by the unused tail; no re-sorting.
    fn walk_affinity(&self, cores: &[Core<'_>], full: i64, mut visit: impl FnMut(&[usize])) {
        let Ok(width) = usize::try_from(full) else {
            return;
        };
        if width == 0 {
            return;
        }
        let mut order: Vec<(usize, i64)> = cores
            .iter()
            .enumerate()
            .map(|(i, c)| (i, c.pieces))
            .collect();
        let mut picked = Vec::with_capacity(width);
        while order.len() >= width {
            let count = order.len() / width;
            let mut kept = Vec::new();
            for chunk in order[..count * width].chunks(width) {
                picked.clear();
                for &(i, pieces) in chunk {
                    picked.push(i);
                    let left = pieces - self.base;
                    if left > 0 {
                        kept.push((i, left));
                    }
                }
                visit(&picked);
            }
            kept.extend_from_slice(&order[count * width..]);
            order = kept;
        }
    }
}

/// Fragment plans (§7.5): each core in order yields `floor(free / fragment)` one-core plans.
fn fragment_plans(cores: &[Core<'_>], fragment: i64) -> Vec<CpuMap> {
    fragment_plans_upto(cores, fragment, usize::MAX)
}

fn fragment_plans_upto(cores: &[Core<'_>], fragment: i64, limit: usize) -> Vec<CpuMap> {
    let mut plans = Vec::new();
    for c in cores {
        for _ in 0..c.pieces / fragment {
            if plans.len() >= limit {
                return plans;
            }
            plans.push(CpuMap::from([(c.id.clone(), fragment)]));
        }
    }
    plans
}

/// Counts greedy whole-core plans over a suffix of the full-core list without simulating.
///
/// With `u_i` whole units per core, greedy "take the `full` freest cores" builds the maximum
/// number of plans of `full` distinct cores, which is the largest `k` with
/// `Σ min(u_i, k) ≥ full·k`. The conversion loop only drops the busiest cores, i.e. a prefix
/// of the ascending list, so each query is a suffix and prefix sums answer it in O(log n).
struct FullCounter {
    units: Vec<i64>,
    prefix: Vec<i128>,
}

impl FullCounter {
    fn new(full: &[Core<'_>], base: i64) -> Self {
        let units: Vec<i64> = full.iter().map(|c| c.pieces / base).collect();
        let mut prefix = Vec::with_capacity(units.len() + 1);
        prefix.push(0i128);
        let mut acc = 0i128;
        for &u in &units {
            acc += i128::from(u);
            prefix.push(acc);
        }
        FullCounter { units, prefix }
    }

    /// `Σ_{i ≥ from} min(u_i, k)`; relies on `units` ascending (true without affinity).
    fn capped_sum(&self, from: usize, k: i64) -> i128 {
        let n = self.units.len();
        let first_big = self.units.partition_point(|&u| u < k).max(from);
        (self.prefix[first_big] - self.prefix[from]) + i128::from(k) * (n - first_big) as i128
    }

    fn count_suffix(&self, from: usize, full: i64) -> i64 {
        let n = self.units.len();
        if full <= 0 || from > n || ((n - from) as i64) < full {
            return 0;
        }
        let total = self.prefix[n] - self.prefix[from];
        // O(1) cases: one core per plan uses every unit; without oversold cores (every core
        // one unit, the usual case) each plan takes `full` distinct cores.
        if full == 1 {
            return i64::try_from(total).unwrap_or(i64::MAX);
        }
        if self.units.last().is_some_and(|&u| u <= 1) {
            return (n - from) as i64 / full;
        }
        let (mut lo, mut hi) = (0i128, total / i128::from(full));
        // Feasible k form an interval [0, K] (concave minus linear), so binary search K.
        while lo < hi {
            let mid = (lo + hi + 1) / 2;
            let k = i64::try_from(mid).unwrap_or(i64::MAX);
            if self.capped_sum(from, k) >= i128::from(full) * mid {
                lo = mid;
            } else {
                hi = mid - 1;
            }
        }
        i64::try_from(lo).unwrap_or(i64::MAX)
    }
}

/// Plans beyond `free_memory / memory` are dropped (§7.7); negative free memory means none
/// (Go panics: anomaly `negative_available_memory_panics`).
fn memory_limit(free_memory: i64, memory: i64) -> Option<i64> {
    (memory > 0).then(|| (free_memory / memory).max(0))
}

/// Bound CPU plans for one group of cores (a NUMA node, or the whole host), in Eru's order;
/// a deploy of n takes the first n. `cpus` are FREE pieces per core.
pub fn group_plans(
    origin: Option<&CpuMap>,
    cpus: &CpuMap,
    free_memory: i64,
    cfg: &SchedConfig,
    cpu: f64,
    memory: i64,
) -> SchedResult<Vec<CpuMap>> {
    let split = split_request(cpu, cfg)?;
    let mut host = Host::new(cpus.iter().map(|(k, v)| (k, *v)), cfg);
    if let Some(origin) = origin.filter(|o| !o.is_empty()) {
        host.reorder_by_affinity(origin, cfg);
    }
    let mut plans = host.plans(split);
    if let Some(limit) = memory_limit(free_memory, memory) {
        plans.truncate(usize::try_from(limit).unwrap_or(usize::MAX));
    }
    Ok(plans)
}

/// Number of plans [`group_plans`] would return, computed without building them.
///
/// `cores` yields (core, free pieces) in id order, e.g. capacity minus usage computed on the
/// fly so that counting many nodes does not copy their CPU maps.
pub fn group_count<'a>(
    origin: Option<&CpuMap>,
    cores: impl IntoIterator<Item = (&'a CoreId, i64)>,
    free_memory: i64,
    cfg: &SchedConfig,
    cpu: f64,
    memory: i64,
) -> SchedResult<i64> {
    let split = split_request(cpu, cfg)?;
    let mut host = Host::new(cores, cfg);
    if let Some(origin) = origin.filter(|o| !o.is_empty()) {
        host.reorder_by_affinity(origin, cfg);
    }
    let count = host.count(split);
    Ok(match memory_limit(free_memory, memory) {
        Some(limit) => count.min(limit),
        None => count,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cpus(pairs: &[(&str, i64)]) -> CpuMap {
        pairs.iter().map(|(k, v)| (CoreId::from(*k), *v)).collect()
    }

    #[test]
    fn truncates_pieces_like_go() {
        let cfg = SchedConfig::default();
        assert_eq!(
            split_request(0.29, &cfg).expect("valid"),
            Split {
                full: 0,
                fragment: 28
            }
        );
        assert!(split_request(0.001, &cfg).is_err());
    }

    #[test]
    fn seventeen_tenths_on_idle_cores_gives_half() {
        let cfg = SchedConfig::default();
        let map = cpus(&[("0", 100), ("1", 100), ("2", 100), ("3", 100), ("4", 100)]);
        assert_eq!(
            group_count(None, map.iter().map(|(k, v)| (k, *v)), 0, &cfg, 1.7, 0).expect("ok"),
            2
        );
        assert_eq!(
            group_plans(None, &map, 0, &cfg, 1.7, 0).expect("ok").len(),
            2
        );
    }

    #[test]
    fn counter_matches_greedy_on_oversold() {
        let cfg = SchedConfig::default();
        let map = cpus(&[("0", 400), ("1", 200), ("2", 400)]);
        assert_eq!(
            group_count(None, map.iter().map(|(k, v)| (k, *v)), 0, &cfg, 2.0, 0).expect("ok"),
            5
        );
    }
}
