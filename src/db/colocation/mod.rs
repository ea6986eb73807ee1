//! Colocation storage (`migrations/*_colocation.sql`): consumer
//! priorities, the policy and its overrides, usage samples (kept about an
//! hour), the server-computed batch inventory, and recorded evictions.

pub mod placement;

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::PgConnection;
use uuid::Uuid;

/// Server-owned classes of the batch ledger, created on the first report.
pub const BATCH_VCPU_MILLI: (i32, &str) = (9000, "BATCH_VCPU_MILLI");
/// Batch memory in MB.
pub const BATCH_MEMORY_MB: (i32, &str) = (9001, "BATCH_MEMORY_MB");

/// A consumer's priority row.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct PriorityRow {
    /// 0 prod, 1 mid, 2 batch, 3 free.
    pub priority_class: i16,
    /// Integer priority.
    pub priority: Option<i32>,
    /// Opt-in to the generic usage evictor.
    pub eviction_enabled: bool,
}

/// Sets a consumer's priority.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn set_priority(
    conn: &mut PgConnection,
    consumer: Uuid,
    p: &PriorityRow,
) -> Result<(), sqlx::Error> {
    set_priorities(conn, &[consumer], p).await
}

/// Gives consumers (one, or a batch deployment's instances) one priority.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn set_priorities(
    conn: &mut PgConnection,
    consumers: &[Uuid],
    p: &PriorityRow,
) -> Result<(), sqlx::Error> {
    crate::db::query(
        "INSERT INTO consumer_priorities (consumer_uuid, priority_class, priority, eviction_enabled)
         SELECT UNNEST($1::uuid[]), $2, $3, $4
         ON CONFLICT (consumer_uuid) DO UPDATE SET
           priority_class = EXCLUDED.priority_class, priority = EXCLUDED.priority,
           eviction_enabled = EXCLUDED.eviction_enabled, updated_at = now()",
    )
    .bind(consumers)
    .bind(p.priority_class)
    .bind(p.priority)
    .bind(p.eviction_enabled)
    .execute(conn)
    .await?;
    Ok(())
}

/// A consumer's priority, if set.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn priority(
    conn: &mut PgConnection,
    consumer: Uuid,
) -> Result<Option<PriorityRow>, sqlx::Error> {
    crate::db::query_as("SELECT priority_class, priority, eviction_enabled FROM consumer_priorities WHERE consumer_uuid = $1")
        .bind(consumer)
        .fetch_optional(conn)
        .await
}

/// The classes a consumer holds allocations of, its row locked so that an
/// allocation write cannot slip between the check and the priority change.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn held_classes(
    conn: &mut PgConnection,
    consumer: Uuid,
) -> Result<Vec<String>, sqlx::Error> {
    crate::db::query("SELECT 1 FROM consumers WHERE uuid = $1 FOR UPDATE")
        .bind(consumer)
        .execute(&mut *conn)
        .await?;
    crate::db::query_scalar(
        "SELECT DISTINCT rc.name FROM allocations a JOIN consumers c ON c.id = a.consumer_id
           JOIN resource_classes rc ON rc.id = a.resource_class_id WHERE c.uuid = $1 ORDER BY 1",
    )
    .bind(consumer)
    .fetch_all(conn)
    .await
}

/// The stored policy fields of a scope (None: the cluster).
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn policy(
    conn: &mut PgConnection,
    provider: Option<i64>,
) -> Result<Option<Value>, sqlx::Error> {
    crate::db::query_scalar("SELECT policy FROM colocation_policies WHERE COALESCE(resource_provider_id, 0) = COALESCE($1, 0)")
        .bind(provider)
        .fetch_optional(conn)
        .await
}

