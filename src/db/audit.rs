//! The SQL of `placement audit`: read-only checks that what the service
//! keeps agrees with itself. Each check returns one line per problem.

use sqlx::PgConnection;

/// One problem found.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Finding {
    /// Which check found it.
    pub check: &'static str,
    /// What is wrong, with its numbers.
    pub detail: String,
}

/// The triggers that keep the change log and the per-project totals, and
/// free a deleted consumer's instance.
const TRIGGERS: &[(&str, &str)] = &[
    ("resource_providers", "resource_providers_structure"),
    ("inventories", "inventories_log_ins"),
    ("inventories", "inventories_log_upd"),
    ("inventories", "inventories_log_del"),
    ("allocations", "allocations_changed_ins"),
    ("allocations", "allocations_changed_upd"),
    ("allocations", "allocations_changed_del"),
    ("resource_providers", "resource_providers_drop_totals"),
    ("resource_provider_traits", "rp_traits_log_ins"),
    ("resource_provider_traits", "rp_traits_log_del"),
    ("resource_provider_aggregates", "rp_aggs_log_ins"),
    ("resource_provider_aggregates", "rp_aggs_log_del"),
    ("provider_colocation", "provider_colocation_log_ins"),
    ("provider_colocation", "provider_colocation_log_upd"),
    ("node_volumes", "node_volumes_log_ins"),
    ("node_volumes", "node_volumes_log_upd"),
    ("node_volumes", "node_volumes_log_del"),
    ("volume_bindings", "volume_bindings_log_ins"),
    ("volume_bindings", "volume_bindings_log_del"),
    ("consumers", "consumers_free_instances"),
    ("resource_classes", "resource_classes_rename"),
];

/// Whether the database holds this service's schema (its migrations table
/// with the first migration).
pub async fn is_ours(conn: &mut PgConnection) -> Result<bool, sqlx::Error> {
    let has_table: bool =
        crate::db::query_scalar("SELECT to_regclass('_sqlx_migrations') IS NOT NULL")
            .fetch_one(&mut *conn)
            .await?;
    if !has_table {
        return Ok(false);
    }
    crate::db::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM _sqlx_migrations WHERE version = 20261121000001 AND success)",
    )
    .fetch_one(conn)
    .await
}

async fn lines(
    conn: &mut PgConnection,
    check: &'static str,
    sql: &str,
) -> Result<Vec<Finding>, sqlx::Error> {
    let rows: Vec<String> = crate::db::query_scalar(sqlx::AssertSqlSafe(sql.to_string()))
        .fetch_all(conn)
        .await?;
    Ok(rows
        .into_iter()
        .map(|detail| Finding { check, detail })
        .collect())
}

/// Usage above what the inventory allows: (total - reserved) x ratio.
const OVER_CAPACITY: &str = "
    SELECT format('provider %s %s: %s used, capacity %s', rp.uuid, rc.name, SUM(a.used),
                  placement_capacity(i.total, i.reserved, i.allocation_ratio)::bigint)
      FROM allocations a
      JOIN inventories i ON i.resource_provider_id = a.resource_provider_id AND i.resource_class_id = a.resource_class_id
      JOIN resource_providers rp ON rp.id = a.resource_provider_id
      JOIN resource_classes rc ON rc.id = a.resource_class_id
     GROUP BY rp.uuid, rc.name, i.total, i.reserved, i.allocation_ratio
    HAVING SUM(a.used) > placement_capacity(i.total, i.reserved, i.allocation_ratio)
     ORDER BY 1";

/// Allocations of a class the provider has no inventory of.
const WITHOUT_INVENTORY: &str = "
    SELECT format('provider %s %s: %s used by consumer %s, no inventory', rp.uuid, rc.name, a.used, c.uuid)
      FROM allocations a
      JOIN resource_providers rp ON rp.id = a.resource_provider_id
      JOIN resource_classes rc ON rc.id = a.resource_class_id
      JOIN consumers c ON c.id = a.consumer_id
     WHERE NOT EXISTS (SELECT 1 FROM inventories i
                        WHERE i.resource_provider_id = a.resource_provider_id AND i.resource_class_id = a.resource_class_id)
     ORDER BY 1";

/// Consumers left behind by a write that removed their allocations.
const EMPTY_CONSUMERS: &str = "
    SELECT format('consumer %s (generation %s) has no allocations', c.uuid, c.generation)
      FROM consumers c
     WHERE NOT EXISTS (SELECT 1 FROM allocations a WHERE a.consumer_id = c.id)
     ORDER BY 1";

