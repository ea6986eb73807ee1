//! Deploy strategies (eru.md §2–3): AUTO, FILL, EACH, GLOBAL, DRAINED turn capacities into a DeployMap.

use std::cmp::{Ordering, Reverse};
use std::collections::{BTreeMap, BinaryHeap};
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use super::capacity::CapacityMap;
use super::error::{SchedError, SchedResult};
use super::types::{DeployInfo, DeployMap, NodeName};

/// How new instances are spread over nodes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Strategy {
    /// Even out existing + new instances per node; `nodes_limit` caps each node's total.
    #[default]
    Auto,
    /// Bring nodes up to `need` instances each; `nodes_limit` = number of nodes (0 = all).
    Fill,
    /// Deploy exactly `need` on each of `nodes_limit` nodes (0 = all); Eru's AVERAGE.
    #[serde(alias = "average")]
    Each,
    /// Even out utilisation: lowest usage after adding one instance first.
    Global,
    /// Fill the smallest-capacity nodes completely first (drain the rest).
    Drained,
}

impl Strategy {
    /// Lower-case name.
    pub fn as_str(self) -> &'static str {
        match self {
            Strategy::Auto => "auto",
            Strategy::Fill => "fill",
            Strategy::Each => "each",
            Strategy::Global => "global",
            Strategy::Drained => "drained",
        }
    }
}

impl fmt::Display for Strategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Strategy {
    type Err = SchedError;

    /// Case-insensitive; `average` is accepted for EACH (Eru's code name).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "auto" => Ok(Strategy::Auto),
            "fill" => Ok(Strategy::Fill),
            "each" | "average" => Ok(Strategy::Each),
            "global" => Ok(Strategy::Global),
            "drained" => Ok(Strategy::Drained),
            _ => Err(SchedError::UnknownStrategy(s.to_owned())),
        }
    }
}

/// Run a strategy (Eru `strategy.Deploy`): `need` instances (per node for FILL/EACH),
/// `nodes_limit` as the strategy reads it, `total` the summed capacity.
///
/// Returns new instances per node; nodes receiving 0 are left out.
pub fn deploy(
    strategy: Strategy,
    need: i64,
    nodes_limit: u32,
    infos: &[DeployInfo],
    total: i64,
) -> SchedResult<DeployMap> {
    if need <= 0 {
        return Err(SchedError::InvalidCount(need));
    }
    let limit = i64::from(nodes_limit);
    let mut map = match strategy {
        Strategy::Auto => auto(infos, need, total, limit)?,
        Strategy::Fill => fill(infos, need, limit)?,
        Strategy::Each => each(infos, need, limit)?,
        Strategy::Global => global(infos, need, total)?,
        Strategy::Drained => drained(infos, need, total)?,
    };
    map.retain(|_, n| *n > 0);
    Ok(map)
}

/// Strategy over a [`CapacityMap`] and the app's existing per-node counts (deploy step 4).
pub fn plan_deploy(
    strategy: Strategy,
    need: i64,
    nodes_limit: u32,
    capacities: &CapacityMap,
    existing: &BTreeMap<NodeName, i64>,
) -> SchedResult<DeployMap> {
    let infos = capacities.deploy_infos(existing);
    deploy(strategy, need, nodes_limit, &infos, capacities.total)
}

/// Like [`plan_deploy`], but ties between equally good nodes go by an
/// order shuffled from `seed` instead of name order, so that concurrent
/// deployments spread over equal nodes instead of all choosing the first.
pub fn plan_deploy_spread(
    strategy: Strategy,
    need: i64,
    nodes_limit: u32,
    capacities: &CapacityMap,
    existing: &BTreeMap<NodeName, i64>,
    seed: u64,
) -> SchedResult<DeployMap> {
    use rand::seq::SliceRandom;
    use rand::SeedableRng;
    let mut infos = capacities.deploy_infos(existing);
    infos.shuffle(&mut rand::rngs::StdRng::seed_from_u64(seed));
    deploy(strategy, need, nodes_limit, &infos, capacities.total)
}

