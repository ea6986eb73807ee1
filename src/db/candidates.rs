//! The provider data behind allocation candidates, as rows (the candidate
//! engine assembles them into its snapshot), and the change-log query that
//! says which providers changed between two PostgreSQL snapshots (see
//! `migrations/*_change_log.sql`).

use crate::db::colocation::placement::{self, PendingRow, ReportRow};
use crate::types::{Inventory, MISC_SHARES_VIA_AGGREGATE};
use sqlx::types::Json;
use sqlx::PgConnection;
use std::collections::HashMap;

/// One inventory with what is allocated from it.
#[derive(Debug, Clone, sqlx::FromRow, serde::Deserialize)]
pub struct StockRow {
    /// The provider.
    pub provider_id: i64,
    /// The class.
    pub class_id: i32,
    /// The record (columns of its own in a row, an object of its own in
    /// [`provider_data`]'s JSON).
    #[sqlx(flatten)]
    pub inventory: Inventory,
    /// Units allocated.
    pub used: i64,
}

/// A trait a provider has.
#[derive(Debug, Clone, sqlx::FromRow, serde::Deserialize)]
pub struct TraitRow {
    /// The provider.
    pub provider_id: i64,
    /// The trait's id.
    pub trait_id: i32,
    /// Its name.
    pub name: String,
}

/// An aggregate a provider is in.
#[derive(Debug, Clone, Copy, sqlx::FromRow, serde::Deserialize)]
pub struct Membership {
    /// The provider.
    pub provider_id: i64,
    /// The aggregate's id.
    pub aggregate_id: i32,
}

/// Where a provider sits in its tree.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct TreeRow {
    /// The provider's id.
    pub id: i64,
    /// Its uuid.
    pub uuid: uuid::Uuid,
    /// Its parent's id.
    pub parent_id: Option<i64>,
    /// Its root's id.
    pub root_id: i64,
}

/// Inventories with usage, traits and aggregates of some providers.
#[derive(Debug, Clone, Default)]
pub struct NodeData {
    /// Inventories with usage.
    pub stock: Vec<StockRow>,
    /// Traits.
    pub traits: Vec<TraitRow>,
    /// Aggregate memberships.
    pub memberships: Vec<Membership>,
}

/// Every provider's inventories with usage, traits and aggregates.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn node_data(conn: &mut PgConnection) -> Result<NodeData, sqlx::Error> {
    let stock: Vec<StockRow> = crate::db::query_as(
        "SELECT i.resource_provider_id AS provider_id, i.resource_class_id AS class_id, i.total, i.reserved,
                i.min_unit, i.max_unit, i.step_size, i.allocation_ratio, COALESCE(u.used, 0)::bigint AS used
           FROM inventories i
           LEFT JOIN (SELECT resource_provider_id, resource_class_id, SUM(used) AS used FROM allocations
                       GROUP BY 1, 2) u
             ON u.resource_provider_id = i.resource_provider_id AND u.resource_class_id = i.resource_class_id
          ORDER BY i.resource_provider_id, i.resource_class_id",
    )
    .fetch_all(&mut *conn)
    .await?;
    let traits: Vec<TraitRow> = crate::db::query_as(
        "SELECT r.resource_provider_id AS provider_id, r.trait_id, t.name FROM resource_provider_traits r
           JOIN traits t ON t.id = r.trait_id ORDER BY r.resource_provider_id, r.trait_id",
    )
    .fetch_all(&mut *conn)
    .await?;
    let memberships: Vec<Membership> = crate::db::query_as(
        "SELECT resource_provider_id AS provider_id, aggregate_id FROM resource_provider_aggregates
          ORDER BY resource_provider_id, aggregate_id",
    )
    .fetch_all(conn)
    .await?;
    Ok(NodeData {
        stock,
        traits,
        memberships,
    })
}

/// What the candidate snapshot holds of some providers.
#[derive(Debug, Clone, Default)]
pub struct ProviderData {
    /// Inventories with usage, traits and aggregates.
    pub node: NodeData,
    /// Their last usage reports.
    pub reports: Vec<ReportRow>,
    /// Per consumer, what was allocated on them since their last report.
    pub pending: Vec<PendingRow>,
}

/// `$1` as an array the planner cannot see into (an init plan). Given the
/// array itself, PostgreSQL plans the statement anew for each length
/// (a custom plan costs less than its generic one, which assumes ten
/// elements), and planning a patch's statement cost 1.6 ms against 0.3 ms
/// to run it. Hidden, every plan costs the same, so after five runs the
/// connection keeps the generic one: index scans on the provider key.
pub(crate) fn hidden(param: &str, array_type: &str) -> String {
    format!("ANY(CAST((SELECT {param}::{array_type}) AS {array_type}))")
}

