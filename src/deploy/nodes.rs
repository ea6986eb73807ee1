//! The nodes a deployment plans over, in the scheduler's plain data: a
//! node with a CPU topology (Eru's cores and shares), or a node registered
//! the Placement way (VCPU and MEMORY_MB inventory, no topology), whose CPU
//! capacity is its VCPU inventory, as Eru's non-bind mode counts CPU quota.

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
    // Generations first: the state read after them is at least as new.
    let heads = db::provider_heads(conn, rp_ids).await?;
    let versions = db::topology_versions(conn, rp_ids).await?;
    let unknown: Vec<i64> = versions
        .iter()
        .filter(|(rp, v)| known.get(rp).and_then(|n| n.topology_version) != Some(**v))
        .map(|(rp, _)| *rp)
        .collect();
    let topologies = db::topologies(conn, &unknown).await?;
    let stock = db::class_stock(conn, rp_ids, &["MEMORY_MB", "VCPU"]).await?;
    let stock_of = |rp: i64, class: &str| stock.get(&(rp, class.to_string())).copied();
    let ids: Vec<i64> = versions.keys().copied().collect();
    let mut volumes = crate::db::volumes::volumes(conn, rp_ids).await?;
    let bound = by_provider(db::bound_shares(conn, &ids).await?, |b| b.0);
    let instances = by_provider(db::instance_usage(conn, &ids).await?, |i| i.rp_id);
    let mut apps: HashMap<i64, HashMap<String, i64>> = HashMap::new();
    for (rp, app, count) in db::app_counts_on(conn, rp_ids).await? {
        apps.entry(rp).or_default().insert(app, count);
    }
    let none = (Vec::new(), Vec::new());
    let mut out = Vec::new();
    for &rp in rp_ids {
        let memory = stock_of(rp, "MEMORY_MB").unwrap_or((0, 0));
        let Some(&(uuid, generation)) = heads.get(&rp) else {
            continue;
        };
        let node = match (versions.get(&rp), stock_of(rp, "VCPU")) {
            (Some(&version), _) => {
                let cores = match (topologies.get(&rp), known.get(&rp)) {
                    (Some(t), _) => topology_cores(t),
                    (None, Some(k)) => (k.cfg, k.info.capacity.clone()),
                    (None, None) => continue,
                };
                let held = (
                    bound.get(&rp).unwrap_or(&none.0).as_slice(),
                    instances.get(&rp).unwrap_or(&none.1).as_slice(),
                );
                topology_node((rp, uuid, generation, version), cores, memory, held)
            }
            (None, Some(vcpus)) => vcpu_node((rp, uuid, generation), vcpus, memory),
            (None, None) => continue,
        };
        let disks = volumes.remove(&rp).unwrap_or_default();
        out.push(NodeState {
            volumes: NodeVolumes {
                capacity: disks.capacity,
                usage: disks.usage,
            },
            apps: apps.remove(&rp).unwrap_or_default(),
            ..node
        });
    }
    out.sort_by_key(|n| n.rp_id);
    out.dedup_by_key(|n| n.rp_id);
    Ok(out)
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

/// Rows grouped by their provider id.
fn by_provider<T>(rows: Vec<T>, rp: impl Fn(&T) -> i64) -> HashMap<i64, Vec<T>> {
    let mut out: HashMap<i64, Vec<T>> = HashMap::new();
    for row in rows {
        out.entry(rp(&row)).or_default().push(row);
    }
    out
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

fn topology_node(
    (rp, uuid, generation, version): (i64, uuid::Uuid, i32, i64),
    (cfg, capacity): (SchedConfig, NodeResource),
    (mem_cap, mem_used): (i64, i64),
    (bound, instances): (&[(i64, String, i64)], &[db::InstanceUsage]),
) -> NodeState {
    let capacity = NodeResource {
        memory: mem_cap * MIB,
        ..capacity
    };
    let mut usage = NodeResource {
        memory: mem_used * MIB,
        cpu_map: bound.iter().map(|b| (CoreId(b.1.clone()), b.2)).collect(),
        ..Default::default()
    };
    for i in instances {
        usage.cpu += i.cpu;
        if let (Some(n), true) = (&i.numa_node, i.bound_memory_mb > 0) {
            *usage.numa_memory.entry(NumaNodeId(n.clone())).or_default() += i.bound_memory_mb * MIB;
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
