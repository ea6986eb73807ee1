//! Inventories of providers and the in-use checks around them.

use crate::types::Inventory;
use chrono::{DateTime, Utc};
use sqlx::PgConnection;

/// An inventory record with its class name and timestamps.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct InventoryRow {
    /// Class id.
    pub resource_class_id: i32,
    /// Class name.
    pub resource_class: String,
    /// Its capacity fields.
    #[sqlx(flatten)]
    pub inventory: Inventory,
    /// Creation time.
    pub created_at: Option<DateTime<Utc>>,
    /// Last update time.
    pub updated_at: Option<DateTime<Utc>>,
}

/// A provider's inventories, by class id.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn of_provider(
    conn: &mut PgConnection,
    rp_id: i64,
) -> Result<Vec<InventoryRow>, sqlx::Error> {
    crate::db::query_as(
        "SELECT i.resource_class_id, c.name AS resource_class, i.total, i.reserved, i.min_unit,
                i.max_unit, i.step_size, i.allocation_ratio, i.created_at, i.updated_at
         FROM inventories i JOIN resource_classes c ON c.id = i.resource_class_id
         WHERE i.resource_provider_id = $1 ORDER BY i.resource_class_id",
    )
    .bind(rp_id)
    .fetch_all(conn)
    .await
}

/// Inserts or updates one record.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn upsert(
    conn: &mut PgConnection,
    rp_id: i64,
    class_id: i32,
    inv: &Inventory,
) -> Result<(), sqlx::Error> {
    crate::db::query(
        "INSERT INTO inventories (resource_provider_id, resource_class_id, total, reserved, min_unit,
                                  max_unit, step_size, allocation_ratio)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
         ON CONFLICT (resource_provider_id, resource_class_id) DO UPDATE SET
            total = EXCLUDED.total, reserved = EXCLUDED.reserved, min_unit = EXCLUDED.min_unit,
            max_unit = EXCLUDED.max_unit, step_size = EXCLUDED.step_size,
            allocation_ratio = EXCLUDED.allocation_ratio, updated_at = now()",
    )
    .bind(rp_id)
    .bind(class_id)
    .bind(inv.total)
    .bind(inv.reserved)
    .bind(inv.min_unit)
    .bind(inv.max_unit)
    .bind(inv.step_size)
    .bind(inv.allocation_ratio)
    .execute(conn)
    .await?;
    Ok(())
}

/// Deletes the records of the given classes.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn delete(
    conn: &mut PgConnection,
    rp_id: i64,
    class_ids: &[i32],
) -> Result<(), sqlx::Error> {
    crate::db::query(
        "DELETE FROM inventories WHERE resource_provider_id = $1 AND resource_class_id = ANY($2)",
    )
    .bind(rp_id)
    .bind(class_ids)
    .execute(conn)
    .await?;
    Ok(())
}

/// The classes among `class_ids` that have allocations on the provider, in
/// class id order (standard classes first, in their standard order), the
/// order Placement's messages list them in.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn classes_in_use(
    conn: &mut PgConnection,
    rp_id: i64,
    class_ids: &[i32],
) -> Result<Vec<String>, sqlx::Error> {
    crate::db::query_scalar(
        "SELECT c.name FROM resource_classes c
         WHERE c.id = ANY($2) AND EXISTS (SELECT 1 FROM allocations a
               WHERE a.resource_provider_id = $1 AND a.resource_class_id = c.id)
         ORDER BY c.id",
    )
    .bind(rp_id)
    .bind(class_ids)
    .fetch_all(conn)
    .await
}
