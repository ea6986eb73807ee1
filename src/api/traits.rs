//! `/traits[/{name}]` and `/resource_providers/{uuid}/traits` (1.6+).

use super::extract::{find_for_update, find_or, Missing};
use super::extract::{JsonBody, PathParams, QueryPairs};
use super::microversion::Microversion;
use super::respond::{latest, Reply};
use super::schema;
use super::schema::bodies::ProviderTraitsPut;
use super::schema::responses::{ProviderTraits as ProviderTraitsOut, TraitList};
use crate::api::respond::{ApiError, ApiResult, GenerationConflict};
use crate::db::providers;
use crate::db::traits::{self as db, NameFilter, TraitRow};
use crate::state::AppState;
use crate::types::is_custom_name;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};

fn modified(t: &TraitRow) -> Option<chrono::DateTime<chrono::Utc>> {
    t.updated_at.or(t.created_at)
}

fn generation_changed() -> ApiError {
    ApiError::generation_conflict(GenerationConflict::Changed)
}

/// `GET /traits`.
pub async fn list(State(st): State<AppState>, mv: Microversion, q: QueryPairs) -> ApiResult<Reply> {
    q.validate(&schema::traits_list_query())?;
    let name = match q.last("name") {
        None => NameFilter::All,
        Some(v) => match v.split_once(':') {
            None => {
                return Err(ApiError::bad_request(format!(
                    "Badly formatted name parameter. Expected name query string parameter in form: ?name=[in|startswith]:[name1,name2|prefix]. Got: \"{v}\""
                )))
            }
            Some(("in", list)) => NameFilter::In(list.split(',').map(|s| s.trim().to_string()).collect()),
            Some(("startswith", p)) => NameFilter::StartsWith(p.to_string()),
            Some(_) => NameFilter::All,
        },
    };
    let associated = match q.last("associated").map(str::to_ascii_lowercase).as_deref() {
        None => None,
        Some("true") => Some(true),
        Some("false") => Some(false),
        Some(_) => {
            return Err(ApiError::bad_request(
                "The query parameter \"associated\" only accepts \"true\" or \"false\"",
            ))
        }
    };
    let mut conn = st.pool.acquire().await?;
    let rows = db::list(&mut conn, &name, associated).await?;
    let names: Vec<String> = rows.iter().map(|t| t.name.clone()).collect();
    Ok(Reply::ok(&TraitList { traits: names }).cache(mv, latest(rows.iter().map(modified))))
}

/// `GET /traits/{name}`: 204 when it exists.
pub async fn show(
    State(st): State<AppState>,
    mv: Microversion,
    PathParams(name): PathParams<String>,
) -> ApiResult<Reply> {
    let mut conn = st.pool.acquire().await?;
    let t = db::get(&mut conn, &name)
        .await?
        .ok_or_else(|| ApiError::not_found(format!("No such trait(s): {name}.")))?;
    Ok(Reply::empty(StatusCode::NO_CONTENT).cache(mv, modified(&t)))
}

/// `PUT /traits/{name}`: create a custom trait (201) or confirm it (204).
pub async fn create(
    State(st): State<AppState>,
    mv: Microversion,
    headers: HeaderMap,
    PathParams(name): PathParams<String>,
) -> ApiResult<Reply> {
    if !is_custom_name(&name) {
        return Err(ApiError::bad_request(
            "The trait is invalid. A valid trait must be no longer than 255 characters, start with the prefix \"CUSTOM_\" and use following characters: \"A\"-\"Z\", \"0\"-\"9\" and \"_\"",
        ));
    }
    let mut tx = st.pool.begin().await?;
    let created = db::create(&mut tx, &name).await?;
    let t = db::get(&mut tx, &name).await?;
    tx.commit().await.map_err(ApiError::commit_failed)?;
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::NO_CONTENT
    };
    Ok(Reply::empty(status)
        .location(&headers, &format!("/traits/{name}"))
        .cache(mv, t.as_ref().and_then(modified)))
}