/// The stored fields of the cluster's policy and of a provider's
/// override, in one read.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn policy_layers(
    conn: &mut PgConnection,
    provider: i64,
) -> Result<(Option<Value>, Option<Value>), sqlx::Error> {
    crate::db::query_as(
        "SELECT (SELECT policy FROM colocation_policies WHERE resource_provider_id IS NULL),
                (SELECT policy FROM colocation_policies WHERE resource_provider_id = $1)",
    )
    .bind(provider)
    .fetch_one(conn)
    .await
}

/// What a usage report needs of its provider, read while locking the
/// provider's row (which orders one provider's reports): its id, the
/// policy fields of the cluster and of its override, and its VCPU and
/// MEMORY_MB (total, reserved).
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct ReportTarget {
    /// Provider id.
    pub rp: i64,
    /// The cluster's policy fields.
    pub cluster_policy: Option<Value>,
    /// The provider's override fields.
    pub own_policy: Option<Value>,
    /// VCPU total.
    pub vcpu_total: Option<i64>,
    /// VCPU reserved.
    pub vcpu_reserved: Option<i64>,
    /// MEMORY_MB total.
    pub memory_total: Option<i64>,
    /// MEMORY_MB reserved.
    pub memory_reserved: Option<i64>,
}

/// Replaces the stored policy fields of a scope.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn put_policy(
    conn: &mut PgConnection,
    provider: Option<i64>,
    fields: &Value,
) -> Result<(), sqlx::Error> {
    crate::db::query(
        "INSERT INTO colocation_policies (resource_provider_id, policy) VALUES ($1, $2)
         ON CONFLICT (COALESCE(resource_provider_id, 0)) DO UPDATE SET policy = EXCLUDED.policy, updated_at = now()",
    )
    .bind(provider)
    .bind(fields)
    .execute(conn)
    .await?;
    Ok(())
}

/// Removes a scope's policy; false when there was none.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn delete_policy(
    conn: &mut PgConnection,
    provider: Option<i64>,
) -> Result<bool, sqlx::Error> {
    let r = crate::db::query(
        "DELETE FROM colocation_policies WHERE COALESCE(resource_provider_id, 0) = COALESCE($1, 0)",
    )
    .bind(provider)
    .execute(conn)
    .await?;
    Ok(r.rows_affected() > 0)
}

/// One node sample.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct Sample {
    /// When the agent measured.
    pub sampled_at: DateTime<Utc>,
    /// The measurement window.
    pub window_seconds: i32,
    /// Node CPU, milli.
    pub node_cpu_milli: i64,
    /// Node memory, MB.
    pub node_memory_mb: i64,
    /// System CPU, milli.
    pub system_cpu_milli: i64,
    /// System memory, MB.
    pub system_memory_mb: i64,
    /// BE CPU used, milli.
    pub be_cpu_used: Option<i64>,
    /// BE CPU requested, milli.
    pub be_cpu_request: Option<i64>,
    /// BE CPU real limit, milli.
    pub be_cpu_real_limit: Option<i64>,
}

/// A consumer's measurement in a usage report.
#[derive(Debug, Clone, Copy)]
pub struct ConsumerSample {
    /// The consumer.
    pub consumer: Uuid,
    /// CPU used, milli.
    pub cpu_milli: i64,
    /// Memory used, MB.
    pub memory_mb: i64,
}

