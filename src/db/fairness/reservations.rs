//! Per-project reservations on inventories, their unused parts, and the
//! provider usage and pool capacity they are checked against.

use sqlx::PgConnection;
use std::collections::{BTreeMap, HashMap};

/// Units reserved and not yet used by their owners, per (provider, class):
/// on `providers` (None: all), leaving out reservations that `usable_by`
/// (a project and its ancestors own them) may use.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn unused_reservations(
    conn: &mut PgConnection,
    providers: Option<&[i64]>,
    usable_by: Option<&str>,
) -> Result<HashMap<(i64, i32), i64>, sqlx::Error> {
    // Most pools have no reservations: answer that with a cheap statement
    // rather than planning the recursive one below.
    let any: bool = crate::db::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM project_reservations
                         WHERE $1::bigint[] IS NULL OR resource_provider_id = ANY($1))",
    )
    .bind(providers)
    .fetch_one(&mut *conn)
    .await?;
    if !any {
        return Ok(HashMap::new());
    }
    let rows: Vec<(i64, i32, i64)> = crate::db::query_as(
        "WITH RECURSIVE r AS (
             SELECT resource_provider_id AS rp, resource_class_id AS rc, project_id AS owner, amount
               FROM project_reservations WHERE $1::bigint[] IS NULL OR resource_provider_id = ANY($1)),
         up(id, depth) AS (
             SELECT id, 0 FROM projects WHERE external_id = $2
             UNION SELECT f.parent_project_id, up.depth + 1 FROM project_fairness f JOIN up ON f.project_id = up.id
              WHERE f.parent_project_id IS NOT NULL AND up.depth < 1000),
         sub(owner, id) AS (
             SELECT DISTINCT owner, owner FROM r
             UNION SELECT sub.owner, f.project_id FROM project_fairness f JOIN sub ON f.parent_project_id = sub.id),
         used AS (
             SELECT sub.owner, pa.resource_provider_id AS rp, pa.resource_class_id AS rc, SUM(pa.used) AS n
               FROM project_allocations pa JOIN sub ON sub.id = pa.project_id
              WHERE pa.resource_provider_id IN (SELECT rp FROM r)
              GROUP BY 1, 2, 3)
         SELECT r.rp, r.rc, SUM(GREATEST(r.amount - COALESCE(used.n, 0), 0))::bigint
           FROM r LEFT JOIN used ON used.owner = r.owner AND used.rp = r.rp AND used.rc = r.rc
          WHERE r.owner NOT IN (SELECT id FROM up)
          GROUP BY 1, 2",
    )
    .bind(providers)
    .bind(usable_by)
    .fetch_all(conn)
    .await?;
    Ok(rows
        .into_iter()
        .filter(|r| r.2 > 0)
        .map(|(rp, rc, n)| ((rp, rc), n))
        .collect())
}

/// One project's reservations on a provider: class name → units.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn reservations(
    conn: &mut PgConnection,
    provider: i64,
    project: i32,
) -> Result<BTreeMap<String, i64>, sqlx::Error> {
    let rows: Vec<(String, i32)> = crate::db::query_as(
        "SELECT rc.name, r.amount FROM project_reservations r JOIN resource_classes rc ON rc.id = r.resource_class_id
          WHERE r.resource_provider_id = $1 AND r.project_id = $2 ORDER BY rc.name",
    )
    .bind(provider)
    .bind(project)
    .fetch_all(conn)
    .await?;
    Ok(rows.into_iter().map(|(c, n)| (c, i64::from(n))).collect())
}

/// A reservation of a project on a provider.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct ReservationRow {
    /// The provider's id.
    pub rp_id: i64,
    /// The owning project's id.
    pub project: i32,
    /// Its external id.
    pub project_external_id: String,
    /// The class.
    pub class_id: i32,
    /// Units reserved.
    pub amount: i32,
}

/// Every reservation.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn all_reservations(conn: &mut PgConnection) -> Result<Vec<ReservationRow>, sqlx::Error> {
    crate::db::query_as(
        "SELECT r.resource_provider_id AS rp_id, r.project_id AS project,
                p.external_id AS project_external_id, r.resource_class_id AS class_id, r.amount
           FROM project_reservations r JOIN projects p ON p.id = r.project_id
          ORDER BY 1, 2, 4",
    )
    .fetch_all(conn)
    .await
}

/// Units reserved on a provider by projects other than `except`, by class id.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn reserved_by_others(
    conn: &mut PgConnection,
    provider: i64,
    except: i32,
) -> Result<HashMap<i32, i64>, sqlx::Error> {
    let rows: Vec<(i32, i64)> = crate::db::query_as(
        "SELECT resource_class_id, SUM(amount)::bigint FROM project_reservations
          WHERE resource_provider_id = $1 AND project_id <> $2 GROUP BY 1",
    )
    .bind(provider)
    .bind(except)
    .fetch_all(conn)
    .await?;
    Ok(rows.into_iter().collect())
}

/// Replaces one project's reservations on a provider: (class id, units).
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn replace_reservations(
    conn: &mut PgConnection,
    provider: i64,
    project: i32,
    rows: &[(i32, i32)],
) -> Result<(), sqlx::Error> {
    crate::db::query(
        "DELETE FROM project_reservations WHERE resource_provider_id = $1 AND project_id = $2",
    )
    .bind(provider)
    .bind(project)
    .execute(&mut *conn)
    .await?;
    let (classes, amounts): (Vec<i32>, Vec<i32>) = rows.iter().copied().unzip();
    crate::db::query(
        "INSERT INTO project_reservations (resource_provider_id, project_id, resource_class_id, amount)
         SELECT $1, $2, * FROM UNNEST($3::int[], $4::int[])",
    )
    .bind(provider)
    .bind(project)
    .bind(&classes)
    .bind(&amounts)
    .execute(conn)
    .await?;
    Ok(())
}

/// Allocations of every project's consumers per provider:
/// (external id, provider id, class id, units); for reservations' unused parts.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn project_allocations_on(
    conn: &mut PgConnection,
    providers: &[i64],
) -> Result<Vec<(String, i64, i32, i64)>, sqlx::Error> {
    crate::db::query_as(
        "SELECT p.external_id, pa.resource_provider_id, pa.resource_class_id, pa.used
           FROM project_allocations pa JOIN projects p ON p.id = pa.project_id
          WHERE pa.resource_provider_id = ANY($1) AND pa.used > 0",
    )
    .bind(providers)
    .fetch_all(conn)
    .await
}

/// Units allocated on a provider, by class id.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn provider_usage(
    conn: &mut PgConnection,
    provider: i64,
) -> Result<HashMap<i32, i64>, sqlx::Error> {
    let rows: Vec<(i32, i64)> = crate::db::query_as(
        "SELECT resource_class_id, SUM(used)::bigint FROM allocations WHERE resource_provider_id = $1 GROUP BY 1",
    )
    .bind(provider)
    .fetch_all(conn)
    .await?;
    Ok(rows.into_iter().collect())
}

/// Σ (total − reserved) × allocation_ratio over every provider, by class id.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn pool_capacity(conn: &mut PgConnection) -> Result<Vec<(i32, f64)>, sqlx::Error> {
    crate::db::query_as(
        "SELECT resource_class_id, SUM(placement_capacity(total, reserved, allocation_ratio))
           FROM inventories GROUP BY 1 ORDER BY 1",
    )
    .fetch_all(conn)
    .await
}
