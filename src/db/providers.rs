//! Resource providers: rows, trees, list filters, generations.

use crate::types::AggFilter;
use chrono::{DateTime, Utc};
use sqlx::{PgConnection, Postgres, QueryBuilder};
use uuid::Uuid;

/// A provider as the API shows it.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct ProviderRow {
    /// Internal id.
    pub id: i64,
    /// External uuid.
    pub uuid: Uuid,
    /// Unique name.
    pub name: String,
    /// Generation for optimistic concurrency.
    pub generation: i32,
    /// Parent's uuid, None for roots.
    pub parent_uuid: Option<Uuid>,
    /// Root's uuid (its own for roots).
    pub root_uuid: Uuid,
    /// Internal id of the root.
    pub root_provider_id: i64,
    /// Creation time.
    pub created_at: Option<DateTime<Utc>>,
    /// Last update time.
    pub updated_at: Option<DateTime<Utc>>,
}

const SELECT: &str = "SELECT rp.id, rp.uuid, rp.name, rp.generation, p.uuid AS parent_uuid,
        r.uuid AS root_uuid, rp.root_provider_id, rp.created_at, rp.updated_at
    FROM resource_providers rp
    LEFT JOIN resource_providers p ON p.id = rp.parent_provider_id
    JOIN resource_providers r ON r.id = rp.root_provider_id";

/// Loads one provider by uuid.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn get(conn: &mut PgConnection, uuid: Uuid) -> Result<Option<ProviderRow>, sqlx::Error> {
    crate::db::query_as(sqlx::AssertSqlSafe(format!("{SELECT} WHERE rp.uuid = $1")))
        .bind(uuid)
        .fetch_optional(conn)
        .await
}

/// Loads one provider by uuid and locks its row until the transaction ends.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn get_for_update(
    conn: &mut PgConnection,
    uuid: Uuid,
) -> Result<Option<ProviderRow>, sqlx::Error> {
    crate::db::query_as(sqlx::AssertSqlSafe(format!(
        "{SELECT} WHERE rp.uuid = $1 FOR UPDATE OF rp"
    )))
    .bind(uuid)
    .fetch_optional(conn)
    .await
}

/// Locks the providers with these uuids, in id order (the one global lock
/// order of every write, so writers never deadlock on providers), and
/// returns those that exist.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn lock_many(
    conn: &mut PgConnection,
    uuids: &[Uuid],
) -> Result<Vec<ProviderRow>, sqlx::Error> {
    crate::db::query_as(sqlx::AssertSqlSafe(format!(
        "{SELECT} WHERE rp.uuid = ANY($1) ORDER BY rp.id FOR UPDATE OF rp"
    )))
    .bind(uuids)
    .fetch_all(conn)
    .await
}

/// Filters of `GET /resource_providers`, already resolved to ids.
#[derive(Debug, Default)]
pub struct ProviderFilter {
    /// Exact name.
    pub name: Option<String>,
    /// Exact uuid.
    pub uuid: Option<Uuid>,
    /// Providers in the tree of this provider.
    pub in_tree: Option<Uuid>,
    /// Aggregate membership of the provider itself.
    pub member_of: AggFilter,
    /// Trait ids: any-of sets that must match, and forbidden ids.
    pub required_trait_ids: Vec<Vec<i32>>,
    /// Trait ids the provider must not have.
    pub forbidden_trait_ids: Vec<i32>,
    /// (class id, amount) that must each fit on the provider itself.
    pub resources: Vec<(i32, i64)>,
}