/// Stores a report in one round trip: locks the provider (reports of one
/// provider are ordered by that lock; its generation stays), reads the
/// [`ReportTarget`] the report is checked against, appends the sample,
/// keeps each consumer's latest usage, and prunes samples older than
/// `retention_seconds`. None: no such provider, and nothing written. The
/// caller checks the report afterwards and rolls back on a refusal.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn record_report(
    conn: &mut PgConnection,
    provider: Uuid,
    s: &Sample,
    consumers: &[ConsumerSample],
    retention_seconds: i64,
) -> Result<Option<ReportTarget>, sqlx::Error> {
    let (ids, cpu, mem): (Vec<Uuid>, Vec<i64>, Vec<i64>) =
        consumers.iter().fold((vec![], vec![], vec![]), |mut a, c| {
            a.0.push(c.consumer);
            a.1.push(c.cpu_milli);
            a.2.push(c.memory_mb);
            a
        });
    crate::db::query_as(
        "SELECT * FROM record_usage_report($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16)",
    )
    .bind(provider)
    .bind(crate::db::classes::VCPU_ID)
    .bind(crate::db::classes::MEMORY_MB_ID)
    .bind(s.sampled_at)
    .bind(s.window_seconds)
    .bind(s.node_cpu_milli)
    .bind(s.node_memory_mb)
    .bind(s.system_cpu_milli)
    .bind(s.system_memory_mb)
    .bind(s.be_cpu_used)
    .bind(s.be_cpu_request)
    .bind(s.be_cpu_real_limit)
    .bind(&ids)
    .bind(&cpu)
    .bind(&mem)
    .bind(retention_seconds as f64)
    .fetch_optional(conn)
    .await
}

/// The latest sample, and the BE CPU averages over `window` seconds
/// before it with how many samples and seconds they cover.
#[derive(Debug, Clone, PartialEq)]
pub struct Samples {
    /// The newest sample.
    pub latest: Sample,
    /// (used, request, real limit) averaged over the window, truncated.
    pub be_avg: Option<(i64, i64, i64)>,
    /// Seconds the window's samples cover (Σ window_seconds).
    pub covered_seconds: i64,
}

/// The provider's latest sample and its BE window, with its batch ledger
/// and its consumers (one round trip for the report path), if it ever
/// reported.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn samples(
    conn: &mut PgConnection,
    rp: i64,
    window_seconds: i64,
) -> Result<Option<ProviderState>, sqlx::Error> {
    let row: Option<SamplesRow> = crate::db::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT l.*, w.be_used_avg, w.be_request_avg, w.be_real_limit_avg, w.covered,
                (SELECT total::bigint FROM inventories WHERE resource_provider_id = $1 AND resource_class_id = $4) AS cpu_total,
                (SELECT total::bigint FROM inventories WHERE resource_provider_id = $1 AND resource_class_id = $5) AS memory_total,
                (SELECT batch_computed_at FROM provider_colocation WHERE resource_provider_id = $1) AS computed_at,
                COALESCE((SELECT SUM(used) FROM allocations WHERE resource_provider_id = $1 AND resource_class_id = $4), 0)::bigint AS cpu_allocated,
                COALESCE((SELECT SUM(used) FROM allocations WHERE resource_provider_id = $1 AND resource_class_id = $5), 0)::bigint AS memory_allocated,
                (SELECT COALESCE(json_agg(x ORDER BY x.consumer_uuid), '[]') FROM ({CONSUMERS_OF_PROVIDER}) x) AS consumers
           FROM (SELECT sampled_at, window_seconds, node_cpu_milli, node_memory_mb, system_cpu_milli,
                        system_memory_mb, be_cpu_used, be_cpu_request, be_cpu_real_limit
                   FROM usage_samples WHERE resource_provider_id = $1 ORDER BY sampled_at DESC LIMIT 1) l
           CROSS JOIN LATERAL (
                 SELECT AVG(be_cpu_used)::bigint AS be_used_avg, AVG(be_cpu_request)::bigint AS be_request_avg,
                        AVG(be_cpu_real_limit)::bigint AS be_real_limit_avg, SUM(window_seconds)::bigint AS covered
                   FROM usage_samples
                  WHERE resource_provider_id = $1 AND be_cpu_used IS NOT NULL
                    AND sampled_at > l.sampled_at - make_interval(secs => $6) AND sampled_at <= l.sampled_at) w"
    )))
    .bind(rp)
    .bind(crate::db::classes::VCPU_ID)
    .bind(crate::db::classes::MEMORY_MB_ID)
    .bind(BATCH_VCPU_MILLI.0)
    .bind(BATCH_MEMORY_MB.0)
    .bind(window_seconds as f64)
    .fetch_optional(conn)
    .await?;
    Ok(row.map(|r| {
        let samples = Samples {
            latest: r.latest,
            be_avg: r
                .be_used_avg
                .zip(r.be_request_avg)
                .zip(r.be_real_limit_avg)
                .map(|((u, q), l)| (u, q, l)),
            covered_seconds: r.covered.unwrap_or(0),
        };
        ProviderState {
            samples,
            ledger: r.ledger,
            consumers: r.consumers.0,
        }
    }))
}

