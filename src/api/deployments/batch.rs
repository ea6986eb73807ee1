//! Batch and free deployments (§C.3): instances on the batch inventory of
//! the providers the batch candidates query accepts, as many on each as
//! the inventory and the load filter take.

use super::{new_instance, per_node, sched_conflict};
use crate::allocation::alloc_error;
use crate::api::respond::Reply;
use crate::api::schema::bodies::DeployRequest;
use crate::api::schema::responses::DeploymentAnswer;
use crate::candidates::snapshot::Node;
use crate::candidates::{batch, find};
use crate::db::allocations as alloc_db;
use crate::db::colocation::{
    self as colocation_db, PriorityRow, BATCH_MEMORY_MB, BATCH_VCPU_MILLI,
};
use crate::db::deployments as db;
use crate::error::{codes, ApiError, ApiResult};
use crate::sched::colocation::CpuMem;
use crate::sched::{self, CapacityMap, NodeCapacity, NodeName};
use crate::state::AppState;
use crate::types::PriorityClass;
use axum::http::StatusCode;
use serde_json::{json, Map, Value};
use std::collections::{BTreeMap, HashSet};

/// A low-priority deployment (§C.3): each instance is `cpu` cores as
/// BATCH_VCPU_MILLI and `memory_mb` as BATCH_MEMORY_MB, bound to no core,
/// on providers the batch candidates query accepts, as many on each as
/// the batch inventory and the load filter take (every instance placed
/// counts, estimated, for the next). The allocation write re-checks
/// capacity under the providers' locks; a lost race plans again.
pub(super) async fn create(
    st: &AppState,
    d: &DeployRequest,
    class: PriorityClass,
) -> ApiResult<Reply> {
    let per = batch_instance(d, class)?;
    let mut attempt = 0;
    loop {
        let (caps, nodes) = batch_capacity(st, d, per).await?;
        let mut conn = st.pool.acquire().await?;
        let counts = db::app_counts(&mut conn, &d.app).await?;
        drop(conn);
        let existing: BTreeMap<NodeName, i64> = nodes
            .iter()
            .map(|(name, (rp_id, _))| (name.clone(), counts.get(rp_id).copied().unwrap_or(0)))
            .collect();
        let deploy_map = sched::plan_deploy(d.strategy, d.count, d.nodes_limit, &caps, &existing)
            .map_err(|e| sched_conflict(&e, Some(&caps)))?;
        let (capacity_map, deploy_counts) = per_node(&caps, &deploy_map);
        let mut answer = DeploymentAnswer {
            app: d.app.clone(),
            dry_run: d.dry_run.then_some(true),
            capacity_map,
            total_capacity: d.dry_run.then_some(caps.total),
            deploy_map: deploy_counts,
            instances: None,
            plans: None,
        };
        if d.dry_run {
            return Ok(Reply::ok(&answer));
        }
        match commit_batch(st, d, class, per, &deploy_map, &nodes).await {
            Ok(instances) => {
                answer.instances = Some(Value::Object(instances));
                return Ok(Reply::json(StatusCode::CREATED, &answer));
            }
            Err(e @ alloc_db::AllocError::Capacity(..))
                if attempt < st.settings.allocation_conflict_retry_count =>
            {
                tracing::debug!(error = %e, attempt, "batch deployment raced; planning again");
                attempt += 1;
            }
            Err(e) => return Err(alloc_error(e, None)),
        }
    }
}

/// One batch instance in batch units, after the request's checks.
fn batch_instance(d: &DeployRequest, class: PriorityClass) -> ApiResult<CpuMem> {
    if d.cpu_bind {
        return Err(ApiError::bad_request(
            "Batch and free instances are not bound to cores: cpu_bind must be false.",
        )
        .code(codes::DEPLOY_INVALID_REQUEST));
    }
    if let Some(p) = d.priority.filter(|p| !class.range().contains(p)) {
        let r = class.range();
        return Err(ApiError::bad_request(format!(
            "Priority {p} is outside the {} class's range {}–{}.",
            class.name(),
            r.start(),
            r.end()
        )));
    }
    batch::check_classes(class, d.resources.keys())?;
    // The schema bounds cpu to [0, 4096] cores, so milli-cores fit.
    let milli = (d.cpu * 1000.0).round();
    if milli < 1.0 {
        return Err(ApiError::bad_request(
            "Batch and free instances need cpu of at least 0.001 cores.",
        )
        .code(codes::DEPLOY_INVALID_REQUEST));
    }
    Ok(CpuMem::new(milli as i64, d.memory_mb))
}

