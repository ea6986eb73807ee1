//! Realloc (eru.md §9, Eru `CalculateRealloc`): apply a resource delta to a running workload on its node.

use serde::{Deserialize, Serialize};

use super::deploy::{add_usage, round9, sub_usage};
use super::error::{SchedError, SchedResult};
use super::memory::check_memory_first;
use super::numa::cpu_plans;
use super::types::{
    sub_map, CpuMap, EngineParams, NodeResourceInfo, NumaMemory, ResourceRequest, SchedConfig,
    WorkloadResource,
};

/// A realloc request: deltas (may be negative) plus the bind flags.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct ReallocRequest {
    /// Change of CPU request.
    pub cpu_request: f64,
    /// Change of CPU limit.
    pub cpu_limit: f64,
    /// Change of memory request (bytes).
    pub memory_request: i64,
    /// Change of memory limit (bytes).
    pub memory_limit: i64,
    /// Bind after the realloc (ignored when `keep_cpu_bind`). Default false: a bound
    /// workload reallocated without either flag becomes unbound, as in Eru.
    pub cpu_bind: bool,
    /// Keep the workload bound iff it is bound now.
    pub keep_cpu_bind: bool,
}

/// Difference new − origin of a workload's resources; zero map entries are dropped.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct ResourceDelta {
    /// CPU request change (rounded to 1e-9).
    pub cpu_request: f64,
    /// CPU limit change (rounded to 1e-9).
    pub cpu_limit: f64,
    /// Memory request change.
    pub memory_request: i64,
    /// Memory limit change.
    pub memory_limit: i64,
    /// Per-core pieces change.
    pub cpu_map: CpuMap,
    /// Per-NUMA-node memory change (new reservation − old; Go drops the new part).
    pub numa_memory: NumaMemory,
}

/// The outcome of a realloc: what to tell the engine, the new resources, and the delta to
/// apply to node usage (usage += delta; roll back with the opposite sign).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReallocOutcome {
    /// Engine parameters for the updated workload.
    pub engine: EngineParams,
    /// The workload's resources after the realloc.
    pub workload: WorkloadResource,
    /// new − origin.
    pub delta: ResourceDelta,
}

/// Re-plan `origin` (a workload on `node`, whose usage includes it) with `request` applied.
///
/// The origin's resources are returned to the node first, then the new request (origin +
/// delta, normalised) is planned — bound: the first CPU plan, preferring the cores the
/// workload held; unbound: the memory-first check for one instance. Pure: on error nothing
/// is changed; on success apply [`ResourceDelta::apply`] to the node.
pub fn calculate_realloc(
    node: &NodeResourceInfo,
    origin: &WorkloadResource,
    request: &ReallocRequest,
    cfg: &SchedConfig,
) -> SchedResult<ReallocOutcome> {
    let bind = if request.keep_cpu_bind {
        !origin.cpu_map.is_empty()
    } else {
        request.cpu_bind
    };

    let mut freed = node.clone();
    sub_usage(&mut freed, origin);

    let new = ResourceRequest {
        cpu_request: request.cpu_request + origin.cpu_request,
        cpu_limit: request.cpu_limit + origin.cpu_limit,
        memory_request: request.memory_request.saturating_add(origin.memory_request),
        memory_limit: request.memory_limit.saturating_add(origin.memory_limit),
        bind,
    }
    .normalise()?;

    let (cpu_map, numa_node) = if bind {
        let plan = cpu_plans(&freed, &new, Some(&origin.cpu_map), cfg)?
            .into_iter()
            .next()
            .ok_or(SchedError::NoCpuPlan {
                cpu: new.cpu_request,
                memory: new.memory_request,
            })?;
        (plan.cpu_map, plan.numa_node)
    } else {
        check_memory_first(&freed, &new, 1)?;
        (CpuMap::new(), None)
    };
    let numa_memory: NumaMemory = numa_node
        .iter()
        .map(|n| (n.clone(), new.memory_request))
        .collect();

    let workload = WorkloadResource {
        cpu_request: new.cpu_request,
        cpu_limit: new.cpu_limit,
        memory_request: new.memory_request,
        memory_limit: new.memory_limit,
        cpu_map: cpu_map.clone(),
        numa_memory,
        numa_node: numa_node.clone(),
    };
    let engine = EngineParams {
        cpu: new.cpu_limit,
        cpu_map,
        numa_node,
        memory: new.memory_limit,
    };
    let delta = ResourceDelta::between(origin, &workload);
    Ok(ReallocOutcome {
        engine,
        workload,
        delta,
    })
}

