//! Plain data types shared by the scheduling algorithms: ids, CPU maps, node resources, requests, config.

use std::collections::BTreeMap;
use std::fmt;
use std::num::NonZeroU32;

use crate::types::ProviderUuid;
use serde::{Deserialize, Serialize};

/// Capacity value meaning "unlimited" (Go `math.MaxInt`): a non-bind request without memory.
pub const UNLIMITED: i64 = i64::MAX;

macro_rules! string_id {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(pub String);

        impl $name {
            /// The id as a string slice.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl From<&str> for $name {
            fn from(s: &str) -> Self {
                Self(s.to_owned())
            }
        }

        impl From<String> for $name {
            fn from(s: String) -> Self {
                Self(s)
            }
        }
    };
}

string_id!(
    /// A CPU core id. Ordered as a **string** ("10" < "2"), as Eru compares them.
    CoreId
);
string_id!(
    /// A NUMA node id.
    NumaNodeId
);
/// A compute node: the resource provider it is (Eru names hosts; here a
/// node is always a provider, and its order is its uuid's).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct NodeName(pub ProviderUuid);

impl NodeName {
    /// The node of a provider.
    pub fn of(uuid: uuid::Uuid) -> Self {
        NodeName(ProviderUuid(uuid))
    }

    /// The provider's uuid.
    pub fn uuid(self) -> uuid::Uuid {
        self.0 .0
    }
}

impl fmt::Display for NodeName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// Pieces per core: `{"0": 100, "3": 70}`. Values are pieces (`share_base` = one whole core);
/// deltas may be negative.
pub type CpuMap = BTreeMap<CoreId, i64>;
/// Core → NUMA node of a host.
pub type NumaMap = BTreeMap<CoreId, NumaNodeId>;
/// Memory bytes per NUMA node.
pub type NumaMemory = BTreeMap<NumaNodeId, i64>;

/// Scheduler configuration (Eru `scheduler.sharebase` / `scheduler.maxshare`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct SchedConfig {
    /// Pieces in one whole core (default 100; e.g. 1000 for finer shares).
    pub share_base: NonZeroU32,
    /// Most cores that may hold fragments (`maxshare`); `None` = unlimited (Go -1).
    pub max_fragment_cores: Option<u32>,
}

/// Eru's default `sharebase`: 100 pieces per core.
pub const DEFAULT_SHARE_BASE: NonZeroU32 = match NonZeroU32::new(100) {
    Some(v) => v,
    None => NonZeroU32::MIN,
};

impl Default for SchedConfig {
    fn default() -> Self {
        Self {
            share_base: DEFAULT_SHARE_BASE,
            max_fragment_cores: None,
        }
    }
}

impl SchedConfig {
    /// Config with the given share base and no fragment-core limit.
    pub fn with_share_base(share_base: NonZeroU32) -> Self {
        Self {
            share_base,
            max_fragment_cores: None,
        }
    }

    /// The share base as a signed piece count for arithmetic.
    pub fn base(&self) -> i64 {
        i64::from(self.share_base.get())
    }
}

/// A resource request (or a realloc delta before it is added to the origin).
///
/// Memory in bytes, CPU in cores (f64). Normalise with [`ResourceRequest::normalise`].
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct ResourceRequest {
    /// CPU request (cores).
    pub cpu_request: f64,
    /// CPU limit (cores); 0 = unset.
    pub cpu_limit: f64,
    /// Memory request (bytes).
    pub memory_request: i64,
    /// Memory limit (bytes); 0 = unset.
    pub memory_limit: i64,
    /// Bind the workload to cores (CPU-bind mode) instead of memory-first mode.
    pub bind: bool,
}

/// Total resources of a node (`capacity`) or what is in use (`usage`), Eru `NodeResource`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct NodeResource {
    /// CPUs in use (usage only; for capacity Eru keeps the core count).
    pub cpu: f64,
    /// Pieces per core.
    pub cpu_map: CpuMap,
    /// Memory bytes.
    pub memory: i64,
    /// Core → NUMA node (capacity only; empty = no NUMA).
    pub numa: NumaMap,
    /// Memory bytes per NUMA node.
    pub numa_memory: NumaMemory,
}

