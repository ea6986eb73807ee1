//! Quotas: guarantees and limits, what a project subtree consumes against
//! them, and the limit lookup (with its locks) of the allocation write.

use super::projects::{subtrees, PROJECT_LOCK};
use sqlx::PgConnection;
use std::collections::{BTreeMap, HashMap};

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
    /// Of the unused guarantee, what may be lent to others (none: nothing).
    pub lending_limit: Option<i64>,
}

/// One class of a quota to store.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct NewQuotaClass {
    /// Class row id.
    pub class_id: i32,
    /// Guarantee, if any.
    pub guarantee: Option<i64>,
    /// Limit, if any.
    pub limit: Option<i64>,
    /// Lending limit, if any (≤ the guarantee).
    pub lending_limit: Option<i64>,
}

const QUOTAS: &str =
    "SELECT p.external_id AS project_id, rc.name AS resource_class, q.guarantee, q.\"limit\", q.lending_limit
    FROM project_quotas q JOIN projects p ON p.id = q.project_id
    JOIN resource_classes rc ON rc.id = q.resource_class_id";

/// One project's quota.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn quota(conn: &mut PgConnection, project: i32) -> Result<Vec<QuotaRow>, sqlx::Error> {
    crate::db::query_as(sqlx::AssertSqlSafe(format!(
        "{QUOTAS} WHERE q.project_id = $1 ORDER BY rc.name"
    )))
    .bind(project)
    .fetch_all(conn)
    .await
}

/// Every quota.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn all_quotas(conn: &mut PgConnection) -> Result<Vec<QuotaRow>, sqlx::Error> {
    crate::db::query_as(sqlx::AssertSqlSafe(format!(
        "{QUOTAS} ORDER BY p.external_id, rc.name"
    )))
    .fetch_all(conn)
    .await
}

/// Replaces a project's quota.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn replace_quota(
    conn: &mut PgConnection,
    project: i32,
    rows: &[NewQuotaClass],
) -> Result<(), sqlx::Error> {
    crate::db::query("DELETE FROM project_quotas WHERE project_id = $1")
        .bind(project)
        .execute(&mut *conn)
        .await?;
    let classes: Vec<i32> = rows.iter().map(|r| r.class_id).collect();
    let guarantees: Vec<Option<i64>> = rows.iter().map(|r| r.guarantee).collect();
    let limits: Vec<Option<i64>> = rows.iter().map(|r| r.limit).collect();
    let lending: Vec<Option<i64>> = rows.iter().map(|r| r.lending_limit).collect();
    crate::db::query(
        "INSERT INTO project_quotas (project_id, resource_class_id, guarantee, \"limit\", lending_limit)
         SELECT $1, * FROM UNNEST($2::int[], $3::bigint[], $4::bigint[], $5::bigint[])",
    )
    .bind(project)
    .bind(&classes)
    .bind(&guarantees)
    .bind(&limits)
    .bind(&lending)
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
pub async fn holdings(conn: &mut PgConnection, project: i32) -> Result<Holdings, sqlx::Error> {
    Ok(holdings_of(conn, &[project])
        .await?
        .remove(&project)
        .unwrap_or_default())
}

/// The room held for the waiting queued requests of `project`'s subtree
/// (preemption holds, which are part of its reservations), by class name.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn held_for_requests(
    conn: &mut PgConnection,
    project: i32,
) -> Result<BTreeMap<String, i64>, sqlx::Error> {
    let rows: Vec<(String, i64)> = crate::db::query_as(
        "WITH RECURSIVE sub(id) AS (
             SELECT $1::int
             UNION SELECT f.project_id FROM project_fairness f JOIN sub ON f.parent_project_id = sub.id)
         SELECT rc.name, SUM(h.amount)::bigint
           FROM preemption_holds h JOIN sub ON h.project_id = sub.id
           JOIN resource_classes rc ON rc.id = h.resource_class_id
          GROUP BY 1",
    )
    .bind(project)
    .fetch_all(conn)
    .await?;
    Ok(rows.into_iter().filter(|(_, n)| *n > 0).collect())
}

