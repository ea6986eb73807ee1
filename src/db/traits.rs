//! Traits and the traits of providers.

use chrono::{DateTime, Utc};
use sqlx::{PgConnection, Postgres, QueryBuilder};

/// A trait row.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct TraitRow {
    /// Internal id.
    pub id: i32,
    /// The trait name.
    pub name: String,
    /// Creation time.
    pub created_at: Option<DateTime<Utc>>,
    /// Last update time.
    pub updated_at: Option<DateTime<Utc>>,
}

/// Name filter of `GET /traits`.
pub enum NameFilter {
    /// No filter.
    All,
    /// `name=in:A,B`.
    In(Vec<String>),
    /// `name=startswith:P`.
    StartsWith(String),
}

/// Lists traits by name filter and association with any provider.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn list(
    conn: &mut PgConnection,
    name: &NameFilter,
    associated: Option<bool>,
) -> Result<Vec<TraitRow>, sqlx::Error> {
    let mut q: QueryBuilder<Postgres> = QueryBuilder::new(
        "SELECT t.id, t.name, t.created_at, t.updated_at FROM traits t WHERE TRUE",
    );
    match name {
        NameFilter::All => {}
        NameFilter::In(names) => {
            q.push(" AND t.name = ANY(")
                .push_bind(names.clone())
                .push(")");
        }
        NameFilter::StartsWith(p) => {
            q.push(" AND starts_with(t.name, ")
                .push_bind(p.clone())
                .push(")");
        }
    }
    match associated {
        Some(true) => {
            q.push(
                " AND EXISTS (SELECT 1 FROM resource_provider_traits r WHERE r.trait_id = t.id)",
            );
        }
        Some(false) => {
            q.push(" AND NOT EXISTS (SELECT 1 FROM resource_provider_traits r WHERE r.trait_id = t.id)");
        }
        None => {}
    }
    // Placement's order on MariaDB, where deployment tools keep it: a name
    // filter is answered from the name index (name order), `associated=true`
    // through the providers' links, anything else from the table
    // (creation order, which an import keeps: the traits keep the source's
    // ids).
    q.push(match (name, associated) {
        (NameFilter::In(_) | NameFilter::StartsWith(_), _) => " ORDER BY t.name",
        // Read through the providers' links: the first provider (oldest)
        // to have each trait, then the trait's own order.
        (NameFilter::All, Some(true)) => {
            " ORDER BY (SELECT MIN(r.resource_provider_id) FROM resource_provider_traits r WHERE r.trait_id = t.id), t.id"
        }
        (NameFilter::All, _) => " ORDER BY t.id",
    });
    q.build_query_as()
        .persistent(super::statements::persistent())
        .fetch_all(conn)
        .await
}

/// One trait by name.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn get(conn: &mut PgConnection, name: &str) -> Result<Option<TraitRow>, sqlx::Error> {
    crate::db::query_as("SELECT id, name, created_at, updated_at FROM traits WHERE name = $1")
        .bind(name)
        .fetch_optional(conn)
        .await
}

/// Creates a trait; false when it already existed.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn create(conn: &mut PgConnection, name: &str) -> Result<bool, sqlx::Error> {
    let res =
        crate::db::query("INSERT INTO traits (name) VALUES ($1) ON CONFLICT (name) DO NOTHING")
            .bind(name)
            .execute(conn)
            .await?;
    Ok(res.rows_affected() == 1)
}

/// True when a provider has the trait.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn in_use(conn: &mut PgConnection, id: i32) -> Result<bool, sqlx::Error> {
    crate::db::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM resource_provider_traits WHERE trait_id = $1)",
    )
    .bind(id)
    .fetch_one(conn)
    .await
}

/// Deletes a trait (callers check standard and in-use first).
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn delete(conn: &mut PgConnection, id: i32) -> Result<(), sqlx::Error> {
    crate::db::query("DELETE FROM traits WHERE id = $1")
        .bind(id)
        .execute(conn)
        .await?;
    Ok(())
}

/// Trait names found (with their ids) and those not found.
#[derive(Debug, Clone, Default)]
pub struct Resolved {
    /// (name, id) of the traits that exist, in the order asked.
    pub found: Vec<(String, i32)>,
    /// The names that do not.
    pub missing: Vec<String>,
}

/// Resolves names to (name, id); the names not found are returned apart.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn resolve(conn: &mut PgConnection, names: &[String]) -> Result<Resolved, sqlx::Error> {
    if names.is_empty() {
        return Ok(Resolved {
            found: Vec::new(),
            missing: Vec::new(),
        });
    }
    let rows: Vec<(i32, String)> =
        crate::db::query_as("SELECT id, name FROM traits WHERE name = ANY($1)")
            .bind(names)
            .fetch_all(conn)
            .await?;
    let mut found = Vec::new();
    let mut missing = Vec::new();
    for n in names {
        match rows.iter().find(|(_, name)| name == n) {
            Some((id, _)) => found.push((n.clone(), *id)),
            None => missing.push(n.clone()),
        }
    }
    Ok(Resolved { found, missing })
}

/// A provider's traits in trait order (Placement's: standard traits as
/// they were first stored, then custom ones as created) with the latest
/// change time among them.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn of_provider(
    conn: &mut PgConnection,
    rp_id: i64,
) -> Result<Vec<TraitRow>, sqlx::Error> {
    crate::db::query_as(
        "SELECT t.id, t.name, t.created_at, t.updated_at FROM traits t
         JOIN resource_provider_traits r ON r.trait_id = t.id
         WHERE r.resource_provider_id = $1 ORDER BY t.id",
    )
    .bind(rp_id)
    .fetch_all(conn)
    .await
}

/// Replaces a provider's traits with `ids`; true when the set changed.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn set_for_provider(
    conn: &mut PgConnection,
    rp_id: i64,
    ids: &[i32],
) -> Result<bool, sqlx::Error> {
    let mut current: Vec<i32> = crate::db::query_scalar(
        "SELECT trait_id FROM resource_provider_traits WHERE resource_provider_id = $1",
    )
    .bind(rp_id)
    .fetch_all(&mut *conn)
    .await?;
    let mut wanted = ids.to_vec();
    current.sort_unstable();
    wanted.sort_unstable();
    wanted.dedup();
    if current == wanted {
        return Ok(false);
    }
    crate::db::query("DELETE FROM resource_provider_traits WHERE resource_provider_id = $1")
        .bind(rp_id)
        .execute(&mut *conn)
        .await?;
    crate::db::query("INSERT INTO resource_provider_traits (resource_provider_id, trait_id) SELECT $1, UNNEST($2::int[])")
        .bind(rp_id)
        .bind(&wanted)
        .execute(conn)
        .await?;
    Ok(true)
}
