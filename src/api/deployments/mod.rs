//! `/deployments` (our extension): N instances of an app placed by the Eru
//! scheduler on nodes found by the candidate engine, committed as Placement
//! allocations plus core bindings in one transaction; and live resize.
//! Batch and free deployments take their own path (`batch`).

mod batch;

use super::extract::{JsonBody, PathParams};
use super::respond::Reply;
use super::schema::bodies::{DeployRequest, ResizeRequest};
use super::schema::responses::{
    AppSummary, DeploymentAnswer, DeploymentList, DeploymentView, Resized,
};
use crate::allocation::alloc_error;
use crate::candidates::find;
use crate::db::allocations::{self as alloc_db, ConsumerWrite, GenerationCheck};
use crate::db::deployments::{self as db, InstanceSpec};
use crate::deploy::{instance_resources, load_nodes, workload, NodeState, CPU_SHARES, MIB};
use crate::error::{codes, ApiError, ApiResult};
use crate::sched::{
    self, CapacityMap, ErrorKind, NodeName, ReallocRequest, ResourceRequest, SchedError,
};
use crate::state::AppState;
use crate::types::GivenGeneration;
use axum::extract::State;
use axum::http::StatusCode;
use serde_json::{json, Map, Value};
use std::collections::{BTreeMap, HashSet};

fn schema() -> Value {
    let name = json!({"type": "string", "minLength": 1, "maxLength": 255});
    json!({
        "type": "object",
        "properties": {
            "app": name,
            "count": {"type": "integer", "minimum": 1, "maximum": 100000},
            "strategy": {"type": "string", "enum": ["auto", "fill", "each", "average", "global", "drained"]},
            "nodes_limit": {"type": "integer", "minimum": 0, "maximum": 100000},
            "cpu": {"type": "number", "minimum": 0, "maximum": 4096},
            "cpu_bind": {"type": "boolean"},
            "memory_mb": {"type": "integer", "minimum": 1, "maximum": 1073741824},
            "resources": {"type": "object", "patternProperties": {"^[A-Z0-9_]+$": {"type": "integer", "minimum": 1, "maximum": 2147483647}}, "additionalProperties": false},
            "required": {"type": "string"},
            "member_of": {"type": "string"},
            "project_id": name,
            "user_id": name,
            "consumer_type": {"type": "string", "pattern": "^[A-Z0-9_]+$", "maxLength": 255},
            "dry_run": {"type": "boolean"},
            "priority_class": {"type": "string", "enum": ["prod", "mid", "batch", "free"]},
            "priority": {"type": "integer", "minimum": 0, "maximum": 9999}
        },
        "required": ["app", "count", "memory_mb", "project_id", "user_id"],
        "additionalProperties": false
    })
}

fn sched_conflict(e: &SchedError, caps: Option<&CapacityMap>) -> ApiError {
    let map = caps
        .map(|c| {
            let nodes: Map<String, Value> = c
                .nodes
                .iter()
                .map(|(n, v)| (n.0.clone(), json!(v.capacity)))
                .collect();
            format!(
                " Capacity map: {} (total {}).",
                Value::Object(nodes),
                c.total
            )
        })
        .unwrap_or_default();
    ApiError::conflict(format!("Unable to schedule: {e}.{map}")).code(deploy_code(e.kind()))
}

/// The stable error code of a scheduling refusal.
fn deploy_code(kind: ErrorKind) -> &'static str {
    match kind {
        ErrorKind::InsufficientCapacity => codes::DEPLOY_INSUFFICIENT_CAPACITY,
        ErrorKind::InsufficientResource => codes::DEPLOY_INSUFFICIENT_RESOURCE,
        ErrorKind::AlreadyFilled => codes::DEPLOY_ALREADY_FILLED,
        ErrorKind::InvalidStrategy
        | ErrorKind::InvalidCount
        | ErrorKind::InvalidCpu
        | ErrorKind::InvalidMemory
        | ErrorKind::InvalidVolume => codes::DEPLOY_INVALID_REQUEST,
    }
}

