//! Projects: ids, the DRF tree (weights, parents, allocation counts),
//! subtrees and the advisory locks writers and admission rounds take.

use sqlx::PgConnection;
use std::collections::HashMap;

/// Namespace of the per-project advisory locks.
pub(super) const PROJECT_LOCK: i32 = 0x5155_4f54;
/// Key of the admission-round advisory lock.
const ADMISSION_LOCK: i64 = 0x4144_4d49_5353_494f;

/// The projects table's id for an external project id, created if missing.
pub use crate::db::consumers::ensure_project;

/// The projects table's id for an external project id, if known.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn project_id(
    conn: &mut PgConnection,
    external: &str,
) -> Result<Option<i32>, sqlx::Error> {
    crate::db::query_scalar("SELECT id FROM projects WHERE external_id = $1")
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
        crate::db::query("SELECT pg_advisory_xact_lock($1, $2)")
            .bind(PROJECT_LOCK)
            .bind(id)
            .execute(&mut *conn)
            .await?;
    }
    Ok(())
}

/// Serialises admission rounds across processes until the transaction
/// ends, and turns PostgreSQL's JIT off for it: a round's reads over a
/// large queue or a freshly written pool are estimated dear enough to be
/// compiled, and compiling cost more than each read (0.2 s against 0.08 s
/// for the read of 80,000 pending requests).
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn lock_admissions(conn: &mut PgConnection) -> Result<(), sqlx::Error> {
    crate::db::query("SELECT pg_advisory_xact_lock($1), set_config('jit', 'off', true)")
        .bind(ADMISSION_LOCK)
        .execute(conn)
        .await?;
    Ok(())
}

/// The admissions lock, shared: a change to one pending request (a cancel)
/// waits for a running round and holds the next one off until it commits,
/// while such changes do not wait for each other.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn lock_admissions_shared(conn: &mut PgConnection) -> Result<(), sqlx::Error> {
    crate::db::query("SELECT pg_advisory_xact_lock_shared($1)")
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
    /// How its queued requests wait: `strict` or `best_effort`.
    pub queueing: String,
    /// Whether the service removes its advised queue consumers:
    /// `advise` or `enforce`.
    pub preemption: String,
    /// How long after the advice (`enforce` only).
    pub preemption_grace_seconds: i32,
    /// `never` or `lower_priority`.
    pub within_project_preemption: String,
}

const FAIRNESS: &str = "SELECT p.external_id AS project_id, pp.external_id AS parent_project_id,
        f.weight, f.allocation_count, f.queueing, f.preemption, f.preemption_grace_seconds,
        f.within_project_preemption
    FROM project_fairness f JOIN projects p ON p.id = f.project_id
    LEFT JOIN projects pp ON pp.id = f.parent_project_id";

/// One project's fairness settings.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn fairness(
    conn: &mut PgConnection,
    project: i32,
) -> Result<Option<FairnessRow>, sqlx::Error> {
    crate::db::query_as(sqlx::AssertSqlSafe(format!(
        "{FAIRNESS} WHERE f.project_id = $1"
    )))
    .bind(project)
    .fetch_optional(conn)
    .await
}

/// Every project's fairness settings.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn all_fairness(conn: &mut PgConnection) -> Result<Vec<FairnessRow>, sqlx::Error> {
    crate::db::query_as(sqlx::AssertSqlSafe(format!(
        "{FAIRNESS} ORDER BY p.external_id"
    )))
    .fetch_all(conn)
    .await
}

