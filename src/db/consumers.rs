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
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn get(conn: &mut PgConnection, uuid: Uuid) -> Result<Option<ConsumerRow>, sqlx::Error> {
    crate::db::query_as(sqlx::AssertSqlSafe(format!("{SELECT} WHERE c.uuid = $1")))
        .bind(uuid)
        .fetch_optional(conn)
        .await
}

/// Loads a consumer and locks it until the transaction ends.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn get_for_update(
    conn: &mut PgConnection,
    uuid: Uuid,
) -> Result<Option<ConsumerRow>, sqlx::Error> {
    crate::db::query_as(sqlx::AssertSqlSafe(format!(
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
    // Look up first and insert with DO NOTHING: an upsert that updates
    // would lock the row until commit, so every writer of one project
    // would wait for the others (and could deadlock with their provider
    // locks).
    let select = format!("SELECT id FROM {table} WHERE {column} = $1");
    if let Some(id) = crate::db::query_scalar(sqlx::AssertSqlSafe(select.clone()))
        .bind(value)
        .fetch_optional(&mut *conn)
        .await?
    {
        return Ok(id);
    }
    let inserted: Option<i32> = crate::db::query_scalar(sqlx::AssertSqlSafe(format!(
        "INSERT INTO {table} ({column}) VALUES ($1) ON CONFLICT ({column}) DO NOTHING RETURNING id"
    )))
    .bind(value)
    .fetch_optional(&mut *conn)
    .await?;
    match inserted {
        Some(id) => Ok(id),
        // A concurrent writer inserted it first and has committed (the
        // conflict waited for it).
        None => {
            crate::db::query_scalar(sqlx::AssertSqlSafe(select))
                .bind(value)
                .fetch_one(conn)
                .await
        }
    }
}

/// The projects table's id for an external project id, created if missing
/// (without locking the row).
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn ensure_project(conn: &mut PgConnection, external: &str) -> Result<i32, sqlx::Error> {
    ensure_named(conn, "projects", "external_id", external).await
}

/// Ids of several projects by external id, creating the missing ones:
/// one statement for those that exist (the usual case), one to insert the
/// rest, and one more for any a concurrent writer inserted first. The
/// insert takes its names in sorted order, so two such inserts wait for
/// each other in one order and never deadlock.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn ensure_projects(
    conn: &mut PgConnection,
    externals: &[String],
) -> Result<std::collections::HashMap<String, i32>, sqlx::Error> {
    let found: Vec<(String, i32)> =
        crate::db::query_as("SELECT external_id, id FROM projects WHERE external_id = ANY($1)")
            .bind(externals)
            .fetch_all(&mut *conn)
            .await?;
    let mut ids: std::collections::HashMap<String, i32> = found.into_iter().collect();
    let missing = |ids: &std::collections::HashMap<String, i32>| -> Vec<&str> {
        externals
            .iter()
            .filter(|n| !ids.contains_key(*n))
            .map(String::as_str)
            .collect()
    };
    let absent = missing(&ids);
    if absent.is_empty() {
        return Ok(ids);
    }
    let inserted: Vec<(String, i32)> = crate::db::query_as(
        "INSERT INTO projects (external_id) SELECT n FROM unnest($1::text[]) AS n ORDER BY n
         ON CONFLICT (external_id) DO NOTHING RETURNING external_id, id",
    )
    .bind(&absent)
    .fetch_all(&mut *conn)
    .await?;
    ids.extend(inserted);
    let raced = missing(&ids);
    if !raced.is_empty() {
        // Inserted by concurrent writers, who have committed (the
        // conflict waited for them).
        let found: Vec<(String, i32)> =
            crate::db::query_as("SELECT external_id, id FROM projects WHERE external_id = ANY($1)")
                .bind(&raced)
                .fetch_all(&mut *conn)
                .await?;
        ids.extend(found);
    }
    Ok(ids)
}

/// Project, user and (optional) consumer-type ids of a consumer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Owner {
    /// The project's id.
    pub project: i32,
    /// The user's id.
    pub user: i32,
    /// The consumer type's id.
    pub consumer_type: Option<i32>,
}

/// Columns of a batched consumer statement, one entry per consumer.
#[derive(Debug, Default)]
pub struct OwnerColumns {
    /// Consumer ids (updates).
    pub ids: Vec<i64>,
    /// Consumer uuids (inserts).
    pub uuids: Vec<Uuid>,
    /// Project ids.
    pub projects: Vec<i32>,
    /// User ids.
    pub users: Vec<i32>,
    /// Consumer type ids.
    pub types: Vec<Option<i32>>,
}

impl OwnerColumns {
    fn push_owner(&mut self, owner: Owner) {
        self.projects.push(owner.project);
        self.users.push(owner.user);
        self.types.push(owner.consumer_type);
    }

    /// Adds an existing consumer.
    pub fn push_id(&mut self, id: i64, owner: Owner) {
        self.ids.push(id);
        self.push_owner(owner);
    }

    /// Adds a new consumer.
    pub fn push_uuid(&mut self, uuid: Uuid, owner: Owner) {
        self.uuids.push(uuid);
        self.push_owner(owner);
    }
}

/// Ids of a project, a user and optionally a consumer type, created on first use.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn ensure_owner(
    conn: &mut PgConnection,
    project: &str,
    user: &str,
    consumer_type: Option<&str>,
) -> Result<Owner, sqlx::Error> {
    // The three exist nearly always: one statement finds them.
    let (p, u, t): (Option<i32>, Option<i32>, Option<i32>) = crate::db::query_as(
        "SELECT (SELECT id FROM projects WHERE external_id = $1),
                (SELECT id FROM users WHERE external_id = $2),
                (SELECT id FROM consumer_types WHERE name = $3)",
    )
    .bind(project)
    .bind(user)
    .bind(consumer_type)
    .fetch_one(&mut *conn)
    .await?;
    let p = match p {
        Some(id) => id,
        None => ensure_named(conn, "projects", "external_id", project).await?,
    };
    let u = match u {
        Some(id) => id,
        None => ensure_named(conn, "users", "external_id", user).await?,
    };
    let t = match (t, consumer_type) {
        (Some(id), _) => Some(id),
        (None, Some(t)) => Some(ensure_named(conn, "consumer_types", "name", t).await?),
        (None, None) => None,
    };
    Ok(Owner {
        project: p,
        user: u,
        consumer_type: t,
    })
}