fn capacity_map(nodes: &[NodeState], req: &ResourceRequest) -> Result<CapacityMap, SchedError> {
    let mut out = Vec::new();
    for n in nodes {
        out.push((
            NodeName(n.uuid.to_string()),
            sched::node_capacity(&n.info, req, &n.cfg)?,
        ));
    }
    Ok(CapacityMap::from_nodes(out))
}

/// `POST /deployments`.
pub async fn create(State(st): State<AppState>, body: JsonBody) -> ApiResult<Reply> {
    let result = deploy(&st, body).await;
    crate::metrics::metrics().deployment(match &result {
        Ok(_) => "placed",
        Err(e) if e.status.as_u16() == 409 => "refused",
        Err(e) if e.status.is_client_error() => "invalid",
        Err(_) => "failed",
    });
    result
}

/// The deployment behind `create`.
async fn deploy(st: &AppState, body: JsonBody) -> ApiResult<Reply> {
    let st = st.clone();
    let d: DeployRequest = body.parse(&schema())?;
    if let Some(class) = d.priority_class.filter(|c| c.low()) {
        return batch::create(&st, &d, class).await;
    }
    let node_ids = candidate_nodes(&st, &d).await?;
    let req = ResourceRequest {
        cpu_request: d.cpu,
        cpu_limit: d.cpu,
        memory_request: d.memory_mb * MIB,
        memory_limit: d.memory_mb * MIB,
        bind: d.cpu_bind,
    };
    // Plan on an unlocked view, then lock only the chosen nodes, re-plan
    // their instances on fresh state and commit; a node that filled up in
    // between makes the whole deployment start again (bounded retries).
    let mut attempt = 0;
    loop {
        match place(&st, &d, &node_ids, &req).await? {
            Placed::Done(reply) => return Ok(reply),
            Placed::Raced(e) if attempt < st.settings.allocation_conflict_retry_count => {
                tracing::debug!(error = %e, attempt, "deployment raced; planning again");
                attempt += 1;
            }
            Placed::Raced(e) => return Err(e),
        }
    }
}

/// Nodes that fit one instance's memory, extra resources and filters, by
/// provider id (through the candidate engine).
async fn candidate_nodes(st: &AppState, d: &DeployRequest) -> ApiResult<Vec<i64>> {
    let mut resources = format!("MEMORY_MB:{}", d.memory_mb);
    for (rc, n) in &d.resources {
        resources.push_str(&format!(",{rc}:{n}"));
    }
    let mut pairs = vec![("resources".to_string(), resources)];
    for (key, v) in [("required", &d.required), ("member_of", &d.member_of)] {
        if let Some(v) = v {
            pairs.push((key.to_string(), v.clone()));
        }
    }
    let found = find::find(&st.engine(), &pairs, (1, 39), None).await?;
    let memory_class = found
        .snap
        .class_names
        .iter()
        .find(|(_, n)| *n == "MEMORY_MB")
        .map(|(id, _)| *id);
    let mut node_ids: Vec<i64> = found
        .candidates
        .iter()
        .flat_map(|c| {
            c.allocations
                .iter()
                .filter(|a| Some(a.1) == memory_class)
                .map(|a| found.snap.nodes[a.0].id)
        })
        .collect::<HashSet<i64>>()
        .into_iter()
        .collect();
    node_ids.sort_unstable();
    Ok(node_ids)
}

/// The Placement write of one new instance of a deployment, owned by
/// (project, user, consumer type), on one provider.
fn new_instance(
    consumer: uuid::Uuid,
    owner: &(String, String, String),
    rp: uuid::Uuid,
    resources: BTreeMap<String, i64>,
) -> ConsumerWrite {
    ConsumerWrite {
        consumer,
        project_id: owner.0.clone(),
        user_id: owner.1.clone(),
        consumer_type: Some(owner.2.clone()),
        generation: GenerationCheck::New,
        allocations: BTreeMap::from([(rp, resources)]),
    }
}

/// Capacity and new instances per node, by node name, for the answer.
fn per_node(
    caps: &CapacityMap,
    deploy_map: &BTreeMap<NodeName, i64>,
) -> (BTreeMap<String, i64>, BTreeMap<String, i64>) {
    let capacity = caps
        .nodes
        .iter()
        .map(|(n, c)| (n.0.clone(), c.capacity))
        .collect();
    let deployed = deploy_map.iter().map(|(n, c)| (n.0.clone(), *c)).collect();
    (capacity, deployed)
}

