//! Fair sharing between projects: the project tree with weights, quotas,
//! per-project reservations, decline filters and admission rounds
//! (`migrations/*_fairness.sql`).
//!
//! Consumption against quota, for a project P and a class: over every
//! provider, max(allocations of P's subtree, reservations of P's subtree),
//! i.e. reservations count whether used or not and allocations made from
//! them are not counted twice. A reservation's unused part is
//! max(0, amount − allocations of the owner's subtree on that inventory).
//!
//! Locks: writers that may take a limited project over its limit take a
//! per-project advisory lock (after their provider row locks), so that
//! concurrent writers of one project in any number of processes are
//! checked one after another.

use sqlx::PgConnection;
use std::collections::{BTreeMap, HashMap};

/// Namespace of the per-project advisory locks.
const PROJECT_LOCK: i32 = 0x5155_4f54;
/// Key of the admission-round advisory lock.
const ADMISSION_LOCK: i64 = 0x4144_4d49_5353_494f;

/// The projects table's id for an external project id, created if missing.
pub use super::consumers::ensure_project;

/// The projects table's id for an external project id, if known.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn project_id(
    conn: &mut PgConnection,
    external: &str,
) -> Result<Option<i32>, sqlx::Error> {
    sqlx::query_scalar("SELECT id FROM projects WHERE external_id = $1")
        .bind(external)
        .fetch_optional(conn)
        .await
}

/// Takes the per-project advisory locks, in id order.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn lock_projects(conn: &mut PgConnection, ids: &[i32]) -> Result<(), sqlx::Error> {
    let mut ids = ids.to_vec();
    ids.sort_unstable();
    ids.dedup();
    for id in ids {
        sqlx::query("SELECT pg_advisory_xact_lock($1, $2)")
            .bind(PROJECT_LOCK)
            .bind(id)
            .execute(&mut *conn)
            .await?;
    }
    Ok(())
}

/// Serialises admission rounds across processes until the transaction ends.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn lock_admissions(conn: &mut PgConnection) -> Result<(), sqlx::Error> {
    sqlx::query("SELECT pg_advisory_xact_lock($1)")
        .bind(ADMISSION_LOCK)
        .execute(conn)
        .await?;
    Ok(())
}

/// A project's fairness settings.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct FairnessRow {
    /// External id.
    pub project_id: String,
    /// Parent's external id.
    pub parent_project_id: Option<String>,
    /// DRF weight.
    pub weight: f64,
    /// Admissions so far (the sorter's tie-break).
    pub allocation_count: i64,
}

const FAIRNESS: &str = "SELECT p.external_id AS project_id, pp.external_id AS parent_project_id,
        f.weight, f.allocation_count
    FROM project_fairness f JOIN projects p ON p.id = f.project_id
    LEFT JOIN projects pp ON pp.id = f.parent_project_id";

/// One project's fairness settings.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn fairness(
    conn: &mut PgConnection,
    project: i32,
) -> Result<Option<FairnessRow>, sqlx::Error> {
    sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "{FAIRNESS} WHERE f.project_id = $1"
    )))
    .bind(project)
    .fetch_optional(conn)
    .await
}

/// Every project's fairness settings.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn all_fairness(conn: &mut PgConnection) -> Result<Vec<FairnessRow>, sqlx::Error> {
    sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "{FAIRNESS} ORDER BY p.external_id"
    )))
    .fetch_all(conn)
    .await
}

/// `project` and its ancestors, nearest first (stops at a cycle).
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn lineage(conn: &mut PgConnection, project: i32) -> Result<Vec<i32>, sqlx::Error> {
    sqlx::query_scalar(
        "WITH RECURSIVE up(id, depth) AS (
             SELECT $1::int, 0
             UNION ALL
             SELECT f.parent_project_id, up.depth + 1 FROM project_fairness f JOIN up ON f.project_id = up.id
              WHERE f.parent_project_id IS NOT NULL AND up.depth < 1000)
         SELECT id FROM up ORDER BY depth",
    )
    .bind(project)
    .fetch_all(conn)
    .await
}

/// Sets a project's weight and parent, keeping its allocation count.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn put_fairness(
    conn: &mut PgConnection,
    project: i32,
    parent: Option<i32>,
    weight: f64,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "INSERT INTO project_fairness (project_id, parent_project_id, weight) VALUES ($1, $2, $3)
         ON CONFLICT (project_id) DO UPDATE
            SET parent_project_id = EXCLUDED.parent_project_id, weight = EXCLUDED.weight, updated_at = now()",
    )
    .bind(project)
    .bind(parent)
    .bind(weight)
    .execute(conn)
    .await?;
    Ok(())
}