/// A reporting provider's samples, batch ledger and consumers.
#[derive(Debug, Clone)]
pub struct ProviderState {
    /// The latest sample and the BE window.
    pub samples: Samples,
    /// What batch capacity was computed and is held.
    pub ledger: BatchLedger,
    /// The consumers allocated there.
    pub consumers: Vec<NodeConsumer>,
}

/// The newest sample with the BE window's aggregates, the ledger and the
/// consumers.
#[derive(sqlx::FromRow)]
struct SamplesRow {
    #[sqlx(flatten)]
    latest: Sample,
    #[sqlx(flatten)]
    ledger: BatchLedger,
    consumers: sqlx::types::Json<Vec<NodeConsumer>>,
    be_used_avg: Option<i64>,
    be_request_avg: Option<i64>,
    be_real_limit_avg: Option<i64>,
    covered: Option<i64>,
}

/// A consumer with allocations on the provider, as colocation sees it.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow, serde::Deserialize)]
pub struct NodeConsumer {
    /// The consumer.
    pub consumer_uuid: Uuid,
    /// Its project.
    pub project_id: String,
    /// 0 prod … 3 free (0 without a row).
    pub priority_class: i16,
    /// Integer priority.
    pub priority: Option<i32>,
    /// Allocated CPU, milli (VCPU × 1000 plus BATCH_VCPU_MILLI).
    pub request_cpu_milli: i64,
    /// Allocated memory, MB (MEMORY_MB plus BATCH_MEMORY_MB).
    pub request_memory_mb: i64,
    /// Measured CPU, milli.
    pub used_cpu_milli: Option<i64>,
    /// Measured memory, MB.
    pub used_memory_mb: Option<i64>,
    /// Recorded evicted and still allocated.
    pub evicted: bool,
    /// Allocated after the provider's last report (not in its numbers yet).
    pub unreported: bool,
}

/// The consumers allocated on provider $1 (class ids: $2 VCPU, $3
/// MEMORY_MB, $4 BATCH_VCPU_MILLI, $5 BATCH_MEMORY_MB), unordered.
const CONSUMERS_OF_PROVIDER: &str = "SELECT c.uuid AS consumer_uuid, p.external_id AS project_id,
                COALESCE(cp.priority_class, 0::smallint) AS priority_class, cp.priority,
                SUM(CASE a.resource_class_id WHEN $2 THEN a.used::bigint * 1000 WHEN $4 THEN a.used::bigint ELSE 0 END)::bigint AS request_cpu_milli,
                SUM(CASE a.resource_class_id WHEN $3 THEN a.used::bigint WHEN $5 THEN a.used::bigint ELSE 0 END)::bigint AS request_memory_mb,
                MAX(u.cpu_milli) AS used_cpu_milli, MAX(u.memory_mb) AS used_memory_mb,
                EXISTS (SELECT 1 FROM evictions e WHERE e.resource_provider_id = $1 AND e.consumer_uuid = c.uuid) AS evicted,
                (MAX(u.sampled_at) IS NULL OR MAX(a.created_at) > MAX(u.sampled_at)) AS unreported
           FROM allocations a JOIN consumers c ON c.id = a.consumer_id JOIN projects p ON p.id = c.project_id
           LEFT JOIN consumer_priorities cp ON cp.consumer_uuid = c.uuid
           LEFT JOIN consumer_usage u ON u.resource_provider_id = $1 AND u.consumer_uuid = c.uuid
          WHERE a.resource_provider_id = $1
          GROUP BY c.uuid, p.external_id, cp.priority_class, cp.priority";

