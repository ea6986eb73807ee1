//! The fair queue's rows (`migrations/*_queue.sql`): submitted requests,
//! their state, the last round's reason and, once admitted, where.

use sqlx::PgConnection;
use uuid::Uuid;

/// The channel the queue's wake-ups and decisions go out on.
pub const QUEUE_CHANNEL: &str = "placement_queue";

/// The session advisory lock the round leader holds.
const QUEUE_LEADER_LOCK: i64 = 0x5155_4555_4c45_4144; // "QUEUELEAD"

/// A request to store.
#[derive(Debug, Clone)]
pub struct NewQueued {
    /// Its id.
    pub id: Uuid,
    /// The consumer to create when admitted.
    pub consumer_uuid: Uuid,
    /// Owner.
    pub project_id: String,
    /// Owner.
    pub user_id: String,
    /// The request's own fields, as JSON text.
    pub request: String,
    /// Seconds until it expires, if it does.
    pub expires_in: Option<f64>,
}

/// One stored request.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct QueuedRow {
    /// Its id.
    pub id: Uuid,
    /// FIFO order.
    pub seq: i64,
    /// The consumer to create.
    pub consumer_uuid: Uuid,
    /// Owner.
    pub project_id: String,
    /// Owner.
    pub user_id: String,
    /// The request's own fields.
    pub request: serde_json::Value,
    /// pending, admitted, cancelled or expired.
    pub state: String,
    /// The last round's reason (pending).
    pub reason: Option<String>,
    /// The round that admitted it.
    pub round_id: Option<Uuid>,
    /// Where it was admitted.
    pub allocations: Option<serde_json::Value>,
    /// When it was queued.
    pub submitted_at: chrono::DateTime<chrono::Utc>,
    /// When it expires.
    pub expires_at: Option<chrono::DateTime<chrono::Utc>>,
    /// When it left `pending`.
    pub decided_at: Option<chrono::DateTime<chrono::Utc>>,
    /// Pending requests of its project at or before it (pending only).
    pub position_in_project: Option<i64>,
    /// The provider where preemption advice holds room for it, if any.
    pub held_on: Option<Uuid>,
    /// Until when that room is held.
    pub held_until: Option<chrono::DateTime<chrono::Utc>>,
    /// Not tried before then (queued again after a preemption).
    pub eligible_at: Option<chrono::DateTime<chrono::Utc>>,
    /// Times its consumer was preempted and queued again.
    pub requeues: i32,
    /// The database's clock, for waiting times.
    pub now: chrono::DateTime<chrono::Utc>,
}

/// A pending request's reason is the last round's: its own row in
/// `queue_reasons`, or else the round's common reason when the round saw
/// it (`migrations/*_queue_common_reason.sql`). One that left `pending`
/// keeps the reason it left with on its own row. The last round's row is
/// read through init plans: joined, that one-row table has no statistics,
/// and the join's estimate made PostgreSQL compile a read of the whole
/// queue with JIT (0.4 s).
///
/// A pending request past its time is `expired` whether or not a round
/// has said so yet: every read (one, a list, a list by state) says it the
/// same way.
///
/// `{POSITION}` is the request's place among its project's pending
/// requests, written by the reader of one row ([`ONE_POSITION`]) or of a
/// page ([`PAGE_POSITION`]).
const COLUMNS: &str = "q.id, q.seq, q.consumer_uuid, q.project_id, q.user_id, q.request,
    CASE WHEN q.state = 'pending' AND q.expires_at <= now() THEN 'expired' ELSE q.state END AS state,
    CASE WHEN q.state = 'pending' AND q.eligible_at > now() THEN 'requeue_backoff'
         WHEN q.state = 'pending' THEN coalesce(
            (SELECT r.reason FROM queue_reasons r WHERE r.seq = q.seq),
            CASE WHEN q.xact IS NULL
                   OR pg_visible_in_snapshot(q.xact, (SELECT snapshot FROM queue_last_round))
                 THEN (SELECT reason FROM queue_last_round) END)
         ELSE q.reason END AS reason,
    q.round_id, q.allocations, q.submitted_at, q.expires_at, q.decided_at,
    CASE WHEN q.state = 'pending' AND (q.expires_at IS NULL OR q.expires_at > now())
        THEN {POSITION} END AS position_in_project,
    (SELECT rp.uuid FROM preemption_holds h JOIN resource_providers rp ON rp.id = h.resource_provider_id
      WHERE h.request_id = q.id LIMIT 1) AS held_on,
    (SELECT max(h.expires_at) FROM preemption_holds h WHERE h.request_id = q.id) AS held_until,
    q.eligible_at, q.requeues, now() AS now";

