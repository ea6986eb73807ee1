//! The nodes a deployment plans over, in the scheduler's plain data: a
//! node with a CPU topology (Eru's cores and shares), or a node registered
//! the Placement way (VCPU and MEMORY_MB inventory, no topology), whose CPU
//! capacity is its VCPU inventory, as Eru's non-bind mode counts CPU quota.

use crate::db::deployment_nodes::HeldInstance;
use crate::db::deployments::{self as db, InstanceRow, Topology};
use crate::sched::{
    CoreId, CpuMap, NodeResource, NodeResourceInfo, NodeVolumes, NumaNodeId, SchedConfig,
    WorkloadResource,
};
use sqlx::PgConnection;
use std::collections::{BTreeMap, HashMap};
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
    /// The provider's generation when this state was read (every change
    /// to it, allocations and topology included, bumps it).
    pub generation: i32,
    /// Share base and fragment-core limit (defaults without a topology).
    pub cfg: SchedConfig,
    /// The version of its CPU topology (None: it has none).
    pub topology_version: Option<i64>,
    /// How its CPU is counted.
    pub cpu: CpuModel,
    /// Capacity and usage.
    pub info: NodeResourceInfo,
    /// Its disks and the bytes bound on them (Eru's volumes).
    pub volumes: NodeVolumes,
    /// Each app's instances on it (apps without any are absent).
    pub apps: HashMap<String, i64>,
}

/// How a node's CPU is counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CpuModel {
    /// Cores and shares of a CPU topology.
    Topology,
    /// No topology: whole VCPUs of its inventory, (capacity, used).
    Vcpu(i64, i64),
}

impl NodeState {
    /// Whether the node has a CPU topology (bound instances need one).
    pub fn has_topology(&self) -> bool {
        self.cpu == CpuModel::Topology
    }

    /// The instances of `app` on it.
    pub fn count_of(&self, app: &str) -> i64 {
        self.apps.get(app).copied().unwrap_or(0)
    }
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

/// States already held, by provider id: their cores, NUMA layout and
/// share base are reused where the topology's version is unchanged.
pub type Known<'a> = HashMap<i64, &'a NodeState>;

/// Loads the nodes among `rp_ids`: those with a CPU topology, and those
/// without one but with VCPU inventory. Others are left out.
pub async fn load_nodes(
    conn: &mut PgConnection,
    rp_ids: &[i64],
    known: &Known<'_>,
) -> Result<Vec<NodeState>, sqlx::Error> {
    let rows = crate::db::deployment_nodes::node_rows(conn, rp_ids).await?;
    // Cores and NUMA layout are read only where the version moved.
    let unknown: Vec<i64> = rows
        .iter()
        .filter(|r| r.topology_version.is_some())
        .filter(|r| known.get(&r.id).and_then(|n| n.topology_version) != r.topology_version)
        .map(|r| r.id)
        .collect();
    let topologies = match unknown.is_empty() {
        true => HashMap::new(),
        false => db::topologies(conn, &unknown).await?,
    };
    let mut out = Vec::with_capacity(rows.len());
    for row in rows {
        let head = (row.id, row.uuid, row.generation);
        let memory = pair(row.memory.as_deref()).unwrap_or((0, 0));
        let node = match (row.topology_version, pair(row.vcpu.as_deref())) {
            (Some(version), _) => {
                let cores = match (topologies.get(&row.id), known.get(&row.id)) {
                    (Some(t), _) => topology_cores(t),
                    (None, Some(k)) => (k.cfg, k.info.capacity.clone()),
                    (None, None) => continue,
                };
                topology_node((head, version), cores, memory, &row.instances.0)
            }
            (None, Some(vcpus)) => vcpu_node(head, vcpus, memory),
            (None, None) => continue,
        };
        let mut volumes = NodeVolumes::default();
        for (device, size, used) in row.volumes.0 {
            if used > 0 {
                volumes.usage.insert(device.clone(), used);
            }
            volumes.capacity.insert(device, size);
        }
        let mut apps: HashMap<String, i64> = HashMap::new();
        for held in &row.instances.0 {
            *apps.entry(held.app.clone()).or_default() += 1;
        }
        out.push(NodeState {
            volumes,
            apps,
            ..node
        });
    }
    out.sort_by_key(|n| n.rp_id);
    out.dedup_by_key(|n| n.rp_id);
    Ok(out)
}

/// (capacity, used) of a class, from the statement's two-element array.
fn pair(v: Option<&[i64]>) -> Option<(i64, i64)> {
    match v? {
        [capacity, used] => Some((*capacity, *used)),
        _ => None,
    }
}

/// A node without a topology: its CPU is whole VCPUs, (capacity, used).
fn vcpu_node(
    (rp, uuid, generation): (i64, uuid::Uuid, i32),
    (cap, used): (i64, i64),
    (mem_cap, mem_used): (i64, i64),
) -> NodeState {
    NodeState {
        rp_id: rp,
        uuid,
        generation,
        cfg: SchedConfig::default(),
        topology_version: None,
        cpu: CpuModel::Vcpu(cap, used),
        info: NodeResourceInfo {
            capacity: NodeResource {
                cpu: f64::from(i32::try_from(cap).unwrap_or(i32::MAX)),
                memory: mem_cap * MIB,
                ..Default::default()
            },
            usage: NodeResource {
                cpu: f64::from(i32::try_from(used).unwrap_or(i32::MAX)),
                memory: mem_used * MIB,
                ..Default::default()
            },
        },
        volumes: NodeVolumes::default(),
        apps: HashMap::new(),
    }
}

/// What a topology gives the scheduler: its settings, and its cores, NUMA
/// layout and NUMA memory as capacity (memory is the inventory's, set by
/// [`topology_node`]).
fn topology_cores(t: &Topology) -> (SchedConfig, NodeResource) {
    let capacity = NodeResource {
        cpu: f64::from(u32::try_from(t.cores.len()).unwrap_or(u32::MAX)),
        cpu_map: t
            .cores
            .iter()
            .map(|(c, _)| (CoreId(c.clone()), i64::from(t.share_base)))
            .collect(),
        memory: 0,
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
    (sched_config(t), capacity)
}

/// A node with a topology, its usage summed from what its instances hold:
/// their CPUs, the shares bound on each core, and the memory of the bound
/// ones on their NUMA node.
fn topology_node(
    ((rp, uuid, generation), version): ((i64, uuid::Uuid, i32), i64),
    (cfg, capacity): (SchedConfig, NodeResource),
    (mem_cap, mem_used): (i64, i64),
    held: &[HeldInstance],
) -> NodeState {
    let capacity = NodeResource {
        memory: mem_cap * MIB,
        ..capacity
    };
    let mut usage = NodeResource {
        memory: mem_used * MIB,
        ..Default::default()
    };
    for i in held {
        usage.cpu += i.cpu;
        for (core, n) in i.cores.iter().zip(&i.shares) {
            *usage.cpu_map.entry(CoreId(core.clone())).or_default() += n;
        }
        if let (Some(n), true) = (&i.numa_node, i.cpu_bind && i.memory_mb > 0) {
            *usage.numa_memory.entry(NumaNodeId(n.clone())).or_default() += i.memory_mb * MIB;
        }
    }
    NodeState {
        rp_id: rp,
        uuid,
        generation,
        cfg,
        topology_version: Some(version),
        cpu: CpuModel::Topology,
        info: NodeResourceInfo { capacity, usage },
        volumes: NodeVolumes::default(),
        apps: HashMap::new(),
    }
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
