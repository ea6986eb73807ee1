//! Inventory rules and the replace-all write shared by the inventories
//! handlers and the reshaper.

use crate::db::inventories::{self, InventoryRow};
use crate::db::{classes, providers};
use crate::error::{codes, Error, Result};
use crate::types::Inventory;
use sqlx::PgConnection;

/// Why an inventory's capacity is invalid, if it is (from microversion 1.26
/// reserved may equal total).
pub fn invalid_capacity(
    inv: &Inventory,
    reserved_may_equal_total: bool,
    rc: &str,
    rp: &uuid::Uuid,
) -> Option<String> {
    let cap = inv.capacity_int();
    if reserved_may_equal_total {
        (cap < 0 || inv.reserved > inv.total).then(|| {
            format!("Invalid inventory for '{rc}' on resource provider '{rp}'. The reserved value is greater than total.")
        })
    } else {
        (cap <= 0 || inv.reserved >= inv.total).then(|| {
            format!("Invalid inventory for '{rc}' on resource provider '{rp}'. The reserved value is greater than or equal to total.")
        })
    }
}

/// The 409 text for classes that still have allocations.
pub fn in_use(rcs: &[String], rp: &uuid::Uuid) -> String {
    format!(
        "update conflict: Inventory for '{}' on resource provider '{rp}' in use.",
        rcs.join(", ")
    )
}

/// Whether the server computes this class's inventory from usage reports
/// (the batch ledger of §C.3): clients never write it.
pub fn server_owned(rc: &str) -> bool {
    crate::types::BATCH_CLASSES.contains(&rc)
}

/// 400 for a single-class write of a server-owned class.
pub fn refuse_server_owned(rc: &str, rp: &uuid::Uuid) -> Result<()> {
    if server_owned(rc) {
        return Err(Error::invalid(format!(
            "Inventory of {rc} on resource provider {rp} is computed by the server from usage reports; it cannot be written."
        )));
    }
    Ok(())
}

/// Replaces a locked provider's inventories with `wanted` (class → record),
/// refusing to remove classes in use. Shared with the reshaper. The
/// server-owned batch rows are neither written nor removed: a client
/// that knows nothing of them (Nova) replaces its own classes, and one
/// that sends back what it read does not overwrite a newer total.
pub async fn set_inventories(
    conn: &mut PgConnection,
    rp: &providers::ProviderRow,
    wanted: &[(String, Inventory)],
    reserved_may_equal_total: bool,
) -> Result<Vec<InventoryRow>> {
    let wanted: Vec<&(String, Inventory)> =
        wanted.iter().filter(|(rc, _)| !server_owned(rc)).collect();
    let names: Vec<String> = wanted.iter().map(|(rc, _)| rc.clone()).collect();
    let ids = classes::ids(conn, &names).await?.map_err(|rc| {
        Error::invalid(format!(
            "Unknown resource class in inventory for resource provider {}: No such resource class {rc}.",
            rp.uuid
        ))
    })?;
    let mut records = Vec::new();
    for ((rc, inv), class_id) in wanted.into_iter().zip(ids) {
        if let Some(why) = invalid_capacity(inv, reserved_may_equal_total, rc, &rp.uuid) {
            return Err(Error::invalid(format!(
                "Unable to update inventory for resource provider {}: {why}",
                rp.uuid
            )));
        }
        records.push((class_id, *inv));
    }
    let current = inventories::of_provider(conn, rp.id).await?;
    let removed: Vec<i32> = current
        .iter()
        .filter(|r| !server_owned(&r.resource_class))
        .map(|r| r.resource_class_id)
        .filter(|c| !records.iter().any(|(id, _)| id == c))
        .collect();
    let busy = inventories::classes_in_use(conn, rp.id, &removed).await?;
    if !busy.is_empty() {
        return Err(Error::conflict(in_use(&busy, &rp.uuid)).code(codes::INVENTORY_INUSE));
    }
    inventories::delete(conn, rp.id, &removed).await?;
    for (class_id, inv) in &records {
        inventories::upsert(conn, rp.id, *class_id, inv).await?;
    }
    Ok(inventories::of_provider(conn, rp.id).await?)
}