/// AUTO (§3.1): one at a time to the node with the fewest instances, ties to the most
/// remaining capacity, then input order.
fn auto(infos: &[DeployInfo], need: i64, total: i64, limit: i64) -> SchedResult<DeployMap> {
    if total < need {
        return Err(SchedError::NeedExceedsTotal { need, total });
    }
    // Min-heap on (count, -capacity, index); capacity stays exact even when UNLIMITED.
    let mut heap: BinaryHeap<Reverse<(i64, Reverse<i64>, usize)>> = infos
        .iter()
        .enumerate()
        .filter(|(_, i)| i.capacity > 0 && (limit == 0 || i.count < limit))
        .map(|(idx, i)| Reverse((i.count, Reverse(i.capacity), idx)))
        .collect();
    let mut placed = vec![0i64; infos.len()];
    for done in 0..need {
        let Some(Reverse((count, Reverse(capacity), idx))) = heap.pop() else {
            return Err(if limit > 0 {
                SchedError::NodesLimitReached {
                    need,
                    placed: done,
                    limit,
                }
            } else {
                SchedError::CapacityExhausted { need, placed: done }
            });
        };
        placed[idx] += 1;
        let (count, capacity) = (count.saturating_add(1), capacity - 1);
        if capacity > 0 && (limit == 0 || count < limit) {
            heap.push(Reverse((count, Reverse(capacity), idx)));
        }
    }
    Ok(collect(infos, &placed))
}

/// The number of nodes FILL and EACH use: 0 means all of them, and more
/// than there are is an error.
fn nodes_limit(infos: &[DeployInfo], limit: i64) -> SchedResult<i64> {
    let limit = if limit == 0 {
        infos.len() as i64
    } else {
        limit
    };
    if (infos.len() as i64) < limit {
        return Err(SchedError::NodesLimitTooLarge {
            nodes: infos.len(),
            limit,
        });
    }
    Ok(limit)
}

/// FILL (§3.2): highest counts first (ties: larger capacity, then input order); each node able
/// to reach `need` is topped up to it and uses one of the `limit` nodes.
fn fill(infos: &[DeployInfo], need: i64, limit: i64) -> SchedResult<DeployMap> {
    let mut limit = nodes_limit(infos, limit)?;
    let mut order: Vec<&DeployInfo> = infos.iter().collect();
    order.sort_by(|a, b| b.count.cmp(&a.count).then(b.capacity.cmp(&a.capacity)));
    let mut map = DeployMap::new();
    let mut added = 0i64;
    for info in order {
        // Saturating: Go's int64 `count + capacity` wraps for unlimited capacity
        // (anomaly `fill_infinite_capacity_overflow`).
        if info.count.saturating_add(info.capacity) < need {
            continue;
        }
        let n = (need - info.count).max(0);
        *map.entry(info.node).or_insert(0) += n;
        added += n;
        limit -= 1;
        if limit == 0 {
            if added == 0 {
                return Err(SchedError::AlreadyFilled { need });
            }
            return Ok(map);
        }
    }
    Err(SchedError::NotEnoughFillNodes {
        need,
        remaining: limit,
    })
}

/// EACH (§3.3): `need` on each of the `limit` largest-capacity nodes; all of them must fit it.
fn each(infos: &[DeployInfo], need: i64, limit: i64) -> SchedResult<DeployMap> {
    let limit = nodes_limit(infos, limit)?;
    let mut order: Vec<&DeployInfo> = infos.iter().collect();
    order.sort_by_key(|i| Reverse(i.capacity));
    let found = order.iter().filter(|i| i.capacity >= need).count();
    if found == 0 {
        return Err(SchedError::NoNodeFits { need });
    }
    if (found as i64) < limit {
        return Err(SchedError::NotEnoughEachNodes { need, found, limit });
    }
    let mut map = DeployMap::new();
    for info in order.into_iter().take(usize::try_from(limit).unwrap_or(0)) {
        *map.entry(info.node).or_insert(0) += need;
    }
    Ok(map)
}

/// Heap entry for GLOBAL: the f64 key `usage + rate`, smallest first, then input order.
#[derive(Debug, Clone, Copy)]
struct GlobalEntry {
    usage: f64,
    rate: f64,
    capacity: i64,
    idx: usize,
}

impl GlobalEntry {
    fn key(&self) -> f64 {
        self.usage + self.rate
    }
}