/// The place of one request among its project's live pending requests
/// (not past their time): one index-only count over the project's pending
/// index (`migrations/*_queue_position_index.sql`).
const ONE_POSITION: &str = "(SELECT count(*) FROM queue_requests o
    WHERE o.state = 'pending' AND (o.expires_at IS NULL OR o.expires_at > now())
      AND o.project_id = q.project_id AND o.seq <= q.seq)";

/// The place of each request of a page (`page`, read after sequence
/// number `$3`) among its project's pending requests: the project's
/// pending requests up to the marker, counted once per project of the
/// page (`before_page`), plus its pending requests on the page up to the
/// row. Every pending request of a project between the marker and a
/// pending row is on the page (a page is filtered by project or by state,
/// and the state filters that show live pending rows show them all), so the
/// sum is the count a row would get alone, and a deep page costs what a
/// front page costs: never one count per row (issue 64). `before_page` is
/// MATERIALIZED: inlined, PostgreSQL ran its count once per row again.
const PAGE_POSITION: &str = "(b.n + count(*)
        FILTER (WHERE q.state = 'pending' AND (q.expires_at IS NULL OR q.expires_at > now()))
        OVER (PARTITION BY q.project_id ORDER BY q.seq))";

/// The rows a statement's `q` (its `INSERT ... RETURNING *`) stored, as
/// [`QueuedRow`]s in submission order. The new rows are not visible to the
/// statement's own count, so a row's position is the project's pending
/// requests before the statement (`before`, counted once per project,
/// not per row) plus its place among the project's new ones.
const INSERTED: &str =
    "SELECT q.id, q.seq, q.consumer_uuid, q.project_id, q.user_id, q.request, q.state,
        q.reason, q.round_id, q.allocations, q.submitted_at, q.expires_at, q.decided_at,
        b.n + row_number() OVER (PARTITION BY q.project_id ORDER BY q.seq) AS position_in_project,
        NULL::uuid AS held_on, NULL::timestamptz AS held_until, q.eligible_at, q.requeues,
        now() AS now
    FROM q JOIN before b ON b.project_id = q.project_id ORDER BY q.seq";

/// Each project of `t` and its pending requests before the statement,
/// counted under the project's queue lock (`queue_pending_locked`), taken
/// in key order so two submitters never wait on each other in a circle.
const BEFORE: &str = "before AS (
    SELECT s.project_id, queue_pending_locked(s.project_id) AS n
      FROM (SELECT DISTINCT t.p AS project_id,
                   hashtextextended('placement.queue:' || t.p, 0) AS k
              FROM t ORDER BY k) s)";

/// Each of `projects` with its pending requests, in name order, its queue
/// lock taken until the transaction ends (so the count holds for a check
/// against the cap).
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn pending_in_locked(
    conn: &mut PgConnection,
    projects: &[&str],
) -> Result<Vec<(String, i64)>, sqlx::Error> {
    crate::db::query_as(
        "SELECT project_id, n FROM (
            SELECT s.project_id, queue_pending_locked(s.project_id) AS n
              FROM (SELECT DISTINCT p AS project_id, hashtextextended('placement.queue:' || p, 0) AS k
                      FROM unnest($1::text[]) AS p ORDER BY k) s) c
          ORDER BY project_id",
    )
    .bind(projects)
    .fetch_all(conn)
    .await
}

/// A request to store if it passes the checks of a submission.
#[derive(Debug, Clone)]
pub struct CheckedQueued {
    /// The row.
    pub row: NewQueued,
    /// The classes it names (each must exist).
    pub classes: Vec<String>,
    /// The traits it names, without `!` (each must exist).
    pub traits: Vec<String>,
}

