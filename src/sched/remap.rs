//! Eru's remap (eru.md §10, `CalculateRemap`): the CPU set non-bound
//! workloads of a node share is every core no bound workload holds a piece
//! of (each with all its `share_base` pieces free), or every core when
//! bound workloads touch them all.

use super::types::{CoreId, NodeResourceInfo};

/// The cores a node's non-bound workloads share.
pub fn shared_pool(node: &NodeResourceInfo, share_base: i64) -> Vec<CoreId> {
    let available = node.available().cpu_map;
    let free: Vec<CoreId> = available
        .iter()
        .filter(|(_, &pieces)| pieces >= share_base)
        .map(|(core, _)| core.clone())
        .collect();
    if free.is_empty() {
        return node.capacity.cpu_map.keys().cloned().collect();
    }
    free
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sched::types::{CpuMap, NodeResource};

    fn node(used: &[(&str, i64)]) -> NodeResourceInfo {
        let map = |pairs: &[(&str, i64)]| -> CpuMap {
            pairs
                .iter()
                .map(|(c, n)| (CoreId((*c).into()), *n))
                .collect()
        };
        NodeResourceInfo {
            capacity: NodeResource {
                cpu_map: map(&[("0", 100), ("1", 100), ("2", 100), ("3", 100)]),
                ..Default::default()
            },
            usage: NodeResource {
                cpu_map: map(used),
                ..Default::default()
            },
        }
    }

    fn ids(cores: Vec<CoreId>) -> Vec<String> {
        cores.into_iter().map(|c| c.0).collect()
    }

    #[test]
    fn the_pool_is_the_cores_no_bound_workload_touches() {
        assert_eq!(ids(shared_pool(&node(&[]), 100)), ["0", "1", "2", "3"]);
        // 1.7 bound: a whole core and a 70-piece fragment leave two cores.
        let n = node(&[("2", 100), ("0", 70)]);
        assert_eq!(ids(shared_pool(&n, 100)), ["1", "3"]);
    }

    #[test]
    fn with_every_core_touched_the_pool_is_every_core() {
        let n = node(&[("0", 10), ("1", 100), ("2", 1), ("3", 50)]);
        assert_eq!(ids(shared_pool(&n, 100)), ["0", "1", "2", "3"]);
    }
}