/// One attempt's outcome.
enum Placed {
    /// Answered (created, or a dry run).
    Done(Reply),
    /// A chosen node changed between planning and locking.
    Raced(ApiError),
}

/// One attempt: capacity and deploy map on an unlocked view, then the
/// chosen nodes locked, their instances planned on fresh state, and every
/// allocation and binding committed in one transaction.
async fn place(
    st: &AppState,
    d: &DeployRequest,
    node_ids: &[i64],
    req: &ResourceRequest,
) -> ApiResult<Placed> {
    let mut conn = st.pool.acquire().await?;
    let nodes = load_nodes(&mut conn, node_ids).await?;
    let caps = capacity_map(&nodes, req)
        .map_err(|e| ApiError::bad_request(format!("Invalid request: {e}.")))?;
    let counts = db::app_counts(&mut conn, &d.app).await?;
    drop(conn);
    let existing: BTreeMap<NodeName, i64> = nodes
        .iter()
        .map(|n| {
            let count = counts.get(&n.rp_id).copied().unwrap_or(0);
            (NodeName(n.uuid.to_string()), count)
        })
        .collect();
    let deploy_map = sched::plan_deploy(d.strategy, d.count, d.nodes_limit, &caps, &existing)
        .map_err(|e| sched_conflict(&e, Some(&caps)))?;
    let (capacity_map, deploy_counts) = per_node(&caps, &deploy_map);
    let chosen: Vec<i64> = nodes
        .iter()
        .filter(|n| deploy_map.contains_key(&NodeName(n.uuid.to_string())))
        .map(|n| n.rp_id)
        .collect();
    let owner = d.owner();
    let mut tx = st.pool.begin().await?;
    if !d.dry_run {
        db::lock_providers(&mut tx, &chosen).await?;
    }
    let mut fresh = load_nodes(&mut tx, &chosen).await?;
    let (writes, specs, shown) = match plan_instances(
        &mut fresh,
        &deploy_map,
        req,
        d.memory_mb,
        &d.resources,
        &owner,
    ) {
        Ok(p) => p,
        Err(e) => return Ok(Placed::Raced(sched_conflict(&e, Some(&caps)))),
    };
    if d.dry_run {
        return Ok(Placed::Done(Reply::ok(&DeploymentAnswer {
            app: d.app.clone(),
            dry_run: Some(true),
            capacity_map,
            total_capacity: Some(caps.total),
            deploy_map: deploy_counts,
            instances: None,
            plans: Some(Value::Object(shown)),
        })));
    }
    match alloc_db::write(&mut tx, &writes).await {
        Ok(()) => {}
        Err(e @ alloc_db::AllocError::Capacity(..)) => {
            return Ok(Placed::Raced(alloc_error(e, None)))
        }
        Err(e) => return Err(alloc_error(e, None)),
    }
    db::insert_instances(&mut tx, &d.app, d.cpu, d.cpu_bind, d.memory_mb, &specs).await?;
    tx.commit().await.map_err(ApiError::commit_failed)?;
    Ok(Placed::Done(Reply::json(
        StatusCode::CREATED,
        &DeploymentAnswer {
            app: d.app.clone(),
            dry_run: None,
            capacity_map,
            total_capacity: None,
            deploy_map: deploy_counts,
            instances: Some(Value::Object(shown)),
            plans: None,
        },
    )))
}

/// The instances a deploy map places: Placement writes, rows to record, and the answer.
type Planned = (Vec<ConsumerWrite>, Vec<db::NewInstance>, Map<String, Value>);

