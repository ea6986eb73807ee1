//! Preemption advice and holds (`migrations/*_preemption.sql`): which
//! consumers a round advises removing for which waiting request, and the
//! room held for that request meanwhile. A hold is an amount added to the
//! waiting project's reservation on the provider (so the freed room is
//! unavailable to everyone else, by the reservations' own rules) and
//! taken off again when the request leaves `pending` or the hold lapses.

use sqlx::PgConnection;
use uuid::Uuid;

/// One consumer holding room the advice may take.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct HolderRow {
    /// The consumer.
    pub consumer_uuid: Uuid,
    /// Its project (external id).
    pub project_id: String,
    /// Provider row id.
    pub provider_id: i64,
    /// Class name.
    pub class_name: String,
    /// Units held.
    pub used: i64,
    /// Consumer row id (larger is newer).
    pub consumer_id: i64,
    /// 0 prod, 1 mid, 2 batch, 3 free.
    pub priority_class: i32,
    /// Priority inside the class.
    pub priority: i64,
    /// The service may remove it itself: admitted through the queue, in a
    /// project that enforces preemption.
    pub removable: bool,
}

/// Every allocation with its consumer's project and priority.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn holders(conn: &mut PgConnection) -> Result<Vec<HolderRow>, sqlx::Error> {
    crate::db::query_as(
        "SELECT c.uuid AS consumer_uuid, p.external_id AS project_id,
                a.resource_provider_id AS provider_id, rc.name AS class_name,
                a.used::int8 AS used, c.id AS consumer_id,
                coalesce(cp.priority_class::int4,
                         CASE q.request->>'priority_class' WHEN 'mid' THEN 1 WHEN 'batch' THEN 2
                                                            WHEN 'free' THEN 3 ELSE 0 END) AS priority_class,
                coalesce(cp.priority, (q.request->>'priority')::int4, 0)::int8 AS priority,
                (q.id IS NOT NULL AND f.preemption IS NOT DISTINCT FROM 'enforce') AS removable
         FROM allocations a
         JOIN consumers c ON c.id = a.consumer_id
         JOIN projects p ON p.id = c.project_id
         JOIN resource_classes rc ON rc.id = a.resource_class_id
         LEFT JOIN consumer_priorities cp ON cp.consumer_uuid = c.uuid
         LEFT JOIN queue_requests q ON q.consumer_uuid = c.uuid AND q.state = 'admitted'
         LEFT JOIN project_fairness f ON f.project_id = p.id",
    )
    .fetch_all(conn)
    .await
}

/// Weights (default 1) of the named projects.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn weights(
    conn: &mut PgConnection,
    projects: &[String],
) -> Result<Vec<(String, f64)>, sqlx::Error> {
    crate::db::query_as(
        "SELECT p.external_id, coalesce(f.weight, 1.0)
         FROM projects p LEFT JOIN project_fairness f ON f.project_id = p.id
         WHERE p.external_id = ANY($1)",
    )
    .bind(projects)
    .fetch_all(conn)
    .await
}

/// The projects whose waiting requests may take room from their own
/// work of lower precedence (`within_project_preemption`).
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn preempting_within(conn: &mut PgConnection) -> Result<Vec<String>, sqlx::Error> {
    crate::db::query_scalar(
        "SELECT p.external_id FROM project_fairness f JOIN projects p ON p.id = f.project_id
         WHERE f.within_project_preemption = 'lower_priority'",
    )
    .fetch_all(conn)
    .await
}

/// One advised victim.
#[derive(Debug, Clone)]
pub struct NewAdvice {
    /// The waiting request.
    pub request_id: Uuid,
    /// The consumer to remove.
    pub consumer_uuid: Uuid,
    /// Its project.
    pub victim_project_id: String,
    /// Where the room is made.
    pub provider_uuid: Uuid,
}