/// Adds admissions to projects' persisted allocation counts.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn add_allocation_counts(
    conn: &mut PgConnection,
    counts: &[(i32, i64)],
) -> Result<(), sqlx::Error> {
    let (ids, ns): (Vec<i32>, Vec<i64>) = counts.iter().copied().unzip();
    sqlx::query(
        "INSERT INTO project_fairness (project_id, allocation_count)
         SELECT * FROM UNNEST($1::int[], $2::bigint[])
         ON CONFLICT (project_id) DO UPDATE
            SET allocation_count = project_fairness.allocation_count + EXCLUDED.allocation_count",
    )
    .bind(&ids)
    .bind(&ns)
    .execute(conn)
    .await?;
    Ok(())
}

/// One class of a quota.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct QuotaRow {
    /// External project id.
    pub project_id: String,
    /// Class name.
    pub resource_class: String,
    /// Guarantee, if any.
    pub guarantee: Option<i64>,
    /// Limit, if any.
    pub limit: Option<i64>,
}

const QUOTAS: &str =
    "SELECT p.external_id AS project_id, rc.name AS resource_class, q.guarantee, q.\"limit\"
    FROM project_quotas q JOIN projects p ON p.id = q.project_id
    JOIN resource_classes rc ON rc.id = q.resource_class_id";

/// One project's quota.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn quota(conn: &mut PgConnection, project: i32) -> Result<Vec<QuotaRow>, sqlx::Error> {
    sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "{QUOTAS} WHERE q.project_id = $1 ORDER BY rc.name"
    )))
    .bind(project)
    .fetch_all(conn)
    .await
}

/// Every quota.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn all_quotas(conn: &mut PgConnection) -> Result<Vec<QuotaRow>, sqlx::Error> {
    sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "{QUOTAS} ORDER BY p.external_id, rc.name"
    )))
    .fetch_all(conn)
    .await
}

/// Replaces a project's quota: (class id, guarantee, limit) per class.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn replace_quota(
    conn: &mut PgConnection,
    project: i32,
    rows: &[(i32, Option<i64>, Option<i64>)],
) -> Result<(), sqlx::Error> {
    sqlx::query("DELETE FROM project_quotas WHERE project_id = $1")
        .bind(project)
        .execute(&mut *conn)
        .await?;
    let classes: Vec<i32> = rows.iter().map(|r| r.0).collect();
    let guarantees: Vec<Option<i64>> = rows.iter().map(|r| r.1).collect();
    let limits: Vec<Option<i64>> = rows.iter().map(|r| r.2).collect();
    sqlx::query(
        "INSERT INTO project_quotas (project_id, resource_class_id, guarantee, \"limit\")
         SELECT $1, * FROM UNNEST($2::int[], $3::bigint[], $4::bigint[])",
    )
    .bind(project)
    .bind(&classes)
    .bind(&guarantees)
    .bind(&limits)
    .execute(conn)
    .await?;
    Ok(())
}

/// A project subtree's holdings by class name.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Holdings {
    /// Allocations of the subtree's consumers.
    pub allocated: BTreeMap<String, i64>,
    /// Reservations of the subtree's projects.
    pub reserved: BTreeMap<String, i64>,
    /// Consumption against quota (see the module comment).
    pub consumed: BTreeMap<String, i64>,
}

/// What `project`'s subtree holds and consumes.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn holdings(conn: &mut PgConnection, project: i32) -> Result<Holdings, sqlx::Error> {
    let rows: Vec<(i32, String, i64, i64, i64)> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "{CONSUMPTION} SELECT root, rc.name, SUM(COALESCE(alloc.n, 0))::bigint, SUM(COALESCE(res.n, 0))::bigint,
                SUM(GREATEST(COALESCE(alloc.n, 0), COALESCE(res.n, 0)))::bigint
           FROM alloc FULL JOIN res USING (root, rp, class_id) JOIN resource_classes rc ON rc.id = class_id
          GROUP BY 1, 2"
    )))
    .bind(vec![project])
    .bind(None::<Vec<i32>>)
    .fetch_all(conn)
    .await?;
    let mut out = Holdings::default();
    for (_, class, allocated, reserved, consumed) in rows {
        for (map, n) in [
            (&mut out.allocated, allocated),
            (&mut out.reserved, reserved),
            (&mut out.consumed, consumed),
        ] {
            if n > 0 {
                map.insert(class.clone(), n);
            }
        }
    }
    Ok(out)
}

