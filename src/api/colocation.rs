//! Colocation extension paths (Koordinator's rules, §C.3): consumer
//! priority, the colocation policy (cluster and per provider), usage
//! reports, and the node agent's advice. Thin: each reads its typed
//! request and calls `crate::colocation`.

use super::extract::{find, find_for_update, JsonBody, PathParams};
use super::policy::{owner_target, Authorize};
use super::respond::Reply;
use crate::api::respond::{ApiError, ApiResult};
use crate::colocation::advice::{self, EvictionsPost};
use crate::colocation::policy_overrides;
use crate::colocation::priority::{self, PriorityPut};
use crate::colocation::reports::{self, UsageReport};
use crate::sched::colocation::knobs::Policy;
use crate::state::AppState;
use crate::types::parse_uuid_like;
use axum::extract::State;
use axum::http::StatusCode;
use serde_json::{json, Map, Value};

/// Every policy field, any JSON value (types and ranges are checked after
/// the merge, with Koordinator's field names in the message).
/// The schema its body is validated against (also the OpenAPI document's).
pub(in crate::api) fn policy_schema() -> Value {
    let fields: Map<String, Value> = serde_json::to_value(Policy::default())
        .ok()
        .and_then(|v| v.as_object().cloned())
        .unwrap_or_default()
        .keys()
        .map(|k| (k.clone(), json!({})))
        .collect();
    json!({"type": "object", "properties": fields, "additionalProperties": false})
}

/// The schema its body is validated against (also the OpenAPI document's).
pub(in crate::api) fn priority_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "priority_class": {"type": "string", "enum": crate::types::PriorityClass::names()},
            "priority": {"type": ["integer", "null"], "minimum": i32::MIN, "maximum": i32::MAX},
            "eviction_enabled": {"type": "boolean"}
        },
        "required": ["priority_class"],
        "additionalProperties": false
    })
}

/// The schema its body is validated against (also the OpenAPI document's).
pub(in crate::api) fn report_schema() -> Value {
    // Amounts are 0 or more (their bound above is the node's capacity,
    // checked by `colocation::reports`); a window is 1 s to an hour.
    let amount = json!({"type": "integer", "minimum": 0, "maximum": i64::MAX});
    let used = json!({"type": "object", "properties": {
        "cpu_milli_used": amount, "memory_mb_used": amount},
        "required": ["cpu_milli_used", "memory_mb_used"], "additionalProperties": false});
    json!({
        "type": "object",
        "properties": {
            "sampled_at": {"type": "string", "format": "date-time"},
            "window_seconds": {"type": "integer", "minimum": 1, "maximum": 3600},
            "node": used, "system": used,
            "consumers": {"type": "array", "maxItems": 10000, "items": {"type": "object", "properties": {
                "consumer_uuid": {"type": "string", "format": "uuid"},
                "cpu_milli_used": amount, "memory_mb_used": amount},
                "required": ["consumer_uuid", "cpu_milli_used", "memory_mb_used"], "additionalProperties": false}},
            "be": {"type": "object", "properties": {
                "cpu_milli_used": amount, "cpu_milli_request": amount,
                "cpu_milli_real_limit": amount},
                "required": ["cpu_milli_used", "cpu_milli_request", "cpu_milli_real_limit"], "additionalProperties": false}
        },
        "required": ["sampled_at", "window_seconds", "node", "system"],
        "additionalProperties": false
    })
}

/// The schema its body is validated against (also the OpenAPI document's).
pub(in crate::api) fn evictions_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "consumer_uuids": {"type": "array", "minItems": 1, "maxItems": 1000,
                               "items": {"type": "string", "format": "uuid"}},
            "trigger": {"type": "string", "enum": ["be_cpu_satisfaction", "memory_usage"]}
        },
        "required": ["consumer_uuids", "trigger"],
        "additionalProperties": false
    })
}

fn consumer(raw: &str) -> ApiResult<uuid::Uuid> {
    parse_uuid_like(raw)
        .ok_or_else(|| ApiError::bad_request(format!("Malformed consumer_uuid: {raw}")))
}

/// Checks the priority rule against the consumer's stored project and user
/// (read under the caller's transaction, so it cannot change before use).
async fn authorize_consumer(
    conn: &mut sqlx::PgConnection,
    auth: &Authorize,
    consumer: uuid::Uuid,
) -> ApiResult<()> {
    let owner = crate::db::consumers::get(conn, consumer).await?;
    auth.check([owner_target(owner.as_ref())])
}

/// `GET /consumers/{consumer_uuid}/priority`.
pub async fn show_priority(
    State(st): State<AppState>,
    auth: Authorize,
    PathParams(id): PathParams<String>,
) -> ApiResult<Reply> {
    let consumer = consumer(&id)?;
    let mut conn = st.pool.acquire().await?;
    authorize_consumer(&mut conn, &auth, consumer).await?;
    Ok(Reply::ok(&priority::show(&mut conn, consumer).await?))
}

