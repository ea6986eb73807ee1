//! Loads the [`Snapshot`] a candidates request needs: every tree holding
//! inventory of a requested class, and every tree a sharing provider of such
//! a class shares with, in a handful of queries inside one repeatable-read
//! transaction, so the answer reflects exactly the writes committed before it.
//!
//! Chosen over a per-process cache because it is trivially correct across
//! several server processes; the cost is a few indexed queries per request.

use crate::candidates::snapshot::{Node, Snapshot, Stock};
use crate::types::MISC_SHARES_VIA_AGGREGATE;
use sqlx::PgConnection;
use std::collections::HashMap;

/// Loads the snapshot for the given requested class ids.
pub async fn load(conn: &mut PgConnection, classes: &[i32]) -> Result<Snapshot, sqlx::Error> {
    let sharing: Option<i32> = sqlx::query_scalar("SELECT id FROM traits WHERE name = $1")
        .bind(MISC_SHARES_VIA_AGGREGATE)
        .fetch_optional(&mut *conn)
        .await?;
    let roots: Vec<i64> = sqlx::query_scalar(
        "SELECT DISTINCT rp.root_provider_id FROM inventories i
           JOIN resource_providers rp ON rp.id = i.resource_provider_id
          WHERE i.resource_class_id = ANY($1)
         UNION
         SELECT DISTINCT rp2.root_provider_id FROM inventories i
           JOIN resource_provider_traits t ON t.resource_provider_id = i.resource_provider_id AND t.trait_id = $2
           JOIN resource_provider_aggregates ra ON ra.resource_provider_id = i.resource_provider_id
           JOIN resource_provider_aggregates ra2 ON ra2.aggregate_id = ra.aggregate_id
           JOIN resource_providers rp2 ON rp2.id = ra2.resource_provider_id
          WHERE i.resource_class_id = ANY($1)",
    )
    .bind(classes)
    .bind(sharing.unwrap_or(-1))
    .fetch_all(&mut *conn)
    .await?;
    let rows: Vec<(i64, uuid::Uuid, Option<i64>, i64)> = sqlx::query_as(
        "SELECT id, uuid, parent_provider_id, root_provider_id FROM resource_providers
          WHERE root_provider_id = ANY($1) ORDER BY id",
    )
    .bind(&roots)
    .fetch_all(&mut *conn)
    .await?;
    let ids: Vec<i64> = rows.iter().map(|r| r.0).collect();
    let index: HashMap<i64, usize> = ids.iter().enumerate().map(|(i, id)| (*id, i)).collect();
    let mut nodes: Vec<Node> = rows
        .iter()
        .map(|&(id, uuid, parent, root)| Node {
            id,
            uuid,
            parent: parent.and_then(|p| index.get(&p).copied()),
            root: index.get(&root).copied().unwrap_or_default(),
            traits: Vec::new(),
            aggs: Vec::new(),
            stock: Vec::new(),
        })
        .collect();
    type StockRow = (i64, i32, i32, i32, i32, i32, i32, f64, i64);
    let stock: Vec<StockRow> = sqlx::query_as(
        "SELECT i.resource_provider_id, i.resource_class_id, i.total, i.reserved, i.min_unit, i.max_unit,
                i.step_size, i.allocation_ratio, COALESCE(u.used, 0)::bigint
           FROM inventories i
           LEFT JOIN (SELECT resource_provider_id, resource_class_id, SUM(used) AS used FROM allocations
                       WHERE resource_provider_id = ANY($1) GROUP BY 1, 2) u
             ON u.resource_provider_id = i.resource_provider_id AND u.resource_class_id = i.resource_class_id
          WHERE i.resource_provider_id = ANY($1)
          ORDER BY i.resource_provider_id, i.resource_class_id",
    )
    .bind(&ids)
    .fetch_all(&mut *conn)
    .await?;
    for (rp, class, total, reserved, min_unit, max_unit, step_size, ratio, used) in stock {
        if let Some(&i) = index.get(&rp) {
            nodes[i].stock.push(Stock {
                class,
                total: total.into(),
                reserved: reserved.into(),
                min_unit: min_unit.into(),
                max_unit: max_unit.into(),
                step_size: step_size.into(),
                allocation_ratio: ratio,
                used,
            });
        }
    }
    let traits: Vec<(i64, i32, String)> = sqlx::query_as(
        "SELECT r.resource_provider_id, r.trait_id, t.name FROM resource_provider_traits r
           JOIN traits t ON t.id = r.trait_id WHERE r.resource_provider_id = ANY($1)
          ORDER BY r.resource_provider_id, r.trait_id",
    )
    .bind(&ids)
    .fetch_all(&mut *conn)
    .await?;
    let mut trait_names = HashMap::new();
    for (rp, t, name) in traits {
        if let Some(&i) = index.get(&rp) {
            nodes[i].traits.push(t);
        }
        trait_names.insert(t, name);
    }
    let aggs: Vec<(i64, i32)> = sqlx::query_as(
        "SELECT resource_provider_id, aggregate_id FROM resource_provider_aggregates
          WHERE resource_provider_id = ANY($1) ORDER BY resource_provider_id, aggregate_id",
    )
    .bind(&ids)
    .fetch_all(&mut *conn)
    .await?;
    for (rp, a) in aggs {
        if let Some(&i) = index.get(&rp) {
            nodes[i].aggs.push(a);
        }
    }
    let any_nested: bool = sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM resource_providers WHERE parent_provider_id IS NOT NULL)",
    )
    .fetch_one(&mut *conn)
    .await?;
    let class_names: Vec<(i32, String)> = sqlx::query_as("SELECT id, name FROM resource_classes")
        .fetch_all(&mut *conn)
        .await?;
    let mut snap = Snapshot {
        nodes,
        by_uuid: HashMap::new(),
        sharing_trait: sharing,
        any_nested,
        class_names: class_names.into_iter().collect(),
        trait_names,
    };
    snap.index();
    Ok(snap)
}

/// Aggregate ids of the given uuids (unknown uuids are left out).
pub async fn aggregate_ids(
    conn: &mut PgConnection,
    uuids: &[uuid::Uuid],
) -> Result<HashMap<uuid::Uuid, i32>, sqlx::Error> {
    let rows: Vec<(i32, uuid::Uuid)> =
        sqlx::query_as("SELECT id, uuid FROM placement_aggregates WHERE uuid = ANY($1)")
            .bind(uuids)
            .fetch_all(conn)
            .await?;
    Ok(rows.into_iter().map(|(id, u)| (u, id)).collect())
}

/// Starts the read-only, repeatable-read transaction a candidates request runs in.
pub async fn begin_snapshot(
    pool: &sqlx::PgPool,
) -> Result<sqlx::Transaction<'static, sqlx::Postgres>, sqlx::Error> {
    let mut tx = pool.begin().await?;
    sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
        .execute(&mut *tx)
        .await?;
    Ok(tx)
}
