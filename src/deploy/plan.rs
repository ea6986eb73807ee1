//! Per-node capacity with the reason a node takes no instance, and the
//! instances a deploy map puts on each node. Pure: the scheduler's
//! functions over [`NodeState`]s, plus the whole-VCPU count of nodes
//! without a CPU topology.

use super::deployment_request::InstanceShape;
use super::nodes::{CpuModel, NodeState, MIB};
use crate::sched::{
    self, Allocation, CapacityMap, NodeCapacity, NodeName, ResourceRequest, SchedError,
    VolumeBinding, VolumePlan, WorkloadResource, UNLIMITED,
};
use serde_json::{json, Value};

/// Why a node takes no instance of a shape, with the numbers.
#[derive(Debug, Clone, PartialEq)]
pub struct Shortfall {
    /// `no_topology`, `cpu`, `memory`, `vcpu`, `cpu_shares`,
    /// `fragment_cores` or `volume` (the candidate engine's own reasons for nodes it
    /// ruled out are added by the caller).
    pub reason: &'static str,
    /// The numbers.
    pub detail: Value,
}

/// One node's verdict.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeVerdict {
    /// The node.
    pub uuid: uuid::Uuid,
    /// Instances it could take (0 with a shortfall).
    pub capacity: i64,
    /// Why it takes none.
    pub short: Option<Shortfall>,
}

/// The scheduler's request for one instance.
pub fn resource_request(shape: &InstanceShape) -> ResourceRequest {
    ResourceRequest {
        cpu_request: shape.cpu.get(),
        cpu_limit: shape.cpu.get(),
        memory_request: shape.memory_mb.saturating_mul(MIB),
        memory_limit: shape.memory_mb.saturating_mul(MIB),
        bind: shape.cpu_bind,
    }
}

fn short(reason: &'static str, detail: Value) -> Shortfall {
    Shortfall { reason, detail }
}

/// Free memory in MiB.
fn free_mb(node: &NodeState) -> i64 {
    node.info
        .capacity
        .memory
        .saturating_sub(node.info.usage.memory)
        / MIB
}

/// A node's capacity for `shape` (CPU and memory, then volumes), or why
/// it has none.
pub fn node_capacity(node: &NodeState, shape: &InstanceShape) -> Result<NodeCapacity, Shortfall> {
    let cap = cpu_memory_capacity(node, shape)?;
    // Fixed host paths are not scheduled: only AUTO volumes limit a node.
    if !shape.volumes.iter().any(VolumeBinding::requires_schedule) {
        return Ok(cap);
    }
    // Volume plans are counted one by one: no more than the rest allows.
    let most = usize::try_from(cap.capacity.min(MOST_VOLUME_PLANS)).unwrap_or(0);
    let volumes = sched::volume_capacity(&node.volumes, &shape.volumes, most)
        .map_err(|e| short("volume", json!({"explanation": e.to_string()})))?;
    if volumes.capacity == 0 {
        return Err(short(
            "volume",
            json!({
                "requested": shape.volumes.iter().map(ToString::to_string).collect::<Vec<_>>(),
                "disks": node.volumes.capacity,
                "used": node.volumes.usage
            }),
        ));
    }
    Ok(sched::merge_node(&[cap, volumes]))
}

/// The most instances volume plans are counted for on one node.
const MOST_VOLUME_PLANS: i64 = 100_000;

fn cpu_memory_capacity(node: &NodeState, shape: &InstanceShape) -> Result<NodeCapacity, Shortfall> {
    let cap = match node.cpu {
        CpuModel::Vcpu(total, used) => vcpu_capacity(node, shape, total, used)?,
        CpuModel::Topology => sched::node_capacity(&node.info, &resource_request(shape), &node.cfg)
            .map_err(|e| short("cpu", json!({"explanation": e.to_string()})))?,
    };
    if cap.capacity > 0 {
        return Ok(cap);
    }
    Err(topology_shortfall(node, shape))
}

/// Whole VCPUs and memory of a node without a topology.
fn vcpu_capacity(
    node: &NodeState,
    shape: &InstanceShape,
    total: i64,
    used: i64,
) -> Result<NodeCapacity, Shortfall> {
    if shape.cpu_bind {
        return Err(short(
            "no_topology",
            json!({"explanation": "cpu_bind needs a CPU topology (PUT .../cpu_topology)"}),
        ));
    }
    let whole = shape.cpu.whole_vcpus();
    let free = free_mb(node);
    if free < shape.memory_mb {
        return Err(short(
            "memory",
            json!({"free_mb": free, "requested_mb": shape.memory_mb}),
        ));
    }
    let by_vcpu = match whole {
        0 => UNLIMITED,
        w => (total - used).max(0) / w,
    };
    if by_vcpu == 0 {
        return Err(short(
            "vcpu",
            json!({"capacity": total, "used": used, "requested": whole}),
        ));
    }
    let memory = node.info.capacity.memory;
    let ratio = |n: i64| {
        if memory == 0 {
            0.0
        } else {
            n as f64 / memory as f64
        }
    };
    Ok(NodeCapacity {
        capacity: by_vcpu.min(free / shape.memory_mb),
        usage: ratio(node.info.usage.memory),
        rate: ratio(shape.memory_mb.saturating_mul(MIB)),
        weight: 1,
    })
}

