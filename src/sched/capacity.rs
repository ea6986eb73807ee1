//! Per-node deploy capacity and the CapacityMap (eru.md §6), plus the multi-resource merge (§6.4).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::error::SchedResult;
use super::memory::{memory_first_capacity, ratio};
use super::numa::count_cpu_plans;
use super::types::{DeployInfo, NodeName, NodeResourceInfo, ResourceRequest, SchedConfig};

/// Weight of the CPU/memory resource when the request binds cores (Eru cpumem plugin).
pub const BIND_WEIGHT: u32 = 100;

/// One node's capacity for a request, with the utilisation figures GLOBAL uses.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct NodeCapacity {
    /// How many more instances fit ([`super::types::UNLIMITED`] = no limit).
    pub capacity: i64,
    /// Current utilisation fraction.
    pub usage: f64,
    /// Utilisation added by one instance.
    pub rate: f64,
    /// Weight of this resource when merged with others.
    pub weight: u32,
}

/// Capacity per node (only nodes with capacity > 0) and their saturating sum.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct CapacityMap {
    /// Per-node capacity, keyed by node name.
    pub nodes: BTreeMap<NodeName, NodeCapacity>,
    /// Sum of capacities, saturating at [`super::types::UNLIMITED`].
    pub total: i64,
}

impl CapacityMap {
    /// Build a map from per-node values, dropping nodes with capacity ≤ 0.
    pub fn from_nodes(nodes: impl IntoIterator<Item = (NodeName, NodeCapacity)>) -> Self {
        let nodes: BTreeMap<NodeName, NodeCapacity> = nodes
            .into_iter()
            .filter(|(_, cap)| cap.capacity > 0)
            .collect();
        // Saturating: an unlimited node plus finite ones stays unlimited (Go overflows).
        let total = nodes
            .values()
            .fold(0i64, |t, c| t.saturating_add(c.capacity));
        CapacityMap { nodes, total }
    }

    /// Strategy inputs: one [`DeployInfo`] per node, with the app's existing per-node counts
    /// (missing = 0), in node-name order so ties resolve deterministically.
    pub fn deploy_infos(&self, existing: &BTreeMap<NodeName, i64>) -> Vec<DeployInfo> {
        self.nodes
            .iter()
            .map(|(name, cap)| DeployInfo {
                node: *name,
                capacity: cap.capacity,
                count: existing.get(name).copied().unwrap_or(0),
                usage: cap.usage,
                rate: cap.rate,
            })
            .collect()
    }
}

/// Capacity of one node for a CPU/memory request (Eru cpumem `doGetNodeDeployCapacity`).
///
/// Bind: the number of CPU plans (memory included), usage/rate from CPUs over the core count,
/// weight 100. Unbound: memory only ([`memory_first_capacity`]), usage/rate from memory,
/// weight 1.
pub fn node_capacity(
    node: &NodeResourceInfo,
    request: &ResourceRequest,
    cfg: &SchedConfig,
) -> SchedResult<NodeCapacity> {
    let req = request.normalise()?;
    if req.bind {
        let cores = node.core_count() as f64;
        return Ok(NodeCapacity {
            capacity: count_cpu_plans(node, &req, None, cfg)?,
            usage: ratio(node.usage.cpu, cores),
            rate: ratio(req.cpu_request, cores),
            weight: BIND_WEIGHT,
        });
    }
    let memory = node.capacity.memory as f64;
    let capacity = memory_first_capacity(node, &req);
    Ok(NodeCapacity {
        capacity,
        usage: ratio(node.usage.memory as f64, memory),
        rate: if req.memory_request == 0 {
            0.0
        } else {
            ratio(req.memory_request as f64, memory)
        },
        weight: 1,
    })
}

/// Capacity of many nodes for one request; nodes that cannot host one instance are left out.
pub fn nodes_capacity<'a>(
    nodes: impl IntoIterator<Item = (&'a NodeName, &'a NodeResourceInfo)>,
    request: &ResourceRequest,
    cfg: &SchedConfig,
) -> SchedResult<CapacityMap> {
    let req = request.normalise()?;
    let mut out = Vec::new();
    for (name, node) in nodes {
        out.push((*name, node_capacity(node, &req, cfg)?));
    }
    Ok(CapacityMap::from_nodes(out))
}

/// Merge the capacity maps of several resources (CPU/memory, volumes …) (Eru cobalt).
///
/// Keeps nodes present in every map; capacity = min; usage and rate = weighted mean
/// Σ(w·x)/Σw; weight = Σw; total saturates. Go leaves the first map unweighted and can
/// overflow the total (anomalies `cobalt_*`); this is the intended behaviour.
pub fn merge_capacity(maps: &[CapacityMap]) -> CapacityMap {
    let Some((first, rest)) = maps.split_first() else {
        return CapacityMap::default();
    };
    let merged = first.nodes.iter().filter_map(|(name, cap)| {
        let mut parts = vec![*cap];
        for m in rest {
            parts.push(*m.nodes.get(name)?);
        }
        Some((*name, merge_node(&parts)))
    });
    CapacityMap::from_nodes(merged.collect::<Vec<_>>())
}

/// One node's capacities for several resources merged as
/// [`merge_capacity`] merges them: the least capacity, usage and rate
/// averaged by weight, the weights summed.
pub fn merge_node(parts: &[NodeCapacity]) -> NodeCapacity {
    let weight: u32 = parts.iter().map(|p| p.weight).fold(0, u32::saturating_add);
    let w = f64::from(weight);
    let mean = |f: fn(&NodeCapacity) -> f64| {
        ratio(
            parts
                .iter()
                .map(|p| f64::from(p.weight) * f(p))
                .sum::<f64>(),
            w,
        )
    };
    NodeCapacity {
        capacity: parts.iter().map(|p| p.capacity).min().unwrap_or(0),
        usage: mean(|p| p.usage),
        rate: mean(|p| p.rate),
        weight,
    }
}