/// Replaces every advice with this round's. A consumer advised again
/// for the same request keeps its first `advised_at`: enforced
/// preemption's grace runs from there.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn replace_advice(
    conn: &mut PgConnection,
    round: Uuid,
    rows: &[NewAdvice],
) -> Result<(), sqlx::Error> {
    let requests: Vec<Uuid> = rows.iter().map(|r| r.request_id).collect();
    let consumers: Vec<Uuid> = rows.iter().map(|r| r.consumer_uuid).collect();
    let projects: Vec<&str> = rows.iter().map(|r| r.victim_project_id.as_str()).collect();
    let providers: Vec<Uuid> = rows.iter().map(|r| r.provider_uuid).collect();
    crate::db::query(
        "DELETE FROM preemption_advice a
          WHERE (a.request_id, a.consumer_uuid) NOT IN
                (SELECT * FROM unnest($1::uuid[], $2::uuid[]))",
    )
    .bind(&requests)
    .bind(&consumers)
    .execute(&mut *conn)
    .await?;
    if rows.is_empty() {
        return Ok(());
    }
    crate::db::query(
        "INSERT INTO preemption_advice (request_id, consumer_uuid, victim_project_id, resource_provider_uuid, round_id)
         SELECT r, c, p, rp, $5 FROM unnest($1::uuid[], $2::uuid[], $3::text[], $4::uuid[]) AS t(r, c, p, rp)
         ON CONFLICT (request_id, consumer_uuid) DO UPDATE
            SET round_id = EXCLUDED.round_id, resource_provider_uuid = EXCLUDED.resource_provider_uuid,
                victim_project_id = EXCLUDED.victim_project_id",
    )
    .bind(&requests)
    .bind(&consumers)
    .bind(&projects)
    .bind(&providers)
    .bind(round)
    .execute(conn)
    .await?;
    Ok(())
}

/// The advice due for removal by the service: advised victims of
/// projects that enforce preemption, admitted through the queue, whose
/// grace has run out, for requests still pending; each victim once. Only
/// whole sets: a request's victims are removed only when every one of
/// them is due, since the removals alone admit it only then (the rest
/// would be removed for nothing while its owner has not acted). A victim
/// admitted in a gang brings the gang's other admitted members with it
/// (`gang_members`): a gang runs whole or not at all.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn due(conn: &mut PgConnection) -> Result<Vec<AdviceRow>, sqlx::Error> {
    crate::db::query_as(
        "WITH advised AS (
            SELECT a.consumer_uuid, a.victim_project_id, a.resource_provider_uuid, a.request_id,
                   q.project_id AS request_project_id, q.request, a.round_id, a.advised_at,
                   coalesce(v.id IS NOT NULL AND f.preemption = 'enforce'
                            AND a.advised_at <= now() - make_interval(secs => f.preemption_grace_seconds),
                            false) AS ready
            FROM preemption_advice a
            JOIN queue_requests q ON q.id = a.request_id AND q.state = 'pending'
            LEFT JOIN queue_requests v ON v.consumer_uuid = a.consumer_uuid AND v.state = 'admitted'
            LEFT JOIN projects p ON p.external_id = a.victim_project_id
            LEFT JOIN project_fairness f ON f.project_id = p.id)
         SELECT DISTINCT ON (e.consumer_uuid)
                e.consumer_uuid, e.victim_project_id, e.resource_provider_uuid, e.request_id,
                e.request_project_id, e.request, e.round_id, e.advised_at,
                NULL::timestamptz AS held_until
         FROM advised e
         WHERE e.ready
           AND NOT EXISTS (SELECT 1 FROM advised o WHERE o.request_id = e.request_id AND NOT o.ready)
         ORDER BY e.consumer_uuid, e.advised_at, e.request_id",
    )
    .fetch_all(conn)
    .await
}

/// The other consumers admitted in `consumer`'s gang (none outside one).
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn gang_members(
    conn: &mut PgConnection,
    consumer: Uuid,
) -> Result<Vec<Uuid>, sqlx::Error> {
    crate::db::query_scalar(
        "SELECT o.consumer_uuid FROM queue_requests v
           JOIN queue_requests o ON o.request->>'gang' = v.request->>'gang'
                                AND o.project_id = v.project_id AND o.state = 'admitted'
          WHERE v.consumer_uuid = $1 AND v.state = 'admitted' AND v.request->>'gang' IS NOT NULL
            AND o.consumer_uuid <> $1
          ORDER BY o.seq",
    )
    .bind(consumer)
    .fetch_all(conn)
    .await
}

/// Records a preemption carried out: the advice it followed and the
/// allocations removed (provider uuid → `{"resources": …}`); the advice
/// naming that consumer ends.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn record_enforced(
    conn: &mut PgConnection,
    advice: &AdviceRow,
    removed: &serde_json::Value,
    requeued_as: Option<Uuid>,
) -> Result<(), sqlx::Error> {
    crate::db::query(
        "WITH ended AS (DELETE FROM preemption_advice WHERE consumer_uuid = $1)
         INSERT INTO preemption_events (consumer_uuid, project_id, resource_provider_uuid, request_id,
                                        request_project_id, request, removed, round_id, advised_at,
                                        requeued_as)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
    )
    .bind(advice.consumer_uuid)
    .bind(&advice.victim_project_id)
    .bind(advice.resource_provider_uuid)
    .bind(advice.request_id)
    .bind(&advice.request_project_id)
    .bind(&advice.request)
    .bind(removed)
    .bind(advice.round_id)
    .bind(advice.advised_at)
    .bind(requeued_as)
    .execute(conn)
    .await?;
    Ok(())
}

