//! `/resource_providers/{uuid}/inventories[/{rc}]`.

use super::extract::{find_for_update, find_or, Missing};
use super::extract::{JsonBody, PathParams};
use super::microversion::Microversion;
use super::respond::{latest, Reply};
use super::schema;
use super::schema::bodies::{InventoriesPut, InventoryCreate, InventoryUpdate};
use super::schema::responses::{Inventories, InventoryWithGeneration};
use crate::api::respond::{codes, ApiError, ApiResult, GenerationConflict};
use crate::db::inventories::{self, InventoryRow};
use crate::db::{classes, providers};
use crate::inventory::{
    in_use, invalid_capacity, refuse_server_owned, server_owned, set_inventories,
};
use crate::state::AppState;
use crate::types::Inventory;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use sqlx::PgConnection;
use std::collections::HashMap;

fn one_json(inv: &Inventory, generation: i32) -> InventoryWithGeneration {
    InventoryWithGeneration {
        inventory: *inv,
        resource_provider_generation: generation,
    }
}

/// The `GET .../inventories` shape.
pub fn inventories_json(rows: &[InventoryRow], generation: i32) -> Inventories {
    Inventories {
        resource_provider_generation: generation,
        inventories: rows
            .iter()
            .map(|r| (r.resource_class.clone(), r.inventory))
            .collect(),
    }
}

fn row_modified(r: &InventoryRow) -> Option<chrono::DateTime<chrono::Utc>> {
    r.updated_at.or(r.created_at)
}

/// `GET .../inventories`.
pub async fn list(
    State(st): State<AppState>,
    mv: Microversion,
    PathParams(id): PathParams<String>,
) -> ApiResult<Reply> {
    let mut conn = st.pool.acquire().await?;
    let rp = find_or(&mut conn, &id, Missing::Inventories).await?;
    let rows = inventories::of_provider(&mut conn, rp.id).await?;
    Ok(Reply::ok(&inventories_json(&rows, rp.generation))
        .cache(mv, latest(rows.iter().map(row_modified))))
}

/// `GET .../inventories/{rc}`.
pub async fn show(
    State(st): State<AppState>,
    mv: Microversion,
    PathParams((id, rc)): PathParams<(String, String)>,
) -> ApiResult<Reply> {
    let mut conn = st.pool.acquire().await?;
    let rp = find_or(&mut conn, &id, Missing::Inventories).await?;
    let rows = inventories::of_provider(&mut conn, rp.id).await?;
    let row = rows
        .iter()
        .find(|r| r.resource_class == rc)
        .ok_or_else(|| {
            ApiError::not_found(format!("No inventory of class {rc} for {}", rp.uuid))
        })?;
    Ok(Reply::ok(&one_json(&row.inventory, rp.generation)).cache(mv, row_modified(row)))
}

async fn bump(conn: &mut PgConnection, rp_id: i64, gen: i32) -> ApiResult<i32> {
    if !providers::bump_generation(conn, rp_id, gen).await? {
        return Err(generation_conflict());
    }
    Ok(gen + 1)
}

fn generation_conflict() -> ApiError {
    ApiError::generation_conflict(GenerationConflict::Inventory)
}

/// `POST .../inventories`: add one class (no generation check).
pub async fn create(
    State(st): State<AppState>,
    mv: Microversion,
    headers: HeaderMap,
    PathParams(id): PathParams<String>,
    body: JsonBody,
) -> ApiResult<Reply> {
    let mut tx = st.pool.begin().await?;
    let rp = find_for_update(&mut tx, &id).await?;
    let b: InventoryCreate = body.parse(&schema::inventory_post())?;
    let rc = b.resource_class;
    // As Placement: the capacity is checked before the class is looked up.
    let inv = b.record;
    if let Some(why) = invalid_capacity(&inv, mv.at_least(1, 26), &rc, &rp.uuid) {
        return Err(ApiError::bad_request(format!(
            "Unable to create inventory for resource provider {}: {why}",
            rp.uuid
        )));
    }
    refuse_server_owned(&rc, &rp.uuid)?;
    let Some(class) = classes::get(&mut tx, &rc).await? else {
        return Err(ApiError::bad_request(format!(
            "Unable to create inventory for resource provider {}: No such resource class {rc}.",
            rp.uuid
        )));
    };
    let existing = inventories::of_provider(&mut tx, rp.id).await?;
    if existing.iter().any(|r| r.resource_class_id == class.id) {
        return Err(ApiError::conflict(format!(
            "Update conflict: Inventory for '{rc}' on resource provider '{}' already exists.",
            rp.uuid
        ))
        .code(codes::CONCURRENT_UPDATE));
    }
    inventories::upsert(&mut tx, rp.id, class.id, &inv).await?;
    let gen = bump(&mut tx, rp.id, rp.generation).await?;
    tx.commit().await.map_err(ApiError::commit_failed)?;
    let path = format!("/resource_providers/{}/inventories/{rc}", rp.uuid);
    Ok(Reply::json(StatusCode::CREATED, &one_json(&inv, gen))
        .location(&headers, &path)
        .cache(mv, None))
}

