//! `/allocations/{consumer}`, `POST /allocations` (1.13+) and
//! `/resource_providers/{uuid}/allocations`.

use super::extract::{find_or, JsonBody, Missing, PathParams};
use super::microversion::Microversion;
use super::respond::{latest, Reply};
use super::schema;
use super::schema::allocations::{consumer_write, writes_from_map};
use super::schema::bodies::{AllocationsPost, AllocationsPut as AllocationBody};
use super::schema::responses::{
    ConsumerAllocations, ConsumerShare, ProviderAllocations, ProviderShare,
};
use crate::allocation;
use crate::api::respond::{ApiError, ApiResult};
use crate::db::allocations::{self as db};
use crate::db::consumers;
use crate::state::AppState;
use crate::types::parse_uuid_like;
use axum::extract::State;
use axum::http::StatusCode;

/// `GET /allocations/{consumer}`: never 404; `{"allocations": {}}` when none.
pub async fn show(
    State(st): State<AppState>,
    mv: Microversion,
    PathParams(id): PathParams<String>,
) -> ApiResult<Reply> {
    let Some(consumer) = parse_uuid_like(&id) else {
        return Ok(Reply::ok(&ConsumerAllocations::default()).cache(mv, None));
    };
    let mut conn = st.pool.acquire().await?;
    let rows = db::of_consumer(&mut conn, consumer).await?;
    let mut body = ConsumerAllocations::default();
    for r in &rows {
        let share = body
            .allocations
            .entry(r.provider_uuid.to_string())
            .or_insert_with(|| ProviderShare {
                generation: r.provider_generation,
                ..Default::default()
            });
        share
            .resources
            .insert(r.resource_class.clone(), i64::from(r.used));
    }
    if !rows.is_empty() && mv.at_least(1, 12) {
        if let Some(c) = consumers::get(&mut conn, consumer).await? {
            body.project_id = Some(c.project_id);
            body.user_id = Some(c.user_id);
            body.consumer_generation = mv.at_least(1, 28).then_some(c.generation);
            body.consumer_type = mv
                .at_least(1, 38)
                .then(|| c.consumer_type.unwrap_or_else(|| "unknown".into()));
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
    let rp = find_or(&mut conn, &id, Missing::Allocations).await?;
    let rows = db::of_provider(&mut conn, rp.id).await?;
    let mut body = ProviderAllocations {
        allocations: Default::default(),
        resource_provider_generation: rp.generation,
    };
    for r in &rows {
        let share = body
            .allocations
            .entry(r.consumer_uuid.to_string())
            .or_insert_with(|| ConsumerShare {
                consumer_generation: mv.at_least(1, 28).then_some(r.consumer_generation),
                ..Default::default()
            });
        share
            .resources
            .insert(r.resource_class.clone(), i64::from(r.used));
    }
    let modified = latest(rows.iter().map(|r| r.updated_at.or(r.created_at)));
    Ok(Reply::ok(&body).cache(mv, modified))
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
    let b: AllocationBody = body.parse(&schema::allocations_put(mv))?;
    let write = consumer_write(consumer, &b, mv, &st.settings);
    st.allocations().put_one(write).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// `POST /allocations`: several consumers in one transaction.
pub async fn post_many(
    State(st): State<AppState>,
    mv: Microversion,
    body: JsonBody,
) -> ApiResult<StatusCode> {
    let b: AllocationsPost = body.parse(&schema::allocations_post(mv, false))?;
    let writes = writes_from_map(&b.0, mv, &st.settings);
    allocation::write_with_retry(
        &st.pool,
        st.settings.allocation_conflict_retry_count,
        &writes,
        None,
    )
    .await?;
    Ok(StatusCode::NO_CONTENT)
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