/// CPU plans and Placement writes for every instance of a deploy map.
fn plan_instances(
    nodes: &mut [NodeState],
    deploy_map: &BTreeMap<NodeName, i64>,
    req: &ResourceRequest,
    memory_mb: i64,
    extra: &BTreeMap<String, i64>,
    owner: &(String, String, String),
) -> Result<Planned, SchedError> {
    let mut writes = Vec::new();
    let mut specs = Vec::new();
    let mut shown: Map<String, Value> = Map::new();
    for (name, &n) in deploy_map {
        let Some(node) = nodes.iter_mut().find(|s| s.uuid.to_string() == name.0) else {
            return Err(SchedError::NodeInsufficient {
                resource: "node",
                need: n as f64,
                available: 0.0,
            });
        };
        let count = usize::try_from(n).map_err(|_| SchedError::NodeInsufficient {
            resource: "node",
            need: n as f64,
            available: 0.0,
        })?;
        let allocations = sched::calculate_deploy(&node.info, count, req, &node.cfg)?;
        let mut listed = Vec::new();
        for a in allocations {
            sched::add_usage(&mut node.info, &a.workload);
            let consumer = uuid::Uuid::new_v4();
            let cpu_map: Vec<(String, i64)> = a
                .workload
                .cpu_map
                .iter()
                .map(|(c, s)| (c.0.clone(), *s))
                .collect();
            let numa = a.workload.numa_node.as_ref().map(|n| n.0.clone());
            listed.push(json!({
                "consumer_uuid": consumer,
                "resource_provider_uuid": node.uuid,
                "cpu_map": cpu_map.iter().map(|(c, s)| (c.clone(), json!(s))).collect::<Map<String, Value>>(),
                "numa_node": numa,
            }));
            writes.push(new_instance(
                consumer,
                owner,
                node.uuid,
                instance_resources(memory_mb, &a.workload.cpu_map, extra),
            ));
            specs.push((consumer, node.rp_id, numa, cpu_map));
        }
        shown.insert(node.uuid.to_string(), json!(listed));
    }
    Ok((writes, specs, shown))
}

/// `GET /deployments`: every app with its instance and node counts.
pub async fn list(State(st): State<AppState>) -> ApiResult<Reply> {
    let mut conn = st.pool.acquire().await?;
    let deployments = db::apps(&mut conn)
        .await?
        .into_iter()
        .map(|(app, count, nodes)| AppSummary { app, count, nodes })
        .collect();
    Ok(Reply::ok(&DeploymentList { deployments }))
}

/// `GET /deployments/{app}`: instances per node with their bindings.
pub async fn show(
    State(st): State<AppState>,
    PathParams(app): PathParams<String>,
) -> ApiResult<Reply> {
    let mut conn = st.pool.acquire().await?;
    let rows = db::instances_of(&mut conn, &app).await?;
    let mut nodes: Map<String, Value> = Map::new();
    for r in &rows {
        let entry = nodes
            .entry(r.provider_uuid.to_string())
            .or_insert_with(|| json!({"count": 0, "instances": []}));
        entry["count"] = json!(entry["count"].as_i64().unwrap_or(0) + 1);
        if let Some(list) = entry["instances"].as_array_mut() {
            list.push(json!({
                "consumer_uuid": r.consumer_uuid, "cpu": r.cpu, "cpu_bind": r.cpu_bind, "memory_mb": r.memory_mb,
                "cpu_map": r.cpu_map.0, "numa_node": r.numa_node
            }));
        }
    }
    Ok(Reply::ok(&DeploymentView {
        app,
        count: rows.len(),
        nodes: Value::Object(nodes),
    }))
}

fn resize_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "cpu": {"type": "number", "minimum": -4096, "maximum": 4096},
            "memory_mb": {"type": "integer", "minimum": -1073741824, "maximum": 1073741824},
            "cpu_bind": {"type": "boolean"}
        },
        "additionalProperties": false
    })
}

/// A resized instance's allocations: its shares on other providers as they
/// were, and on its node the new memory and CPU shares beside the node's
/// other classes as they were.
fn resized_allocations(
    current: &[alloc_db::AllocationRow],
    node: uuid::Uuid,
    memory_mb: i64,
    cpu_map: &sched::CpuMap,
) -> BTreeMap<uuid::Uuid, BTreeMap<String, i64>> {
    let extra: BTreeMap<String, i64> = current
        .iter()
        .filter(|r| {
            r.provider_uuid == node
                && r.resource_class != "MEMORY_MB"
                && r.resource_class != CPU_SHARES
        })
        .map(|r| (r.resource_class.clone(), i64::from(r.used)))
        .collect();
    let mut allocations = BTreeMap::new();
    for r in current.iter().filter(|r| r.provider_uuid != node) {
        allocations
            .entry(r.provider_uuid)
            .or_insert_with(BTreeMap::new)
            .insert(r.resource_class.clone(), i64::from(r.used));
    }
    allocations.insert(node, instance_resources(memory_mb, cpu_map, &extra));
    allocations
}