/// Lists providers matching every filter, ordered by id.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn list(
    conn: &mut PgConnection,
    f: &ProviderFilter,
) -> Result<Vec<ProviderRow>, sqlx::Error> {
    let mut q: QueryBuilder<Postgres> = QueryBuilder::new(SELECT);
    q.push(" WHERE TRUE");
    if let Some(name) = &f.name {
        q.push(" AND rp.name = ").push_bind(name.clone());
    }
    if let Some(u) = f.uuid {
        q.push(" AND rp.uuid = ").push_bind(u);
    }
    if let Some(t) = f.in_tree {
        q.push(" AND rp.root_provider_id = (SELECT root_provider_id FROM resource_providers WHERE uuid = ")
            .push_bind(t)
            .push(")");
    }
    for set in &f.member_of.any_of {
        q.push(" AND EXISTS (SELECT 1 FROM resource_provider_aggregates ra JOIN placement_aggregates pa ON pa.id = ra.aggregate_id WHERE ra.resource_provider_id = rp.id AND pa.uuid = ANY(")
            .push_bind(set.iter().copied().collect::<Vec<Uuid>>())
            .push("))");
    }
    if !f.member_of.forbidden.is_empty() {
        q.push(" AND NOT EXISTS (SELECT 1 FROM resource_provider_aggregates ra JOIN placement_aggregates pa ON pa.id = ra.aggregate_id WHERE ra.resource_provider_id = rp.id AND pa.uuid = ANY(")
            .push_bind(f.member_of.forbidden.iter().copied().collect::<Vec<Uuid>>())
            .push("))");
    }
    for set in &f.required_trait_ids {
        q.push(" AND EXISTS (SELECT 1 FROM resource_provider_traits t WHERE t.resource_provider_id = rp.id AND t.trait_id = ANY(")
            .push_bind(set.clone())
            .push("))");
    }
    if !f.forbidden_trait_ids.is_empty() {
        q.push(" AND NOT EXISTS (SELECT 1 FROM resource_provider_traits t WHERE t.resource_provider_id = rp.id AND t.trait_id = ANY(")
            .push_bind(f.forbidden_trait_ids.clone())
            .push("))");
    }
    for (rc, amount) in &f.resources {
        q.push(" AND EXISTS (SELECT 1 FROM inventories i WHERE i.resource_provider_id = rp.id AND i.resource_class_id = ")
            .push_bind(*rc)
            .push(" AND placement_units_ok(")
            .push_bind(*amount)
            .push(", i.min_unit, i.max_unit, i.step_size) AND (SELECT COALESCE(SUM(a.used), 0) FROM allocations a WHERE a.resource_provider_id = rp.id AND a.resource_class_id = i.resource_class_id) + ")
            .push_bind(*amount)
            .push(" <= placement_capacity(i.total, i.reserved, i.allocation_ratio))");
    }
    q.push(" ORDER BY rp.id");
    q.build_query_as()
        .persistent(super::statements::persistent())
        .fetch_all(conn)
        .await
}

/// Outcome of inserting a provider.
#[derive(Debug, thiserror::Error)]
pub enum CreateError {
    /// The name is taken.
    #[error("duplicate name")]
    DuplicateName,
    /// The uuid is taken.
    #[error("duplicate uuid")]
    DuplicateUuid,
    /// Any other database failure.
    #[error(transparent)]
    Db(sqlx::Error),
}

/// Inserts a provider; `parent` must already be resolved (id, root id).
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn create(
    conn: &mut PgConnection,
    uuid: Uuid,
    name: &str,
    parent: Option<(i64, i64)>,
) -> Result<(), CreateError> {
    let res = crate::db::query(
        "WITH nid AS (SELECT nextval('resource_providers_id_seq') AS id)
         INSERT INTO resource_providers (id, uuid, name, root_provider_id, parent_provider_id)
         SELECT id, $1, $2, COALESCE($3, id), $4 FROM nid",
    )
    .bind(uuid)
    .bind(name)
    .bind(parent.map(|p| p.1))
    .bind(parent.map(|p| p.0))
    .execute(conn)
    .await;
    match res {
        Ok(_) => Ok(()),
        Err(e) if super::is_unique_violation(&e, "resource_providers_name_key") => {
            Err(CreateError::DuplicateName)
        }
        Err(e) if super::is_unique_violation(&e, "resource_providers_uuid_key") => {
            Err(CreateError::DuplicateUuid)
        }
        Err(e) => Err(CreateError::Db(e)),
    }
}