/// Deletes a consumer (its allocations go with it).
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn delete(conn: &mut PgConnection, id: i64) -> Result<(), sqlx::Error> {
    crate::db::query("DELETE FROM consumers WHERE id = $1")
        .bind(id)
        .execute(conn)
        .await?;
    Ok(())
}

/// Loads and locks several consumers, in uuid order.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn get_many_for_update(
    conn: &mut PgConnection,
    uuids: &[Uuid],
) -> Result<Vec<ConsumerRow>, sqlx::Error> {
    crate::db::query_as(sqlx::AssertSqlSafe(format!(
        "{SELECT} WHERE c.uuid = ANY($1) ORDER BY c.uuid FOR UPDATE OF c"
    )))
    .bind(uuids)
    .fetch_all(conn)
    .await
}

/// Deletes consumers (their allocations go with them).
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn delete_many(conn: &mut PgConnection, ids: &[i64]) -> Result<(), sqlx::Error> {
    if !ids.is_empty() {
        crate::db::query("DELETE FROM consumers WHERE id = ANY($1)")
            .bind(ids)
            .execute(conn)
            .await?;
    }
    Ok(())
}

/// Sets owners and types (where `set_type`) and bumps generations of existing consumers.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn update_and_bump_many(
    conn: &mut PgConnection,
    cols: &OwnerColumns,
    set_type: &[bool],
) -> Result<(), sqlx::Error> {
    if cols.ids.is_empty() {
        return Ok(());
    }
    crate::db::query(
        "UPDATE consumers c SET project_id = t.p, user_id = t.u,
            consumer_type_id = CASE WHEN t.s THEN t.ct ELSE c.consumer_type_id END,
            generation = c.generation + 1, updated_at = now()
         FROM UNNEST($1::bigint[], $2::int[], $3::int[], $4::int[], $5::bool[]) AS t(id, p, u, ct, s)
         WHERE c.id = t.id",
    )
    .bind(&cols.ids)
    .bind(&cols.projects)
    .bind(&cols.users)
    .bind(&cols.types)
    .bind(set_type)
    .execute(conn)
    .await?;
    Ok(())
}

/// Creates consumers with generation 1 (created and written); returns the
/// ids of those inserted (a uuid another writer created first is absent).
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn create_many(
    conn: &mut PgConnection,
    cols: &OwnerColumns,
) -> Result<std::collections::HashMap<Uuid, i64>, sqlx::Error> {
    if cols.uuids.is_empty() {
        return Ok(Default::default());
    }
    let rows: Vec<(i64, Uuid)> = crate::db::query_as(
        "INSERT INTO consumers (uuid, project_id, user_id, consumer_type_id, generation)
         SELECT u, p, us, ct, 1 FROM UNNEST($1::uuid[], $2::int[], $3::int[], $4::int[]) AS t(u, p, us, ct)
         ON CONFLICT (uuid) DO NOTHING RETURNING id, uuid",
    )
    .bind(&cols.uuids)
    .bind(&cols.projects)
    .bind(&cols.users)
    .bind(&cols.types)
    .fetch_all(conn)
    .await?;
    Ok(rows.into_iter().map(|(id, u)| (u, id)).collect())
}

/// placement-status's two counts on this service's schema. Both are
/// zero by construction here (a provider's root is `NOT NULL`, an
/// allocation references its consumer); they are read rather than assumed
/// so that a database damaged by hand says so.
pub async fn status_counts(
    conn: &mut PgConnection,
) -> Result<crate::db::import::source::StatusCounts, sqlx::Error> {
    let (missing_root_ids, missing_consumers): (i64, i64) = crate::db::query_as(
        "SELECT (SELECT COUNT(*) FROM resource_providers WHERE root_provider_id IS NULL),
                (SELECT COUNT(DISTINCT a.consumer_id) FROM allocations a
                  WHERE NOT EXISTS (SELECT 1 FROM consumers c WHERE c.id = a.consumer_id))",
    )
    .fetch_one(conn)
    .await?;
    Ok(crate::db::import::source::StatusCounts {
        missing_root_ids,
        missing_consumers,
    })
}
