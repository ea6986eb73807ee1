//! Batch and free deployments (§C.3): instances on the batch inventory of
//! the providers the batch candidates search accepts, as many on each as
//! the inventory and the load filter take (every instance placed counts,
//! estimated, for the next). Bound to no core. The allocation write
//! re-checks capacity under the providers' locks; a lost race plans again.

use super::deployment_request::Deployment;
use super::plan::NodeVerdict;
use super::write::{write_instances, DeploymentWrite, InstanceWrite};
use super::{Deployed, PlannedInstance};
use crate::candidates::find::{self, Engine};
use crate::candidates::low_priority_filter::{self, LoadJudge};
use crate::candidates::search::{Scope, Search};
use crate::candidates::snapshot::Node;
use crate::db::colocation::{PriorityRow, BATCH_MEMORY_MB, BATCH_VCPU_MILLI};
use crate::db::deployments as db;
use crate::error::{codes, with_retries, Error, Result};
use crate::sched::colocation::CpuMem;
use crate::sched::{self, CapacityMap, NodeCapacity, NodeName};
use crate::types::PriorityClass;
use std::collections::{BTreeMap, HashSet};

/// Places a low-priority deployment.
pub async fn deploy(
    engine: &Engine<'_>,
    retries: u32,
    d: &Deployment,
    class: PriorityClass,
) -> Result<Deployed> {
    let per = batch_instance(d, class)?;
    with_retries(retries, || attempt(engine, d, class, per)).await
}

async fn attempt(
    engine: &Engine<'_>,
    d: &Deployment,
    class: PriorityClass,
    per: CpuMem,
) -> Result<Deployed> {
    let (caps, nodes, ruled_out) = batch_capacity(engine, d, per).await?;
    let mut conn = engine.pool.acquire().await?;
    let counts = db::app_counts(&mut conn, d.app.as_str()).await?;
    drop(conn);
    let existing: BTreeMap<NodeName, i64> = nodes
        .iter()
        .map(|(name, (rp_id, _))| (*name, counts.get(rp_id).copied().unwrap_or(0)))
        .collect();
    let deploy_map = sched::plan_deploy(d.strategy, d.count, d.nodes_limit, &caps, &existing)
        .map_err(|e| {
            // The same refusal as production deployments: every node's
            // capacity, or why the search ruled it out.
            let verdicts: Vec<NodeVerdict> = caps
                .nodes
                .iter()
                .map(|(name, c)| NodeVerdict {
                    uuid: name.uuid(),
                    capacity: c.capacity,
                    short: None,
                })
                .collect();
            super::refusal::refusal(&e, &verdicts, &ruled_out)
        })?;
    let mut instances = Vec::new();
    let mut rows = Vec::new();
    for (name, &count) in &deploy_map {
        let Some(&(rp_id, rp)) = nodes.get(name) else {
            continue;
        };
        for _ in 0..count {
            let consumer_uuid = uuid::Uuid::new_v4();
            instances.push(PlannedInstance {
                consumer_uuid,
                node: rp,
                cpu_map: Vec::new(),
                numa_node: None,
                volumes: Default::default(),
            });
            rows.push(rp_id);
        }
    }
    let answer = Deployed::new(&caps, &deploy_map, instances, Vec::new());
    if !d.dry_run {
        commit(engine.pool, d, class, per, &answer.instances, &rows).await?;
    }
    Ok(answer)
}

/// One batch instance in batch units, after the request's checks.
fn batch_instance(d: &Deployment, class: PriorityClass) -> Result<CpuMem> {
    if d.shape.cpu_bind {
        return Err(Error::invalid(
            "Batch and free instances are not bound to cores: cpu_bind must be false.",
        )
        .code(codes::DEPLOY_INVALID_REQUEST));
    }
    if let Some(p) = d.priority {
        class.admits(p).map_err(Error::invalid)?;
    }
    low_priority_filter::check_classes(class, d.shape.resources.keys())?;
    if !d.shape.volumes.is_empty() {
        return Err(Error::invalid(
            "Batch and free instances take no volumes: only production deployments do.",
        )
        .code(codes::DEPLOY_INVALID_REQUEST));
    }
    let milli = d.shape.cpu.milli();
    if milli < 1 {
        return Err(
            Error::invalid("Batch and free instances need cpu of at least 0.001 cores.")
                .code(codes::DEPLOY_INVALID_REQUEST),
        );
    }
    Ok(CpuMem::new(milli, d.shape.memory_mb))
}

