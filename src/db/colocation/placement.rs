//! What batch placement reads on every low-priority candidates query:
//! each reporting provider's last measurement, the allocations made since
//! it, and every policy scope. Three index-driven statements, whatever the
//! cluster's size.

use super::{BATCH_MEMORY_MB, BATCH_VCPU_MILLI};
use crate::db::classes::{MEMORY_MB_ID, VCPU_ID};
use serde_json::Value;
use sqlx::PgConnection;

/// A provider that has reported: id, whole seconds since its last sample,
/// measured node CPU (milli) and memory (MB).
pub type ReportedHost = (i64, i64, i64, i64);

/// Every provider that has reported usage.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn reported_hosts(conn: &mut PgConnection) -> Result<Vec<ReportedHost>, sqlx::Error> {
    // A provider known only from a recorded eviction has a '-infinity'
    // report time: its age saturates instead of overflowing an interval.
    sqlx::query_as(
        "SELECT resource_provider_id,
                LEAST(floor(EXTRACT(EPOCH FROM now()) - EXTRACT(EPOCH FROM last_sampled_at)), 1e9)::bigint,
                node_cpu_milli, node_memory_mb
           FROM provider_colocation",
    )
    .fetch_all(conn)
    .await
}

/// A request placed since its provider's last report: provider id,
/// consumer id, CPU (milli: VCPU × 1000 plus BATCH_VCPU_MILLI) and memory
/// (MB: MEMORY_MB plus BATCH_MEMORY_MB).
pub type PendingRequest = (i64, i64, i64, i64);

/// The CPU and memory of every consumer's allocations made after its
/// provider's last report and within `horizon_seconds` (older ones sit on
/// providers whose reports have expired, which are refused anyway).
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn pending_requests(
    conn: &mut PgConnection,
    horizon_seconds: i64,
) -> Result<Vec<PendingRequest>, sqlx::Error> {
    sqlx::query_as(
        "SELECT a.resource_provider_id, a.consumer_id,
                SUM(CASE a.resource_class_id WHEN $2 THEN a.used::bigint * 1000 WHEN $4 THEN a.used ELSE 0 END)::bigint,
                SUM(CASE a.resource_class_id WHEN $3 THEN a.used WHEN $5 THEN a.used ELSE 0 END)::bigint
           FROM allocations a
           JOIN provider_colocation pc ON pc.resource_provider_id = a.resource_provider_id
          WHERE a.created_at > now() - make_interval(secs => $1) AND a.created_at > pc.last_sampled_at
            AND a.resource_class_id IN ($2, $3, $4, $5)
          GROUP BY a.resource_provider_id, a.consumer_id",
    )
    .bind(horizon_seconds as f64)
    .bind(VCPU_ID)
    .bind(MEMORY_MB_ID)
    .bind(BATCH_VCPU_MILLI.0)
    .bind(BATCH_MEMORY_MB.0)
    .fetch_all(conn)
    .await
}

/// Every stored policy scope: (provider id, None for the cluster; fields).
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn policy_scopes(
    conn: &mut PgConnection,
) -> Result<Vec<(Option<i64>, Value)>, sqlx::Error> {
    sqlx::query_as("SELECT resource_provider_id, policy FROM colocation_policies")
        .fetch_all(conn)
        .await
}
