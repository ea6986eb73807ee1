//! The deployment service (Eru's design over Placement data): a checked
//! [`Deployment`] goes to the candidate engine through its typed entry
//! point, then to the scheduler (capacity, strategy, CPU plans), then to
//! one transaction that writes the allocations, instances and core
//! bindings. Handlers only parse, call [`deploy`] or [`resize::resize`],
//! and render.

pub mod batch;
pub mod nodes;
pub mod plan;
pub mod request;
pub mod resize;

use crate::allocation::alloc_error;
use crate::candidates::find::{self, Engine, Search};
use crate::db::allocations::{self as alloc_db, ConsumerWrite, GenerationCheck};
use crate::db::deployments as db;
use crate::error::{codes, with_retries, ApiError, ApiResult};
use crate::sched::{self, CapacityMap, NodeName, SchedError};
use crate::types::PriorityClass;
pub use nodes::{instance_resources, CpuModel, NodeState, CPU_SHARES, MIB};
use plan::NodeVerdict;
pub use request::Deployment;
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashSet};

/// One new instance as planned.
#[derive(Debug, Clone, PartialEq)]
pub struct PlannedInstance {
    /// Its consumer.
    pub consumer_uuid: uuid::Uuid,
    /// Its node.
    pub node: uuid::Uuid,
    /// Core → shares (empty unless bound).
    pub cpu_map: Vec<(String, i64)>,
    /// The NUMA node it is pinned to.
    pub numa_node: Option<String>,
}

/// What a deployment did (or, for a dry run, would do).
#[derive(Debug, Clone)]
pub struct Deployed {
    /// Instances each node with room could take, by node uuid.
    pub capacity: BTreeMap<uuid::Uuid, i64>,
    /// Their sum.
    pub total_capacity: i64,
    /// New instances per node.
    pub deploy_map: BTreeMap<uuid::Uuid, i64>,
    /// The instances, in node order.
    pub instances: Vec<PlannedInstance>,
    /// Every candidate node's verdict (shown by dry runs).
    pub verdicts: Vec<NodeVerdict>,
}

/// Places `d`: its nodes from the candidate engine, the plan from the
/// scheduler, everything written in one transaction. A node that filled
/// up between planning and locking makes the attempt start again, under
/// the retry policy every write shares ([`with_retries`]).
pub async fn deploy(engine: &Engine<'_>, retries: u32, d: &Deployment) -> ApiResult<Deployed> {
    let search = Search {
        query: d.node_query(),
        priority: PriorityClass::Prod,
        project: Some(d.owner.project_id.clone()),
        version: (1, 39),
        max_results: None,
    };
    let found = find::run(engine, &search).await?;
    let node_ids = candidate_nodes(&found);
    let ruled_out = engine_refusals(&found, &node_ids);
    let mut attempts = 0u64;
    let result = with_retries(retries, || {
        attempts += 1;
        attempt(engine.pool, d, &node_ids, &ruled_out)
    })
    .await;
    crate::metrics::metrics()
        .write_retries
        .inc_by(attempts.saturating_sub(1));
    result
}

/// Nodes that fit one instance's memory, extra resources and filters, by
/// provider id: the providers of MEMORY_MB in the candidates.
fn candidate_nodes(found: &find::Candidates) -> Vec<i64> {
    let memory = found
        .snap
        .class_names
        .iter()
        .find(|(_, n)| *n == "MEMORY_MB")
        .map(|(id, _)| *id);
    let mut ids: Vec<i64> = found
        .candidates
        .iter()
        .flat_map(|c| c.allocations.iter().filter(|a| Some(a.1) == memory))
        .map(|a| found.snap.nodes[a.0].id)
        .collect::<HashSet<i64>>()
        .into_iter()
        .collect();
    ids.sort_unstable();
    ids
}

/// The roots the candidate engine ruled out, with its reason: part of the
/// answer when nothing can be placed.
fn engine_refusals(found: &find::Candidates, chosen: &[i64]) -> Vec<Value> {
    let Some(request) = &found.request else {
        return Vec::new();
    };
    let query = crate::candidates::explain::Query {
        snap: &found.snap,
        request,
        adjusted: &found.adjusted,
    };
    crate::candidates::explain::explain(&query, &found.candidates)
        .into_iter()
        .filter(|v| !chosen.contains(&found.snap.nodes[v.root].id))
        .filter_map(|v| {
            let r = v.reason?;
            Some(json!({
                "node": found.snap.nodes[v.root].uuid,
                "reason": r.kind,
                "detail": r.detail
            }))
        })
        .collect()
}

