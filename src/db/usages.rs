//! Usages: sums of allocations per provider, or per project/user/type.

use sqlx::PgConnection;

/// Units used per class name on a provider, one entry per inventory class (0 if unused).
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn of_provider(
    conn: &mut PgConnection,
    rp_id: i64,
) -> Result<Vec<(String, i64)>, sqlx::Error> {
    crate::db::query_as(
        "SELECT c.name, COALESCE((SELECT SUM(a.used) FROM allocations a
                 WHERE a.resource_provider_id = i.resource_provider_id
                   AND a.resource_class_id = i.resource_class_id), 0)::bigint
         FROM inventories i JOIN resource_classes c ON c.id = i.resource_class_id
         WHERE i.resource_provider_id = $1 ORDER BY i.resource_class_id",
    )
    .bind(rp_id)
    .fetch_all(conn)
    .await
}

/// One row of project usage: consumer type (None = untyped), class, units, consumers.
#[derive(Debug, sqlx::FromRow)]
pub struct ProjectUsage {
    /// Consumer type name, None for untyped consumers.
    pub consumer_type: Option<String>,
    /// Resource class name.
    pub resource_class: String,
    /// Units used.
    pub used: i64,
}

/// Usage of a project (and optionally a user), grouped by class and
/// consumer type, in Placement's order: class id, then type id with the
/// untyped first (MySQL's order for its `GROUP BY`).
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn of_project(
    conn: &mut PgConnection,
    project: &str,
    user: Option<&str>,
) -> Result<Vec<ProjectUsage>, sqlx::Error> {
    crate::db::query_as(
        "SELECT ct.name AS consumer_type, rc.name AS resource_class, SUM(a.used)::bigint AS used
         FROM allocations a
         JOIN consumers c ON c.id = a.consumer_id
         JOIN projects p ON p.id = c.project_id
         JOIN users u ON u.id = c.user_id
         JOIN resource_classes rc ON rc.id = a.resource_class_id
         LEFT JOIN consumer_types ct ON ct.id = c.consumer_type_id
         WHERE p.external_id = $1 AND ($2::text IS NULL OR u.external_id = $2)
         GROUP BY rc.id, ct.id
         ORDER BY rc.id, ct.id NULLS FIRST",
    )
    .bind(project)
    .bind(user)
    .fetch_all(conn)
    .await
}

/// Number of consumers with allocations per consumer type (None = untyped).
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn consumer_counts(
    conn: &mut PgConnection,
    project: &str,
    user: Option<&str>,
) -> Result<Vec<(Option<String>, i64)>, sqlx::Error> {
    crate::db::query_as(
        "SELECT ct.name, COUNT(DISTINCT c.id)::bigint
         FROM consumers c
         JOIN projects p ON p.id = c.project_id
         JOIN users u ON u.id = c.user_id
         LEFT JOIN consumer_types ct ON ct.id = c.consumer_type_id
         WHERE p.external_id = $1 AND ($2::text IS NULL OR u.external_id = $2)
           AND EXISTS (SELECT 1 FROM allocations a WHERE a.consumer_id = c.id)
         GROUP BY ct.name",
    )
    .bind(project)
    .bind(user)
    .fetch_all(conn)
    .await
}