/// Providers that take at least one instance, with how many each takes;
/// by node name: (provider id, uuid).
async fn batch_capacity(
    st: &AppState,
    d: &DeployRequest,
    per: CpuMem,
) -> ApiResult<(CapacityMap, BTreeMap<NodeName, (i64, uuid::Uuid)>)> {
    let pairs = batch_query(d, per);
    let found = find::find(&st.engine(), &pairs, (1, 39), None).await?;
    let mut conn = st.pool.acquire().await?;
    let judge = batch::LoadJudge::load(&mut conn).await?;
    drop(conn);
    let snap = &found.snap;
    let wanted: Vec<(i32, i64)> = [
        (BATCH_VCPU_MILLI.0, per.cpu),
        (BATCH_MEMORY_MB.0, per.memory),
    ]
    .into_iter()
    .chain(d.resources.iter().filter_map(|(rc, n)| {
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
        let name = NodeName(node.uuid.to_string());
        caps.push((
            name.clone(),
            batch_node_capacity(node, &wanted, &judge, per),
        ));
        nodes.insert(name, (node.id, node.uuid));
    }
    Ok((CapacityMap::from_nodes(caps), nodes))
}

/// The batch candidates query for one instance.
fn batch_query(d: &DeployRequest, per: CpuMem) -> Vec<(String, String)> {
    let mut resources = format!(
        "BATCH_VCPU_MILLI:{},BATCH_MEMORY_MB:{}",
        per.cpu, per.memory
    );
    for (rc, n) in &d.resources {
        resources.push_str(&format!(",{rc}:{n}"));
    }
    let mut pairs = vec![
        ("resources".to_string(), resources),
        ("priority_class".to_string(), "batch".to_string()),
    ];
    for (key, v) in [("required", &d.required), ("member_of", &d.member_of)] {
        if let Some(v) = v {
            pairs.push((key.to_string(), v.clone()));
        }
    }
    pairs
}

/// How many instances a provider takes: what its free inventory of each
/// wanted class (class id, units per instance) holds, then what the load
/// filter accepts of that.
fn batch_node_capacity(
    node: &Node,
    wanted: &[(i32, i64)],
    judge: &batch::LoadJudge,
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
    NodeCapacity {
        capacity: judge.instances(node, per, fit),
        usage: ratio(
            node.stock(BATCH_VCPU_MILLI.0).map_or(0, |s| s.used),
            batch_cpu,
        ),
        rate: ratio(per.cpu, batch_cpu),
        weight: 1,
    }
}

/// `part / whole`, 0 for an empty whole.
fn ratio(part: i64, whole: i64) -> f64 {
    if whole <= 0 {
        0.0
    } else {
        part as f64 / whole as f64
    }
}

/// Writes a batch deploy map in one transaction: the instances' priority,
/// their allocations (capacity re-checked under lock) and their rows.
async fn commit_batch(
    st: &AppState,
    d: &DeployRequest,
    class: PriorityClass,
    per: CpuMem,
    deploy_map: &BTreeMap<NodeName, i64>,
    nodes: &BTreeMap<NodeName, (i64, uuid::Uuid)>,
) -> Result<Map<String, Value>, alloc_db::AllocError> {
    let owner = d.owner();
    let mut writes = Vec::new();
    let mut specs = Vec::new();
    let mut shown = Map::new();
    for (name, &count) in deploy_map {
        let Some(&(rp_id, rp)) = nodes.get(name) else {
            continue;
        };
        let mut resources = d.resources.clone();
        resources.insert(BATCH_VCPU_MILLI.1.to_string(), per.cpu);
        resources.insert(BATCH_MEMORY_MB.1.to_string(), per.memory);
        let mut listed = Vec::new();
        for _ in 0..count {
            let consumer = uuid::Uuid::new_v4();
            listed.push(json!({"consumer_uuid": consumer, "resource_provider_uuid": rp}));
            writes.push(new_instance(consumer, &owner, rp, resources.clone()));
            specs.push((consumer, rp_id, None, Vec::new()));
        }
        shown.insert(rp.to_string(), json!(listed));
    }
    let consumers: Vec<uuid::Uuid> = writes.iter().map(|w| w.consumer).collect();
    let mut tx = st.pool.begin().await?;
    let row = PriorityRow {
        priority_class: class.code(),
        priority: d.priority,
        eviction_enabled: false,
    };
    colocation_db::set_priorities(&mut tx, &consumers, &row).await?;
    alloc_db::write(&mut tx, &writes).await?;
    db::insert_instances(&mut tx, &d.app, d.cpu, false, d.memory_mb, &specs).await?;
    tx.commit().await?;
    Ok(shown)
}