/// What the candidate search found for a batch deployment: each host's
/// capacity, the hosts by node (provider id, uuid), and the nodes the
/// search ruled out with their reasons.
type BatchNodes = (
    CapacityMap,
    BTreeMap<NodeName, (i64, uuid::Uuid)>,
    Vec<crate::error::NodeReport>,
);

/// Providers that take at least one instance, with how many each takes.
async fn batch_capacity(engine: &Engine<'_>, d: &Deployment, per: CpuMem) -> Result<BatchNodes> {
    let query = d.query_with(vec![
        (BATCH_VCPU_MILLI.1.to_string(), per.cpu),
        (BATCH_MEMORY_MB.1.to_string(), per.memory),
    ]);
    let search = Search {
        query,
        priority: PriorityClass::Batch,
        project: Some(d.owner.project_id.clone()),
        version: crate::microversions::LATEST,
        max_results: None,
        one_per_anchor: false,
        scope: Scope::EveryTree,
    };
    let found = find::run(engine, &search).await?;
    let mut conn = engine.pool.acquire().await?;
    let judge = LoadJudge::load(&mut conn).await?;
    drop(conn);
    let snap = &found.snap;
    let wanted: Vec<(i32, i64)> = [
        (BATCH_VCPU_MILLI.0, per.cpu),
        (BATCH_MEMORY_MB.0, per.memory),
    ]
    .into_iter()
    .chain(d.shape.resources.iter().filter_map(|(rc, n)| {
        let id = snap.class_names.iter().find(|(_, name)| *name == rc)?.0;
        Some((*id, *n))
    }))
    .collect();
    let hosts: HashSet<usize> = found
        .candidates
        .iter()
        .flat_map(|c| {
            c.allocations
                .iter()
                .filter(|a| a.1 == BATCH_VCPU_MILLI.0)
                .map(|a| a.0)
        })
        .collect();
    let mut caps = Vec::new();
    let mut nodes = BTreeMap::new();
    for i in hosts {
        let node = &snap.nodes[i];
        let name = NodeName::of(node.uuid);
        caps.push((name, node_capacity(node, &wanted, &judge, per)));
        nodes.insert(name, (node.id, node.uuid));
    }
    let chosen: Vec<i64> = nodes.values().map(|(id, _)| *id).collect();
    let ruled_out = super::refusal::engine_refusals(&found, &chosen);
    Ok((CapacityMap::from_nodes(caps), nodes, ruled_out))
}

/// How many instances a provider takes: what its free inventory of each
/// wanted class (class id, units per instance) holds, then what the load
/// filter accepts of that.
fn node_capacity(
    node: &Node,
    wanted: &[(i32, i64)],
    judge: &LoadJudge,
    per: CpuMem,
) -> NodeCapacity {
    let fit = wanted
        .iter()
        .map(|&(class, n)| {
            node.stock(class)
                .map_or(0, |s| (s.capacity_int() - s.used).max(0) / n.max(1))
        })
        .min()
        .unwrap_or(0);
    let batch_cpu = node
        .stock(BATCH_VCPU_MILLI.0)
        .map_or(0, |s| s.capacity_int());
    let ratio = |part: i64| {
        if batch_cpu <= 0 {
            0.0
        } else {
            part as f64 / batch_cpu as f64
        }
    };
    NodeCapacity {
        capacity: judge.instances(node, per, fit),
        usage: ratio(node.stock(BATCH_VCPU_MILLI.0).map_or(0, |s| s.used)),
        rate: ratio(per.cpu),
        weight: 1,
    }
}

/// Writes the instances in one transaction: their priority, their
/// allocations (capacity re-checked under lock) and their rows.
async fn commit(
    pool: &crate::db::Pool,
    d: &Deployment,
    class: PriorityClass,
    per: CpuMem,
    instances: &[PlannedInstance],
    rp_ids: &[i64],
) -> Result<()> {
    let mut resources = d.shape.resources.clone();
    resources.insert(BATCH_VCPU_MILLI.1.to_string(), per.cpu);
    resources.insert(BATCH_MEMORY_MB.1.to_string(), per.memory);
    let items: Vec<InstanceWrite> = instances
        .iter()
        .zip(rp_ids)
        .map(|(instance, rp_id)| InstanceWrite {
            instance,
            rp_id: *rp_id,
            resources: resources.clone(),
        })
        .collect();
    let priority = PriorityRow {
        priority_class: class.code(),
        priority: d.priority,
        eviction_enabled: false,
    };
    let write = DeploymentWrite {
        d,
        items,
        cpu_bind: false,
    };
    let mut tx = pool.begin().await?;
    write_instances(&mut tx, &[write], Some(&priority)).await?;
    tx.commit().await.map_err(Error::commit_failed)?;
    Ok(())
}
