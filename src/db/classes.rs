//! Resource classes: standard (ids 0..) and custom (ids from 10000).

use chrono::{DateTime, Utc};
use sqlx::PgConnection;

/// A resource class row.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct ClassRow {
    /// Internal id (standard classes: their index in os-resource-classes).
    pub id: i32,
    /// The class name.
    pub name: String,
    /// Creation time.
    pub created_at: Option<DateTime<Utc>>,
    /// Last update time.
    pub updated_at: Option<DateTime<Utc>>,
}

/// Custom classes start at this id; anything below is standard.
pub const FIRST_CUSTOM_ID: i32 = 10000;
/// The id of VCPU (standard ids are their index in Placement's list).
pub const VCPU_ID: i32 = 0;
/// The id of MEMORY_MB.
pub const MEMORY_MB_ID: i32 = 1;

/// All classes, standard first, in id order.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn list(conn: &mut PgConnection) -> Result<Vec<ClassRow>, sqlx::Error> {
    crate::db::query_as("SELECT id, name, created_at, updated_at FROM resource_classes ORDER BY id")
        .fetch_all(conn)
        .await
}

/// One class by name.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn get(conn: &mut PgConnection, name: &str) -> Result<Option<ClassRow>, sqlx::Error> {
    crate::db::query_as(
        "SELECT id, name, created_at, updated_at FROM resource_classes WHERE name = $1",
    )
    .bind(name)
    .fetch_optional(conn)
    .await
}

/// Resolves names to ids; returns the first unknown name as the error.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn ids(
    conn: &mut PgConnection,
    names: &[String],
) -> Result<Result<Vec<i32>, String>, sqlx::Error> {
    let rows: Vec<(i32, String)> =
        crate::db::query_as("SELECT id, name FROM resource_classes WHERE name = ANY($1)")
            .bind(names)
            .fetch_all(conn)
            .await?;
    let mut out = Vec::with_capacity(names.len());
    for n in names {
        match rows.iter().find(|(_, name)| name == n) {
            Some((id, _)) => out.push(*id),
            None => return Ok(Err(n.clone())),
        }
    }
    Ok(Ok(out))
}

/// Creates a custom class; false when it already exists.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn create(conn: &mut PgConnection, name: &str) -> Result<bool, sqlx::Error> {
    let res = crate::db::query(
        "INSERT INTO resource_classes (id, name) VALUES (nextval('custom_resource_class_id_seq'), $1)
         ON CONFLICT (name) DO NOTHING",
    )
    .bind(name)
    .execute(conn)
    .await?;
    Ok(res.rows_affected() == 1)
}

/// Renames a custom class; false when the new name is taken.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn rename(conn: &mut PgConnection, id: i32, new_name: &str) -> Result<bool, sqlx::Error> {
    let res =
        crate::db::query("UPDATE resource_classes SET name = $2, updated_at = now() WHERE id = $1")
            .bind(id)
            .bind(new_name)
            .execute(conn)
            .await;
    match res {
        Ok(_) => Ok(true),
        Err(e) if super::is_unique_violation(&e, "resource_classes_name_key") => Ok(false),
        Err(e) => Err(e),
    }
}

/// True when some inventory uses the class.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn in_use(conn: &mut PgConnection, id: i32) -> Result<bool, sqlx::Error> {
    crate::db::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM inventories WHERE resource_class_id = $1)",
    )
    .bind(id)
    .fetch_one(conn)
    .await
}

/// Deletes a class (callers check standard and in-use first).
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn delete(conn: &mut PgConnection, id: i32) -> Result<(), sqlx::Error> {
    crate::db::query("DELETE FROM resource_classes WHERE id = $1")
        .bind(id)
        .execute(conn)
        .await?;
    Ok(())
}
