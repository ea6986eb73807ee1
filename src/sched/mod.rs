//! Eru scheduling algorithms as pure functions over plain data: node capacity, CPU plans, deploy strategies, realloc.
//!
//! Follows `shared/docs/eru.md` (projecteru2/core at ff909eef); `shared/vectors/eru.json`
//! proves it (tests/eru_vectors.rs). No database, no HTTP: callers load node state, call
//! these functions, and persist the results.
//!
//! Typical deploy:
//! 1. [`nodes_capacity`] for the request over candidate nodes → [`CapacityMap`]
//!    (merge with [`volume_capacity`] results via [`merge_capacity`] when volumes are asked).
//! 2. [`plan_deploy`] with the strategy, count, nodes limit and existing per-node counts →
//!    [`DeployMap`].
//! 3. For each node in the map, [`calculate_deploy`] → one [`Allocation`] per instance
//!    (bound cores, NUMA node), then [`add_usage`].

pub mod admission;
pub mod capacity;
pub mod colocation;
pub mod cpu;
pub mod decline;
pub mod deploy;
pub mod drf;
pub mod error;
pub mod memory;
pub mod mesos;
pub mod numa;
pub mod preempt;
pub mod quota;
pub mod realloc;
pub mod remap;
pub mod strategy;
pub mod types;
pub mod volume;
pub mod workload_request;

pub use capacity::{
    merge_capacity, merge_node, node_capacity, nodes_capacity, CapacityMap, NodeCapacity,
};
pub use deploy::{add_usage, calculate_deploy, sub_usage, Allocation};
pub use error::{ErrorKind, SchedError, SchedResult};
pub use numa::{count_cpu_plans, cpu_plans};
pub use realloc::{calculate_realloc, ReallocOutcome, ReallocRequest, ResourceDelta};
pub use remap::shared_pool;
pub use strategy::{deploy, plan_deploy, plan_deploy_spread, Strategy};
pub use types::{
    CoreId, CpuMap, CpuPlan, DeployInfo, DeployMap, EngineParams, NodeName, NodeResource,
    NodeResourceInfo, NumaMap, NumaMemory, NumaNodeId, ResourceRequest, SchedConfig,
    WorkloadResource, UNLIMITED,
};
pub use volume::{volume_capacity, volume_plans, NodeVolumes, VolumeBinding, VolumePlan};
