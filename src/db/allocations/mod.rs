//! Allocations: reads by consumer and by provider, and the two paths that write them: the detailed write
//! (`detailed.rs`) used by PUT/POST /allocations, the reshaper, deployments
//! and queue rounds, and the claim of new consumers in one statement
//! (`claim.rs`), whose rules are declared once in `rules.rs`.
//!
//! Concurrency: the write locks every provider that receives allocations
//! (`FOR UPDATE`, in id order) before it reads usage, so concurrent writers
//! from any number of server processes serialise per provider and capacity
//! can never be overcommitted. Consumers are locked too, so consumer
//! generations are compared and bumped atomically.

use super::consumers;

mod bound_shares;
mod claim;
mod detailed;
mod fairness_checks;
mod priority_classes;
pub mod rules;
pub use rules::AllocError;
mod stock;
use crate::types::{ConsumerWrite, GenerationCheck};
use chrono::{DateTime, Utc};
use claim::Claim;
pub use detailed::{check_generations, write, write_checking};
use sqlx::PgConnection;
use std::collections::HashMap;
use uuid::Uuid;

/// One allocation row with names resolved.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct AllocationRow {
    /// Provider uuid.
    pub provider_uuid: Uuid,
    /// Provider generation.
    pub provider_generation: i32,
    /// Consumer uuid.
    pub consumer_uuid: Uuid,
    /// Consumer generation.
    pub consumer_generation: i32,
    /// Resource class name.
    pub resource_class: String,
    /// Units.
    pub used: i32,
    /// Creation time.
    pub created_at: Option<DateTime<Utc>>,
    /// Last update time.
    pub updated_at: Option<DateTime<Utc>>,
}

const SELECT: &str = "SELECT rp.uuid AS provider_uuid, rp.generation AS provider_generation,
        c.uuid AS consumer_uuid, c.generation AS consumer_generation, rc.name AS resource_class,
        a.used, a.created_at, a.updated_at
    FROM allocations a
    JOIN resource_providers rp ON rp.id = a.resource_provider_id
    JOIN consumers c ON c.id = a.consumer_id
    JOIN resource_classes rc ON rc.id = a.resource_class_id";

/// A consumer's allocations in the order they were written (Placement's
/// order: its rows in id order, as its index on the consumer gives them).
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn of_consumer(
    conn: &mut PgConnection,
    consumer: Uuid,
) -> Result<Vec<AllocationRow>, sqlx::Error> {
    crate::db::query_as(sqlx::AssertSqlSafe(format!(
        "{SELECT} WHERE c.uuid = $1 ORDER BY a.id"
    )))
    .bind(consumer)
    .fetch_all(conn)
    .await
}

/// A provider's allocations, ordered by consumer (oldest first) then
/// class, as Placement on MariaDB answers; an import writes the source's
/// consumers in their order, so the old service's order carries over.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn of_provider(
    conn: &mut PgConnection,
    rp_id: i64,
) -> Result<Vec<AllocationRow>, sqlx::Error> {
    crate::db::query_as(sqlx::AssertSqlSafe(format!(
        "{SELECT} WHERE a.resource_provider_id = $1 ORDER BY c.id, rc.id"
    )))
    .bind(rp_id)
    .fetch_all(conn)
    .await
}

/// Consumer uuid → id.
pub type ConsumerIds = HashMap<Uuid, i64>;

/// Whether `write` may be claimed (see [`claim`]), as far as the write
/// itself says.
pub fn claimable(write: &ConsumerWrite) -> bool {
    claim::claimable(write)
}

/// Writes the claims of several new consumers in one statement (atomic on
/// its own, or inside the caller's transaction), all or nothing: true when
/// written, false (nothing written) when any of them needs the detailed
/// path ([`write`]), which then runs each on its own. Locks the
/// providers as [`write`] does.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn claim(conn: &mut PgConnection, writes: &[ConsumerWrite]) -> Result<bool, AllocError> {
    let Some(claim) = Claim::of(writes) else {
        return Ok(false);
    };
    Ok(claim.write(conn).await?.is_some())
}

/// Deletes all of a consumer's allocations and the consumer; false when it had none.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn delete_consumer(conn: &mut PgConnection, consumer: Uuid) -> Result<bool, sqlx::Error> {
    let Some(c) = consumers::get_for_update(conn, consumer).await? else {
        return Ok(false);
    };
    let n = crate::db::query("DELETE FROM allocations WHERE consumer_id = $1")
        .bind(c.id)
        .execute(&mut *conn)
        .await?
        .rows_affected();
    consumers::delete(conn, c.id).await?;
    Ok(n > 0)
}