/// One preemption carried out, as listed.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct EventRow {
    /// The advice it followed (`held_until` none).
    #[sqlx(flatten)]
    pub advice: AdviceRow,
    /// The allocations removed.
    pub removed: serde_json::Value,
    /// The request queued again for the consumer, if it asked.
    pub requeued_as: Option<Uuid>,
    /// When.
    pub enforced_at: chrono::DateTime<chrono::Utc>,
}

/// The preemptions carried out, newest first, a victim project's only
/// when named; at most `limit`.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn events(
    conn: &mut PgConnection,
    project: Option<&str>,
    limit: i64,
) -> Result<Vec<EventRow>, sqlx::Error> {
    crate::db::query_as(
        "SELECT consumer_uuid, project_id AS victim_project_id, resource_provider_uuid, request_id,
                request_project_id, request, round_id, advised_at, NULL::timestamptz AS held_until,
                removed, enforced_at, requeued_as
         FROM preemption_events
         WHERE $1::text IS NULL OR project_id = $1
         ORDER BY id DESC LIMIT $2",
    )
    .bind(project)
    .bind(limit)
    .fetch_all(conn)
    .await
}

/// Drops preemption events older than the retention window; how many.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn prune_events(conn: &mut PgConnection, keep_secs: u64) -> Result<u64, sqlx::Error> {
    let keep = i64::try_from(keep_secs).unwrap_or(i64::MAX);
    let done = crate::db::query(
        "DELETE FROM preemption_events
         WHERE enforced_at < now() - make_interval(secs => $1::double precision)",
    )
    .bind(keep)
    .execute(conn)
    .await?;
    Ok(done.rows_affected())
}

/// Room to hold for one waiting request on one provider.
#[derive(Debug, Clone)]
pub struct NewHold {
    /// The waiting request.
    pub request_id: Uuid,
    /// Provider row id.
    pub provider_id: i64,
    /// The waiting project's row id.
    pub project_id: i32,
    /// (class row id, units).
    pub amounts: Vec<(i32, i32)>,
}

/// Holds room for requests that hold none yet, for `seconds`: each hold
/// adds its units to the project's reservation on the provider.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn hold(
    conn: &mut PgConnection,
    holds: &[NewHold],
    seconds: u64,
) -> Result<(), sqlx::Error> {
    let (mut requests, mut providers, mut projects, mut classes, mut amounts) =
        (vec![], vec![], vec![], vec![], vec![]);
    for h in holds {
        for &(class, amount) in &h.amounts {
            requests.push(h.request_id);
            providers.push(h.provider_id);
            projects.push(h.project_id);
            classes.push(class);
            amounts.push(amount);
        }
    }
    if requests.is_empty() {
        return Ok(());
    }
    let keep = i64::try_from(seconds).unwrap_or(i64::MAX);
    crate::db::query(
        "WITH held AS (
             INSERT INTO preemption_holds (request_id, resource_provider_id, project_id, resource_class_id, amount, expires_at)
             SELECT r, rp, p, c, n, now() + make_interval(secs => $6::double precision)
             FROM unnest($1::uuid[], $2::int8[], $3::int4[], $4::int4[], $5::int4[]) AS t(r, rp, p, c, n)
             WHERE NOT EXISTS (SELECT 1 FROM preemption_holds h WHERE h.request_id = t.r)
             ON CONFLICT DO NOTHING
             RETURNING resource_provider_id, project_id, resource_class_id, amount)
         INSERT INTO project_reservations (resource_provider_id, project_id, resource_class_id, amount)
         SELECT resource_provider_id, project_id, resource_class_id, sum(amount)::int4 FROM held GROUP BY 1, 2, 3
         ON CONFLICT (resource_provider_id, project_id, resource_class_id)
         DO UPDATE SET amount = project_reservations.amount + EXCLUDED.amount",
    )
    .bind(&requests)
    .bind(&providers)
    .bind(&projects)
    .bind(&classes)
    .bind(&amounts)
    .bind(keep)
    .execute(conn)
    .await?;
    Ok(())
}