/// Per-root subtree allocations and reservations by provider and class;
/// `$1` the roots, `$2` the classes (NULL: all).
const CONSUMPTION: &str = "WITH RECURSIVE sub(root, id) AS (
        SELECT r, r FROM UNNEST($1::int[]) r
        UNION SELECT sub.root, f.project_id FROM project_fairness f JOIN sub ON f.parent_project_id = sub.id),
    alloc AS (
        SELECT sub.root, pa.resource_provider_id AS rp, pa.resource_class_id AS class_id, SUM(pa.used) AS n
          FROM sub JOIN project_allocations pa ON pa.project_id = sub.id
         WHERE $2::int[] IS NULL OR pa.resource_class_id = ANY($2)
         GROUP BY 1, 2, 3),
    res AS (
        SELECT sub.root, r.resource_provider_id AS rp, r.resource_class_id AS class_id, SUM(r.amount) AS n
          FROM sub JOIN project_reservations r ON r.project_id = sub.id
         WHERE $2::int[] IS NULL OR r.resource_class_id = ANY($2)
         GROUP BY 1, 2, 3)";

/// Consumption against quota of several project subtrees in some classes:
/// (project, class id) → units, from the per-project totals the
/// allocation triggers keep (`project_allocations`).
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn consumption(
    conn: &mut PgConnection,
    projects: &[i32],
    classes: Option<&[i32]>,
) -> Result<HashMap<(i32, i32), i64>, sqlx::Error> {
    let subtrees = subtrees(conn, projects).await?;
    consumption_of(conn, &subtrees, classes).await
}

/// Like [`consumption`], for subtrees already resolved: (project, members).
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn consumption_of(
    conn: &mut PgConnection,
    subtrees: &[(i32, Vec<i32>)],
    classes: Option<&[i32]>,
) -> Result<HashMap<(i32, i32), i64>, sqlx::Error> {
    let mut out = HashMap::new();
    for (root, members) in subtrees {
        let rows: Vec<(i32, i64)> = sqlx::query_as(
            "WITH alloc AS (
                 SELECT resource_provider_id AS rp, resource_class_id AS cls, SUM(used) AS n
                   FROM project_allocations
                  WHERE project_id = ANY($1) AND ($2::int[] IS NULL OR resource_class_id = ANY($2))
                  GROUP BY 1, 2),
             res AS (
                 SELECT resource_provider_id AS rp, resource_class_id AS cls, SUM(amount) AS n
                   FROM project_reservations
                  WHERE project_id = ANY($1) AND ($2::int[] IS NULL OR resource_class_id = ANY($2))
                  GROUP BY 1, 2)
             SELECT cls, SUM(GREATEST(COALESCE(alloc.n, 0), COALESCE(res.n, 0)))::bigint
               FROM alloc FULL JOIN res USING (rp, cls) GROUP BY 1",
        )
        .bind(members)
        .bind(classes)
        .fetch_all(&mut *conn)
        .await?;
        out.extend(rows.into_iter().map(|(c, n)| ((*root, c), n)));
    }
    Ok(out)
}

/// Each project with the ids of its subtree (itself included).
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn subtrees(
    conn: &mut PgConnection,
    projects: &[i32],
) -> Result<Vec<(i32, Vec<i32>)>, sqlx::Error> {
    let mut out: Vec<(i32, Vec<i32>)> = projects.iter().map(|&p| (p, vec![p])).collect();
    let has_children: bool = sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM project_fairness WHERE parent_project_id = ANY($1))",
    )
    .bind(projects)
    .fetch_one(&mut *conn)
    .await?;
    if !has_children {
        return Ok(out);
    }
    let rows: Vec<(i32, i32)> = sqlx::query_as(
        "WITH RECURSIVE sub(root, id) AS (
             SELECT r, r FROM UNNEST($1::int[]) r
             UNION SELECT sub.root, f.project_id FROM project_fairness f JOIN sub ON f.parent_project_id = sub.id)
         SELECT root, id FROM sub WHERE root <> id",
    )
    .bind(projects)
    .fetch_all(&mut *conn)
    .await?;
    for (root, id) in rows {
        if let Some(entry) = out.iter_mut().find(|(p, _)| *p == root) {
            entry.1.push(id);
        }
    }
    Ok(out)
}

/// A limit that a write could break.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct LimitRow {
    /// The limited project's id.
    pub project: i32,
    /// Its external id.
    pub project_id: String,
    /// The class id.
    pub class: i32,
    /// The class name.
    pub resource_class: String,
    /// The limit.
    pub limit: i64,
    /// Whether the project has sub-projects (whose consumption counts too).
    pub has_children: bool,
}