/// The statement of [`provider_data`]: each part a JSON array, so that the
/// five reads of a snapshot patch are one round trip. Every part filters
/// on its provider key by the hidden `$1`. A trait's name is looked up by
/// its key (a join's generic plan hashed every trait on every run).
static PROVIDER_DATA: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    format!("SELECT {}", provider_data_columns(&hidden("$1", "int8[]")))
});

/// The five JSON columns of [`provider_data`], for the providers whose id
/// is `= {ids}`.
fn provider_data_columns(ids: &str) -> String {
    let reports = placement::reports_sql(&format!("AND resource_provider_id = {ids}"));
    let pending = placement::pending_sql(&format!(
        "AND a.resource_provider_id = {ids} AND pc.resource_provider_id = {ids}"
    ));
    format!(
        "(SELECT coalesce(json_agg(s ORDER BY s.provider_id, s.class_id), '[]')
             FROM (SELECT i.resource_provider_id AS provider_id, i.resource_class_id AS class_id,
                          json_build_object('total', i.total, 'reserved', i.reserved,
                                            'min_unit', i.min_unit, 'max_unit', i.max_unit,
                                            'step_size', i.step_size,
                                            'allocation_ratio', i.allocation_ratio) AS inventory,
                          COALESCE(u.used, 0)::bigint AS used
                     FROM inventories i
                     LEFT JOIN (SELECT resource_provider_id, resource_class_id, SUM(used) AS used
                                  FROM allocations WHERE resource_provider_id = {ids} GROUP BY 1, 2) u
                       ON u.resource_provider_id = i.resource_provider_id
                      AND u.resource_class_id = i.resource_class_id
                    WHERE i.resource_provider_id = {ids}) s) AS stock,
          (SELECT coalesce(json_agg(t ORDER BY t.provider_id, t.trait_id), '[]')
             FROM (SELECT r.resource_provider_id AS provider_id, r.trait_id,
                          (SELECT t.name FROM traits t WHERE t.id = r.trait_id) AS name
                     FROM resource_provider_traits r
                    WHERE r.resource_provider_id = {ids}) t) AS traits,
          (SELECT coalesce(json_agg(m ORDER BY m.provider_id, m.aggregate_id), '[]')
             FROM (SELECT resource_provider_id AS provider_id, aggregate_id
                     FROM resource_provider_aggregates WHERE resource_provider_id = {ids}) m)
            AS memberships,
          (SELECT coalesce(json_agg(r), '[]') FROM ({reports}) r) AS reports,
          (SELECT coalesce(json_agg(p), '[]') FROM ({pending}) p) AS pending"
    )
}

/// Inventories with usage, traits, aggregates and colocation reports of
/// the given providers, in one statement.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn provider_data(
    conn: &mut PgConnection,
    ids: &[i64],
) -> Result<ProviderData, sqlx::Error> {
    let parts: DataColumns = crate::db::query_as(sqlx::AssertSqlSafe(PROVIDER_DATA.as_str()))
        .bind(ids)
        .fetch_one(conn)
        .await?;
    Ok(parts.into())
}

/// The columns of [`provider_data_columns`].
#[derive(sqlx::FromRow)]
struct DataColumns {
    stock: Json<Vec<StockRow>>,
    traits: Json<Vec<TraitRow>>,
    memberships: Json<Vec<Membership>>,
    reports: Json<Vec<ReportRow>>,
    pending: Json<Vec<PendingRow>>,
}

impl From<DataColumns> for ProviderData {
    fn from(parts: DataColumns) -> Self {
        ProviderData {
            node: NodeData {
                stock: parts.stock.0,
                traits: parts.traits.0,
                memberships: parts.memberships.0,
            },
            reports: parts.reports.0,
            pending: parts.pending.0,
        }
    }
}

/// What changed since a cached snapshot, read at the statement's own
/// snapshot together with the changed providers' data.
pub struct PatchSince {
    /// The statement's snapshot, as text.
    pub snapshot: String,
    /// Providers were created, deleted or moved, or the log was pruned
    /// past the cache: only a full load is exact.
    pub full: bool,
    /// The providers whose data changed.
    pub ids: Vec<i64>,
    /// Their data at `snapshot`.
    pub data: ProviderData,
}

