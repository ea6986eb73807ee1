//! Per-project reservations on a provider: capacity that only the project
//! and its sub-projects may allocate. Generation-checked and bumping the
//! provider generation, like inventories. A reservation counts as the
//! project's consumption whether used or not, so it must fit the
//! project's limits; together with other projects' reservations it must
//! fit the inventory (400), and it cannot take capacity others already use
//! (409).

use super::{class_ids, project_row, Amounts};
use crate::db::allocations::AllocError;
use crate::db::{fairness as db, inventories, providers};
use crate::error::{codes, Error, Result};
use crate::types::GivenGeneration;
use serde::{Deserialize, Serialize};
use sqlx::PgConnection;
use std::collections::HashMap;
use utoipa::ToSchema;

/// `PUT /resource_providers/{uuid}/project_reservations/{project_id}`.
#[derive(Debug, Deserialize, ToSchema)]
pub struct ReservationPut {
    /// The provider generation the client last saw.
    #[schema(value_type = i64)]
    pub resource_provider_generation: GivenGeneration,
    /// Units reserved by class (replaces the project's reservations here).
    pub resources: Amounts,
}

/// One project's reservations on a provider.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ReservationView {
    /// The provider's generation.
    pub resource_provider_generation: i32,
    /// Units reserved by class.
    pub resources: Amounts,
}

/// A project's reservations on a provider.
pub async fn show(
    conn: &mut PgConnection,
    rp: &providers::ProviderRow,
    project: &str,
) -> Result<ReservationView> {
    let resources = match db::project_id(conn, project).await? {
        Some(id) => db::reservations(conn, rp.id, id).await?,
        None => Amounts::new(),
    };
    Ok(ReservationView {
        resource_provider_generation: rp.generation,
        resources,
    })
}

/// Replaces a project's reservations on a locked provider (an empty map
/// removes them), inside the caller's transaction. The project and its
/// ancestors are locked after the provider, as allocation writes do.
pub async fn replace(
    conn: &mut PgConnection,
    rp: &providers::ProviderRow,
    project: &str,
    body: &ReservationPut,
) -> Result<ReservationView> {
    if !body.resource_provider_generation.matches(rp.generation) {
        return Err(Error::inventory_generation_conflict());
    }
    let id = project_row(conn, project).await?;
    let names: Vec<String> = body.resources.keys().cloned().collect();
    let ids = class_ids(conn, &names).await?;
    let before = db::unused_reservations(conn, Some(&[rp.id]), None).await?;
    fits_inventory(conn, rp, id, &body.resources, &ids).await?;
    let lineage = db::lineage(conn, id).await?;
    db::lock_projects(conn, &lineage).await?;
    let class_list: Vec<i32> = ids.values().copied().collect();
    let consumed_before = db::consumption(conn, &lineage, Some(&class_list)).await?;
    let rows: Vec<(i32, i32)> = body
        .resources
        .iter()
        .map(|(c, n)| Ok((ids[c], i32::try_from(*n).map_err(|_| too_large(c))?)))
        .collect::<Result<_>>()?;
    db::replace_reservations(conn, rp.id, id, &rows).await?;
    not_taken_from_others(conn, rp, &ids, &before).await?;
    within_limits(conn, project, &ids, &consumed_before).await?;
    providers::bump_locked(conn, &[rp.id]).await?;
    Ok(ReservationView {
        resource_provider_generation: rp.generation + 1,
        resources: db::reservations(conn, rp.id, id).await?,
    })
}

fn too_large(class: &str) -> Error {
    Error::invalid(format!(
        "The reservation of {class} is larger than its inventory."
    ))
}

/// 400 unless every class has inventory here and all projects'
/// reservations together fit its capacity.
async fn fits_inventory(
    conn: &mut PgConnection,
    rp: &providers::ProviderRow,
    project: i32,
    wanted: &Amounts,
    ids: &HashMap<String, i32>,
) -> Result<()> {
    let inventories = inventories::of_provider(conn, rp.id).await?;
    let others = db::reserved_by_others(conn, rp.id, project).await?;
    for (class, n) in wanted {
        let Some(inv) = inventories.iter().find(|i| &i.resource_class == class) else {
            return Err(Error::invalid(format!(
                "Resource provider {} has no inventory of {class} to reserve.",
                rp.uuid
            )));
        };
        let total = others.get(&ids[class]).copied().unwrap_or(0) + n;
        if total as f64 > inv.inventory.capacity() {
            return Err(Error::invalid(format!(
                "Reservations of {class} on resource provider {} would total {total}, above its capacity of {}.",
                rp.uuid,
                inv.inventory.capacity_int()
            )));
        }
    }
    Ok(())
}

/// 409 when the new reservation claims capacity that others already use.
async fn not_taken_from_others(
    conn: &mut PgConnection,
    rp: &providers::ProviderRow,
    ids: &HashMap<String, i32>,
    before: &HashMap<(i64, i32), i64>,
) -> Result<()> {
    let after = db::unused_reservations(conn, Some(&[rp.id]), None).await?;
    let used = db::provider_usage(conn, rp.id).await?;
    let inventories = inventories::of_provider(conn, rp.id).await?;
    for inv in &inventories {
        let Some(&class) = ids.get(&inv.resource_class) else {
            continue;
        };
        let u = used.get(&class).copied().unwrap_or(0);
        let now = u + after.get(&(rp.id, class)).copied().unwrap_or(0);
        let was = u + before.get(&(rp.id, class)).copied().unwrap_or(0);
        if now as f64 > inv.inventory.capacity() && now > was {
            return Err(Error::conflict(format!(
                "Unable to reserve {} on resource provider {}: the capacity is in use by other projects.",
                inv.resource_class, rp.uuid
            ))
            .code(codes::RESERVATION_UNAVAILABLE));
        }
    }
    Ok(())
}

/// 409 placement.quota.exceeded when the reservation takes the project (or
/// an ancestor) over a limit.
async fn within_limits(
    conn: &mut PgConnection,
    project: &str,
    ids: &HashMap<String, i32>,
    before: &HashMap<(i32, i32), i64>,
) -> Result<()> {
    let classes: Vec<i32> = ids.values().copied().collect();
    let names: Vec<String> = ids.keys().cloned().collect();
    let limits = db::limits_over(conn, &[project.to_string()], &names).await?;
    if limits.is_empty() {
        return Ok(());
    }
    let lineage: Vec<i32> = limits.iter().map(|l| l.project).collect();
    let after = db::consumption(conn, &lineage, Some(&classes)).await?;
    for l in limits {
        let now = after.get(&(l.project, l.class)).copied().unwrap_or(0);
        let was = before.get(&(l.project, l.class)).copied().unwrap_or(0);
        if now > l.limit && now > was {
            let e = AllocError::Quota {
                project: l.project_id,
                class: l.resource_class,
                limit: l.limit,
                before: was,
                after: now,
            };
            return Err(Error::conflict(e.to_string()).code(codes::QUOTA_EXCEEDED));
        }
    }
    Ok(())
}

/// Removes a project's reservations on a locked provider; false when it had none.
pub async fn remove(
    conn: &mut PgConnection,
    rp: &providers::ProviderRow,
    project: &str,
) -> Result<bool> {
    let Some(id) = db::project_id(conn, project).await? else {
        return Ok(false);
    };
    if db::reservations(conn, rp.id, id).await?.is_empty() {
        return Ok(false);
    }
    db::replace_reservations(conn, rp.id, id, &[]).await?;
    providers::bump_locked(conn, &[rp.id]).await?;
    Ok(true)
}