/// The limits, in the given classes, of the named projects and their
/// ancestors (`flat`: no project has a parent, a cheaper statement), taking each limited project's advisory lock on the way (in
/// project order) so that the caller's next statement reads consumption
/// no concurrent writer of those projects can change.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn limits_over(
    conn: &mut PgConnection,
    projects: &[String],
    classes: &[String],
    flat: bool,
) -> Result<Vec<LimitRow>, sqlx::Error> {
    let sql = if flat { FLAT_LIMITS } else { TREE_LIMITS };
    sqlx::query_as(sql)
        .bind(projects)
        .bind(classes)
        .bind(PROJECT_LOCK)
        .fetch_all(conn)
        .await
}

/// Limits of the named projects when no project has a parent.
const FLAT_LIMITS: &str =
    "SELECT l.*, pg_advisory_xact_lock($3, l.project) IS NOT NULL AS locked FROM (
        SELECT q.project_id AS project, p.external_id AS project_id, q.resource_class_id AS class,
               rc.name AS resource_class, q.\"limit\" AS limit, false AS has_children
          FROM projects p JOIN project_quotas q ON q.project_id = p.id
          JOIN resource_classes rc ON rc.id = q.resource_class_id
         WHERE p.external_id = ANY($1) AND q.\"limit\" IS NOT NULL AND rc.name = ANY($2)
         ORDER BY 1, 3 OFFSET 0) l";

/// Limits of the named projects and their ancestors.
const TREE_LIMITS: &str = "WITH RECURSIVE up(id, depth) AS (
        SELECT id, 0 FROM projects WHERE external_id = ANY($1)
        UNION SELECT f.parent_project_id, up.depth + 1 FROM project_fairness f JOIN up ON f.project_id = up.id
         WHERE f.parent_project_id IS NOT NULL AND up.depth < 1000)
    SELECT l.*, pg_advisory_xact_lock($3, l.project) IS NOT NULL AS locked FROM (
        SELECT DISTINCT q.project_id AS project, p.external_id AS project_id, q.resource_class_id AS class,
               rc.name AS resource_class, q.\"limit\" AS limit,
               EXISTS (SELECT 1 FROM project_fairness ch WHERE ch.parent_project_id = q.project_id) AS has_children
          FROM up JOIN project_quotas q ON q.project_id = up.id JOIN projects p ON p.id = q.project_id
          JOIN resource_classes rc ON rc.id = q.resource_class_id
         WHERE q.\"limit\" IS NOT NULL AND rc.name = ANY($2)
         ORDER BY 1, 3 OFFSET 0) l";

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
    let any: bool = sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM project_reservations
                         WHERE $1::bigint[] IS NULL OR resource_provider_id = ANY($1))",
    )
    .bind(providers)
    .fetch_one(&mut *conn)
    .await?;
    if !any {
        return Ok(HashMap::new());
    }
    let rows: Vec<(i64, i32, i64)> = sqlx::query_as(
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
    let rows: Vec<(String, i32)> = sqlx::query_as(
        "SELECT rc.name, r.amount FROM project_reservations r JOIN resource_classes rc ON rc.id = r.resource_class_id
          WHERE r.resource_provider_id = $1 AND r.project_id = $2 ORDER BY rc.name",
    )
    .bind(provider)
    .bind(project)
    .fetch_all(conn)
    .await?;
    Ok(rows.into_iter().map(|(c, n)| (c, i64::from(n))).collect())
}

/// Every reservation: (provider id, owner id, owner external id, class id, units).
pub type ReservationRow = (i64, i32, String, i32, i32);