/// Stores, in one statement, each request whose classes and traits all
/// exist and whose consumer is neither a consumer already nor live in the
/// queue; the others are left out, each independently of the rest (the
/// caller works out why). Returns the stored rows in submission order.
///
/// Its arrays go through init plans (`(SELECT $1::uuid[])`), which hide
/// their lengths from the planner: every plan then costs the same, and
/// the connection keeps one generic plan instead of planning each call.
/// The consumers are looked up by `= ANY` of the array, an index scan: a
/// correlated `EXISTS ... OR EXISTS` became a hashed subplan over every
/// consumer, 1.8 ms a call with 10,000 consumers.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn insert_checked(
    conn: &mut PgConnection,
    requests: &[CheckedQueued],
    max_pending_per_project: i64,
) -> Result<Vec<QueuedRow>, sqlx::Error> {
    let rows = || requests.iter().map(|r| &r.row);
    let ids: Vec<Uuid> = rows().map(|r| r.id).collect();
    let consumers: Vec<Uuid> = rows().map(|r| r.consumer_uuid).collect();
    let projects: Vec<&str> = rows().map(|r| r.project_id.as_str()).collect();
    let users: Vec<&str> = rows().map(|r| r.user_id.as_str()).collect();
    let bodies: Vec<&str> = rows().map(|r| r.request.as_str()).collect();
    let expires: Vec<Option<f64>> = rows().map(|r| r.expires_in).collect();
    // (position in the batch, from 1 as WITH ORDINALITY counts; name)
    let named = |names: fn(&CheckedQueued) -> &Vec<String>| -> (Vec<i64>, Vec<&str>) {
        (1_i64..)
            .zip(requests)
            .flat_map(|(n, r)| names(r).iter().map(move |name| (n, name.as_str())))
            .unzip()
    };
    let (class_of, classes) = named(|r| &r.classes);
    let (trait_of, traits) = named(|r| &r.traits);
    crate::db::query_as(sqlx::AssertSqlSafe(format!(
        "WITH t AS (
            SELECT * FROM unnest((SELECT $1::uuid[]), (SELECT $2::uuid[]), (SELECT $3::text[]),
                                 (SELECT $4::text[]), (SELECT $5::text[]), (SELECT $6::float8[]))
                   WITH ORDINALITY AS t(id, c, p, u, r, e, n)),
         {BEFORE},
         refused AS (
            SELECT k.n FROM (
                SELECT t.n, b.n + row_number() OVER (PARTITION BY t.p ORDER BY t.n) AS depth
                  FROM t JOIN before b ON b.project_id = t.p) k
             WHERE k.depth > $11
            UNION ALL
            SELECT k.n FROM unnest((SELECT $7::int8[]), (SELECT $8::text[])) AS k(n, name)
             WHERE NOT EXISTS (SELECT 1 FROM resource_classes rc WHERE rc.name = k.name)
            UNION ALL
            SELECT k.n FROM unnest((SELECT $9::int8[]), (SELECT $10::text[])) AS k(n, name)
             WHERE NOT EXISTS (SELECT 1 FROM traits tr WHERE tr.name = k.name)
            UNION ALL
            SELECT t.n FROM t JOIN consumers c ON c.uuid = t.c
             WHERE c.uuid = ANY(CAST((SELECT $2::uuid[]) AS uuid[]))
            UNION ALL
            SELECT t.n FROM t JOIN queue_requests o ON o.consumer_uuid = t.c
             WHERE o.consumer_uuid = ANY(CAST((SELECT $2::uuid[]) AS uuid[])) AND o.state IN ('pending', 'admitted')),
         q AS (
            INSERT INTO queue_requests (id, consumer_uuid, project_id, user_id, request, expires_at)
            SELECT id, c, p, u, r::json, now() + make_interval(secs => e) FROM t
             WHERE t.n NOT IN (SELECT n FROM refused)
             ORDER BY n
            ON CONFLICT (consumer_uuid) WHERE state IN ('pending', 'admitted') DO NOTHING
            RETURNING *)
         {INSERTED}"
    )))
    .bind(&ids)
    .bind(&consumers)
    .bind(&projects)
    .bind(&users)
    .bind(&bodies)
    .bind(&expires)
    .bind(&class_of)
    .bind(&classes)
    .bind(&trait_of)
    .bind(&traits)
    .bind(max_pending_per_project)
    .fetch_all(conn)
    .await
}

