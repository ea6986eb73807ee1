//! Aggregates and provider membership.

use sqlx::PgConnection;
use uuid::Uuid;

/// A provider's aggregate uuids, in the order they were first created.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn of_provider(conn: &mut PgConnection, rp_id: i64) -> Result<Vec<Uuid>, sqlx::Error> {
    crate::db::query_scalar(
        "SELECT pa.uuid FROM placement_aggregates pa
         JOIN resource_provider_aggregates ra ON ra.aggregate_id = pa.id
         WHERE ra.resource_provider_id = $1 ORDER BY pa.id",
    )
    .bind(rp_id)
    .fetch_all(conn)
    .await
}

/// Replaces a provider's aggregates, creating unknown aggregates on the way.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn set_for_provider(
    conn: &mut PgConnection,
    rp_id: i64,
    aggs: &[Uuid],
) -> Result<(), sqlx::Error> {
    crate::db::query("INSERT INTO placement_aggregates (uuid) SELECT UNNEST($1::uuid[]) ON CONFLICT (uuid) DO NOTHING")
        .bind(aggs)
        .execute(&mut *conn)
        .await?;
    crate::db::query("DELETE FROM resource_provider_aggregates WHERE resource_provider_id = $1")
        .bind(rp_id)
        .execute(&mut *conn)
        .await?;
    crate::db::query(
        "INSERT INTO resource_provider_aggregates (resource_provider_id, aggregate_id)
         SELECT $1, id FROM placement_aggregates WHERE uuid = ANY($2)",
    )
    .bind(rp_id)
    .bind(aggs)
    .execute(conn)
    .await?;
    Ok(())
}

/// Every aggregate's uuid by id.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn uuids_by_id(
    conn: &mut PgConnection,
) -> Result<std::collections::HashMap<i32, Uuid>, sqlx::Error> {
    let rows: Vec<(i32, Uuid)> = crate::db::query_as("SELECT id, uuid FROM placement_aggregates")
        .fetch_all(conn)
        .await?;
    Ok(rows.into_iter().collect())
}