/// `PUT /consumers/{consumer_uuid}/priority`.
pub async fn set_priority(
    State(st): State<AppState>,
    auth: Authorize,
    PathParams(id): PathParams<String>,
    body: JsonBody,
) -> ApiResult<Reply> {
    let b: PriorityPut = body.parse_extension(&priority_schema())?;
    let consumer = consumer(&id)?;
    let mut tx = st.pool.begin().await?;
    authorize_consumer(&mut tx, &auth, consumer).await?;
    let view = priority::put(&mut tx, consumer, b).await?;
    tx.commit().await.map_err(ApiError::commit_failed)?;
    Ok(Reply::ok(&view))
}

/// `GET /colocation_policy`.
pub async fn show_cluster_policy(State(st): State<AppState>) -> ApiResult<Reply> {
    let mut conn = st.pool.acquire().await?;
    Ok(Reply::ok(&policy_overrides::show(&mut conn, None).await?))
}

/// `PUT /colocation_policy`.
pub async fn set_cluster_policy(State(st): State<AppState>, body: JsonBody) -> ApiResult<Reply> {
    let fields: Value = body.parse_extension(&policy_schema())?;
    let mut tx = st.pool.begin().await?;
    let view = policy_overrides::put(&mut tx, None, fields).await?;
    tx.commit().await?;
    Ok(Reply::ok(&view))
}

/// `DELETE /colocation_policy`: back to Koordinator's defaults.
pub async fn delete_cluster_policy(State(st): State<AppState>) -> ApiResult<StatusCode> {
    let mut tx = st.pool.begin().await?;
    policy_overrides::delete(&mut tx, None).await?;
    tx.commit().await.map_err(ApiError::commit_failed)?;
    Ok(StatusCode::NO_CONTENT)
}

/// `GET /resource_providers/{uuid}/colocation_policy`.
pub async fn show_provider_policy(
    State(st): State<AppState>,
    PathParams(id): PathParams<String>,
) -> ApiResult<Reply> {
    let mut conn = st.pool.acquire().await?;
    let rp = find(&mut conn, &id).await?;
    Ok(Reply::ok(
        &policy_overrides::show(&mut conn, Some(rp.id)).await?,
    ))
}

/// `PUT /resource_providers/{uuid}/colocation_policy`.
pub async fn set_provider_policy(
    State(st): State<AppState>,
    PathParams(id): PathParams<String>,
    body: JsonBody,
) -> ApiResult<Reply> {
    let fields: Value = body.parse_extension(&policy_schema())?;
    let mut tx = st.pool.begin().await?;
    let rp = find(&mut tx, &id).await?;
    let view = policy_overrides::put(&mut tx, Some(rp.id), fields).await?;
    tx.commit().await?;
    Ok(Reply::ok(&view))
}

/// `DELETE /resource_providers/{uuid}/colocation_policy`.
pub async fn delete_provider_policy(
    State(st): State<AppState>,
    PathParams(id): PathParams<String>,
) -> ApiResult<StatusCode> {
    let mut tx = st.pool.begin().await?;
    let rp = find(&mut tx, &id).await?;
    policy_overrides::delete(&mut tx, Some(rp.id)).await?;
    tx.commit().await.map_err(ApiError::commit_failed)?;
    Ok(StatusCode::NO_CONTENT)
}

/// `POST /resource_providers/{uuid}/usage_reports`: 202.
pub async fn report(
    State(st): State<AppState>,
    PathParams(id): PathParams<String>,
    body: JsonBody,
) -> ApiResult<Reply> {
    let b: UsageReport = body.parse_extension(&report_schema())?;
    let mut tx = st.pool.begin().await?;
    let answer = reports::ingest(&mut tx, &id, &b, st.settings.colocation_sample_retention).await?;
    tx.commit().await?;
    crate::metrics::metrics().usage_reports.inc();
    Ok(Reply::json(StatusCode::ACCEPTED, &answer))
}

/// `GET /resource_providers/{uuid}/suppression`.
pub async fn suppression(
    State(st): State<AppState>,
    PathParams(id): PathParams<String>,
) -> ApiResult<Reply> {
    let mut tx = crate::db::candidates::begin_snapshot(&st.pool).await?;
    let rp = find(&mut tx, &id).await?;
    let view = advice::suppression(&mut tx, rp.id).await?;
    tx.commit().await?;
    Ok(Reply::ok(&view))
}

/// `GET /resource_providers/{uuid}/eviction_candidates`.
pub async fn eviction_candidates(
    State(st): State<AppState>,
    PathParams(id): PathParams<String>,
) -> ApiResult<Reply> {
    let mut tx = crate::db::candidates::begin_snapshot(&st.pool).await?;
    let rp = find(&mut tx, &id).await?;
    let view = advice::eviction_candidates(&mut tx, rp.id).await?;
    tx.commit().await?;
    Ok(Reply::ok(&view))
}

/// `POST /resource_providers/{uuid}/evictions`.
pub async fn record_evictions(
    State(st): State<AppState>,
    PathParams(id): PathParams<String>,
    body: JsonBody,
) -> ApiResult<Reply> {
    let b: EvictionsPost = body.parse_extension(&evictions_schema())?;
    let mut tx = st.pool.begin().await?;
    let rp = find_for_update(&mut tx, &id).await?;
    let answer = advice::record(&mut tx, rp.id, &b).await?;
    tx.commit().await?;
    crate::metrics::metrics()
        .evictions
        .inc_by(u64::try_from(b.consumer_uuids.len()).unwrap_or(0));
    Ok(Reply::ok(&answer))
}
