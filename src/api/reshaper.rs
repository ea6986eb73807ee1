//! `POST /reshaper` (1.30+): move inventories and allocations across a
//! provider tree in one transaction.

use super::allocations::{alloc_error, writes_from_map};
use super::extract::JsonBody;
use super::inventories::{invalid_capacity, inventory_from, set_inventories};
use super::microversion::Microversion;
use super::schema;
use crate::db::{allocations, classes, inventories, providers};
use crate::error::{codes, ApiError, ApiResult};
use crate::types::parse_uuid_like;
use crate::AppState;
use axum::extract::State;
use axum::http::StatusCode;
use serde_json::{Map, Value};

/// `POST /reshaper`.
pub async fn reshape(
    State(st): State<AppState>,
    mv: Microversion,
    body: JsonBody,
) -> ApiResult<StatusCode> {
    let b: Value = body.parse(&schema::reshaper(mv))?;
    let inv_map = b["inventories"].as_object().cloned().unwrap_or_default();
    let writes = writes_from_map(&b["allocations"], mv, &st.settings);
    let mut tx = st.pool.begin().await?;

    // Lock every provider whose inventory changes, in id order, and check generations.
    let mut targets = Vec::new();
    for (raw, spec) in &inv_map {
        let rp = match parse_uuid_like(raw) {
            Some(u) => providers::get_for_update(&mut tx, u).await?,
            None => None,
        };
        let Some(rp) = rp else {
            return Err(ApiError::bad_request(format!(
                "Resource provider {raw} in inventories not found: No resource provider with uuid {raw} found"
            ))
            .code(codes::PROVIDER_NOT_FOUND));
        };
        let given = spec["resource_provider_generation"].as_i64().unwrap_or(-1);
        if given != rp.generation as i64 {
            return Err(ApiError::conflict(format!(
                "resource provider generation conflict for provider {}: actual: {}, given: {given}",
                rp.uuid, rp.generation
            ))
            .code(codes::CONCURRENT_UPDATE));
        }
        let wanted = spec["inventories"].as_object().cloned().unwrap_or_default();
        targets.push((rp, wanted));
    }
    targets.sort_by_key(|(rp, _)| rp.id);

    // Interim inventory: current records overlaid with the new ones, so
    // nothing still allocated disappears before the allocations move.
    for (rp, wanted) in &targets {
        if wanted.is_empty() {
            continue;
        }
        let names: Vec<String> = wanted.keys().cloned().collect();
        let ids = classes::ids(&mut tx, &names).await?.map_err(|rc| {
            ApiError::bad_request(format!(
                "malformed reshaper data: No such resource class {rc}."
            ))
        })?;
        for ((rc, v), class_id) in wanted.iter().zip(ids) {
            let inv = inventory_from(v);
            if let Some(why) = invalid_capacity(&inv, mv, rc, &rp.uuid) {
                return Err(ApiError::bad_request(format!(
                    "malformed reshaper data: {why}"
                )));
            }
            inventories::upsert(&mut tx, rp.id, class_id, &inv).await?;
        }
        // Placement bumps once per inventory step: interim, then final.
        providers::bump_locked(&mut tx, &[rp.id]).await?;
    }

    allocations::write(&mut tx, &writes)
        .await
        .map_err(|e| alloc_error(e, None))?;

    // Final inventory, exactly as given.
    for (rp, wanted) in &targets {
        let wanted: Map<String, Value> = wanted.clone();
        set_inventories(&mut tx, rp, &wanted, mv).await?;
        providers::bump_locked(&mut tx, &[rp.id]).await?;
    }
    tx.commit().await?;
    Ok(StatusCode::NO_CONTENT)
}