/// Bound instances whose core shares differ from their CPU_SHARES allocation.
const CPU_SHARES: &str = "
    WITH bound AS (SELECT i.consumer_id, i.resource_provider_id,
                          (SELECT SUM(s) FROM UNNEST(i.core_shares) AS s)::bigint AS shares
                     FROM instances i WHERE cardinality(i.core_shares) > 0),
         allocated AS (SELECT a.consumer_id, a.resource_provider_id, SUM(a.used)::bigint AS shares
                         FROM allocations a JOIN resource_classes rc ON rc.id = a.resource_class_id
                        WHERE rc.name = 'CUSTOM_CPU_SHARES'
                          AND EXISTS (SELECT 1 FROM instances i WHERE i.consumer_id = a.consumer_id AND i.cpu_bind)
                        GROUP BY 1, 2)
    SELECT format('consumer %s on provider %s: %s shares bound to cores, %s allocated as CUSTOM_CPU_SHARES',
                  c.uuid, rp.uuid, COALESCE(bound.shares, 0), COALESCE(allocated.shares, 0))
      FROM bound FULL JOIN allocated USING (consumer_id, resource_provider_id)
      JOIN consumers c ON c.id = consumer_id
      JOIN resource_providers rp ON rp.id = resource_provider_id
     WHERE COALESCE(bound.shares, 0) <> COALESCE(allocated.shares, 0)
     ORDER BY 1";

/// Volume bindings above a disk's size, or on a disk the node no longer
/// declares.
const VOLUMES_OVER: &str = "
    SELECT format('provider %s volume %s: %s bytes bound, size %s', rp.uuid, b.device, SUM(b.size),
                  COALESCE(MAX(v.size)::text, 'not declared'))
      FROM volume_bindings b
      JOIN resource_providers rp ON rp.id = b.resource_provider_id
      LEFT JOIN node_volumes v ON v.resource_provider_id = b.resource_provider_id AND v.device = b.device
     GROUP BY rp.uuid, b.device
    HAVING MAX(v.size) IS NULL OR SUM(b.size) > MAX(v.size)
     ORDER BY 1";

/// Bindings (cores or volumes) of consumers without an allocation on that
/// provider: an instance the allocations do not know of.
const PHANTOM_BINDINGS: &str = "
    WITH bound AS (SELECT consumer_id, resource_provider_id FROM volume_bindings
                   UNION SELECT consumer_id, resource_provider_id FROM instances)
    SELECT format('consumer %s holds an instance or bindings on provider %s without an allocation there',
                  c.uuid, rp.uuid)
      FROM bound
      JOIN consumers c ON c.id = bound.consumer_id
      JOIN resource_providers rp ON rp.id = bound.resource_provider_id
     WHERE NOT EXISTS (SELECT 1 FROM allocations a
                        WHERE a.consumer_id = bound.consumer_id AND a.resource_provider_id = bound.resource_provider_id)
     ORDER BY 1";

/// Rows naming a provider, consumer, class, project, user or consumer type
/// that is gone.
/// These references have no foreign keys (Placement's schema has none
/// either, and a key is checked row by row on every bulk write); the write
/// paths keep them, and this check is their net.
const DANGLING: &str = "
    SELECT format('allocation %s: %s', a.id, concat_ws(', ',
                  CASE WHEN c.id IS NULL THEN format('consumer id %s is missing', a.consumer_id) END,
                  CASE WHEN rp.id IS NULL THEN format('provider id %s is missing', a.resource_provider_id) END,
                  CASE WHEN rc.id IS NULL THEN format('class id %s is missing', a.resource_class_id) END))
      FROM allocations a
      LEFT JOIN consumers c ON c.id = a.consumer_id
      LEFT JOIN resource_providers rp ON rp.id = a.resource_provider_id
      LEFT JOIN resource_classes rc ON rc.id = a.resource_class_id
     WHERE c.id IS NULL OR rp.id IS NULL OR rc.id IS NULL
    UNION ALL
    SELECT format('consumer %s: %s', c.uuid, concat_ws(', ',
                  CASE WHEN p.id IS NULL THEN format('project id %s is missing', c.project_id) END,
                  CASE WHEN u.id IS NULL THEN format('user id %s is missing', c.user_id) END,
                  CASE WHEN c.consumer_type_id IS NOT NULL AND t.id IS NULL
                       THEN format('consumer type id %s is missing', c.consumer_type_id) END))
      FROM consumers c
      LEFT JOIN projects p ON p.id = c.project_id
      LEFT JOIN users u ON u.id = c.user_id
      LEFT JOIN consumer_types t ON t.id = c.consumer_type_id
     WHERE p.id IS NULL OR u.id IS NULL OR (c.consumer_type_id IS NOT NULL AND t.id IS NULL)
    UNION ALL
    SELECT format('%s of consumer id %s on provider id %s: %s', what, held.consumer_id, held.resource_provider_id,
                  concat_ws(', ',
                  CASE WHEN c.id IS NULL THEN 'the consumer is missing' END,
                  CASE WHEN rp.id IS NULL THEN 'the provider is missing' END))
      FROM (SELECT 'instance' AS what, consumer_id, resource_provider_id FROM instances
            UNION ALL SELECT 'volume binding', consumer_id, resource_provider_id FROM volume_bindings) held
      LEFT JOIN consumers c ON c.id = held.consumer_id
      LEFT JOIN resource_providers rp ON rp.id = held.resource_provider_id
     WHERE c.id IS NULL OR rp.id IS NULL
    UNION ALL
    SELECT format('totals of project id %s on provider id %s class id %s: %s', pa.project_id,
                  pa.resource_provider_id, pa.resource_class_id, concat_ws(', ',
                  CASE WHEN p.id IS NULL THEN 'the project is missing' END,
                  CASE WHEN rp.id IS NULL THEN 'the provider is missing' END))
      FROM project_allocations pa
      LEFT JOIN projects p ON p.id = pa.project_id
      LEFT JOIN resource_providers rp ON rp.id = pa.resource_provider_id
     WHERE p.id IS NULL OR rp.id IS NULL
     ORDER BY 1";