/// Consumers among `uuids` that are live in the queue (`true`), then
/// those that are consumers already (`false`), each in uuid order.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn taken_consumers(
    conn: &mut PgConnection,
    uuids: &[Uuid],
) -> Result<Vec<(Uuid, bool)>, sqlx::Error> {
    crate::db::query_as(
        "SELECT consumer_uuid, true FROM queue_requests
          WHERE consumer_uuid = ANY($1) AND state IN ('pending', 'admitted')
         UNION ALL
         SELECT uuid, false FROM consumers WHERE uuid = ANY($1)
         ORDER BY 2 DESC, 1",
    )
    .bind(uuids)
    .fetch_all(conn)
    .await
}

/// Marks the queued requests of consumers the service removed
/// `preempted`: they may be queued again at once.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn mark_preempted(conn: &mut PgConnection, consumer: Uuid) -> Result<(), sqlx::Error> {
    crate::db::query(
        "UPDATE queue_requests SET state = 'preempted', reason = NULL
          WHERE consumer_uuid = $1 AND state = 'admitted'",
    )
    .bind(consumer)
    .execute(conn)
    .await?;
    Ok(())
}

/// Queues again the request of `consumer`, just preempted, when it asked
/// to be (`requeue: true`): a new pending request of the same consumer,
/// project, user and body, keeping its expiry, eligible after `backoff`
/// seconds doubled for each earlier requeue (at most an hour). Its id,
/// or None when it did not ask.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn requeue_preempted(
    conn: &mut PgConnection,
    consumer: Uuid,
    backoff: u64,
) -> Result<Option<Uuid>, sqlx::Error> {
    let backoff = i64::try_from(backoff).unwrap_or(i64::MAX);
    crate::db::query_scalar(
        "INSERT INTO queue_requests (id, consumer_uuid, project_id, user_id, request, expires_at,
                                     eligible_at, requeues)
         SELECT gen_random_uuid(), q.consumer_uuid, q.project_id, q.user_id, q.request, q.expires_at,
                now() + make_interval(secs => least($2::float8 * power(2, least(q.requeues, 20)), 3600)),
                q.requeues + 1
           FROM queue_requests q
          WHERE q.consumer_uuid = $1 AND q.state = 'preempted' AND q.request->>'requeue' = 'true'
          ORDER BY q.seq DESC LIMIT 1
         RETURNING id",
    )
    .bind(consumer)
    .bind(backoff)
    .fetch_optional(conn)
    .await
}

/// Marks `released` the admitted requests among `uuids` whose consumer
/// is gone (its allocations were deleted since): they no longer keep
/// the consumer from being queued again.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn release_ended(conn: &mut PgConnection, uuids: &[Uuid]) -> Result<u64, sqlx::Error> {
    let done = crate::db::query(
        "UPDATE queue_requests q SET state = 'released'
          WHERE q.consumer_uuid = ANY($1) AND q.state = 'admitted'
            AND NOT EXISTS (SELECT 1 FROM consumers c WHERE c.uuid = q.consumer_uuid)",
    )
    .bind(uuids)
    .execute(conn)
    .await?;
    Ok(done.rows_affected())
}

/// One request.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn get(conn: &mut PgConnection, id: Uuid) -> Result<Option<QueuedRow>, sqlx::Error> {
    let columns = COLUMNS.replace("{POSITION}", ONE_POSITION);
    crate::db::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT {columns} FROM queue_requests q WHERE q.id = $1"
    )))
    .bind(id)
    .fetch_optional(conn)
    .await
}

