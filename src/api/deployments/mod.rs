//! `/deployments` (our extension): the HTTP side of the deployment service
//! (`crate::deploy`). Each handler reads its request, calls the service and
//! renders the answer.

use super::extract::{JsonBody, PathParams};
use super::policy::{owner_target, project_target, Authorize};
use super::respond::Reply;
use super::schema::bodies::ResizeRequest;
use super::schema::responses::{
    AppSummary, DeploymentAnswer, DeploymentList, DeploymentView, InstanceRecord, NodeInstances,
    PlacedInstance, Resized,
};
use crate::api::respond::{ApiError, ApiResult};
use crate::db::deployments as db;
use crate::deploy::deployment_request::{DeploymentBody, MAX_COUNT, MAX_CPU, MAX_MEMORY_MB};
use crate::deploy::{self, resize::Deltas, Deployed, Deployment};
use crate::state::AppState;
use axum::extract::State;
use axum::http::StatusCode;
use serde_json::{json, Value};
use std::collections::BTreeMap;

/// The schema its body is validated against (also the OpenAPI document's).
pub(in crate::api) fn schema() -> Value {
    let name = json!({"type": "string", "minLength": 1, "maxLength": 255});
    json!({
        "type": "object",
        "properties": {
            "app": name,
            "count": {"type": "integer", "minimum": 1, "maximum": MAX_COUNT},
            "strategy": {"type": "string", "enum": ["auto", "fill", "each", "average", "global", "drained"]},
            "nodes_limit": {"type": "integer", "minimum": 0, "maximum": MAX_COUNT},
            "cpu": {"type": "number", "minimum": 0, "maximum": MAX_CPU},
            "cpu_bind": {"type": "boolean"},
            "memory_mb": {"type": "integer", "minimum": 1, "maximum": MAX_MEMORY_MB},
            "resources": {"type": "object", "patternProperties": {"^[A-Z0-9_]+$": {"type": "integer", "minimum": 1, "maximum": 2147483647}}, "additionalProperties": false},
            "volumes": {"type": "array", "maxItems": 64, "items": {"type": "string", "minLength": 1, "maxLength": 1024}},
            "required": {"type": "string"},
            "member_of": {"type": "string"},
            "project_id": name,
            "user_id": name,
            "consumer_type": {"type": "string", "pattern": "^[A-Z0-9_]+$", "maxLength": 255},
            "dry_run": {"type": "boolean"},
            "priority_class": {"type": "string", "enum": crate::types::PriorityClass::names()},
            "priority": {"type": "integer", "minimum": 0, "maximum": 9999}
        },
        "required": ["app", "count", "memory_mb", "project_id", "user_id"],
        "additionalProperties": false
    })
}

/// `POST /deployments`: checked against the project and user it places for.
pub async fn create(
    State(st): State<AppState>,
    auth: Authorize,
    body: JsonBody,
) -> ApiResult<Reply> {
    let result = place(&st, &auth, body).await;
    crate::metrics::metrics().deployment(match &result {
        Ok(_) => "placed",
        Err(e) if e.status.as_u16() == 409 => "refused",
        Err(e) if e.status.is_client_error() => "invalid",
        Err(_) => "failed",
    });
    result
}

async fn place(st: &AppState, auth: &Authorize, body: JsonBody) -> ApiResult<Reply> {
    let request: DeploymentBody = body.parse_extension(&schema())?;
    auth.check([project_target(
        Some(&request.project_id),
        Some(&request.user_id),
    )])?;
    // The app is the project's that first deployed it: nobody else
    // deploys into it, nor sees its instances through a dry run.
    let owners = st.app_owners();
    let owner = match request.dry_run {
        true => owners.owner(&st.pool, &request.app).await?,
        false => Some(
            owners
                .take(&st.pool, &request.app, &request.project_id)
                .await?,
        ),
    };
    if owner.is_some_and(|o| o != request.project_id) {
        return Err(ApiError::conflict(format!(
            "App {} belongs to another project: choose another name.",
            request.app
        ))
        .code(crate::error::codes::DEPLOY_APP_OWNED));
    }
    let d = Deployment::try_from(request)?;
    let done = st.deployments().deploy(&d).await?;
    let answer = render(&d, done);
    Ok(match d.dry_run {
        true => Reply::ok(&answer),
        false => Reply::json(StatusCode::CREATED, &answer),
    })
}

