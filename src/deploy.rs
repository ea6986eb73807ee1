//! Deployments: the Placement side (candidates, allocations) joined with the
//! Eru scheduler in `sched/`. This module turns database state into the
//! scheduler's plain data and the scheduler's plans back into allocations
//! and core bindings, all inside the caller's transaction.

use crate::db::deployments::{self as db, InstanceRow, Topology};
use crate::sched::{
    CoreId, CpuMap, NodeResource, NodeResourceInfo, NumaNodeId, SchedConfig, WorkloadResource,
};
use sqlx::PgConnection;
use std::collections::BTreeMap;
use std::num::NonZeroU32;

/// The resource class that carries bound CPU shares in Placement.
pub use crate::types::CPU_SHARES;
/// Bytes in a MiB: Placement counts MEMORY_MB, the scheduler bytes.
pub const MIB: i64 = 1024 * 1024;

/// One schedulable node: its provider, scheduler settings and state.
#[derive(Debug, Clone)]
pub struct NodeState {
    /// Provider id.
    pub rp_id: i64,
    /// Provider uuid (the scheduler's node name).
    pub uuid: uuid::Uuid,
    /// Share base and fragment-core limit.
    pub cfg: SchedConfig,
    /// Capacity and usage.
    pub info: NodeResourceInfo,
}

/// Scheduler settings of a topology.
pub fn sched_config(t: &Topology) -> SchedConfig {
    SchedConfig {
        share_base: NonZeroU32::new(t.share_base.max(1) as u32).unwrap_or(NonZeroU32::MIN),
        max_fragment_cores: u32::try_from(t.max_fragment_cores).ok(),
    }
}

/// What an instance holds, in the scheduler's terms.
pub fn workload(inst: &InstanceRow) -> WorkloadResource {
    let cpu_map: CpuMap = inst
        .cpu_map
        .0
        .iter()
        .map(|(c, s)| (CoreId(c.clone()), *s))
        .collect();
    let numa_node = inst.numa_node.clone().map(NumaNodeId);
    let numa_memory = match (&numa_node, inst.cpu_bind) {
        (Some(n), true) => BTreeMap::from([(n.clone(), inst.memory_mb * MIB)]),
        _ => BTreeMap::new(),
    };
    WorkloadResource {
        cpu_request: inst.cpu,
        cpu_limit: inst.cpu,
        memory_request: inst.memory_mb * MIB,
        memory_limit: inst.memory_mb * MIB,
        cpu_map,
        numa_memory,
        numa_node,
    }
}

/// Loads the nodes among `rp_ids` that have a CPU topology.
pub async fn load_nodes(
    conn: &mut PgConnection,
    rp_ids: &[i64],
) -> Result<Vec<NodeState>, sqlx::Error> {
    let topologies = db::topologies(conn, rp_ids).await?;
    let ids: Vec<i64> = topologies.keys().copied().collect();
    let uuids = db::provider_uuids(conn, &ids).await?;
    let memory = db::memory(conn, &ids).await?;
    let bound = db::bound_shares(conn, &ids).await?;
    let instances = db::instance_usage(conn, &ids).await?;
    let mut out = Vec::new();
    for (rp, t) in topologies {
        let (mem_cap, mem_used) = memory.get(&rp).copied().unwrap_or((0, 0));
        let capacity = NodeResource {
            cpu: t.cores.len() as f64,
            cpu_map: t
                .cores
                .iter()
                .map(|(c, _)| (CoreId(c.clone()), i64::from(t.share_base)))
                .collect(),
            memory: mem_cap * MIB,
            numa: t
                .cores
                .iter()
                .filter_map(|(c, n)| Some((CoreId(c.clone()), NumaNodeId(n.clone()?))))
                .collect(),
            numa_memory: t
                .numa_memory_mb
                .iter()
                .map(|(n, mb)| (NumaNodeId(n.clone()), mb * MIB))
                .collect(),
        };
        let mut usage = NodeResource {
            memory: mem_used * MIB,
            cpu_map: bound
                .iter()
                .filter(|b| b.0 == rp)
                .map(|b| (CoreId(b.1.clone()), b.2))
                .collect(),
            ..Default::default()
        };
        for (_, numa, cpu, bound_mb) in instances.iter().filter(|i| i.0 == rp) {
            usage.cpu += cpu;
            if let (Some(n), true) = (numa, *bound_mb > 0) {
                *usage.numa_memory.entry(NumaNodeId(n.clone())).or_default() += bound_mb * MIB;
            }
        }
        out.push(NodeState {
            rp_id: rp,
            uuid: uuids.get(&rp).copied().unwrap_or_default(),
            cfg: sched_config(&t),
            info: NodeResourceInfo { capacity, usage },
        });
    }
    out.sort_by_key(|n| n.rp_id);
    Ok(out)
}

/// The Placement allocation of one instance on its node: memory, bound
/// shares (the sum of its binding), and any extra resources.
pub fn instance_resources(
    memory_mb: i64,
    cpu_map: &CpuMap,
    extra: &BTreeMap<String, i64>,
) -> BTreeMap<String, i64> {
    let mut r = extra.clone();
    if memory_mb > 0 {
        r.insert("MEMORY_MB".into(), memory_mb);
    }
    let shares: i64 = cpu_map.values().sum();
    if shares > 0 {
        r.insert(CPU_SHARES.into(), shares);
    }
    r
}