impl PartialEq for GlobalEntry {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for GlobalEntry {}
impl PartialOrd for GlobalEntry {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for GlobalEntry {
    /// Reversed so the max-heap pops the smallest key.
    fn cmp(&self, other: &Self) -> Ordering {
        other
            .key()
            .total_cmp(&self.key())
            .then(other.idx.cmp(&self.idx))
    }
}

/// GLOBAL (§3.4): each instance to the node with the lowest `usage + rate`, in plain f64
/// arithmetic as Eru does (the vectors depend on it); count and limit are ignored.
fn global(infos: &[DeployInfo], need: i64, total: i64) -> SchedResult<DeployMap> {
    if total < need {
        return Err(SchedError::NeedExceedsTotal { need, total });
    }
    let mut heap: BinaryHeap<GlobalEntry> = infos
        .iter()
        .enumerate()
        .filter(|(_, i)| i.capacity > 0)
        .map(|(idx, i)| GlobalEntry {
            usage: i.usage,
            rate: i.rate,
            capacity: i.capacity,
            idx,
        })
        .collect();
    let mut placed = vec![0i64; infos.len()];
    for done in 0..need {
        let Some(mut e) = heap.pop() else {
            return Err(SchedError::CapacityExhausted { need, placed: done });
        };
        placed[e.idx] += 1;
        e.usage += e.rate;
        e.capacity -= 1;
        if e.capacity > 0 {
            heap.push(e);
        }
    }
    Ok(collect(infos, &placed))
}

/// DRAINED (§3.5, extra): smallest capacity first (ties: higher usage, then input order), each
/// node filled completely before the next.
fn drained(infos: &[DeployInfo], need: i64, total: i64) -> SchedResult<DeployMap> {
    if total < need {
        return Err(SchedError::NeedExceedsTotal { need, total });
    }
    let mut order: Vec<&DeployInfo> = infos.iter().filter(|i| i.capacity > 0).collect();
    order.sort_by(|a, b| {
        a.capacity
            .cmp(&b.capacity)
            .then(b.usage.total_cmp(&a.usage))
    });
    let mut map = DeployMap::new();
    let mut left = need;
    for info in order {
        if left == 0 {
            break;
        }
        let n = info.capacity.min(left);
        *map.entry(info.node).or_insert(0) += n;
        left -= n;
    }
    if left > 0 {
        return Err(SchedError::CapacityExhausted {
            need,
            placed: need - left,
        });
    }
    Ok(map)
}

fn collect(infos: &[DeployInfo], placed: &[i64]) -> DeployMap {
    let mut map = DeployMap::new();
    for (info, &n) in infos.iter().zip(placed) {
        if n > 0 {
            *map.entry(info.node).or_insert(0) += n;
        }
    }
    map
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A node named by one letter (nodes order as their uuids do).
    fn named(label: &str) -> NodeName {
        let mut raw = [0u8; 16];
        raw[..label.len()].copy_from_slice(label.as_bytes());
        NodeName::of(uuid::Uuid::from_bytes(raw))
    }

    fn info(node: &str, capacity: i64, count: i64) -> DeployInfo {
        DeployInfo {
            node: named(node),
            capacity,
            count,
            usage: 0.0,
            rate: 0.0,
        }
    }

    #[test]
    fn names_parse_case_insensitively_with_average_alias() {
        assert_eq!("AUTO".parse::<Strategy>(), Ok(Strategy::Auto));
        assert_eq!("average".parse::<Strategy>(), Ok(Strategy::Each));
        assert_eq!(
            "bogus".parse::<Strategy>(),
            Err(SchedError::UnknownStrategy("bogus".into()))
        );
    }

    #[test]
    fn auto_nodes_limit_caps_each_node_total() {
        let infos = [info("a", 10, 4), info("b", 10, 0)];
        let map = deploy(Strategy::Auto, 6, 5, &infos, 20).expect("fits");
        assert_eq!(map.get(&named("a")), Some(&1));
        assert_eq!(map.get(&named("b")), Some(&5));
        let err = deploy(Strategy::Auto, 7, 5, &infos, 20).expect_err("over the limit");
        assert!(matches!(
            err,
            SchedError::NodesLimitReached {
                placed: 6,
                limit: 5,
                ..
            }
        ));
    }

    #[test]
    fn errors_say_why() {
        let infos = [info("a", 3, 0)];
        let msg = deploy(Strategy::Auto, 5, 0, &infos, 3)
            .expect_err("too many")
            .to_string();
        assert!(
            msg.contains("need 5") && msg.contains("capacity for 3"),
            "{msg}"
        );
        let msg = deploy(Strategy::Fill, 1, 2, &infos, 3)
            .expect_err("limit > nodes")
            .to_string();
        assert!(
            msg.contains("nodes limit 2") && msg.contains("1 candidate"),
            "{msg}"
        );
    }
}
