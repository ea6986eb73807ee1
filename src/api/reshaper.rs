//! `POST /reshaper` (1.30+): move inventories and allocations across a
//! provider tree in one transaction.

use super::extract::JsonBody;
use super::microversion::Microversion;
use super::schema;
use super::schema::allocations::writes_from_map;
use super::schema::bodies::{InventoriesPut, Ordered, Reshape};
use crate::api::respond::{codes, ApiResult};
use crate::db::providers::ProviderRow;
use crate::db::{allocations, classes, inventories, providers};
use crate::error::{with_retries, Error, Result};
use crate::inventory::{invalid_capacity, set_inventories};
use crate::state::AppState;
use crate::types::parse_uuid_like;
use crate::types::ConsumerWrite;
use crate::types::Inventory;
use axum::extract::State;
use axum::http::StatusCode;
use sqlx::PgConnection;
use uuid::Uuid;

/// `POST /reshaper`: one transaction, run again when it loses a database race.
pub async fn reshape(
    State(st): State<AppState>,
    mv: Microversion,
    body: JsonBody,
) -> ApiResult<StatusCode> {
    let b: Reshape = body.parse(&schema::reshaper(mv))?;
    let writes = writes_from_map(&b.allocations, mv, &st.settings);
    let inv_map = &b.inventories;
    with_retries(st.settings.allocation_conflict_retry_count, || {
        reshape_once(&st, inv_map, &writes, mv)
    })
    .await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Every provider the reshape names, locked in id order before anything is
/// read, then checked: each inventory target must exist and match its
/// generation. Returns the targets with their new records, by id.
async fn lock_targets(
    tx: &mut PgConnection,
    inv_map: &Ordered<InventoriesPut>,
    writes: &[ConsumerWrite],
) -> Result<Vec<(ProviderRow, Vec<(String, Inventory)>)>> {
    let mut named: Vec<Uuid> = inv_map
        .0
        .iter()
        .filter_map(|(k, _)| parse_uuid_like(k))
        .collect();
    named.extend(writes.iter().flat_map(|w| w.allocations.keys().copied()));
    named.sort_unstable();
    named.dedup();
    let locked = providers::lock_many(tx, &named).await?;
    let mut targets = Vec::new();
    for (raw, spec) in &inv_map.0 {
        let rp = parse_uuid_like(raw).and_then(|u| locked.iter().find(|rp| rp.uuid == u));
        let Some(rp) = rp else {
            return Err(Error::invalid(format!(
                "Resource provider {raw} in inventories not found: No resource provider with uuid {raw} found"
            ))
            .code(codes::PROVIDER_NOT_FOUND));
        };
        let given = &spec.resource_provider_generation;
        if !given.matches(rp.generation) {
            return Err(Error::conflict(format!(
                "resource provider generation conflict for provider {}: actual: {}, given: {given}",
                rp.uuid, rp.generation
            ))
            .code(codes::CONCURRENT_UPDATE));
        }
        targets.push((rp.clone(), spec.records()));
    }
    targets.sort_by_key(|(rp, _)| rp.id);
    Ok(targets)
}

async fn reshape_once(
    st: &AppState,
    inv_map: &Ordered<InventoriesPut>,
    writes: &[ConsumerWrite],
    mv: Microversion,
) -> Result<()> {
    let mut tx = st.pool.begin().await?;
    let targets = lock_targets(&mut tx, inv_map, writes).await?;
    allocations::check_generations(&mut tx, writes)
        .await
        .map_err(|e| e.into_error(None))?;

    // Interim inventory: current records overlaid with the new ones, so
    // nothing still allocated disappears before the allocations move.
    for (rp, wanted) in &targets {
        if wanted.is_empty() {
            continue;
        }
        let names: Vec<String> = wanted.iter().map(|(rc, _)| rc.clone()).collect();
        let ids = classes::ids(&mut tx, &names).await?.map_err(|rc| {
            Error::invalid(format!(
                "malformed reshaper data: No such resource class {rc}."
            ))
        })?;
        for ((rc, inv), class_id) in wanted.iter().zip(ids) {
            if let Some(why) = invalid_capacity(inv, mv.at_least(1, 26), rc, &rp.uuid) {
                return Err(Error::invalid(format!("malformed reshaper data: {why}")));
            }
            inventories::upsert(&mut tx, rp.id, class_id, inv).await?;
        }
        // Placement bumps once per inventory step: interim, then final.
        providers::bump_locked(&mut tx, &[rp.id]).await?;
    }

    allocations::write(&mut tx, writes)
        .await
        .map_err(|e| e.into_error(None))?;

    // Final inventory, exactly as given.
    for (rp, wanted) in &targets {
        set_inventories(&mut tx, rp, wanted, mv.at_least(1, 26)).await?;
        providers::bump_locked(&mut tx, &[rp.id]).await?;
    }
    tx.commit().await.map_err(Error::commit_failed)
}
