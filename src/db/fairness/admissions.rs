//! Decline filters and the audit rows of admission rounds.

use sqlx::PgConnection;

/// Records a decline filter for `seconds`.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn insert_decline(
    conn: &mut PgConnection,
    project: i32,
    user: Option<&str>,
    provider: i64,
    resources: &serde_json::Value,
    seconds: f64,
) -> Result<chrono::DateTime<chrono::Utc>, sqlx::Error> {
    crate::db::query_scalar(
        "INSERT INTO decline_filters (project_id, user_id, resource_provider_id, resources, expires_at)
         VALUES ($1, $2, $3, $4, now() + make_interval(secs => $5)) RETURNING expires_at",
    )
    .bind(project)
    .bind(user)
    .bind(provider)
    .bind(resources)
    .bind(seconds)
    .fetch_one(conn)
    .await
}

/// Clears a project's decline filters (one user's when named); the count removed.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn revive(
    conn: &mut PgConnection,
    project: i32,
    user: Option<&str>,
) -> Result<u64, sqlx::Error> {
    Ok(crate::db::query(
        "DELETE FROM decline_filters WHERE project_id = $1 AND ($2::text IS NULL OR user_id = $2)",
    )
    .bind(project)
    .bind(user)
    .execute(conn)
    .await?
    .rows_affected())
}

/// An active decline filter.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct DeclineRow {
    /// The declining project (external id).
    pub project: String,
    /// The declining user, if only theirs.
    pub user_id: Option<String>,
    /// The provider declined.
    pub rp_id: i64,
    /// What was refused: class → units.
    pub resources: serde_json::Value,
}

/// Decline filters still in force (expired ones are deleted on the way).
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn active_declines(conn: &mut PgConnection) -> Result<Vec<DeclineRow>, sqlx::Error> {
    crate::db::query("DELETE FROM decline_filters WHERE expires_at <= now()")
        .execute(&mut *conn)
        .await?;
    crate::db::query_as(
        "SELECT p.external_id AS project, d.user_id, d.resource_provider_id AS rp_id, d.resources
           FROM decline_filters d JOIN projects p ON p.id = d.project_id ORDER BY d.id",
    )
    .fetch_all(conn)
    .await
}

/// Stores a committed round for audit and replay.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn record_round(
    conn: &mut PgConnection,
    id: uuid::Uuid,
    seed: i64,
    request: &str,
    result: &str,
) -> Result<(), sqlx::Error> {
    crate::db::query(
        "INSERT INTO admission_rounds (id, seed, request, result) VALUES ($1, $2, $3::json, $4::json)",
    )
        .bind(id)
        .bind(seed)
        .bind(request)
        .bind(result)
        .execute(conn)
        .await?;
    Ok(())
}

/// Deletes rounds started more than `keep_secs` ago; how many went.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn prune_rounds(conn: &mut PgConnection, keep_secs: u64) -> Result<u64, sqlx::Error> {
    let keep = i64::try_from(keep_secs).unwrap_or(i64::MAX);
    Ok(crate::db::query(
        "DELETE FROM admission_rounds WHERE started_at < now() - make_interval(secs => $1::double precision)",
    )
    .bind(keep)
    .execute(conn)
    .await?
    .rows_affected())
}