/// A page of requests in submission order, after `marker`'s.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn list(
    conn: &mut PgConnection,
    project: Option<&str>,
    state: Option<&str>,
    after: Option<i64>,
    limit: i64,
) -> Result<Vec<QueuedRow>, sqlx::Error> {
    let columns = COLUMNS.replace("{POSITION}", PAGE_POSITION);
    crate::db::query_as(sqlx::AssertSqlSafe(format!(
        "WITH page AS (
            SELECT * FROM queue_requests q
             WHERE ($1::text IS NULL OR q.project_id = $1)
               AND ($2::text IS NULL
                    OR (q.state = $2 AND ($2 <> 'pending' OR q.expires_at IS NULL OR q.expires_at > now()))
                    OR ($2 = 'expired' AND q.state = 'pending' AND q.expires_at <= now()))
               AND q.seq > coalesce($3, 0)
             ORDER BY q.seq LIMIT $4),
         before_page AS MATERIALIZED (
            SELECT p.project_id,
                   (SELECT count(*) FROM queue_requests o
                     WHERE o.state = 'pending' AND (o.expires_at IS NULL OR o.expires_at > now())
                       AND o.project_id = p.project_id AND o.seq <= coalesce($3, 0)) AS n
              FROM (SELECT DISTINCT project_id FROM page) p)
         SELECT {columns} FROM page q JOIN before_page b ON b.project_id = q.project_id
         ORDER BY q.seq"
    )))
    .bind(project)
    .bind(state)
    .bind(after)
    .bind(limit)
    .fetch_all(conn)
    .await
}

/// The sequence number of a request, for paging.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn seq_of(conn: &mut PgConnection, id: Uuid) -> Result<Option<i64>, sqlx::Error> {
    crate::db::query_scalar("SELECT seq FROM queue_requests WHERE id = $1")
        .bind(id)
        .fetch_optional(conn)
        .await
}

/// Cancels a pending request, and with it every pending member of its
/// gang (a gang is one job to its owner: cancelling any member cancels
/// the gang, so the rest are never admitted as a smaller gang); false
/// when it is not pending.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn cancel(conn: &mut PgConnection, id: Uuid) -> Result<bool, sqlx::Error> {
    let cancelled: Option<(String, Option<String>)> = crate::db::query_as(
        "UPDATE queue_requests SET state = 'cancelled', decided_at = now()
         WHERE id = $1 AND state = 'pending' AND (expires_at IS NULL OR expires_at > now())
         RETURNING project_id, request->>'gang'",
    )
    .bind(id)
    .fetch_optional(&mut *conn)
    .await?;
    let Some((project, gang)) = cancelled else {
        return Ok(false);
    };
    if let Some(gang) = gang {
        // Only the project's pending rows are read (its pending index).
        crate::db::query(
            "UPDATE queue_requests SET state = 'cancelled', decided_at = now()
             WHERE state = 'pending' AND project_id = $1 AND request->>'gang' = $2",
        )
        .bind(&project)
        .bind(&gang)
        .execute(&mut *conn)
        .await?;
    }
    // Long polls in every process see it at the commit.
    announce_decided(conn).await?;
    Ok(true)
}

/// Pending requests past their time become `expired`, and with each the
/// pending members of its gang (a gang times out whole); how many.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn expire(conn: &mut PgConnection) -> Result<u64, sqlx::Error> {
    let lapsed: Vec<(String, Option<String>)> = crate::db::query_as(
        "UPDATE queue_requests SET state = 'expired', decided_at = now()
         WHERE state = 'pending' AND expires_at <= now()
         RETURNING project_id, request->>'gang'",
    )
    .fetch_all(&mut *conn)
    .await?;
    let (projects, gangs): (Vec<String>, Vec<String>) = lapsed
        .iter()
        .filter_map(|(p, g)| Some((p.clone(), g.clone()?)))
        .unzip();
    let mut expired = u64::try_from(lapsed.len()).unwrap_or(u64::MAX);
    if !gangs.is_empty() {
        // Only the lapsed gangs' projects' pending rows are read.
        let done = crate::db::query(
            "UPDATE queue_requests q SET state = 'expired', decided_at = now()
              FROM unnest($1::text[], $2::text[]) AS g(project_id, gang)
             WHERE q.state = 'pending' AND q.project_id = g.project_id AND q.request->>'gang' = g.gang",
        )
        .bind(&projects)
        .bind(&gangs)
        .execute(conn)
        .await?;
        expired += done.rows_affected();
    }
    Ok(expired)
}