impl ResourceDelta {
    /// `new − origin`, zero entries dropped. Eru's delta keeps only `−origin.numa_memory`
    /// (anomaly `realloc_delta_numa_memory_drops_new_numa`); this includes the new part.
    pub fn between(origin: &WorkloadResource, new: &WorkloadResource) -> Self {
        let mut cpu_map = new.cpu_map.clone();
        sub_map(&mut cpu_map, &origin.cpu_map);
        cpu_map.retain(|_, v| *v != 0);
        let mut numa_memory = new.numa_memory.clone();
        sub_map(&mut numa_memory, &origin.numa_memory);
        numa_memory.retain(|_, v| *v != 0);
        ResourceDelta {
            cpu_request: round9(new.cpu_request - origin.cpu_request),
            cpu_limit: round9(new.cpu_limit - origin.cpu_limit),
            memory_request: new.memory_request.saturating_sub(origin.memory_request),
            memory_limit: new.memory_limit.saturating_sub(origin.memory_limit),
            cpu_map,
            numa_memory,
        }
    }

    fn as_workload(&self) -> WorkloadResource {
        WorkloadResource {
            cpu_request: self.cpu_request,
            cpu_limit: self.cpu_limit,
            memory_request: self.memory_request,
            memory_limit: self.memory_limit,
            cpu_map: self.cpu_map.clone(),
            numa_memory: self.numa_memory.clone(),
            numa_node: None,
        }
    }

    /// Apply the delta to the node's usage (commit a realloc).
    pub fn apply(&self, node: &mut NodeResourceInfo) {
        add_usage(node, &self.as_workload());
    }

    /// Undo [`ResourceDelta::apply`] (roll a realloc back).
    pub fn rollback(&self, node: &mut NodeResourceInfo) {
        sub_usage(node, &self.as_workload());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sched::deploy::calculate_deploy;
    use crate::sched::types::{CoreId, NodeResource};

    #[test]
    fn apply_then_rollback_restores_usage() {
        let mut node = NodeResourceInfo {
            capacity: NodeResource {
                cpu_map: (0..4).map(|i| (CoreId(i.to_string()), 100)).collect(),
                memory: 8 << 30,
                ..NodeResource::default()
            },
            usage: NodeResource::default(),
        };
        let cfg = SchedConfig::default();
        let alloc = calculate_deploy(&node, 1, &ResourceRequest::bound(1.5, 1 << 30), &cfg)
            .expect("fits")
            .remove(0);
        add_usage(&mut node, &alloc.workload);
        let before = node.clone();
        let req = ReallocRequest {
            cpu_request: 1.0,
            keep_cpu_bind: true,
            ..ReallocRequest::default()
        };
        let out = calculate_realloc(&node, &alloc.workload, &req, &cfg).expect("fits");
        assert_eq!(out.workload.cpu_map.values().sum::<i64>(), 250);
        out.delta.apply(&mut node);
        assert_eq!(node.usage.cpu_map.values().sum::<i64>(), 250);
        out.delta.rollback(&mut node);
        assert_eq!(node.usage.cpu_map.values().sum::<i64>(), 150);
        assert_eq!(node.usage.memory, before.usage.memory);
    }

    #[test]
    fn too_big_fails_without_touching_anything() {
        let node = NodeResourceInfo {
            capacity: NodeResource {
                cpu_map: (0..2).map(|i| (CoreId(i.to_string()), 100)).collect(),
                memory: 1 << 30,
                ..NodeResource::default()
            },
            usage: NodeResource::default(),
        };
        let origin = WorkloadResource {
            cpu_request: 1.0,
            cpu_limit: 1.0,
            cpu_map: CpuMap::from([(CoreId::from("0"), 100)]),
            ..WorkloadResource::default()
        };
        let req = ReallocRequest {
            cpu_request: 5.0,
            keep_cpu_bind: true,
            ..ReallocRequest::default()
        };
        let err = calculate_realloc(&node, &origin, &req, &SchedConfig::default())
            .expect_err("6 cores on a 2-core node");
        assert!(matches!(err, SchedError::NoCpuPlan { .. }));
    }
}