/// A refusal with every node's reason, under a stable code: the detail
/// gives the capacity map and a count per reason, `nodes` each node.
fn refusal(e: &SchedError, verdicts: &[NodeVerdict], ruled_out: &[Value]) -> ApiError {
    let mut nodes: Vec<Value> = verdicts.iter().map(verdict_json).collect();
    nodes.extend(ruled_out.iter().cloned());
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for reason in nodes.iter().filter_map(|n| n["reason"].as_str()) {
        *counts.entry(reason).or_default() += 1;
    }
    let capacity: serde_json::Map<String, Value> = verdicts
        .iter()
        .filter(|v| v.capacity > 0)
        .map(|v| (v.uuid.to_string(), json!(v.capacity)))
        .collect();
    let total = verdicts
        .iter()
        .fold(0i64, |t, v| t.saturating_add(v.capacity));
    let short: Vec<String> = counts.iter().map(|(r, n)| format!("{n} {r}")).collect();
    let without_room = match short.is_empty() {
        true => String::new(),
        false => format!(" Nodes without room: {}.", short.join(", ")),
    };
    let no_topology = !verdicts.is_empty()
        && verdicts
            .iter()
            .all(|v| v.short.as_ref().is_some_and(|s| s.reason == "no_topology"));
    let code = match no_topology {
        true => codes::DEPLOY_NO_TOPOLOGY,
        false => deploy_code(e),
    };
    ApiError::conflict(format!(
        "Unable to schedule: {e}. Capacity map: {} (total {total}).{without_room}",
        Value::Object(capacity)
    ))
    .code(code)
    .with_nodes(Value::Array(nodes))
}

/// A node's verdict as shown: its capacity, or its reason and numbers.
pub fn verdict_json(v: &NodeVerdict) -> Value {
    match &v.short {
        None => json!({"node": v.uuid, "capacity": v.capacity}),
        Some(s) => json!({"node": v.uuid, "capacity": 0, "reason": s.reason, "detail": s.detail}),
    }
}

/// The stable error code of a scheduling refusal.
pub fn deploy_code(e: &SchedError) -> &'static str {
    use sched::ErrorKind as K;
    match e.kind() {
        K::InsufficientCapacity => codes::DEPLOY_INSUFFICIENT_CAPACITY,
        K::InsufficientResource => codes::DEPLOY_INSUFFICIENT_RESOURCE,
        K::AlreadyFilled => codes::DEPLOY_ALREADY_FILLED,
        K::InvalidStrategy
        | K::InvalidCount
        | K::InvalidCpu
        | K::InvalidMemory
        | K::InvalidVolume => codes::DEPLOY_INVALID_REQUEST,
    }
}

/// A node filled up between planning and locking: run the attempt again.
fn raced(e: ApiError) -> ApiError {
    ApiError {
        retryable: true,
        ..e
    }
}