/// The consumers allocated on a provider.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn node_consumers(
    conn: &mut PgConnection,
    rp: i64,
) -> Result<Vec<NodeConsumer>, sqlx::Error> {
    crate::db::query_as(sqlx::AssertSqlSafe(format!(
        "{CONSUMERS_OF_PROVIDER} ORDER BY consumer_uuid"
    )))
    .bind(rp)
    .bind(crate::db::classes::VCPU_ID)
    .bind(crate::db::classes::MEMORY_MB_ID)
    .bind(BATCH_VCPU_MILLI.0)
    .bind(BATCH_MEMORY_MB.0)
    .fetch_all(conn)
    .await
}

/// Creates the batch classes (standard-range ids, so they can be neither
/// renamed nor deleted) if this is the first report ever.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn ensure_batch_classes(conn: &mut PgConnection) -> Result<(), sqlx::Error> {
    crate::db::query(
        "INSERT INTO resource_classes (id, name) VALUES ($1, $2), ($3, $4) ON CONFLICT DO NOTHING",
    )
    .bind(BATCH_VCPU_MILLI.0)
    .bind(BATCH_VCPU_MILLI.1)
    .bind(BATCH_MEMORY_MB.0)
    .bind(BATCH_MEMORY_MB.1)
    .execute(conn)
    .await?;
    Ok(())
}

/// The batch ledger of a provider: current totals (None: never written),
/// when they were computed, and what batch consumers hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, sqlx::FromRow)]
pub struct BatchLedger {
    /// BATCH_VCPU_MILLI total.
    pub cpu_total: Option<i64>,
    /// BATCH_MEMORY_MB total.
    pub memory_total: Option<i64>,
    /// When last written.
    pub computed_at: Option<DateTime<Utc>>,
    /// BATCH_VCPU_MILLI allocated.
    pub cpu_allocated: i64,
    /// BATCH_MEMORY_MB allocated.
    pub memory_allocated: i64,
}

/// A provider's batch ledger.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn batch_ledger(conn: &mut PgConnection, rp: i64) -> Result<BatchLedger, sqlx::Error> {
    crate::db::query_as(
        "SELECT (SELECT total::bigint FROM inventories WHERE resource_provider_id = $1 AND resource_class_id = $2) AS cpu_total,
                (SELECT total::bigint FROM inventories WHERE resource_provider_id = $1 AND resource_class_id = $3) AS memory_total,
                (SELECT batch_computed_at FROM provider_colocation WHERE resource_provider_id = $1) AS computed_at,
                COALESCE((SELECT SUM(used) FROM allocations WHERE resource_provider_id = $1 AND resource_class_id = $2), 0)::bigint AS cpu_allocated,
                COALESCE((SELECT SUM(used) FROM allocations WHERE resource_provider_id = $1 AND resource_class_id = $3), 0)::bigint AS memory_allocated",
    )
    .bind(rp)
    .bind(BATCH_VCPU_MILLI.0)
    .bind(BATCH_MEMORY_MB.0)
    .fetch_one(conn)
    .await
}

/// Writes the batch inventory totals without bumping the provider's
/// generation (the change log still tells every snapshot), and whether
/// batch consumers now hold more than them.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn write_batch(
    conn: &mut PgConnection,
    rp: i64,
    cpu: i32,
    memory: i32,
    overcommitted: bool,
) -> Result<(), sqlx::Error> {
    crate::db::query(
        "WITH i AS (INSERT INTO inventories (resource_provider_id, resource_class_id, total, reserved, min_unit,
                                              max_unit, step_size, allocation_ratio)
              VALUES ($1, $2, $4, 0, 1, GREATEST($4, 1), 1, 1.0), ($1, $3, $5, 0, 1, GREATEST($5, 1), 1, 1.0)
              ON CONFLICT (resource_provider_id, resource_class_id) DO UPDATE SET
                total = EXCLUDED.total, max_unit = EXCLUDED.max_unit, updated_at = now())
         UPDATE provider_colocation SET batch_computed_at = now(), batch_overcommitted = $6
          WHERE resource_provider_id = $1",
    )
    .bind(rp)
    .bind(BATCH_VCPU_MILLI.0)
    .bind(BATCH_MEMORY_MB.0)
    .bind(cpu)
    .bind(memory)
    .bind(overcommitted)
    .execute(conn)
    .await?;
    Ok(())
}