/// `DELETE /traits/{name}`.
pub async fn delete(
    State(st): State<AppState>,
    PathParams(name): PathParams<String>,
) -> ApiResult<StatusCode> {
    let mut tx = st.pool.begin().await?;
    let t = db::get(&mut tx, &name)
        .await?
        .ok_or_else(|| ApiError::not_found(format!("No such trait(s): {name}.")))?;
    if !name.starts_with("CUSTOM_") {
        return Err(ApiError::bad_request(format!(
            "Cannot delete standard trait {name}."
        )));
    }
    if db::in_use(&mut tx, t.id).await? {
        return Err(ApiError::conflict(format!(
            "The trait {name} is in use by a resource provider."
        )));
    }
    db::delete(&mut tx, t.id).await?;
    tx.commit().await.map_err(ApiError::commit_failed)?;
    Ok(StatusCode::NO_CONTENT)
}

fn provider_traits_json(rows: &[TraitRow], generation: i32) -> ProviderTraitsOut {
    let names: Vec<String> = rows.iter().map(|t| t.name.clone()).collect();
    ProviderTraitsOut {
        traits: names,
        resource_provider_generation: generation,
    }
}

/// `GET /resource_providers/{uuid}/traits`.
pub async fn of_provider(
    State(st): State<AppState>,
    mv: Microversion,
    PathParams(id): PathParams<String>,
) -> ApiResult<Reply> {
    let mut conn = st.pool.acquire().await?;
    let rp = find_or(&mut conn, &id, Missing::TraitsOrUsages).await?;
    let rows = db::of_provider(&mut conn, rp.id).await?;
    Ok(Reply::ok(&provider_traits_json(&rows, rp.generation))
        .cache(mv, latest(rows.iter().map(modified))))
}

/// `PUT /resource_providers/{uuid}/traits`: replace the set; bumps only on change.
pub async fn set_for_provider(
    State(st): State<AppState>,
    mv: Microversion,
    PathParams(id): PathParams<String>,
    body: JsonBody,
) -> ApiResult<Reply> {
    // Placement validates this body before it looks the provider up.
    let b: ProviderTraitsPut = body.parse(&schema::provider_traits_put())?;
    let mut tx = st.pool.begin().await?;
    let rp = find_for_update(&mut tx, &id).await?;
    if !b.resource_provider_generation.matches(rp.generation) {
        return Err(generation_changed());
    }
    let names = b.traits;
    let db::Resolved { found, missing } = db::resolve(&mut tx, &names).await?;
    if !missing.is_empty() {
        return Err(ApiError::bad_request(format!(
            "No such trait {}",
            missing.join(", ")
        )));
    }
    let ids: Vec<i32> = found.iter().map(|(_, id)| *id).collect();
    let mut gen = rp.generation;
    if db::set_for_provider(&mut tx, rp.id, &ids).await? {
        if !providers::bump_generation(&mut tx, rp.id, gen).await? {
            return Err(generation_changed());
        }
        gen += 1;
    }
    let mut rows = db::of_provider(&mut tx, rp.id).await?;
    tx.commit().await.map_err(ApiError::commit_failed)?;
    // Placement answers the PUT with the traits it looked up by name, in
    // its database's order for `name IN (…)`: on MariaDB and SQLite, where
    // nearly every deployment keeps it, the name index's (recorded in
    // tests/data/placement-answer-order.json); on PostgreSQL the table's,
    // creation order. Its GET is in trait order everywhere.
    rows.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(Reply::ok(&provider_traits_json(&rows, gen)).cache(mv, latest(rows.iter().map(modified))))
}

/// `DELETE /resource_providers/{uuid}/traits`.
pub async fn clear_provider(
    State(st): State<AppState>,
    PathParams(id): PathParams<String>,
) -> ApiResult<StatusCode> {
    let mut tx = st.pool.begin().await?;
    let rp = find_for_update(&mut tx, &id).await?;
    if db::set_for_provider(&mut tx, rp.id, &[]).await?
        && !providers::bump_generation(&mut tx, rp.id, rp.generation).await?
    {
        return Err(generation_changed());
    }
    tx.commit().await.map_err(ApiError::commit_failed)?;
    Ok(StatusCode::NO_CONTENT)
}