/// `project` and its ancestors, nearest first (stops at a cycle).
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn lineage(conn: &mut PgConnection, project: i32) -> Result<Vec<i32>, sqlx::Error> {
    crate::db::query_scalar(
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

/// A project's fairness settings to store.
#[derive(Debug, Clone)]
pub struct NewFairness<'a> {
    /// The parent's row id.
    pub parent: Option<i32>,
    /// DRF weight.
    pub weight: f64,
    /// `strict` or `best_effort`.
    pub queueing: &'a str,
    /// `advise` or `enforce`.
    pub preemption: &'a str,
    /// Seconds from advice to removal (`enforce`).
    pub preemption_grace_seconds: i32,
    /// `never` or `lower_priority`.
    pub within_project_preemption: &'a str,
}

/// Sets a project's fairness settings, keeping its allocation count.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn put_fairness(
    conn: &mut PgConnection,
    project: i32,
    new: &NewFairness<'_>,
) -> Result<(), sqlx::Error> {
    crate::db::query(
        "INSERT INTO project_fairness (project_id, parent_project_id, weight, queueing, preemption,
                                       preemption_grace_seconds, within_project_preemption)
         VALUES ($1, $2, $3, $4, $5, $6, $7)
         ON CONFLICT (project_id) DO UPDATE
            SET parent_project_id = EXCLUDED.parent_project_id, weight = EXCLUDED.weight,
                queueing = EXCLUDED.queueing, preemption = EXCLUDED.preemption,
                preemption_grace_seconds = EXCLUDED.preemption_grace_seconds,
                within_project_preemption = EXCLUDED.within_project_preemption, updated_at = now()",
    )
    .bind(project)
    .bind(new.parent)
    .bind(new.weight)
    .bind(new.queueing)
    .bind(new.preemption)
    .bind(new.preemption_grace_seconds)
    .bind(new.within_project_preemption)
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
    crate::db::query(
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

/// Each project with the ids of its subtree (itself included).
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn subtrees(
    conn: &mut PgConnection,
    projects: &[i32],
) -> Result<Vec<(i32, Vec<i32>)>, sqlx::Error> {
    let mut out: Vec<(i32, Vec<i32>)> = projects.iter().map(|&p| (p, vec![p])).collect();
    let has_children: bool = crate::db::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM project_fairness WHERE parent_project_id = ANY($1))",
    )
    .bind(projects)
    .fetch_one(&mut *conn)
    .await?;
    if !has_children {
        return Ok(out);
    }
    let rows: Vec<(i32, i32)> = crate::db::query_as(
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

/// The projects whose own consumers hold allocations (external ids).
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn projects_holding(conn: &mut PgConnection) -> Result<Vec<String>, sqlx::Error> {
    crate::db::query_scalar(
        "SELECT p.external_id FROM projects p
          WHERE EXISTS (SELECT 1 FROM project_allocations pa WHERE pa.project_id = p.id AND pa.used > 0)
          ORDER BY 1",
    )
    .fetch_all(conn)
    .await
}

/// Allocations of these projects' own consumers: (external id, class id, units).
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn project_allocations(
    conn: &mut PgConnection,
    projects: &[i32],
) -> Result<Vec<(String, i32, i64)>, sqlx::Error> {
    crate::db::query_as(
        // Per project through its key (a lateral join): a plan for the
        // whole array could choose to scan every project's rows.
        "SELECT p.external_id, s.resource_class_id, s.used
           FROM unnest($1::int[]) AS x(id) JOIN projects p ON p.id = x.id
           CROSS JOIN LATERAL (
               SELECT pa.resource_class_id, SUM(pa.used)::bigint AS used
                 FROM project_allocations pa WHERE pa.project_id = x.id
                GROUP BY 1 HAVING SUM(pa.used) > 0) s
          ORDER BY 1, 2",
    )
    .bind(projects)
    .fetch_all(conn)
    .await
}

/// Which of these consumers exist already.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn existing_consumers(
    conn: &mut PgConnection,
    uuids: &[uuid::Uuid],
) -> Result<Vec<uuid::Uuid>, sqlx::Error> {
    crate::db::query_scalar("SELECT uuid FROM consumers WHERE uuid = ANY($1) ORDER BY uuid")
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
    crate::db::query_scalar(
        "WITH RECURSIVE sub(id) AS (
             SELECT $1::int
             UNION SELECT f.project_id FROM project_fairness f JOIN sub ON f.parent_project_id = sub.id)
         SELECT p.external_id FROM sub JOIN projects p ON p.id = sub.id",
    )
    .bind(project)
    .fetch_all(conn)
    .await
}

/// Table ids of the known external project ids.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn project_ids(
    conn: &mut PgConnection,
    external: &[String],
) -> Result<HashMap<String, i32>, sqlx::Error> {
    let rows: Vec<(String, i32)> =
        crate::db::query_as("SELECT external_id, id FROM projects WHERE external_id = ANY($1)")
            .bind(external)
            .fetch_all(conn)
            .await?;
    Ok(rows.into_iter().collect())
}