/// One node's CPU/memory state: capacity and current usage.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct NodeResourceInfo {
    /// What the node has.
    pub capacity: NodeResource,
    /// What is allocated on it.
    pub usage: NodeResource,
}

/// Free resources of a node (capacity − usage).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Available {
    /// Free pieces per core (may be ≤ 0; such cores are ignored by the planner).
    pub cpu_map: CpuMap,
    /// Free memory bytes (may be negative when over-committed).
    pub memory: i64,
    /// Free memory per NUMA node.
    pub numa_memory: NumaMemory,
}

impl NodeResourceInfo {
    /// Free resources: capacity minus usage, per core and per NUMA node.
    pub fn available(&self) -> Available {
        let mut cpu_map = self.capacity.cpu_map.clone();
        sub_map(&mut cpu_map, &self.usage.cpu_map);
        let mut numa_memory = self.capacity.numa_memory.clone();
        sub_map(&mut numa_memory, &self.usage.numa_memory);
        Available {
            cpu_map,
            memory: self.capacity.memory.saturating_sub(self.usage.memory),
            numa_memory,
        }
    }

    /// Number of cores in the capacity map (Eru's CPU capacity).
    pub fn core_count(&self) -> usize {
        self.capacity.cpu_map.len()
    }
}

/// `a -= b` per key (missing keys count as 0).
pub fn sub_map<K: Ord + Clone>(a: &mut BTreeMap<K, i64>, b: &BTreeMap<K, i64>) {
    for (k, v) in b {
        let e = a.entry(k.clone()).or_insert(0);
        *e = e.saturating_sub(*v);
    }
}

/// `a += b` per key (missing keys count as 0).
pub fn add_map<K: Ord + Clone>(a: &mut BTreeMap<K, i64>, b: &BTreeMap<K, i64>) {
    for (k, v) in b {
        let e = a.entry(k.clone()).or_insert(0);
        *e = e.saturating_add(*v);
    }
}

/// One bound CPU plan: which cores and how many pieces, and the NUMA node it stays in.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CpuPlan {
    /// NUMA node the plan stays inside; `None` = cross-NUMA (Eru's "").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub numa_node: Option<NumaNodeId>,
    /// Pieces per core, e.g. `{"0": 100, "3": 70}`.
    pub cpu_map: CpuMap,
}

/// What one workload holds on its node (Eru `WorkloadResource`).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct WorkloadResource {
    /// CPU request (cores).
    pub cpu_request: f64,
    /// CPU limit (cores).
    pub cpu_limit: f64,
    /// Memory request (bytes).
    pub memory_request: i64,
    /// Memory limit (bytes).
    pub memory_limit: i64,
    /// Bound cores (empty when not bound).
    pub cpu_map: CpuMap,
    /// Memory reserved per NUMA node (bound NUMA-local workloads only).
    pub numa_memory: NumaMemory,
    /// NUMA node the workload is pinned to, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub numa_node: Option<NumaNodeId>,
}

/// What the container engine is told (Eru `EngineParams`).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct EngineParams {
    /// CPU quota (the limit).
    pub cpu: f64,
    /// Bound cores (empty when not bound).
    pub cpu_map: CpuMap,
    /// NUMA node, if pinned.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub numa_node: Option<NumaNodeId>,
    /// Memory limit (bytes).
    pub memory: i64,
}

/// Per-node inputs of a deploy strategy (Eru `strategy.Info`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeployInfo {
    /// Node name.
    pub node: NodeName,
    /// How many more instances fit ([`UNLIMITED`] = no limit).
    pub capacity: i64,
    /// Existing instances of this app (+entrypoint) on the node, in-flight ones included.
    #[serde(default)]
    pub count: i64,
    /// Current utilisation fraction (GLOBAL, DRAINED tie-break).
    #[serde(default)]
    pub usage: f64,
    /// Utilisation added by one instance (GLOBAL).
    #[serde(default)]
    pub rate: f64,
}

/// New instances per node, the output of a deploy strategy. Only nodes receiving ≥ 1 appear.
pub type DeployMap = BTreeMap<NodeName, i64>;
