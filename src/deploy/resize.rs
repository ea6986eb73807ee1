//! Live resize of one instance on its node (Eru's realloc): deltas of CPU
//! and memory, the old cores preferred, written with its allocations in
//! one transaction; nothing changes when it does not fit.

use super::deployment_request::Cpus;
use super::nodes::{self, instance_resources, workload, CpuModel, NodeState, CPU_SHARES, MIB};
use crate::db::allocations as alloc_db;
use crate::db::deployments::{self as db, InstanceSpec};
use crate::error::{codes, Error, Result};
use crate::sched::{self, CpuMap, ReallocRequest};
use crate::types::GivenGeneration;
use crate::types::{AllocationsByProvider, ConsumerWrite, GenerationCheck};
use std::collections::BTreeMap;

/// A resize's deltas.
#[derive(Debug, Clone, Copy)]
pub struct Deltas {
    /// CPUs to add (negative: remove).
    pub cpu: f64,
    /// MiB to add (negative: remove).
    pub memory_mb: i64,
    /// The binding mode wanted (None keeps it).
    pub cpu_bind: Option<bool>,
}

/// The instance after a resize.
#[derive(Debug, Clone)]
pub struct Resized {
    /// Its node.
    pub node: uuid::Uuid,
    /// CPUs now.
    pub cpu: f64,
    /// Bound now.
    pub cpu_bind: bool,
    /// Memory now, MiB.
    pub memory_mb: i64,
    /// Core → shares.
    pub cpu_map: Vec<(String, i64)>,
    /// Its NUMA node.
    pub numa_node: Option<String>,
}

/// Resizes instance `consumer` of `app`; 404 when it is not one, 409
/// (nothing changed) when the node has no room. A lost database race runs
/// it again under the retry policy every write shares.
pub async fn resize(
    pool: &crate::db::Pool,
    retries: u32,
    app: &str,
    consumer: uuid::Uuid,
    deltas: Deltas,
) -> Result<Resized> {
    crate::error::with_retries(retries, || resize_once(pool, app, consumer, deltas)).await
}

async fn resize_once(
    pool: &crate::db::Pool,
    app: &str,
    consumer: uuid::Uuid,
    deltas: Deltas,
) -> Result<Resized> {
    let not_found = || Error::not_found(format!("No instance {consumer} of app {app}"));
    let mut tx = pool.begin().await?;
    let inst = db::instance(&mut tx, consumer)
        .await?
        .filter(|i| i.app == app)
        .ok_or_else(not_found)?;
    db::lock_providers_waiting(&mut tx, &[inst.resource_provider_id]).await?;
    // Re-read under the lock: a concurrent resize may have changed it.
    let inst = db::instance(&mut tx, consumer)
        .await?
        .ok_or_else(not_found)?;
    let node = nodes::load_nodes(&mut tx, &[inst.resource_provider_id], &Default::default())
        .await?
        .into_iter()
        .next()
        .ok_or_else(|| {
            Error::conflict(
                "The instance's node has neither a CPU topology nor VCPU inventory any more.",
            )
        })?;
    let after = match node.cpu {
        CpuModel::Topology => on_topology(&node, &inst, deltas)?,
        CpuModel::Vcpu(..) => on_vcpus(&inst, deltas)?,
    };
    let cpu_map = write(&mut tx, &node, &inst, &after).await?;
    tx.commit().await.map_err(Error::commit_failed)?;
    Ok(Resized {
        node: node.uuid,
        cpu: after.cpu,
        cpu_bind: !cpu_map.is_empty(),
        memory_mb: after.memory_mb,
        cpu_map,
        numa_node: after.numa_node,
    })
}