/// Every reservation.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn all_reservations(conn: &mut PgConnection) -> Result<Vec<ReservationRow>, sqlx::Error> {
    sqlx::query_as(
        "SELECT r.resource_provider_id, r.project_id, p.external_id, r.resource_class_id, r.amount
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
    let rows: Vec<(i32, i64)> = sqlx::query_as(
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
    sqlx::query(
        "DELETE FROM project_reservations WHERE resource_provider_id = $1 AND project_id = $2",
    )
    .bind(provider)
    .bind(project)
    .execute(&mut *conn)
    .await?;
    let (classes, amounts): (Vec<i32>, Vec<i32>) = rows.iter().copied().unzip();
    sqlx::query(
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

/// Allocations of every project's own consumers: (external id, class id, units).
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn project_allocations(
    conn: &mut PgConnection,
) -> Result<Vec<(String, i32, i64)>, sqlx::Error> {
    sqlx::query_as(
        "SELECT p.external_id, pa.resource_class_id, SUM(pa.used)::bigint
           FROM project_allocations pa JOIN projects p ON p.id = pa.project_id
          GROUP BY 1, 2 HAVING SUM(pa.used) > 0 ORDER BY 1, 2",
    )
    .fetch_all(conn)
    .await
}

/// Allocations of every project's consumers per provider:
/// (external id, provider id, class id, units); for reservations' unused parts.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn project_allocations_on(
    conn: &mut PgConnection,
    providers: &[i64],
) -> Result<Vec<(String, i64, i32, i64)>, sqlx::Error> {
    sqlx::query_as(
        "SELECT p.external_id, pa.resource_provider_id, pa.resource_class_id, pa.used
           FROM project_allocations pa JOIN projects p ON p.id = pa.project_id
          WHERE pa.resource_provider_id = ANY($1) AND pa.used > 0",
    )
    .bind(providers)
    .fetch_all(conn)
    .await
}

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
    sqlx::query_scalar(
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
    Ok(sqlx::query(
        "DELETE FROM decline_filters WHERE project_id = $1 AND ($2::text IS NULL OR user_id = $2)",
    )
    .bind(project)
    .bind(user)
    .execute(conn)
    .await?
    .rows_affected())
}

/// An active decline filter: (project, user, provider id, refused resources).
pub type DeclineRow = (String, Option<String>, i64, serde_json::Value);

/// Decline filters still in force (expired ones are deleted on the way).
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn active_declines(conn: &mut PgConnection) -> Result<Vec<DeclineRow>, sqlx::Error> {
    sqlx::query("DELETE FROM decline_filters WHERE expires_at <= now()")
        .execute(&mut *conn)
        .await?;
    sqlx::query_as(
        "SELECT p.external_id, d.user_id, d.resource_provider_id, d.resources
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
    sqlx::query(
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

/// Units allocated on a provider, by class id.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn provider_usage(
    conn: &mut PgConnection,
    provider: i64,
) -> Result<HashMap<i32, i64>, sqlx::Error> {
    let rows: Vec<(i32, i64)> = sqlx::query_as(
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
    sqlx::query_as(
        "SELECT resource_class_id, SUM((total - reserved) * allocation_ratio)::float8
           FROM inventories GROUP BY 1 ORDER BY 1",
    )
    .fetch_all(conn)
    .await
}

/// Which of these consumers exist already.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn existing_consumers(
    conn: &mut PgConnection,
    uuids: &[uuid::Uuid],
) -> Result<Vec<uuid::Uuid>, sqlx::Error> {
    sqlx::query_scalar("SELECT uuid FROM consumers WHERE uuid = ANY($1) ORDER BY uuid")
        .bind(uuids)
        .fetch_all(conn)
        .await
}

/// External ids of a project's subtree (itself included).
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn subtree_names(
    conn: &mut PgConnection,
    project: i32,
) -> Result<Vec<String>, sqlx::Error> {
    sqlx::query_scalar(
        "WITH RECURSIVE sub(id) AS (
             SELECT $1::int
             UNION SELECT f.project_id FROM project_fairness f JOIN sub ON f.parent_project_id = sub.id)
         SELECT p.external_id FROM sub JOIN projects p ON p.id = sub.id",
    )
    .bind(project)
    .fetch_all(conn)
    .await
}

/// What fairness checks a write on these providers needs.
#[derive(Debug, Clone, Copy, sqlx::FromRow)]
pub struct Needed {
    /// Some project has a limit.
    pub limits: bool,
    /// Some reservation lies on these providers.
    pub reservations: bool,
    /// No project has a parent.
    pub flat: bool,
}

/// What fairness checks a write on these providers needs, in one cheap
/// statement, so that pools without quotas pay almost nothing.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn checks_needed(
    conn: &mut PgConnection,
    providers: &[i64],
) -> Result<Needed, sqlx::Error> {
    sqlx::query_as(
        "SELECT EXISTS (SELECT 1 FROM project_quotas WHERE \"limit\" IS NOT NULL) AS limits,
                EXISTS (SELECT 1 FROM project_reservations WHERE resource_provider_id = ANY($1)) AS reservations,
                NOT EXISTS (SELECT 1 FROM project_fairness WHERE parent_project_id IS NOT NULL) AS flat",
    )
    .bind(providers)
    .fetch_one(conn)
    .await
}