/// Sets to 0 the batch inventory of every provider whose last report is
/// older than its degradeTimeMinutes (its override's, else `cluster_minutes`);
/// returns how many inventories it touched.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn degrade_stale(
    conn: &mut PgConnection,
    cluster_minutes: i64,
) -> Result<u64, sqlx::Error> {
    // Overrides were validated as integers ≥ 1 when they were stored.
    let r = crate::db::query(
        "UPDATE inventories i SET total = 0, max_unit = 1, updated_at = now()
           FROM provider_colocation pc
           LEFT JOIN colocation_policies cp ON cp.resource_provider_id = pc.resource_provider_id
          WHERE i.resource_provider_id = pc.resource_provider_id AND i.resource_class_id = ANY($1)
            AND i.total <> 0
            AND pc.last_sampled_at < now() - make_interval(
                  mins => COALESCE((cp.policy->>'degradeTimeMinutes')::int, $2::int))",
    )
    .bind([BATCH_VCPU_MILLI.0, BATCH_MEMORY_MB.0])
    .bind(i32::try_from(cluster_minutes).unwrap_or(i32::MAX))
    .execute(conn)
    .await?;
    Ok(r.rows_affected())
}

/// Records that the agent evicted these consumers, and starts the
/// trigger's cooldown.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn record_evictions(
    conn: &mut PgConnection,
    rp: i64,
    consumers: &[Uuid],
    trigger: &str,
    cooldown_seconds: i64,
) -> Result<Option<DateTime<Utc>>, sqlx::Error> {
    let column = if trigger == "memory_usage" {
        "memory_cooldown_until"
    } else {
        "cpu_cooldown_until"
    };
    crate::db::query(
        "INSERT INTO evictions (resource_provider_id, consumer_uuid, trigger) SELECT $1, UNNEST($2::uuid[]), $3",
    )
    .bind(rp)
    .bind(consumers)
    .bind(trigger)
    .execute(&mut *conn)
    .await?;
    crate::db::query_scalar(sqlx::AssertSqlSafe(format!(
        "INSERT INTO provider_colocation (resource_provider_id, last_sampled_at, {column})
         VALUES ($1, '-infinity', now() + make_interval(secs => $2))
         ON CONFLICT (resource_provider_id) DO UPDATE SET {column} = EXCLUDED.{column}
         RETURNING {column}"
    )))
    .bind(rp)
    .bind(cooldown_seconds as f64)
    .fetch_one(conn)
    .await
}

/// Until when evictions of each kind are held back after the last one.
#[derive(Debug, Clone, Copy, Default, sqlx::FromRow)]
pub struct Cooldowns {
    /// CPU evictions wait until then.
    pub cpu_until: Option<DateTime<Utc>>,
    /// Memory evictions wait until then.
    pub memory_until: Option<DateTime<Utc>>,
}

/// The cooldowns in force.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn cooldowns(conn: &mut PgConnection, rp: i64) -> Result<Cooldowns, sqlx::Error> {
    Ok(crate::db::query_as(
        "SELECT cpu_cooldown_until AS cpu_until, memory_cooldown_until AS memory_until
           FROM provider_colocation WHERE resource_provider_id = $1",
    )
    .bind(rp)
    .fetch_optional(conn)
    .await?
    .unwrap_or_default())
}