/// The answer of a deployment or its dry run.
fn render(d: &Deployment, done: Deployed) -> DeploymentAnswer {
    let mut per_node: BTreeMap<uuid::Uuid, Vec<PlacedInstance>> = BTreeMap::new();
    for i in done.instances {
        per_node.entry(i.node).or_default().push(PlacedInstance {
            consumer_uuid: i.consumer_uuid,
            resource_provider_uuid: i.node,
            cpu_map: i.cpu_map.into_iter().collect(),
            numa_node: i.numa_node,
            volume_plan: (!i.volumes.is_empty()).then_some(i.volumes),
        });
    }
    let by_name =
        |m: &BTreeMap<uuid::Uuid, i64>| m.iter().map(|(u, n)| (u.to_string(), *n)).collect();
    DeploymentAnswer {
        app: d.app.as_str().to_string(),
        dry_run: d.dry_run.then_some(true),
        // A dry run shows every candidate node; a deployment the nodes it
        // used (listing every node would make its answer, and its cost,
        // grow with the cluster).
        capacity_map: match d.dry_run {
            true => by_name(&done.capacity),
            false => by_name(
                &done
                    .capacity
                    .iter()
                    .filter(|(node, _)| done.deploy_map.contains_key(node))
                    .map(|(node, c)| (*node, *c))
                    .collect(),
            ),
        },
        total_capacity: d.dry_run.then_some(done.total_capacity),
        deploy_map: by_name(&done.deploy_map),
        nodes: d
            .dry_run
            .then(|| done.verdicts.iter().map(deploy::refusal::report).collect()),
        instances: (!d.dry_run).then(|| per_node.clone()),
        plans: d.dry_run.then_some(per_node),
    }
}

/// `GET /deployments`: every app the caller may see (its owner's rule
/// passes) with its instance and node counts.
pub async fn list(State(st): State<AppState>, auth: Authorize) -> ApiResult<Reply> {
    let mut conn = st.pool.acquire().await?;
    let apps = db::apps_with_owners(&mut conn).await?;
    let deployments = auth
        .filter(apps, |(_, owner, _, _)| project_target(Some(owner), None))
        .into_iter()
        .map(|(app, _, count, nodes)| AppSummary { app, count, nodes })
        .collect();
    Ok(Reply::ok(&DeploymentList { deployments }))
}

/// `GET /deployments/{app}`: instances per node with their bindings;
/// checked against every project that owns an instance of the app.
pub async fn show(
    State(st): State<AppState>,
    auth: Authorize,
    PathParams(app): PathParams<String>,
) -> ApiResult<Reply> {
    // Checked against the app's owner (an app nobody deployed: only
    // rules that ignore the target pass, so nobody learns which exist).
    let owner = st.app_owners().owner(&st.pool, &app).await?;
    auth.check(owner.iter().map(|p| project_target(Some(p), None)))?;
    let mut conn = st.pool.acquire().await?;
    let rows = db::instances_of(&mut conn, &app).await?;
    let mut nodes: BTreeMap<uuid::Uuid, NodeInstances> = BTreeMap::new();
    for r in &rows {
        let node = nodes.entry(r.provider_uuid).or_default();
        node.count += 1;
        node.instances.push(InstanceRecord {
            consumer_uuid: r.consumer_uuid,
            cpu: r.cpu,
            cpu_bind: r.cpu_bind,
            memory_mb: r.memory_mb,
            cpu_map: r.cpu_map.0.iter().map(|(c, s)| (c.clone(), *s)).collect(),
            numa_node: r.numa_node.clone(),
            // As in the deployment's answer: only instances with volumes.
            volume_plan: (!r.volume_plan.0.is_empty()).then(|| r.volume_plan.0.clone()),
        });
    }
    Ok(Reply::ok(&DeploymentView {
        app,
        count: rows.len(),
        nodes,
    }))
}

/// The schema its body is validated against (also the OpenAPI document's).
pub(in crate::api) fn resize_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "cpu": {"type": "number", "minimum": -MAX_CPU, "maximum": MAX_CPU},
            "memory_mb": {"type": "integer", "minimum": -MAX_MEMORY_MB, "maximum": MAX_MEMORY_MB},
            "cpu_bind": {"type": "boolean"}
        },
        "additionalProperties": false
    })
}

/// `POST /deployments/{app}/instances/{consumer_uuid}/resize`: apply deltas
/// on the same node, preferring the instance's old cores; 409 and no change
/// when it does not fit.
pub async fn resize(
    State(st): State<AppState>,
    auth: Authorize,
    PathParams((app, consumer)): PathParams<(String, String)>,
    body: JsonBody,
) -> ApiResult<Reply> {
    let b: ResizeRequest = body.parse_extension(&resize_schema())?;
    let consumer_uuid = crate::types::parse_uuid_like(&consumer);
    let owner = match consumer_uuid {
        Some(u) => crate::db::consumers::get(&mut *st.pool.acquire().await?, u).await?,
        None => None,
    };
    auth.check([owner_target(owner.as_ref())])?;
    let consumer_uuid = consumer_uuid
        .ok_or_else(|| ApiError::not_found(format!("No instance {consumer} of app {app}")))?;
    let deltas = Deltas {
        cpu: b.cpu,
        memory_mb: b.memory_mb,
        cpu_bind: b.cpu_bind,
    };
    let retries = st.settings.allocation_conflict_retry_count;
    let r = deploy::resize::resize(&st.pool, retries, &app, consumer_uuid, deltas).await?;
    Ok(Reply::ok(&Resized {
        consumer_uuid,
        resource_provider_uuid: r.node,
        cpu: r.cpu,
        cpu_bind: r.cpu_bind,
        memory_mb: r.memory_mb,
        cpu_map: r.cpu_map.into_iter().collect(),
        numa_node: r.numa_node,
    }))
}