/// Requests that leave the queue undecided as `cancelled`, with `reason`:
/// `invalid` (a class or trait they name was deleted) or `consumer_exists`
/// (their consumer was written by another path since they were queued).
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn cancel_undecidable(
    conn: &mut PgConnection,
    ids: &[Uuid],
    reason: &str,
) -> Result<u64, sqlx::Error> {
    if ids.is_empty() {
        return Ok(0);
    }
    // A gang cannot be admitted whole without a member: its pending
    // members leave with it.
    let done = crate::db::query(
        "WITH target AS (
            SELECT id, project_id, request->>'gang' AS gang FROM queue_requests
             WHERE id = ANY($1) AND state = 'pending')
         UPDATE queue_requests q SET state = 'cancelled', reason = $2, decided_at = now()
          WHERE q.state = 'pending'
            AND (q.id IN (SELECT id FROM target)
                 OR (q.project_id, q.request->>'gang') IN
                    (SELECT project_id, gang FROM target WHERE gang IS NOT NULL))",
    )
    .bind(ids)
    .bind(reason)
    .execute(conn)
    .await?;
    Ok(done.rows_affected())
}

/// A pending request as a round reads it: the request's JSON as text, which
/// the round parses straight into its typed form (through a JSON value,
/// 80,000 rows took 0.9 s to read and another 0.4 s to parse).
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct PendingRow {
    /// Its id.
    pub id: Uuid,
    /// FIFO order.
    pub seq: i64,
    /// The consumer to create.
    pub consumer_uuid: Uuid,
    /// Owner.
    pub project_id: String,
    /// Owner.
    pub user_id: String,
    /// The request as submitted, JSON text.
    pub request: String,
    /// When it was queued.
    pub submitted_at: chrono::DateTime<chrono::Utc>,
    /// Its own reason from the last round, when that differed from the
    /// round's common one (which the round writes anew either way).
    pub own_reason: Option<String>,
    /// The database's clock, for waiting times.
    pub now: chrono::DateTime<chrono::Utc>,
    /// Its consumer exists: written by another path since it was queued.
    pub taken: bool,
}

/// Every pending request, in submission order, with its own last reason
/// and whether its consumer exists (read in the same pass: a pass of its
/// own over 80,000 pending requests cost 65 ms); and records this
/// statement's snapshot as the round's: the requests it returns are the
/// ones the round decides, so they are the ones the round's common reason
/// speaks for.
/// The round holds the admissions lock, and a cancel takes it shared, so
/// no row changes under the round: the rows are not locked one by one.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn pending_seen(conn: &mut PgConnection) -> Result<Vec<PendingRow>, sqlx::Error> {
    crate::db::query_as(
        "WITH seen AS (
            INSERT INTO queue_last_round (only_row, snapshot) VALUES (true, pg_current_snapshot())
            ON CONFLICT (only_row) DO UPDATE SET snapshot = excluded.snapshot)
         SELECT q.id, q.seq, q.consumer_uuid, q.project_id, q.user_id, q.request::text AS request,
                q.submitted_at, r.reason AS own_reason, now() AS now,
                EXISTS (SELECT 1 FROM consumers c WHERE c.uuid = q.consumer_uuid) AS taken
         FROM queue_requests q LEFT JOIN queue_reasons r ON r.seq = q.seq
         WHERE q.state = 'pending' AND (q.eligible_at IS NULL OR q.eligible_at <= now())
         ORDER BY q.seq",
    )
    .fetch_all(conn)
    .await
}

/// Marks requests admitted by `round`, with where each went.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn mark_admitted(
    conn: &mut PgConnection,
    round: Uuid,
    ids: &[Uuid],
    allocations: &[serde_json::Value],
) -> Result<(), sqlx::Error> {
    if ids.is_empty() {
        return Ok(());
    }
    crate::db::query(
        "UPDATE queue_requests q SET state = 'admitted', reason = NULL, round_id = $1,
                allocations = t.a, decided_at = now()
         FROM unnest($2::uuid[], $3::jsonb[]) AS t(id, a) WHERE q.id = t.id",
    )
    .bind(round)
    .bind(ids)
    .bind(allocations)
    .execute(conn)
    .await?;
    Ok(())
}

