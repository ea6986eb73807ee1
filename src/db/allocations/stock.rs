//! What the allocation write reads of its locked providers: usage per
//! class, and inventories.

use crate::types::Inventory;
use sqlx::PgConnection;
use std::collections::HashMap;

/// Units used on the providers, per (provider, class).
pub(super) async fn usage(conn: &mut PgConnection, rp_ids: &[i64]) -> Result<Usage, sqlx::Error> {
    let rows: Vec<(i64, i32, i64)> = crate::db::query_as(
        "SELECT resource_provider_id, resource_class_id, SUM(used)::bigint FROM allocations
         WHERE resource_provider_id = ANY($1) GROUP BY 1, 2",
    )
    .bind(rp_ids)
    .fetch_all(conn)
    .await?;
    Ok(rows.into_iter().map(|(rp, rc, n)| ((rp, rc), n)).collect())
}

/// Units used per (provider, class).
pub(super) type Usage = HashMap<(i64, i32), i64>;

/// Inventories per (provider, class).
pub(super) type Inventories = HashMap<(i64, i32), Inventory>;

/// The locked providers' usage and inventories, in one statement: rows
/// with a total are inventories, rows with a sum are usage (a class may
/// be used without inventory, on a provider overcommitted before).
pub(super) async fn usage_and_inventories(
    conn: &mut PgConnection,
    rp_ids: &[i64],
) -> Result<(Usage, Inventories), sqlx::Error> {
    // Each row is one or the other, as `is_inventory` says; the other
    // part is zeros the loop below never reads.
    #[derive(sqlx::FromRow)]
    struct Row {
        resource_provider_id: i64,
        resource_class_id: i32,
        is_inventory: bool,
        #[sqlx(flatten)]
        inventory: Inventory,
        used: i64,
    }
    let rows: Vec<Row> = crate::db::query_as(
        "SELECT resource_provider_id, resource_class_id, true AS is_inventory, total, reserved, min_unit,
                max_unit, step_size, allocation_ratio, 0::bigint AS used
           FROM inventories WHERE resource_provider_id = ANY($1)
         UNION ALL
         SELECT resource_provider_id, resource_class_id, false, 0, 0, 0, 0, 0, 0, SUM(used)::bigint
           FROM allocations WHERE resource_provider_id = ANY($1) GROUP BY 1, 2",
    )
    .bind(rp_ids)
    .fetch_all(conn)
    .await?;
    let (mut usage, mut inventories) = (Usage::new(), Inventories::new());
    for r in rows {
        let key = (r.resource_provider_id, r.resource_class_id);
        if r.is_inventory {
            inventories.insert(key, r.inventory);
        } else {
            usage.insert(key, r.used);
        }
    }
    Ok((usage, inventories))
}