/// What each project's subtree holds and consumes, in one statement.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn holdings_of(
    conn: &mut PgConnection,
    projects: &[i32],
) -> Result<HashMap<i32, Holdings>, sqlx::Error> {
    let rows: Vec<(i32, String, i64, i64, i64)> = crate::db::query_as(sqlx::AssertSqlSafe(format!(
        "{CONSUMPTION} SELECT root, rc.name, SUM(COALESCE(alloc.n, 0))::bigint, SUM(COALESCE(res.n, 0))::bigint,
                SUM(GREATEST(COALESCE(alloc.n, 0), COALESCE(res.n, 0)))::bigint
           FROM alloc FULL JOIN res USING (root, rp, class_id) JOIN resource_classes rc ON rc.id = class_id
          GROUP BY 1, 2"
    )))
    .bind(projects)
    .bind(None::<Vec<i32>>)
    .fetch_all(conn)
    .await?;
    let mut out: HashMap<i32, Holdings> = HashMap::new();
    for (root, class, allocated, reserved, consumed) in rows {
        let held = out.entry(root).or_default();
        for (map, n) in [
            (&mut held.allocated, allocated),
            (&mut held.reserved, reserved),
            (&mut held.consumed, consumed),
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
    // One statement for every subtree: (root, member) pairs.
    let (roots, members): (Vec<i32>, Vec<i32>) = subtrees
        .iter()
        .flat_map(|(root, members)| members.iter().map(move |m| (*root, *m)))
        .unzip();
    if roots.is_empty() {
        return Ok(HashMap::new());
    }
    let rows: Vec<(i32, i32, i64)> = crate::db::query_as(
        "WITH m AS (SELECT * FROM unnest($1::int[], $2::int[]) AS m(root, member)),
         alloc AS (
             SELECT m.root, pa.resource_provider_id AS rp, pa.resource_class_id AS cls, SUM(pa.used) AS n
               FROM project_allocations pa JOIN m ON pa.project_id = m.member
              WHERE $3::int[] IS NULL OR pa.resource_class_id = ANY($3)
              GROUP BY 1, 2, 3),
         res AS (
             SELECT m.root, r.resource_provider_id AS rp, r.resource_class_id AS cls, SUM(r.amount) AS n
               FROM project_reservations r JOIN m ON r.project_id = m.member
              WHERE $3::int[] IS NULL OR r.resource_class_id = ANY($3)
              GROUP BY 1, 2, 3)
         SELECT root, cls, SUM(GREATEST(COALESCE(alloc.n, 0), COALESCE(res.n, 0)))::bigint
           FROM alloc FULL JOIN res USING (root, rp, cls) GROUP BY 1, 2",
    )
    .bind(&roots)
    .bind(&members)
    .bind(classes)
    .fetch_all(&mut *conn)
    .await?;
    Ok(rows.into_iter().map(|(r, c, n)| ((r, c), n)).collect())
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
/// ancestors, taking each limited project's advisory lock on the way (in
/// project order) so that the caller's next statement reads consumption
/// no concurrent writer of those projects can change.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn limits_over(
    conn: &mut PgConnection,
    projects: &[String],
    classes: &[String],
) -> Result<Vec<LimitRow>, sqlx::Error> {
    crate::db::query_as(TREE_LIMITS)
        .bind(projects)
        .bind(classes)
        .bind(PROJECT_LOCK)
        .fetch_all(conn)
        .await
}

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

/// What fairness checks a write on these providers needs.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Needed {
    /// A writer's project, or one of its ancestors, has a limit in a
    /// written class.
    pub limits: bool,
    /// Some reservation lies on these providers.
    pub reservations: bool,
    /// No project has a parent.
    pub flat: bool,
    /// The written consumers whose priority class is batch or free (they
    /// may use only the batch classes, and only they may).
    pub low_priority: Vec<uuid::Uuid>,
}

/// What fairness checks a write needs, and which of its consumers are low
/// priority, in one cheap statement, so that pools without quotas (or
/// writers without limits) pay almost nothing.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn checks_needed(
    conn: &mut PgConnection,
    providers: &[i64],
    projects: &[String],
    classes: &[i32],
    consumers: &[uuid::Uuid],
) -> Result<Needed, sqlx::Error> {
    crate::db::query_as(
        "WITH RECURSIVE up(id, depth) AS (
             SELECT id, 0 FROM projects WHERE external_id = ANY($2)
             UNION SELECT f.parent_project_id, up.depth + 1 FROM project_fairness f JOIN up ON f.project_id = up.id
              WHERE f.parent_project_id IS NOT NULL AND up.depth < 1000)
         SELECT EXISTS (SELECT 1 FROM up JOIN project_quotas q ON q.project_id = up.id
                         WHERE q.\"limit\" IS NOT NULL AND q.resource_class_id = ANY($3)) AS limits,
                EXISTS (SELECT 1 FROM project_reservations WHERE resource_provider_id = ANY($1)) AS reservations,
                NOT EXISTS (SELECT 1 FROM project_fairness WHERE parent_project_id IS NOT NULL) AS flat,
                ARRAY(SELECT consumer_uuid FROM consumer_priorities
                       WHERE consumer_uuid = ANY($4) AND priority_class >= 2) AS low_priority",
    )
    .bind(providers)
    .bind(projects)
    .bind(classes)
    .bind(consumers)
    .fetch_one(conn)
    .await
}

/// A limit with what its project consumes now.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct LimitUse {
    /// The limit.
    #[sqlx(flatten)]
    pub limit: LimitRow,
    /// The project's consumption in the class (see [`consumption`]).
    pub consumed: i64,
}

/// Bumps the providers' generations (they are locked by the caller), then
/// answers the limits of the named projects in the given classes with
/// their consumption, when no project has a parent: the allocation write's
/// last statement in the common case, one round trip that also locks the
/// limited projects (the migration of `bump_then_flat_limits_used` says
/// why all three go together).
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn bump_then_flat_limits_used(
    conn: &mut PgConnection,
    bump: &[i64],
    projects: &[String],
    classes: &[i32],
) -> Result<Vec<LimitUse>, sqlx::Error> {
    crate::db::query_as("SELECT * FROM bump_then_flat_limits_used($1, $2, $3, $4)")
        .bind(bump)
        .bind(projects)
        .bind(classes)
        .bind(PROJECT_LOCK)
        .fetch_all(conn)
        .await
}

/// The projects (external ids) a limit applies to: those with a limit in
/// any class, and every project below one.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn limited_projects(conn: &mut PgConnection) -> Result<Vec<String>, sqlx::Error> {
    crate::db::query_scalar(
        "WITH RECURSIVE limited(id, depth) AS (
             SELECT DISTINCT project_id, 0 FROM project_quotas WHERE \"limit\" IS NOT NULL
             UNION SELECT f.project_id, l.depth + 1 FROM project_fairness f
                     JOIN limited l ON f.parent_project_id = l.id WHERE l.depth < 1000)
         SELECT DISTINCT p.external_id FROM limited l JOIN projects p ON p.id = l.id",
    )
    .fetch_all(conn)
    .await
}