/// One attempt: capacity and deploy map on an unlocked view, then the
/// chosen nodes locked, their instances planned on fresh state, and every
/// allocation and binding committed in one transaction.
async fn attempt(
    pool: &crate::db::Pool,
    d: &Deployment,
    node_ids: &[i64],
    ruled_out: &[Value],
) -> ApiResult<Deployed> {
    let mut conn = pool.acquire().await?;
    let nodes = nodes::load_nodes(&mut conn, node_ids).await?;
    let counts = db::app_counts(&mut conn, d.app.as_str()).await?;
    drop(conn);
    let (caps, verdicts) = plan::capacity_map(&nodes, &d.shape);
    let existing: BTreeMap<NodeName, i64> = nodes
        .iter()
        .map(|n| {
            (
                NodeName(n.uuid.to_string()),
                counts.get(&n.rp_id).copied().unwrap_or(0),
            )
        })
        .collect();
    let deploy_map = sched::plan_deploy_spread(
        d.strategy,
        d.count,
        d.nodes_limit,
        &caps,
        &existing,
        rand::random(),
    )
    .map_err(|e| refusal(&e, &verdicts, ruled_out))?;
    let chosen: Vec<&NodeState> = nodes
        .iter()
        .filter(|n| deploy_map.contains_key(&NodeName(n.uuid.to_string())))
        .collect();
    let chosen_ids: Vec<i64> = chosen.iter().map(|n| n.rp_id).collect();
    let mut tx = pool.begin().await?;
    if !d.dry_run {
        db::lock_providers(&mut tx, &chosen_ids).await?;
    }
    let mut fresh = nodes::load_nodes(&mut tx, &chosen_ids).await?;
    let per_node: Vec<(usize, i64)> = fresh
        .iter()
        .enumerate()
        .filter_map(|(i, n)| Some((i, *deploy_map.get(&NodeName(n.uuid.to_string()))?)))
        .collect();
    let mut planned = Vec::new();
    for (i, count) in per_node {
        let node = &mut fresh[i];
        let n = usize::try_from(count).unwrap_or(0);
        let allocations = plan::instances(node, n, &d.shape)
            .map_err(|e| raced(refusal(&e, &verdicts, ruled_out)))?;
        planned.extend(
            allocations
                .into_iter()
                .map(|a| (node.uuid, node.cpu, node.rp_id, a)),
        );
    }
    let answer = deployed(&caps, &deploy_map, &planned, verdicts);
    if d.dry_run {
        return Ok(answer);
    }
    write(&mut tx, d, &planned, &answer.instances).await?;
    tx.commit().await.map_err(ApiError::commit_failed)?;
    Ok(answer)
}

/// A planned allocation with its node's uuid, CPU model and provider id.
type Planned = (uuid::Uuid, CpuModel, i64, sched::Allocation);

fn deployed(
    caps: &CapacityMap,
    deploy_map: &BTreeMap<NodeName, i64>,
    planned: &[Planned],
    verdicts: Vec<NodeVerdict>,
) -> Deployed {
    let by_uuid = |name: &NodeName| uuid::Uuid::parse_str(&name.0).unwrap_or_default();
    Deployed {
        capacity: caps
            .nodes
            .iter()
            .map(|(n, c)| (by_uuid(n), c.capacity))
            .collect(),
        total_capacity: caps.total,
        deploy_map: deploy_map.iter().map(|(n, c)| (by_uuid(n), *c)).collect(),
        instances: planned
            .iter()
            .map(|(node, _, _, a)| PlannedInstance {
                consumer_uuid: uuid::Uuid::new_v4(),
                node: *node,
                cpu_map: a
                    .workload
                    .cpu_map
                    .iter()
                    .map(|(c, s)| (c.0.clone(), *s))
                    .collect(),
                numa_node: a.workload.numa_node.as_ref().map(|n| n.0.clone()),
            })
            .collect(),
        verdicts,
    }
}

/// The allocations, instances and bindings of the planned instances.
async fn write(
    tx: &mut sqlx::PgConnection,
    d: &Deployment,
    planned: &[Planned],
    instances: &[PlannedInstance],
) -> ApiResult<()> {
    let mut writes = Vec::with_capacity(planned.len());
    let mut specs = Vec::with_capacity(planned.len());
    for ((node, cpu, rp_id, a), inst) in planned.iter().zip(instances) {
        let mut resources =
            instance_resources(d.shape.memory_mb, &a.workload.cpu_map, &d.shape.resources);
        if let (CpuModel::Vcpu(..), w @ 1..) = (cpu, d.shape.cpu.whole_vcpus()) {
            resources.insert("VCPU".into(), w);
        }
        writes.push(ConsumerWrite {
            consumer: inst.consumer_uuid,
            project_id: d.owner.project_id.clone(),
            user_id: d.owner.user_id.clone(),
            consumer_type: Some(d.owner.consumer_type.clone()),
            generation: GenerationCheck::New,
            allocations: BTreeMap::from([(*node, resources)]),
        });
        specs.push((
            inst.consumer_uuid,
            *rp_id,
            inst.numa_node.clone(),
            inst.cpu_map.clone(),
        ));
    }
    match alloc_db::write(tx, &writes).await {
        Ok(()) => {}
        Err(e @ alloc_db::AllocError::Capacity(..)) => return Err(raced(alloc_error(e, None))),
        Err(e) => return Err(alloc_error(e, None)),
    }
    let shape = &d.shape;
    db::insert_instances(
        tx,
        d.app.as_str(),
        shape.cpu.get(),
        shape.cpu_bind,
        shape.memory_mb,
        &specs,
    )
    .await?;
    Ok(())
}
