//! `/allocations/{consumer}`, `POST /allocations` (1.13+) and
//! `/resource_providers/{uuid}/allocations`.

use super::extract::{JsonBody, PathParams};
use super::microversion::Microversion;
use super::resource_providers::find;
use super::respond::{latest, Reply};
use super::schema;
use crate::config::Settings;
use crate::db::allocations::{self as db, AllocError, ConsumerWrite, GenerationCheck};
use crate::db::consumers;
use crate::error::{codes, with_retries, ApiError, ApiResult};
use crate::types::parse_uuid_like;
use crate::types::GivenGeneration;
use crate::AppState;
use axum::extract::State;
use axum::http::StatusCode;
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;
use uuid::Uuid;

/// An allocation amount: any JSON integer the schema let through that fits
/// in 64 bits (larger ones are refused, never wrapped or zeroed; amounts
/// over an inventory's max_unit then get Placement's 409).
fn amount(rc: &str, n: &Value) -> ApiResult<i64> {
    n.as_i64().ok_or_else(|| {
        ApiError::bad_request(format!(
            "JSON does not validate: {n} is out of range for resources {rc}"
        ))
    })
}

/// Turns one consumer's validated body (any version's form) into a write.
pub fn consumer_write(
    consumer: Uuid,
    v: &Value,
    mv: Microversion,
    settings: &Settings,
) -> ApiResult<ConsumerWrite> {
    let mut allocations: BTreeMap<Uuid, BTreeMap<String, i64>> = BTreeMap::new();
    let mut add = |rp: Option<Uuid>, resources: &Value| -> ApiResult<()> {
        // Unparseable keys cannot name a provider; nil makes that a 400 later.
        let entry = allocations.entry(rp.unwrap_or(Uuid::nil())).or_default();
        for (rc, n) in resources.as_object().into_iter().flatten() {
            let sum = entry.entry(rc.clone()).or_default();
            *sum = sum.saturating_add(amount(rc, n)?);
        }
        Ok(())
    };
    match &v["allocations"] {
        Value::Array(list) => {
            for item in list {
                add(
                    item["resource_provider"]["uuid"]
                        .as_str()
                        .and_then(parse_uuid_like),
                    &item["resources"],
                )?;
            }
        }
        Value::Object(map) => {
            for (rp, item) in map {
                add(parse_uuid_like(rp), &item["resources"])?;
            }
        }
        _ => {}
    }
    let owner = |k: &str, default: &str| {
        v.get(k)
            .and_then(Value::as_str)
            .unwrap_or(default)
            .to_string()
    };
    Ok(ConsumerWrite {
        consumer,
        project_id: owner("project_id", &settings.incomplete_consumer_project_id),
        user_id: owner("user_id", &settings.incomplete_consumer_user_id),
        consumer_type: mv.at_least(1, 38).then(|| owner("consumer_type", "")),
        generation: match v.get("consumer_generation") {
            _ if !mv.at_least(1, 28) => GenerationCheck::None,
            Some(given) => match GivenGeneration::from_json(given) {
                Some(g) => GenerationCheck::Is(g),
                None => GenerationCheck::New,
            },
            None => GenerationCheck::New,
        },
        allocations,
    })
}

/// Maps a refused write to Placement's error; `put_consumer` picks the PUT wording.
pub fn alloc_error(e: AllocError, put_consumer: Option<Uuid>) -> ApiError {
    match e {
        AllocError::NoProvider(rp) if rp.is_nil() => {
            ApiError::bad_request("Allocation for resource provider that does not exist.")
        }
        AllocError::NoProvider(_) => ApiError::bad_request(e.to_string()),
        AllocError::NoClass(_, ref rc) => match put_consumer {
            Some(c) => ApiError::bad_request(format!(
                "Unable to allocate inventory for consumer {c}: No such resource class {rc}."
            )),
            None => ApiError::bad_request(format!(
                "Unable to allocate inventory No such resource class {rc}."
            )),
        },
        AllocError::NoInventory(..)
        | AllocError::Constraints(..)
        | AllocError::Capacity(..)
        | AllocError::BoundShares(..) => ApiError::conflict(e.to_string()),
        AllocError::ConsumerGeneration { .. } => {
            ApiError::conflict(e.to_string()).code(codes::CONCURRENT_UPDATE)
        }
        AllocError::Db(db) => ApiError::from(db),
    }
}

/// Runs an allocation write in its own transaction, running it again when
/// it loses a database race (a deadlock or serialisation failure between
/// writers) up to `allocation_conflict_retry_count` times, as Placement
/// retries generation races; `put_consumer` picks the PUT wording of errors.
pub async fn write_with_retry(
    st: &AppState,
    writes: &[ConsumerWrite],
    put_consumer: Option<Uuid>,
) -> ApiResult<()> {
    with_retries(st.settings.allocation_conflict_retry_count, || async {
        let mut tx = st.pool.begin().await?;
        db::write(&mut tx, writes)
            .await
            .map_err(|e| alloc_error(e, put_consumer))?;
        tx.commit().await.map_err(ApiError::commit_failed)
    })
    .await
}

