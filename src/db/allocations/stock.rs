//! What the allocation write reads of its locked providers: usage per
//! class, and inventories.

use crate::db::inventories::Inventory;
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
    #[derive(sqlx::FromRow)]
    struct Row {
        resource_provider_id: i64,
        resource_class_id: i32,
        total: Option<i32>,
        reserved: i32,
        min_unit: i32,
        max_unit: i32,
        step_size: i32,
        allocation_ratio: f64,
        used: Option<i64>,
    }
    let rows: Vec<Row> = crate::db::query_as(
        "SELECT resource_provider_id, resource_class_id, total, reserved, min_unit, max_unit, step_size,
                allocation_ratio, NULL::bigint AS used
           FROM inventories WHERE resource_provider_id = ANY($1)
         UNION ALL
         SELECT resource_provider_id, resource_class_id, NULL, 0, 0, 0, 0, 0, SUM(used)::bigint
           FROM allocations WHERE resource_provider_id = ANY($1) GROUP BY 1, 2",
    )
    .bind(rp_ids)
    .fetch_all(conn)
    .await?;
    let (mut usage, mut inventories) = (Usage::new(), Inventories::new());
    for r in rows {
        let key = (r.resource_provider_id, r.resource_class_id);
        if let Some(used) = r.used {
            usage.insert(key, used);
        }
        if let Some(total) = r.total {
            inventories.insert(
                key,
                Inventory {
                    total,
                    reserved: r.reserved,
                    min_unit: r.min_unit,
                    max_unit: r.max_unit,
                    step_size: r.step_size,
                    allocation_ratio: r.allocation_ratio,
                },
            );
        }
    }
    Ok((usage, inventories))
}
