//! Node-level CPU plans (eru.md §7.8): NUMA-local plans first, then cross-NUMA plans on what is left.

use std::collections::BTreeMap;

use super::cpu::{group_count, group_plans};
use super::error::SchedResult;
use super::types::{
    sub_map, CpuMap, CpuPlan, NodeResourceInfo, NumaNodeId, ResourceRequest, SchedConfig,
};

/// Bound CPU plans for a node, in the order a deploy consumes them (first n for n instances).
///
/// The request is normalised as a bind request first. With a NUMA map, each NUMA node is
/// planned on its own cores and memory (plans labelled with it), its plans' cores and memory
/// are taken out, and one more pass over all remaining cores and memory yields cross-NUMA
/// plans (labelled `None`). NUMA nodes are visited in id order (Go: random map order).
/// `origin` is the workload's old CPU map on realloc (affinity), `None` for a deploy.
pub fn cpu_plans(
    node: &NodeResourceInfo,
    request: &ResourceRequest,
    origin: Option<&CpuMap>,
    cfg: &SchedConfig,
) -> SchedResult<Vec<CpuPlan>> {
    let req = ResourceRequest {
        bind: true,
        ..*request
    }
    .normalise()?;
    let (cpu, memory) = (req.cpu_request, req.memory_request);
    let mut available = node.available();
    let mut plans = Vec::new();

    for (numa, cores) in numa_groups(node, &available.cpu_map) {
        let numa_free = available.numa_memory.get(&numa).copied().unwrap_or(0);
        let local = group_plans(origin, &cores, numa_free, cfg, cpu, memory)?;
        for cpu_map in local {
            // Take the plan out of the pool so the cross-NUMA pass cannot reuse it.
            sub_map(&mut available.cpu_map, &cpu_map);
            available.memory = available.memory.saturating_sub(memory);
            let e = available.numa_memory.entry(numa.clone()).or_insert(0);
            *e = e.saturating_sub(memory);
            plans.push(CpuPlan {
                numa_node: Some(numa.clone()),
                cpu_map,
            });
        }
    }

    let cross = group_plans(
        origin,
        &available.cpu_map,
        available.memory,
        cfg,
        cpu,
        memory,
    )?;
    plans.extend(cross.into_iter().map(|cpu_map| CpuPlan {
        numa_node: None,
        cpu_map,
    }));
    Ok(plans)
}

/// The number of plans [`cpu_plans`] returns: the node's capacity for a bound request.
///
/// Without NUMA this only counts (no plan is built), which keeps capacity over many nodes
/// fast; with NUMA it builds the plans, as Eru does.
pub fn count_cpu_plans(
    node: &NodeResourceInfo,
    request: &ResourceRequest,
    origin: Option<&CpuMap>,
    cfg: &SchedConfig,
) -> SchedResult<i64> {
    if !node.capacity.numa.is_empty() {
        return Ok(cpu_plans(node, request, origin, cfg)?.len() as i64);
    }
    let req = ResourceRequest {
        bind: true,
        ..*request
    }
    .normalise()?;
    // Free pieces computed per core instead of cloning the map: this runs for every node.
    // Cores only present in usage would have negative free pieces and are ignored anyway.
    let used = &node.usage.cpu_map;
    let free = node
        .capacity
        .cpu_map
        .iter()
        .map(|(id, cap)| (id, cap.saturating_sub(used.get(id).copied().unwrap_or(0))));
    group_count(
        origin,
        free,
        node.capacity.memory.saturating_sub(node.usage.memory),
        cfg,
        req.cpu_request,
        req.memory_request,
    )
}

/// Free pieces of each NUMA node's cores, grouped by NUMA node (sorted by id).
fn numa_groups(node: &NodeResourceInfo, free: &CpuMap) -> BTreeMap<NumaNodeId, CpuMap> {
    let mut groups: BTreeMap<NumaNodeId, CpuMap> = BTreeMap::new();
    for (core, numa) in &node.capacity.numa {
        groups
            .entry(numa.clone())
            .or_default()
            .insert(core.clone(), free.get(core).copied().unwrap_or(0));
    }
    groups
}