/// `GET /allocations/{consumer}`: never 404; `{"allocations": {}}` when none.
pub async fn show(
    State(st): State<AppState>,
    mv: Microversion,
    PathParams(id): PathParams<String>,
) -> ApiResult<Reply> {
    let Some(consumer) = parse_uuid_like(&id) else {
        return Ok(Reply::ok(&json!({"allocations": {}})).cache(mv, None));
    };
    let mut conn = st.pool.acquire().await?;
    let rows = db::of_consumer(&mut conn, consumer).await?;
    let mut allocs = Map::new();
    for r in &rows {
        let entry = allocs
            .entry(r.provider_uuid.to_string())
            .or_insert_with(|| json!({"generation": r.provider_generation, "resources": {}}));
        entry["resources"][&r.resource_class] = json!(r.used);
    }
    let mut body = json!({"allocations": allocs});
    if !rows.is_empty() && mv.at_least(1, 12) {
        if let Some(c) = consumers::get(&mut conn, consumer).await? {
            body["project_id"] = json!(c.project_id);
            body["user_id"] = json!(c.user_id);
            if mv.at_least(1, 28) {
                body["consumer_generation"] = json!(c.generation);
            }
            if mv.at_least(1, 38) {
                body["consumer_type"] = json!(c.consumer_type.unwrap_or_else(|| "unknown".into()));
            }
        }
    }
    let modified = latest(rows.iter().map(|r| r.updated_at.or(r.created_at)));
    Ok(Reply::ok(&body).cache(mv, modified))
}

/// `GET /resource_providers/{uuid}/allocations`.
pub async fn of_provider(
    State(st): State<AppState>,
    mv: Microversion,
    PathParams(id): PathParams<String>,
) -> ApiResult<Reply> {
    let mut conn = st.pool.acquire().await?;
    let rp = find(&mut conn, &id).await?;
    let rows = db::of_provider(&mut conn, rp.id).await?;
    let mut allocs = Map::new();
    for r in &rows {
        let entry = allocs
            .entry(r.consumer_uuid.to_string())
            .or_insert_with(|| {
                let mut e = json!({"resources": {}});
                if mv.at_least(1, 28) {
                    e["consumer_generation"] = json!(r.consumer_generation);
                }
                e
            });
        entry["resources"][&r.resource_class] = json!(r.used);
    }
    let modified = latest(rows.iter().map(|r| r.updated_at.or(r.created_at)));
    Ok(
        Reply::ok(&json!({"allocations": allocs, "resource_provider_generation": rp.generation}))
            .cache(mv, modified),
    )
}

/// `PUT /allocations/{consumer}`: replace one consumer's allocations.
pub async fn replace(
    State(st): State<AppState>,
    mv: Microversion,
    PathParams(id): PathParams<String>,
    body: JsonBody,
) -> ApiResult<StatusCode> {
    let consumer = parse_uuid_like(&id)
        .ok_or_else(|| ApiError::bad_request(format!("Malformed consumer_uuid: {id}")))?;
    let b: Value = body.parse(&schema::allocations_put(mv))?;
    let write = consumer_write(consumer, &b, mv, &st.settings)?;
    write_with_retry(&st, &[write], Some(consumer)).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// `POST /allocations`: several consumers in one transaction.
pub async fn post_many(
    State(st): State<AppState>,
    mv: Microversion,
    body: JsonBody,
) -> ApiResult<StatusCode> {
    let b: Value = body.parse(&schema::allocations_post(mv, false))?;
    let writes = writes_from_map(&b, mv, &st.settings)?;
    write_with_retry(&st, &writes, None).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Writes from a validated `{consumer: body}` map (POST /allocations, reshaper).
pub fn writes_from_map(
    b: &Value,
    mv: Microversion,
    settings: &Settings,
) -> ApiResult<Vec<ConsumerWrite>> {
    b.as_object()
        .into_iter()
        .flatten()
        .filter_map(|(c, v)| parse_uuid_like(c).map(|u| consumer_write(u, v, mv, settings)))
        .collect()
}

/// `DELETE /allocations/{consumer}`.
pub async fn delete(
    State(st): State<AppState>,
    PathParams(id): PathParams<String>,
) -> ApiResult<StatusCode> {
    let not_found = || ApiError::not_found(format!("No allocations for consumer '{id}'"));
    let consumer = parse_uuid_like(&id).ok_or_else(not_found)?;
    let mut tx = st.pool.begin().await?;
    if !db::delete_consumer(&mut tx, consumer).await? {
        return Err(not_found());
    }
    tx.commit().await.map_err(ApiError::commit_failed)?;
    Ok(StatusCode::NO_CONTENT)
}