/// Renews the holds of `requests` (still waiting for room this round) to
/// last `seconds` from now: a hold lives as long as its request waits, so
/// the advice it keeps in place, the advice's first `advised_at` and a
/// grace longer than the hold all stay put, and room reserved against
/// starvation is not handed back before the request fits. A request that
/// stops waiting for room is not renewed, and its hold lapses.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn renew(
    conn: &mut PgConnection,
    requests: &std::collections::HashSet<Uuid>,
    seconds: u64,
) -> Result<u64, sqlx::Error> {
    if requests.is_empty() {
        return Ok(0);
    }
    // The holds are few (one reservation against starvation, the advised
    // requests'); the waiting requests may be 100,000: the few are read
    // and matched here rather than the many sent.
    let held: Vec<Uuid> =
        crate::db::query_scalar("SELECT DISTINCT request_id FROM preemption_holds")
            .fetch_all(&mut *conn)
            .await?;
    let requests: Vec<Uuid> = held.into_iter().filter(|r| requests.contains(r)).collect();
    if requests.is_empty() {
        return Ok(0);
    }
    let keep = i64::try_from(seconds).unwrap_or(i64::MAX);
    let done = crate::db::query(
        "UPDATE preemption_holds SET expires_at = now() + make_interval(secs => $2::double precision)
          WHERE request_id = ANY($1)",
    )
    .bind(&requests)
    .bind(keep)
    .execute(conn)
    .await?;
    Ok(done.rows_affected())
}

/// Whether room is held for any pending request now.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn any_held(conn: &mut PgConnection) -> Result<bool, sqlx::Error> {
    crate::db::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM preemption_holds h JOIN queue_requests q ON q.id = h.request_id
                         WHERE q.state = 'pending' AND h.expires_at > now())",
    )
    .fetch_one(conn)
    .await
}

/// The provider each of `requests` holds room on, where it holds any.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn held_on(
    conn: &mut PgConnection,
    requests: &[Uuid],
) -> Result<Vec<(Uuid, i64)>, sqlx::Error> {
    crate::db::query_as(
        "SELECT DISTINCT request_id, resource_provider_id FROM preemption_holds
         WHERE request_id = ANY($1)",
    )
    .bind(requests)
    .fetch_all(conn)
    .await
}

/// Ends the holds of requests no longer pending and the holds past their
/// time, taking their units off the reservations they were added to.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn release(conn: &mut PgConnection) -> Result<u64, sqlx::Error> {
    let done = crate::db::query(
        "WITH gone AS (
             DELETE FROM preemption_holds h USING queue_requests q
             WHERE q.id = h.request_id AND (q.state <> 'pending' OR h.expires_at <= now())
             RETURNING h.resource_provider_id, h.project_id, h.resource_class_id, h.amount),
         sums AS (
             SELECT resource_provider_id, project_id, resource_class_id, sum(amount) AS amount
             FROM gone GROUP BY 1, 2, 3),
         lowered AS (
             UPDATE project_reservations r SET amount = r.amount - s.amount FROM sums s
             WHERE (r.resource_provider_id, r.project_id, r.resource_class_id)
                 = (s.resource_provider_id, s.project_id, s.resource_class_id)
               AND r.amount > s.amount
             RETURNING 1)
         DELETE FROM project_reservations r USING sums s
         WHERE (r.resource_provider_id, r.project_id, r.resource_class_id)
             = (s.resource_provider_id, s.project_id, s.resource_class_id)
           AND r.amount <= s.amount",
    )
    .execute(conn)
    .await?;
    Ok(done.rows_affected())
}

/// One advised victim as listed.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct AdviceRow {
    /// The consumer to remove.
    pub consumer_uuid: Uuid,
    /// Its project.
    pub victim_project_id: String,
    /// Where the room is made.
    pub resource_provider_uuid: Uuid,
    /// The waiting request it makes room for.
    pub request_id: Uuid,
    /// The waiting request's project.
    pub request_project_id: String,
    /// What the waiting request needs.
    pub request: serde_json::Value,
    /// The round that advised it.
    pub round_id: Uuid,
    /// When.
    pub advised_at: chrono::DateTime<chrono::Utc>,
    /// Until when the freed room is held for the request.
    pub held_until: Option<chrono::DateTime<chrono::Utc>>,
}

/// The advice in force, a victim project's only when named.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn list(
    conn: &mut PgConnection,
    project: Option<&str>,
) -> Result<Vec<AdviceRow>, sqlx::Error> {
    crate::db::query_as(
        "SELECT a.consumer_uuid, a.victim_project_id, a.resource_provider_uuid, a.request_id,
                q.project_id AS request_project_id, q.request, a.round_id, a.advised_at,
                (SELECT max(h.expires_at) FROM preemption_holds h WHERE h.request_id = a.request_id) AS held_until
         FROM preemption_advice a JOIN queue_requests q ON q.id = a.request_id
         WHERE q.state = 'pending' AND ($1::text IS NULL OR a.victim_project_id = $1)
           AND EXISTS (SELECT 1 FROM consumers c WHERE c.uuid = a.consumer_uuid)
         ORDER BY a.advised_at, a.request_id, a.consumer_uuid",
    )
    .bind(project)
    .fetch_all(conn)
    .await
}