/// The providers changed since `since` and their data, as of this one
/// statement's snapshot: a snapshot cache brought up to now in one round
/// trip, on any connection.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn patch_since(conn: &mut PgConnection, since: &str) -> Result<PatchSince, sqlx::Error> {
    #[derive(sqlx::FromRow)]
    struct Row {
        snapshot: String,
        full: bool,
        ids: Vec<i64>,
        #[sqlx(flatten)]
        data: DataColumns,
    }
    let row: Row = crate::db::query_as(sqlx::AssertSqlSafe(PATCH_SINCE.as_str()))
        .bind(since)
        .fetch_one(conn)
        .await?;
    Ok(PatchSince {
        snapshot: row.snapshot,
        full: row.full,
        ids: row.ids,
        data: row.data.into(),
    })
}

/// The statement of [`patch_since`]: [`changes_sql`] at its own snapshot,
/// and the data of the providers it names (none when a full load is due).
///
/// The providers to read are listed once, in `wanted` (none when a full
/// load is due), and each of the seven reads of them takes that one list:
/// written out in each, the list and its check for a full load were five
/// plan nodes seven times over, a third of the statement's hundred, and
/// every run starts every node.
static PATCH_SINCE: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    let changes = changes_sql("pg_current_snapshot()");
    format!(
        "WITH changed AS MATERIALIZED ({changes}),
         patch AS MATERIALIZED (
           SELECT COALESCE(bool_or(structural), false) AS reload,
                  ARRAY(SELECT provider_id FROM changed WHERE provider_id IS NOT NULL) AS ids
             FROM changed),
         wanted AS MATERIALIZED (
           SELECT CASE WHEN reload THEN '{{}}'::int8[] ELSE ids END AS ids FROM patch)
         SELECT pg_current_snapshot()::text AS snapshot,
                (SELECT reload FROM patch) AS full,
                (SELECT ids FROM patch) AS ids,
                {}",
        provider_data_columns("ANY(CAST((SELECT ids FROM wanted) AS int8[]))")
    )
});

/// What changed since a cached snapshot when only allocations did: the
/// units each provider and class gained (negative: lost), from the change
/// log alone, as of this one statement's snapshot.
pub struct UsageSince {
    /// The statement's snapshot, as text.
    pub snapshot: String,
    /// Something besides allocations changed (or the log was pruned past
    /// the cache, or holds rows without units): only [`patch_since`]
    /// brings the cache forward.
    pub other: bool,
    /// Per provider and class, the units added, ordered by both.
    pub deltas: Vec<UsageDelta>,
}

/// Units a provider's class gained between two snapshots.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UsageDelta {
    /// The provider's id.
    pub provider_id: i64,
    /// The class's id.
    pub class_id: i32,
    /// Units added (negative: removed).
    pub units: i64,
}

/// The changes since `since` when they are allocations alone (see
/// [`UsageSince`]): a short statement, where [`patch_since`] starts its
/// seven reads.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn usage_since(conn: &mut PgConnection, since: &str) -> Result<UsageSince, sqlx::Error> {
    static USAGE_SINCE: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
        let now = "pg_current_snapshot()";
        format!(
            "WITH changed AS MATERIALIZED (
               SELECT provider_id, class_id, used_delta, structural FROM change_log
                WHERE {window}
               UNION ALL
               SELECT NULL, NULL, NULL, true FROM change_log_horizon
                WHERE xid >= (SELECT pg_snapshot_xmin($1::pg_snapshot))),
             usage AS MATERIALIZED (
               SELECT provider_id, class_id, SUM(used_delta)::int8 AS units FROM changed
                WHERE NOT structural AND used_delta IS NOT NULL
                GROUP BY 1, 2 ORDER BY 1, 2)
             SELECT {now}::text AS snapshot,
                    (SELECT COALESCE(bool_or(structural OR used_delta IS NULL), false) FROM changed) AS other,
                    ARRAY(SELECT provider_id FROM usage) AS providers,
                    ARRAY(SELECT class_id FROM usage) AS classes,
                    ARRAY(SELECT units FROM usage) AS units",
            window = window_sql(now)
        )
    });
    let (snapshot, other, providers, classes, units): (String, bool, Vec<i64>, Vec<i32>, Vec<i64>) =
        crate::db::query_as(sqlx::AssertSqlSafe(USAGE_SINCE.as_str()))
            .bind(since)
            .fetch_one(conn)
            .await?;
    let deltas = providers
        .into_iter()
        .zip(classes)
        .zip(units)
        .map(|((provider_id, class_id), units)| UsageDelta {
            provider_id,
            class_id,
            units,
        })
        .collect();
    Ok(UsageSince {
        snapshot,
        other,
        deltas,
    })
}

