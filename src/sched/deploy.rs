//! Allocation of n instances on one chosen node (eru.md §8, Eru `CalculateDeploy`) and usage bookkeeping.

use serde::{Deserialize, Serialize};

use super::error::{SchedError, SchedResult};
use super::memory::check_memory_first;
use super::numa::cpu_plans;
use super::types::{
    add_map, sub_map, CpuMap, EngineParams, NodeResourceInfo, NumaMemory, ResourceRequest,
    SchedConfig, WorkloadResource,
};

/// What one new instance gets: engine parameters and the resources it holds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Allocation {
    /// Parameters for the container engine.
    pub engine: EngineParams,
    /// Resources recorded against the node for this instance.
    pub workload: WorkloadResource,
}

/// Allocate `count` instances of `request` on `node`.
///
/// Bound: the first `count` CPU plans (error when fewer). Unbound: the soft CPU check and the
/// memory check for all `count`; every instance gets the same resources and no CPU map.
pub fn calculate_deploy(
    node: &NodeResourceInfo,
    count: usize,
    request: &ResourceRequest,
    cfg: &SchedConfig,
) -> SchedResult<Vec<Allocation>> {
    let req = request.normalise()?;
    if !req.bind {
        check_memory_first(node, &req, i64::try_from(count).unwrap_or(i64::MAX))?;
        let alloc = allocation(&req, CpuMap::new(), None);
        return Ok(vec![alloc; count]);
    }
    let plans = cpu_plans(node, &req, None, cfg)?;
    if plans.len() < count {
        return Err(SchedError::NodeInsufficient {
            resource: "cpu",
            need: count as f64,
            available: plans.len() as f64,
        });
    }
    Ok(plans
        .into_iter()
        .take(count)
        .map(|p| allocation(&req, p.cpu_map, p.numa_node))
        .collect())
}

fn allocation(
    req: &ResourceRequest,
    cpu_map: CpuMap,
    numa_node: Option<super::types::NumaNodeId>,
) -> Allocation {
    // A NUMA-local workload reserves its memory on that NUMA node.
    let numa_memory: NumaMemory = numa_node
        .iter()
        .map(|n| (n.clone(), req.memory_request))
        .collect();
    Allocation {
        engine: EngineParams {
            cpu: req.cpu_limit,
            cpu_map: cpu_map.clone(),
            numa_node: numa_node.clone(),
            memory: req.memory_limit,
        },
        workload: WorkloadResource {
            cpu_request: req.cpu_request,
            cpu_limit: req.cpu_limit,
            memory_request: req.memory_request,
            memory_limit: req.memory_limit,
            cpu_map,
            numa_memory,
            numa_node,
        },
    }
}

/// Record a workload's resources as used on the node.
pub fn add_usage(node: &mut NodeResourceInfo, w: &WorkloadResource) {
    node.usage.cpu = round9(node.usage.cpu + w.cpu_request);
    add_map(&mut node.usage.cpu_map, &w.cpu_map);
    node.usage.memory = node.usage.memory.saturating_add(w.memory_request);
    add_map(&mut node.usage.numa_memory, &w.numa_memory);
}

/// Return a workload's resources to the node.
pub fn sub_usage(node: &mut NodeResourceInfo, w: &WorkloadResource) {
    node.usage.cpu = round9(node.usage.cpu - w.cpu_request);
    sub_map(&mut node.usage.cpu_map, &w.cpu_map);
    node.usage.memory = node.usage.memory.saturating_sub(w.memory_request);
    sub_map(&mut node.usage.numa_memory, &w.numa_memory);
}

/// Round to 1e-9, as Eru does for CPU sums, so repeated adds do not drift.
pub fn round9(x: f64) -> f64 {
    (x * 1e9).round() / 1e9
}