/// What a round changes of the reasons, by `seq`.
#[derive(Debug, Default)]
pub struct ReasonChanges<'a> {
    /// The reason the round gave most deferred requests (none deferred:
    /// none); theirs are not stored one by one.
    pub common: Option<&'a str>,
    /// Requests whose own reason is written for the first time.
    pub first: (Vec<i64>, Vec<&'a str>),
    /// Requests whose own reason differs from the last round's.
    pub changed: (Vec<i64>, Vec<&'a str>),
    /// Requests whose reason is now the common one: their own row goes.
    pub cleared: Vec<i64>,
}

/// Records the round's common reason and the own reasons that changed.
/// The round read the old ones under the admissions lock, which every
/// writer of a pending request's reason holds, so a first reason is a
/// plain insert and an unchanged one is not touched.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn record_reasons(
    conn: &mut PgConnection,
    changes: &ReasonChanges<'_>,
) -> Result<(), sqlx::Error> {
    crate::db::query(
        "WITH changed AS (
            UPDATE queue_reasons r SET reason = t.reason
              FROM unnest($3::int8[], $4::text[]) AS t(seq, reason) WHERE r.seq = t.seq),
         cleared AS (DELETE FROM queue_reasons WHERE seq = ANY($5::int8[])),
         common AS (UPDATE queue_last_round SET reason = $6)
         INSERT INTO queue_reasons (seq, reason) SELECT * FROM unnest($1::int8[], $2::text[])",
    )
    .bind(&changes.first.0)
    .bind(&changes.first.1)
    .bind(&changes.changed.0)
    .bind(&changes.changed.1)
    .bind(&changes.cleared)
    .bind(changes.common)
    .execute(conn)
    .await?;
    Ok(())
}

/// Pending requests now, for the depth gauge (the pending index alone).
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn pending_count(conn: &mut PgConnection) -> Result<i64, sqlx::Error> {
    crate::db::query_scalar("SELECT count(*) FROM queue_requests WHERE state = 'pending'")
        .fetch_one(conn)
        .await
}

/// The `top` projects with the most pending requests, most first, with
/// their counts (from the pending requests' index by project).
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn pending_by_project(
    conn: &mut PgConnection,
    top: i64,
) -> Result<Vec<(String, i64)>, sqlx::Error> {
    crate::db::query_as(
        "SELECT project_id, count(*) FROM queue_requests WHERE state = 'pending'
          GROUP BY project_id ORDER BY count(*) DESC, project_id LIMIT $1",
    )
    .bind(top)
    .fetch_all(conn)
    .await
}

/// Tells every process (at commit) that a round decided.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn announce_decided(conn: &mut PgConnection) -> Result<(), sqlx::Error> {
    crate::db::query("SELECT pg_notify($1, 'decided')")
        .bind(QUEUE_CHANNEL)
        .execute(conn)
        .await?;
    Ok(())
}

/// Tries to become the round leader on this session; true when held.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn try_lead<'e>(session: impl sqlx::PgExecutor<'e>) -> Result<bool, sqlx::Error> {
    crate::db::query_scalar("SELECT pg_try_advisory_lock($1)")
        .bind(QUEUE_LEADER_LOCK)
        .fetch_one(session)
        .await
}

/// Whether this session holds the leader's lock (a session that was
/// opened again has lost it).
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn still_leads<'e>(session: impl sqlx::PgExecutor<'e>) -> Result<bool, sqlx::Error> {
    crate::db::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted
           AND pid = pg_backend_pid() AND objsubid = 1
           AND classid = ($1 >> 32)::oid AND objid = ($1 & 4294967295)::oid)",
    )
    .bind(QUEUE_LEADER_LOCK)
    .fetch_one(session)
    .await
}

/// Drops decided requests older than the retention window; how many.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn prune(conn: &mut PgConnection, keep_secs: u64) -> Result<u64, sqlx::Error> {
    let keep = i64::try_from(keep_secs).unwrap_or(i64::MAX);
    let done = crate::db::query(
        "DELETE FROM queue_requests
         WHERE decided_at IS NOT NULL AND decided_at < now() - make_interval(secs => $1::double precision)",
    )
    .bind(keep)
    .execute(conn)
    .await?;
    Ok(done.rows_affected())
}

/// Drops the reasons of requests no longer pending (readers already ignore
/// them); how many.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn prune_reasons(conn: &mut PgConnection) -> Result<u64, sqlx::Error> {
    let done = crate::db::query(
        "DELETE FROM queue_reasons r WHERE NOT EXISTS
            (SELECT 1 FROM queue_requests q WHERE q.seq = r.seq AND q.state = 'pending')",
    )
    .execute(conn)
    .await?;
    Ok(done.rows_affected())
}