/// The per-project totals the allocation triggers keep, against the rows.
const PROJECT_TOTALS: &str = "
    WITH actual AS (SELECT c.project_id, a.resource_provider_id, a.resource_class_id, SUM(a.used)::bigint AS used
                      FROM allocations a JOIN consumers c ON c.id = a.consumer_id GROUP BY 1, 2, 3)
    SELECT format('project %s provider %s class %s: totals say %s, allocations %s',
                  p.external_id, rp.uuid, rc.name, COALESCE(pa.used, 0), COALESCE(actual.used, 0))
      FROM actual FULL JOIN project_allocations pa USING (project_id, resource_provider_id, resource_class_id)
      JOIN projects p ON p.id = project_id
      JOIN resource_providers rp ON rp.id = resource_provider_id
      JOIN resource_classes rc ON rc.id = resource_class_id
     WHERE COALESCE(pa.used, 0) <> COALESCE(actual.used, 0)
     ORDER BY 1";

/// Every check, in a read-only transaction the caller opened.
pub async fn run(conn: &mut PgConnection) -> Result<Vec<Finding>, sqlx::Error> {
    let mut out = Vec::new();
    for (check, sql) in [
        ("over_capacity", OVER_CAPACITY),
        ("allocation_without_inventory", WITHOUT_INVENTORY),
        ("consumer_without_allocations", EMPTY_CONSUMERS),
        ("cpu_shares_mismatch", CPU_SHARES),
        ("volumes_over_size", VOLUMES_OVER),
        ("instance_without_allocation", PHANTOM_BINDINGS),
        ("project_totals_drift", PROJECT_TOTALS),
        ("dangling_reference", DANGLING),
    ] {
        out.extend(lines(conn, check, sql).await?);
    }
    out.extend(triggers(conn).await?);
    let horizon: i64 = crate::db::query_scalar("SELECT COUNT(*) FROM change_log_horizon")
        .fetch_one(&mut *conn)
        .await?;
    if horizon != 1 {
        out.push(Finding {
            check: "change_log",
            detail: format!("change_log_horizon has {horizon} rows, not 1: snapshot caches cannot tell what they missed"),
        });
    }
    Ok(out)
}

/// Triggers missing or disabled: without them the change log (and so every
/// server's candidate snapshot) or the project totals go stale.
async fn triggers(conn: &mut PgConnection) -> Result<Vec<Finding>, sqlx::Error> {
    let names: Vec<&str> = TRIGGERS.iter().map(|(_, t)| *t).collect();
    let present: Vec<(String, String)> = crate::db::query_as(
        "SELECT tgname::text, tgenabled::text FROM pg_trigger WHERE tgname = ANY($1) AND NOT tgisinternal",
    )
    .bind(&names)
    .fetch_all(conn)
    .await?;
    Ok(TRIGGERS
        .iter()
        .filter_map(|(table, name)| {
            let state = present
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, s)| s.as_str());
            let problem = match state {
                None => "is missing",
                Some("D") => "is disabled",
                Some(_) => return None,
            };
            Some(Finding {
                check: "change_log",
                detail: format!("trigger {name} on {table} {problem}"),
            })
        })
        .collect())
}