/// `PUT .../inventories`: replace the whole set.
pub async fn replace(
    State(st): State<AppState>,
    mv: Microversion,
    PathParams(id): PathParams<String>,
    body: JsonBody,
) -> ApiResult<Reply> {
    let mut tx = st.pool.begin().await?;
    let rp = find_for_update(&mut tx, &id).await?;
    let b: InventoriesPut = body.parse(&schema::inventories_put())?;
    if !b.resource_provider_generation.matches(rp.generation) {
        return Err(generation_conflict());
    }
    let written = b.records();
    let mut rows = set_inventories(&mut tx, &rp, &written, mv.at_least(1, 26)).await?;
    let gen = bump(&mut tx, rp.id, rp.generation).await?;
    tx.commit().await.map_err(ApiError::commit_failed)?;
    // Placement answers a PUT in the order written (a GET in class order);
    // server-owned rows the body cannot name come last.
    let place: HashMap<&str, usize> = written
        .iter()
        .enumerate()
        .map(|(i, (rc, _))| (rc.as_str(), i))
        .collect();
    rows.sort_by_key(|r| {
        place
            .get(r.resource_class.as_str())
            .copied()
            .unwrap_or(usize::MAX)
    });
    Ok(Reply::ok(&inventories_json(&rows, gen)).cache(mv, None))
}

/// `PUT .../inventories/{rc}`: update one existing class.
pub async fn update(
    State(st): State<AppState>,
    mv: Microversion,
    PathParams((id, rc)): PathParams<(String, String)>,
    body: JsonBody,
) -> ApiResult<Reply> {
    let mut tx = st.pool.begin().await?;
    let rp = find_for_update(&mut tx, &id).await?;
    // Placement's order: the body, its generation and its capacity, and
    // only then the class.
    let b: InventoryUpdate = body.parse(&schema::inventory_put_one())?;
    if !b.resource_provider_generation.matches(rp.generation) {
        return Err(generation_conflict());
    }
    let inv = b.record;
    if let Some(why) = invalid_capacity(&inv, mv.at_least(1, 26), &rc, &rp.uuid) {
        return Err(ApiError::bad_request(format!(
            "Unable to update inventory for resource provider {}: {why}",
            rp.uuid
        )));
    }
    refuse_server_owned(&rc, &rp.uuid)?;
    let Some(class) = classes::get(&mut tx, &rc).await? else {
        return Err(ApiError::not_found(format!("No such resource class {rc}.")));
    };
    let existing = inventories::of_provider(&mut tx, rp.id).await?;
    if !existing.iter().any(|r| r.resource_class_id == class.id) {
        return Err(ApiError::bad_request(format!(
            "No inventory record with resource class for resource provider {}: No inventory of class {rc} found.",
            rp.uuid
        )));
    }
    inventories::upsert(&mut tx, rp.id, class.id, &inv).await?;
    let gen = bump(&mut tx, rp.id, rp.generation).await?;
    tx.commit().await.map_err(ApiError::commit_failed)?;
    Ok(Reply::ok(&one_json(&inv, gen)).cache(mv, None))
}

/// `DELETE .../inventories/{rc}`.
pub async fn delete(
    State(st): State<AppState>,
    PathParams((id, rc)): PathParams<(String, String)>,
) -> ApiResult<StatusCode> {
    let mut tx = st.pool.begin().await?;
    let rp = find_for_update(&mut tx, &id).await?;
    refuse_server_owned(&rc, &rp.uuid)?;
    let existing = inventories::of_provider(&mut tx, rp.id).await?;
    let Some(row) = existing.iter().find(|r| r.resource_class == rc) else {
        // Placement's handler wraps its lookup's message: an unknown class
        // is its own, a known one without inventory the object's.
        let why = match classes::get(&mut tx, &rc).await? {
            None => format!("No such resource class {rc}."),
            Some(_) => format!("No inventory of class {rc} found for delete"),
        };
        return Err(ApiError::not_found(format!(
            "No inventory of class {rc} found for delete: {why}"
        )));
    };
    let busy = inventories::classes_in_use(&mut tx, rp.id, &[row.resource_class_id]).await?;
    if !busy.is_empty() {
        // Placement answers this one with concurrent_update, not inventory.inuse.
        return Err(ApiError::conflict(in_use(&busy, &rp.uuid)).code(codes::CONCURRENT_UPDATE));
    }
    inventories::delete(&mut tx, rp.id, &[row.resource_class_id]).await?;
    bump(&mut tx, rp.id, rp.generation).await?;
    tx.commit().await.map_err(ApiError::commit_failed)?;
    Ok(StatusCode::NO_CONTENT)
}

/// `DELETE .../inventories` (1.5+; 405 before), but for the server-owned
/// batch rows.
pub async fn delete_all(
    State(st): State<AppState>,
    PathParams(id): PathParams<String>,
) -> ApiResult<StatusCode> {
    let mut tx = st.pool.begin().await?;
    let rp = find_for_update(&mut tx, &id).await?;
    let existing = inventories::of_provider(&mut tx, rp.id).await?;
    // The server-owned batch rows stay: they are not the client's.
    let ids: Vec<i32> = existing
        .iter()
        .filter(|r| !server_owned(&r.resource_class))
        .map(|r| r.resource_class_id)
        .collect();
    let busy = inventories::classes_in_use(&mut tx, rp.id, &ids).await?;
    if !busy.is_empty() {
        return Err(ApiError::conflict(in_use(&busy, &rp.uuid)).code(codes::INVENTORY_INUSE));
    }
    inventories::delete(&mut tx, rp.id, &ids).await?;
    bump(&mut tx, rp.id, rp.generation).await?;
    tx.commit().await.map_err(ApiError::commit_failed)?;
    Ok(StatusCode::NO_CONTENT)
}