/// Every provider's place in its tree, ordered by id.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn provider_rows(conn: &mut PgConnection) -> Result<Vec<TreeRow>, sqlx::Error> {
    crate::db::query_as(
        "SELECT id, uuid, parent_provider_id AS parent_id, root_provider_id AS root_id
           FROM resource_providers ORDER BY id",
    )
    .fetch_all(conn)
    .await
}

/// The id of the trait that marks sharing providers, if it exists.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn sharing_trait_id(conn: &mut PgConnection) -> Result<Option<i32>, sqlx::Error> {
    crate::db::query_scalar("SELECT id FROM traits WHERE name = $1")
        .bind(MISC_SHARES_VIA_AGGREGATE)
        .fetch_optional(conn)
        .await
}

/// Every resource class name by id.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn class_names(conn: &mut PgConnection) -> Result<HashMap<i32, String>, sqlx::Error> {
    let rows: Vec<(i32, String)> = crate::db::query_as("SELECT id, name FROM resource_classes")
        .fetch_all(conn)
        .await?;
    Ok(rows.into_iter().collect())
}

/// What changed between the snapshot a cache was built at and now.
pub enum Delta {
    /// Nothing the cache does not already reflect.
    None,
    /// These providers' data changed.
    Providers(Vec<i64>),
    /// Providers were created, deleted or moved, or the log was pruned past the cache: reload all.
    Full,
}

/// A snapshot and the database server it was taken on.
///
/// Snapshots of two servers do not compare: a standby promoted after an
/// asynchronous failover, or a server restarted after a crash, may not
/// have the last transactions the old one committed, and gives their ids
/// to new ones. A cache brought forward from the old server's snapshot
/// would keep the lost transactions' data and miss the new ones'.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    /// `pg_current_snapshot()`, as text.
    pub snapshot: String,
    /// The server's start time (seconds since the epoch, as text, the same
    /// whatever a session's time zone): another host, or the same one
    /// restarted, is another server.
    pub server: String,
}

/// The [`Seen`] of the current transaction (one statement).
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn seen(conn: &mut PgConnection) -> Result<Seen, sqlx::Error> {
    let (snapshot, server) = crate::db::query_as(
        "SELECT pg_current_snapshot()::text, extract(epoch FROM pg_postmaster_start_time())::text",
    )
    .fetch_one(conn)
    .await?;
    Ok(Seen { snapshot, server })
}

/// Providers changed by transactions visible in `now` (this statement's
/// own snapshot when None) but not in `since`.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn delta(
    conn: &mut PgConnection,
    since: &str,
    now: Option<&str>,
) -> Result<Delta, sqlx::Error> {
    // One statement: the changes, and a row without a provider when the
    // log was pruned past `since` (then only a full load is exact).
    //
    // The bounds on `xid` come from init plans, so the planner sees no
    // values and the connection keeps one generic plan (planning was 0.3
    // ms a search against 0.1 ms of running). The upper bound says
    // nothing new (what `now` sees is below its xmax), but a range on
    // both sides is estimated narrow, so that plan is the index scan the
    // custom plans chose.
    static DELTA: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
        changes_sql("COALESCE($2::pg_snapshot, pg_current_snapshot())")
    });
    let rows: Vec<(Option<i64>, bool)> = crate::db::query_as(sqlx::AssertSqlSafe(DELTA.as_str()))
        .bind(since)
        .bind(now)
        .fetch_all(conn)
        .await?;
    Ok(if rows.is_empty() {
        Delta::None
    } else if rows.iter().any(|r| r.1) {
        Delta::Full
    } else {
        Delta::Providers(rows.into_iter().filter_map(|r| r.0).collect())
    })
}

/// The providers changed by transactions visible in the snapshot `now`
/// (an SQL expression) but not in `$1`, with whether the change was
/// structural; and a row without a provider when the log was pruned past
/// `$1` (then only a full load is exact).
fn changes_sql(now: &str) -> String {
    format!(
        "SELECT provider_id, bool_or(structural) AS structural FROM change_log
          WHERE {window}
          GROUP BY provider_id
         UNION ALL
         SELECT NULL, true FROM change_log_horizon
          WHERE xid >= (SELECT pg_snapshot_xmin($1::pg_snapshot))",
        window = window_sql(now)
    )
}