/// `POST /deployments/{app}/instances/{consumer_uuid}/resize`: apply deltas
/// on the same node, preferring the instance's old cores; 409 and no change
/// when it does not fit.
pub async fn resize(
    State(st): State<AppState>,
    PathParams((app, consumer)): PathParams<(String, String)>,
    body: JsonBody,
) -> ApiResult<Reply> {
    let b: ResizeRequest = body.parse(&resize_schema())?;
    let not_found = || ApiError::not_found(format!("No instance {consumer} of app {app}"));
    let consumer_uuid = crate::types::parse_uuid_like(&consumer).ok_or_else(not_found)?;
    let mut tx = st.pool.begin().await?;
    let inst = db::instance(&mut tx, consumer_uuid)
        .await?
        .filter(|i| i.app == app)
        .ok_or_else(not_found)?;
    db::lock_providers(&mut tx, &[inst.resource_provider_id]).await?;
    // Re-read under the lock: a concurrent resize may have changed it.
    let inst = db::instance(&mut tx, consumer_uuid)
        .await?
        .ok_or_else(not_found)?;
    let nodes = load_nodes(&mut tx, &[inst.resource_provider_id]).await?;
    let node = nodes
        .first()
        .ok_or_else(|| ApiError::conflict("The instance's node no longer has a CPU topology."))?;
    let request = ReallocRequest {
        cpu_request: b.cpu,
        cpu_limit: b.cpu,
        memory_request: b.memory_mb * MIB,
        memory_limit: b.memory_mb * MIB,
        cpu_bind: b.cpu_bind.unwrap_or(false),
        keep_cpu_bind: b.cpu_bind.is_none(),
    };
    let out = sched::calculate_realloc(&node.info, &workload(&inst), &request, &node.cfg)
        .map_err(|e| sched_conflict(&e, None))?;
    let new_mem = out.workload.memory_request / MIB;
    let current = alloc_db::of_consumer(&mut tx, consumer_uuid).await?;
    let allocations = resized_allocations(&current, node.uuid, new_mem, &out.workload.cpu_map);
    let owner = crate::db::consumers::get(&mut tx, consumer_uuid)
        .await?
        .ok_or_else(not_found)?;
    let write = ConsumerWrite {
        consumer: consumer_uuid,
        project_id: owner.project_id,
        user_id: owner.user_id,
        consumer_type: None,
        generation: GenerationCheck::Is(GivenGeneration::known(owner.generation)),
        allocations,
    };
    let cpu_map: Vec<(String, i64)> = out
        .workload
        .cpu_map
        .iter()
        .map(|(c, s)| (c.0.clone(), *s))
        .collect();
    let numa = out.workload.numa_node.as_ref().map(|n| n.0.clone());
    let bound = !cpu_map.is_empty();
    let spec = InstanceSpec {
        app: &app,
        rp_id: inst.resource_provider_id,
        cpu: out.workload.cpu_request,
        cpu_bind: bound,
        memory_mb: new_mem,
        numa_node: numa.as_deref(),
        cpu_map: &cpu_map,
    };
    // The binding first: the allocation write checks shares against it.
    db::put_instance(&mut tx, consumer_uuid, &spec).await?;
    alloc_db::write(&mut tx, &[write])
        .await
        .map_err(|e| alloc_error(e, None))?;
    tx.commit().await.map_err(ApiError::commit_failed)?;
    Ok(Reply::ok(&Resized {
        consumer_uuid,
        resource_provider_uuid: node.uuid,
        cpu: out.workload.cpu_request,
        cpu_bind: bound,
        memory_mb: new_mem,
        cpu_map: cpu_map.into_iter().collect(),
        numa_node: numa,
    }))
}