/// Writes the resized instance: its binding, then its allocations (the
/// write checks shares against the binding); returns the binding.
async fn write(
    tx: &mut sqlx::PgConnection,
    node: &NodeState,
    inst: &db::InstanceRow,
    after: &After,
) -> Result<Vec<(String, i64)>> {
    let consumer = inst.consumer_uuid;
    let current = alloc_db::of_consumer(tx, consumer).await?;
    let mut allocations = resized_allocations(&current, node.uuid, after.memory_mb, &after.cpu_map);
    if let (CpuModel::Vcpu(..), Some(mine)) = (node.cpu, allocations.get_mut(&node.uuid)) {
        mine.shift_remove("VCPU");
        let whole = Cpus::new(after.cpu)?.whole_vcpus();
        if whole > 0 {
            mine.insert("VCPU".into(), whole);
        }
    }
    let owner = crate::db::consumers::get(tx, consumer)
        .await?
        .ok_or_else(|| Error::not_found(format!("No instance {consumer}")))?;
    let write = ConsumerWrite {
        consumer,
        project_id: owner.project_id,
        user_id: owner.user_id,
        consumer_type: None,
        generation: GenerationCheck::Is(GivenGeneration::known(owner.generation)),
        allocations,
        unparsed_provider: None,
    };
    let cpu_map: Vec<(String, i64)> = after
        .cpu_map
        .iter()
        .map(|(c, s)| (c.0.clone(), *s))
        .collect();
    let spec = InstanceSpec {
        app: &inst.app,
        rp_id: inst.resource_provider_id,
        cpu: after.cpu,
        cpu_bind: !cpu_map.is_empty(),
        memory_mb: after.memory_mb,
        numa_node: after.numa_node.as_deref(),
        cpu_map: &cpu_map,
    };
    db::put_instance(tx, consumer, &spec).await?;
    alloc_db::write(tx, &[write]).await.map_err(|e| match e {
        // Only a node without a topology leaves its capacity check to the
        // write; the refusal is a deployment's like any other.
        alloc_db::AllocError::Capacity(..) => {
            e.into_error(None).code(codes::DEPLOY_INSUFFICIENT_RESOURCE)
        }
        e => e.into_error(None),
    })?;
    Ok(cpu_map)
}

/// The instance's new shape.
struct After {
    cpu: f64,
    memory_mb: i64,
    cpu_map: CpuMap,
    numa_node: Option<String>,
}

fn on_topology(node: &NodeState, inst: &db::InstanceRow, d: Deltas) -> Result<After> {
    let request = ReallocRequest {
        cpu_request: d.cpu,
        cpu_limit: d.cpu,
        memory_request: d.memory_mb.saturating_mul(MIB),
        memory_limit: d.memory_mb.saturating_mul(MIB),
        cpu_bind: d.cpu_bind.unwrap_or(false),
        keep_cpu_bind: d.cpu_bind.is_none(),
    };
    let out = sched::calculate_realloc(&node.info, &workload(inst), &request, &node.cfg).map_err(
        |e| {
            Error::conflict(format!("Unable to schedule: {e}."))
                .code(super::refusal::deploy_code(&e))
        },
    )?;
    Ok(After {
        cpu: out.workload.cpu_request,
        memory_mb: out.workload.memory_request / MIB,
        cpu_map: out.workload.cpu_map,
        numa_node: out.workload.numa_node.map(|n| n.0),
    })
}

/// On a node without a topology: the new sizes, checked against its
/// inventory by the allocation write itself.
fn on_vcpus(inst: &db::InstanceRow, d: Deltas) -> Result<After> {
    if d.cpu_bind == Some(true) {
        return Err(Error::conflict(
            "Unable to schedule: the node has no CPU topology, so the instance cannot be bound to cores.",
        )
        .code(codes::DEPLOY_NO_TOPOLOGY));
    }
    let cpu = inst.cpu + d.cpu;
    let memory_mb = inst.memory_mb.saturating_add(d.memory_mb);
    if cpu < 0.0 || memory_mb < 1 {
        return Err(Error::invalid(format!(
            "The instance would have {cpu} CPUs and {memory_mb} MiB."
        ))
        .code(codes::DEPLOY_INVALID_REQUEST));
    }
    Ok(After {
        cpu,
        memory_mb,
        cpu_map: CpuMap::new(),
        numa_node: None,
    })
}

/// A resized instance's allocations: its shares on other providers as they
/// were, and on its node the new memory and CPU shares beside the node's
/// other classes as they were.
fn resized_allocations(
    current: &[alloc_db::AllocationRow],
    node: uuid::Uuid,
    memory_mb: i64,
    cpu_map: &CpuMap,
) -> AllocationsByProvider {
    let extra: BTreeMap<String, i64> = current
        .iter()
        .filter(|r| {
            r.provider_uuid == node
                && r.resource_class != "MEMORY_MB"
                && r.resource_class != CPU_SHARES
        })
        .map(|r| (r.resource_class.clone(), i64::from(r.used)))
        .collect();
    let mut allocations = AllocationsByProvider::new();
    for r in current.iter().filter(|r| r.provider_uuid != node) {
        allocations
            .entry(r.provider_uuid)
            .or_default()
            .insert(r.resource_class.clone(), i64::from(r.used));
    }
    let on_node = instance_resources(memory_mb, cpu_map, &extra);
    allocations.insert(node, on_node.into_iter().collect());
    allocations
}