/// Why a node with a topology has no room (diagnostic only: the
/// capacity itself is the scheduler's).
fn topology_shortfall(node: &NodeState, shape: &InstanceShape) -> Shortfall {
    let cores = node.info.core_count();
    let cpu = shape.cpu.get();
    if cpu > cores as f64 {
        return short("cpu", json!({"cores": cores, "requested": cpu}));
    }
    let free = free_mb(node);
    if free < shape.memory_mb {
        return short(
            "memory",
            json!({"free_mb": free, "requested_mb": shape.memory_mb}),
        );
    }
    let base = i64::from(node.cfg.share_base.get());
    let available = node.info.available().cpu_map;
    let needed = (cpu * base as f64).round() as i64;
    let whole_needed = needed / base;
    let whole_free = available.values().filter(|&&s| s >= base).count();
    let free_shares: i64 = available.values().sum();
    let fragment_cores = node
        .info
        .usage
        .cpu_map
        .values()
        .filter(|&&u| u > 0 && u < base)
        .count();
    let detail = json!({
        "share_base": base,
        "needed_shares": needed,
        "free_shares": free_shares,
        "whole_cores_needed": whole_needed,
        "whole_cores_free": whole_free,
        "fragment_cores": fragment_cores,
        "max_fragment_cores": node.cfg.max_fragment_cores
    });
    let limit_reached = node
        .cfg
        .max_fragment_cores
        .is_some_and(|m| fragment_cores >= m as usize);
    if needed % base != 0 && limit_reached && free_shares >= needed {
        return short("fragment_cores", detail);
    }
    short("cpu_shares", detail)
}

/// Every node's verdict and the capacity map of those with room.
pub fn capacity_map(nodes: &[NodeState], shape: &InstanceShape) -> (CapacityMap, Vec<NodeVerdict>) {
    let mut verdicts = Vec::with_capacity(nodes.len());
    let mut caps = Vec::new();
    for n in nodes {
        match node_capacity(n, shape) {
            Ok(c) => {
                caps.push((NodeName::of(n.uuid), c));
                verdicts.push(NodeVerdict {
                    uuid: n.uuid,
                    capacity: c.capacity,
                    short: None,
                });
            }
            Err(s) => verdicts.push(NodeVerdict {
                uuid: n.uuid,
                capacity: 0,
                short: Some(s),
            }),
        }
    }
    (CapacityMap::from_nodes(caps), verdicts)
}

/// `count` instances of `shape` on `node` with their volume plans, the
/// node's usage updated.
pub fn instances(
    node: &mut NodeState,
    count: usize,
    shape: &InstanceShape,
) -> Result<Vec<(Allocation, VolumePlan)>, SchedError> {
    let req = resource_request(shape);
    let allocations = match node.cpu {
        CpuModel::Topology => sched::calculate_deploy(&node.info, count, &req, &node.cfg)?,
        CpuModel::Vcpu(..) => {
            let fits = cpu_memory_capacity(node, shape).map_or(0, |c| c.capacity);
            let wanted = i64::try_from(count).unwrap_or(i64::MAX);
            if fits < wanted {
                return Err(SchedError::NodeInsufficient {
                    resource: "vcpu",
                    need: wanted as f64,
                    available: fits as f64,
                });
            }
            let one = Allocation {
                engine: Default::default(),
                workload: WorkloadResource {
                    cpu_request: req.cpu_request,
                    cpu_limit: req.cpu_limit,
                    memory_request: req.memory_request,
                    memory_limit: req.memory_limit,
                    ..Default::default()
                },
            };
            vec![one; count]
        }
    };
    let volumes = volume_plans(node, count, shape)?;
    for (a, plan) in allocations.iter().zip(&volumes) {
        sched::add_usage(&mut node.info, &a.workload);
        if let CpuModel::Vcpu(total, used) = node.cpu {
            node.cpu = CpuModel::Vcpu(total, used + shape.cpu.whole_vcpus());
        }
        for (device, bytes) in plan.values().flatten() {
            *node.volumes.usage.entry(device.clone()).or_default() += bytes;
        }
    }
    Ok(allocations.into_iter().zip(volumes).collect())
}

/// A volume plan for each of `count` instances (empty plans without
/// volumes asked for).
fn volume_plans(
    node: &NodeState,
    count: usize,
    shape: &InstanceShape,
) -> Result<Vec<VolumePlan>, SchedError> {
    if shape.volumes.is_empty() {
        return Ok(vec![VolumePlan::new(); count]);
    }
    let plans = sched::volume_plans(&node.volumes, &shape.volumes, count)?;
    if plans.len() < count {
        return Err(SchedError::NodeInsufficient {
            resource: "volume",
            need: count as f64,
            available: plans.len() as f64,
        });
    }
    Ok(plans)
}