/// Renames and/or re-parents a provider, re-rooting its whole subtree.
/// Returns false when the new name is taken.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn update(
    conn: &mut PgConnection,
    id: i64,
    name: &str,
    parent: Option<(i64, i64)>,
) -> Result<bool, sqlx::Error> {
    let res = crate::db::query(
        "UPDATE resource_providers SET name = $2, parent_provider_id = $3, updated_at = now() WHERE id = $1",
    )
    .bind(id)
    .bind(name)
    .bind(parent.map(|p| p.0))
    .execute(&mut *conn)
    .await;
    match res {
        Ok(_) => {}
        Err(e) if super::is_unique_violation(&e, "resource_providers_name_key") => {
            return Ok(false)
        }
        Err(e) => return Err(e),
    }
    let new_root = parent.map(|p| p.1).unwrap_or(id);
    crate::db::query(
        "WITH RECURSIVE sub AS (
            SELECT id FROM resource_providers WHERE id = $1
            UNION ALL SELECT c.id FROM resource_providers c JOIN sub ON c.parent_provider_id = sub.id)
         UPDATE resource_providers SET root_provider_id = $2 WHERE id IN (SELECT id FROM sub)",
    )
    .bind(id)
    .bind(new_root)
    .execute(conn)
    .await?;
    Ok(true)
}

/// True when `candidate` is `id` or one of its descendants.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn is_in_subtree(
    conn: &mut PgConnection,
    id: i64,
    candidate: i64,
) -> Result<bool, sqlx::Error> {
    crate::db::query_scalar(
        "WITH RECURSIVE sub AS (
            SELECT id FROM resource_providers WHERE id = $1
            UNION ALL SELECT c.id FROM resource_providers c JOIN sub ON c.parent_provider_id = sub.id)
         SELECT EXISTS (SELECT 1 FROM sub WHERE id = $2)",
    )
    .bind(id)
    .bind(candidate)
    .fetch_one(conn)
    .await
}

/// What blocks deleting a provider, if anything.
pub enum DeleteBlock {
    /// It has child providers.
    HasChildren,
    /// It has allocations.
    HasAllocations,
}

/// Deletes a provider with its inventories, traits and aggregate links.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn delete(conn: &mut PgConnection, id: i64) -> Result<Option<DeleteBlock>, sqlx::Error> {
    let children: bool = crate::db::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM resource_providers WHERE parent_provider_id = $1)",
    )
    .bind(id)
    .fetch_one(&mut *conn)
    .await?;
    if children {
        return Ok(Some(DeleteBlock::HasChildren));
    }
    let allocs: bool = crate::db::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM allocations WHERE resource_provider_id = $1)",
    )
    .bind(id)
    .fetch_one(&mut *conn)
    .await?;
    if allocs {
        return Ok(Some(DeleteBlock::HasAllocations));
    }
    crate::db::query("DELETE FROM resource_providers WHERE id = $1")
        .bind(id)
        .execute(conn)
        .await?;
    Ok(None)
}

/// Bumps a provider's generation if it still is `expected`; false when a
/// concurrent writer got there first.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn bump_generation(
    conn: &mut PgConnection,
    id: i64,
    expected: i32,
) -> Result<bool, sqlx::Error> {
    let res = crate::db::query(
        "UPDATE resource_providers SET generation = generation + 1, updated_at = now()
         WHERE id = $1 AND generation = $2",
    )
    .bind(id)
    .bind(expected)
    .execute(conn)
    .await?;
    Ok(res.rows_affected() == 1)
}

/// The generation of a provider now, after bumps in this transaction.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn generation(conn: &mut PgConnection, id: i64) -> Result<i32, sqlx::Error> {
    crate::db::query_scalar("SELECT generation FROM resource_providers WHERE id = $1")
        .bind(id)
        .fetch_one(conn)
        .await
}

/// Bumps the generations of providers this transaction already holds locked.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn bump_locked(conn: &mut PgConnection, ids: &[i64]) -> Result<(), sqlx::Error> {
    crate::db::query("UPDATE resource_providers SET generation = generation + 1, updated_at = now() WHERE id = ANY($1)")
        .bind(ids)
        .execute(conn)
        .await?;
    Ok(())
}
