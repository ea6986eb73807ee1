//! What batch placement needs of each reporting provider, loaded into the
//! candidate engine's snapshot (and reloaded with it through the change
//! log): the last report's time and measured usage, and the requests of
//! consumers allocated since that report. Also every policy scope.

use super::{BATCH_MEMORY_MB, BATCH_VCPU_MILLI};
use crate::db::classes::{MEMORY_MB_ID, VCPU_ID};
use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::PgConnection;

/// A provider's last report.
#[derive(Debug, Clone, sqlx::FromRow, serde::Deserialize)]
pub struct ReportRow {
    /// The provider's id.
    pub rp_id: i64,
    /// When it was sampled.
    pub sampled_at: DateTime<Utc>,
    /// The node's measured CPU, milli.
    pub cpu_milli: i64,
    /// The node's measured memory, MB.
    pub memory_mb: i64,
}

/// A consumer allocated on a provider after its last report.
#[derive(Debug, Clone, sqlx::FromRow, serde::Deserialize)]
pub struct PendingRow {
    /// The provider's id.
    pub rp_id: i64,
    /// CPU, milli: VCPU × 1000 plus BATCH_VCPU_MILLI.
    pub cpu_milli: i64,
    /// Memory, MB: MEMORY_MB plus BATCH_MEMORY_MB.
    pub memory_mb: i64,
}

/// The select of [`ReportRow`]s, of every provider or, with `filter` (a
/// further condition on `resource_provider_id`), of some: a row made by a
/// recorded eviction before any report ('-infinity') is no report.
pub(crate) fn reports_sql(filter: &str) -> String {
    format!(
        "SELECT resource_provider_id AS rp_id, last_sampled_at AS sampled_at,
                node_cpu_milli AS cpu_milli, node_memory_mb AS memory_mb
           FROM provider_colocation
          WHERE last_sampled_at > '-infinity' {filter}"
    )
}

/// The select of [`PendingRow`]s, per consumer what was allocated after
/// the provider's last report; `filter` as in [`reports_sql`] (on `a` and
/// `pc`).
/// The class ids are the service's own constants, written into the text.
pub(crate) fn pending_sql(filter: &str) -> String {
    let (vcpu, memory) = (VCPU_ID, MEMORY_MB_ID);
    let (batch_cpu, batch_memory) = (BATCH_VCPU_MILLI.0, BATCH_MEMORY_MB.0);
    format!(
        "SELECT a.resource_provider_id AS rp_id,
                SUM(CASE a.resource_class_id WHEN {vcpu} THEN a.used::bigint * 1000
                                             WHEN {batch_cpu} THEN a.used ELSE 0 END)::bigint AS cpu_milli,
                SUM(CASE a.resource_class_id WHEN {memory} THEN a.used
                                             WHEN {batch_memory} THEN a.used ELSE 0 END)::bigint AS memory_mb
           FROM allocations a
           JOIN provider_colocation pc ON pc.resource_provider_id = a.resource_provider_id
          WHERE a.created_at > pc.last_sampled_at AND pc.last_sampled_at > '-infinity'
            AND a.resource_class_id IN ({vcpu}, {memory}, {batch_cpu}, {batch_memory}) {filter}
          GROUP BY a.resource_provider_id, a.consumer_id"
    )
}

/// Every provider's last report (a provider's own come with the rest of
/// its data, `db::candidates::provider_data`).
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn reports(conn: &mut PgConnection) -> Result<Vec<ReportRow>, sqlx::Error> {
    crate::db::query_as(sqlx::AssertSqlSafe(reports_sql("")))
        .fetch_all(conn)
        .await
}

/// Per consumer, what was allocated on every provider after its last report.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn pending(conn: &mut PgConnection) -> Result<Vec<PendingRow>, sqlx::Error> {
    crate::db::query_as(sqlx::AssertSqlSafe(pending_sql("")))
        .fetch_all(conn)
        .await
}

/// Every stored policy scope: (provider id, None for the cluster; fields).
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn policy_scopes(
    conn: &mut PgConnection,
) -> Result<Vec<(Option<i64>, Value)>, sqlx::Error> {
    crate::db::query_as("SELECT resource_provider_id, policy FROM colocation_policies")
        .fetch_all(conn)
        .await
}