/// The change-log rows of transactions visible in the snapshot `now` (an
/// SQL expression) but not in `$1`.
fn window_sql(now: &str) -> String {
    format!(
        "xid >= (SELECT pg_snapshot_xmin($1::pg_snapshot))
            AND xid < (SELECT pg_snapshot_xmax({now}))
            AND pg_visible_in_snapshot(xid, {now})
            AND NOT pg_visible_in_snapshot(xid, $1::pg_snapshot)"
    )
}

/// Deletes change-log rows older than `keep_secs` and records the horizon.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn prune_change_log(conn: &mut PgConnection, keep_secs: f64) -> Result<u64, sqlx::Error> {
    let cut: Option<String> = crate::db::query_scalar(
        "SELECT max(xid)::text FROM change_log WHERE created_at < now() - make_interval(secs => $1)",
    )
    .bind(keep_secs)
    .fetch_one(&mut *conn)
    .await?;
    let Some(cut) = cut else { return Ok(0) };
    let n = crate::db::query("DELETE FROM change_log WHERE xid <= $1::xid8")
        .bind(&cut)
        .execute(&mut *conn)
        .await?
        .rows_affected();
    crate::db::query("UPDATE change_log_horizon SET xid = GREATEST(xid, $1::xid8)")
        .bind(&cut)
        .execute(conn)
        .await?;
    Ok(n)
}

/// Aggregate ids of the given uuids (unknown uuids are left out).
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn aggregate_ids(
    conn: &mut PgConnection,
    uuids: &[uuid::Uuid],
) -> Result<HashMap<uuid::Uuid, i32>, sqlx::Error> {
    let rows: Vec<(i32, uuid::Uuid)> =
        crate::db::query_as("SELECT id, uuid FROM placement_aggregates WHERE uuid = ANY($1)")
            .bind(uuids)
            .fetch_all(conn)
            .await?;
    Ok(rows.into_iter().map(|(id, u)| (u, id)).collect())
}

/// Starts the read-only, repeatable-read transaction a candidates request
/// runs in (one statement: BEGIN with its isolation level).
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn begin_snapshot(pool: &super::Pool) -> Result<super::pool::Tx, sqlx::Error> {
    pool.begin_with("BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        .await
}

/// What a candidates query reads besides the providers, from one
/// statement (so one PostgreSQL snapshot and one round trip).
#[derive(Debug, Clone)]
pub struct NamesRead {
    /// The statement's snapshot and server.
    pub seen: Seen,
    /// Ids of the asked class names that exist.
    pub classes: HashMap<String, i32>,
    /// Ids of the asked trait names that exist.
    pub traits: HashMap<String, i32>,
    /// Ids of the asked aggregates that exist.
    pub aggregates: HashMap<uuid::Uuid, i32>,
    /// Whether any project reservation exists (then the search must
    /// withhold other projects' unused ones).
    pub reservations: bool,
}

/// The statement of [`read_names`]; the names are hidden from the planner (see
/// [`hidden`]): every search runs it, and its planning cost four times
/// its execution.
static READ_NAMES: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    let (classes, traits) = (hidden("$1", "text[]"), hidden("$2", "text[]"));
    let aggregates = hidden("$3", "uuid[]");
    format!(
        "SELECT pg_current_snapshot()::text, extract(epoch FROM pg_postmaster_start_time())::text,
                (SELECT coalesce(jsonb_object_agg(name, id), '{{}}') FROM resource_classes WHERE name = {classes}),
                (SELECT coalesce(jsonb_object_agg(name, id), '{{}}') FROM traits WHERE name = {traits}),
                (SELECT coalesce(jsonb_object_agg(uuid, id), '{{}}') FROM placement_aggregates WHERE uuid = {aggregates}),
                EXISTS (SELECT 1 FROM project_reservations)"
    )
});

/// Reads a [`NamesRead`] for these names.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn read_names(
    conn: &mut PgConnection,
    classes: &[String],
    traits: &[String],
    aggregates: &[uuid::Uuid],
) -> Result<NamesRead, sqlx::Error> {
    type Ids<K> = Json<HashMap<K, i32>>;
    let (snapshot, server, classes, traits, aggregates, reservations): (
        String,
        String,
        Ids<String>,
        Ids<String>,
        Ids<uuid::Uuid>,
        bool,
    ) = crate::db::query_as(sqlx::AssertSqlSafe(READ_NAMES.as_str()))
        .bind(classes)
        .bind(traits)
        .bind(aggregates)
        .fetch_one(conn)
        .await?;
    Ok(NamesRead {
        seen: Seen { snapshot, server },
        classes: classes.0,
        traits: traits.0,
        aggregates: aggregates.0,
        reservations,
    })
}
