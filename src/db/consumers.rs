//! Consumers with their project, user, type and generation.

use sqlx::PgConnection;
use uuid::Uuid;

/// A consumer as the allocation handlers need it.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct ConsumerRow {
    /// Internal id.
    pub id: i64,
    /// External uuid.
    pub uuid: Uuid,
    /// Project external id.
    pub project_id: String,
    /// User external id.
    pub user_id: String,
    /// Consumer type name, None when untyped.
    pub consumer_type: Option<String>,
    /// Consumer generation.
    pub generation: i32,
}

const SELECT: &str = "SELECT c.id, c.uuid, p.external_id AS project_id, u.external_id AS user_id,
        ct.name AS consumer_type, c.generation
    FROM consumers c JOIN projects p ON p.id = c.project_id JOIN users u ON u.id = c.user_id
    LEFT JOIN consumer_types ct ON ct.id = c.consumer_type_id";

/// Loads a consumer.
pub async fn get(conn: &mut PgConnection, uuid: Uuid) -> Result<Option<ConsumerRow>, sqlx::Error> {
    sqlx::query_as(sqlx::AssertSqlSafe(format!("{SELECT} WHERE c.uuid = $1")))
        .bind(uuid)
        .fetch_optional(conn)
        .await
}

/// Loads a consumer and locks it until the transaction ends.
pub async fn get_for_update(
    conn: &mut PgConnection,
    uuid: Uuid,
) -> Result<Option<ConsumerRow>, sqlx::Error> {
    sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "{SELECT} WHERE c.uuid = $1 FOR UPDATE OF c"
    )))
    .bind(uuid)
    .fetch_optional(conn)
    .await
}

async fn ensure_named(
    conn: &mut PgConnection,
    table: &str,
    column: &str,
    value: &str,
) -> Result<i32, sqlx::Error> {
    // INSERT .. ON CONFLICT DO UPDATE returns the row whether new or not,
    // and is safe against concurrent inserts of the same name.
    sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "INSERT INTO {table} ({column}) VALUES ($1)
         ON CONFLICT ({column}) DO UPDATE SET {column} = EXCLUDED.{column} RETURNING id"
    )))
    .bind(value)
    .fetch_one(conn)
    .await
}

/// Ids of a project, a user and optionally a consumer type, created on first use.
pub async fn ensure_owner(
    conn: &mut PgConnection,
    project: &str,
    user: &str,
    consumer_type: Option<&str>,
) -> Result<(i32, i32, Option<i32>), sqlx::Error> {
    let p = ensure_named(conn, "projects", "external_id", project).await?;
    let u = ensure_named(conn, "users", "external_id", user).await?;
    let t = match consumer_type {
        Some(t) => Some(ensure_named(conn, "consumer_types", "name", t).await?),
        None => None,
    };
    Ok((p, u, t))
}

/// Inserts a consumer with generation 0; None when a concurrent writer created it first.
pub async fn create(
    conn: &mut PgConnection,
    uuid: Uuid,
    owner: (i32, i32, Option<i32>),
) -> Result<Option<i64>, sqlx::Error> {
    sqlx::query_scalar(
        "INSERT INTO consumers (uuid, project_id, user_id, consumer_type_id) VALUES ($1, $2, $3, $4)
         ON CONFLICT (uuid) DO NOTHING RETURNING id",
    )
    .bind(uuid)
    .bind(owner.0)
    .bind(owner.1)
    .bind(owner.2)
    .fetch_optional(conn)
    .await
}

/// Sets owner and type (None keeps the type) and bumps the generation.
pub async fn update_and_bump(
    conn: &mut PgConnection,
    id: i64,
    owner: (i32, i32, Option<i32>),
    set_type: bool,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "UPDATE consumers SET project_id = $2, user_id = $3,
            consumer_type_id = CASE WHEN $5 THEN $4 ELSE consumer_type_id END,
            generation = generation + 1, updated_at = now()
         WHERE id = $1",
    )
    .bind(id)
    .bind(owner.0)
    .bind(owner.1)
    .bind(owner.2)
    .bind(set_type)
    .execute(conn)
    .await?;
    Ok(())
}

/// Deletes a consumer (its allocations go with it).
pub async fn delete(conn: &mut PgConnection, id: i64) -> Result<(), sqlx::Error> {
    sqlx::query("DELETE FROM consumers WHERE id = $1")
        .bind(id)
        .execute(conn)
        .await?;
    Ok(())
}
