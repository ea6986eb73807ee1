//! CPU topologies, deployed instances and their core bindings.

use sqlx::PgConnection;
use std::collections::HashMap;

/// A provider's CPU topology.
#[derive(Debug, Clone, PartialEq)]
pub struct Topology {
    /// Shares in one whole core.
    pub share_base: i32,
    /// Most cores that may hold fragments; -1 = unlimited.
    pub max_fragment_cores: i32,
    /// (core id, NUMA node).
    pub cores: Vec<(String, Option<String>)>,
    /// Memory per NUMA node, MiB.
    pub numa_memory_mb: Vec<(String, i64)>,
}

/// The topologies of the given providers.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn topologies(
    conn: &mut PgConnection,
    rp_ids: &[i64],
) -> Result<HashMap<i64, Topology>, sqlx::Error> {
    type Head = (i64, i32, i32, Vec<String>, Vec<Option<String>>);
    let heads: Vec<Head> = crate::db::query_as(
        "SELECT resource_provider_id, share_base, max_fragment_cores, core_ids, core_numa_nodes
           FROM cpu_topologies WHERE resource_provider_id = ANY($1)",
    )
    .bind(rp_ids)
    .fetch_all(&mut *conn)
    .await?;
    let mut out: HashMap<i64, Topology> = heads
        .into_iter()
        .map(|(rp, share_base, max_fragment_cores, ids, numas)| {
            let cores = ids.into_iter().zip(numas).collect();
            (
                rp,
                Topology {
                    share_base,
                    max_fragment_cores,
                    cores,
                    numa_memory_mb: vec![],
                },
            )
        })
        .collect();
    let numa: Vec<(i64, String, i64)> = crate::db::query_as(
        "SELECT resource_provider_id, numa_node, memory_mb FROM numa_memory
          WHERE resource_provider_id = ANY($1) ORDER BY resource_provider_id, numa_node",
    )
    .bind(rp_ids)
    .fetch_all(conn)
    .await?;
    for (rp, node, mb) in numa {
        if let Some(t) = out.get_mut(&rp) {
            t.numa_memory_mb.push((node, mb));
        }
    }
    Ok(out)
}

/// The size of the largest deployment node, in CPUs: cores of a CPU
/// topology, or (unless `bound`) VCPUs of a node's inventory. None when
/// there is no such node.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn largest_node_cpus(
    conn: &mut PgConnection,
    bound: bool,
) -> Result<Option<i64>, sqlx::Error> {
    crate::db::query_scalar(
        "SELECT GREATEST(
                (SELECT MAX(cardinality(core_ids)) FROM cpu_topologies),
                (SELECT MAX(i.total) FROM inventories i JOIN resource_classes c ON c.id = i.resource_class_id
                  WHERE c.name = 'VCPU' AND NOT $1))::bigint",
    )
    .bind(bound)
    .fetch_one(conn)
    .await
}

/// Replaces a provider's topology (with a new version).
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn set_topology(
    conn: &mut PgConnection,
    rp_id: i64,
    t: &Topology,
) -> Result<(), sqlx::Error> {
    let ids: Vec<&str> = t.cores.iter().map(|c| c.0.as_str()).collect();
    let numas: Vec<Option<&str>> = t.cores.iter().map(|c| c.1.as_deref()).collect();
    crate::db::query(
        "INSERT INTO cpu_topologies (resource_provider_id, share_base, max_fragment_cores, core_ids, core_numa_nodes)
         VALUES ($1, $2, $3, $4, $5)
         ON CONFLICT (resource_provider_id) DO UPDATE SET share_base = EXCLUDED.share_base,
            max_fragment_cores = EXCLUDED.max_fragment_cores, core_ids = EXCLUDED.core_ids,
            core_numa_nodes = EXCLUDED.core_numa_nodes, updated_at = now(),
            version = nextval('cpu_topology_versions')",
    )
    .bind(rp_id)
    .bind(t.share_base)
    .bind(t.max_fragment_cores)
    .bind(&ids)
    .bind(&numas)
    .execute(&mut *conn)
    .await?;
    crate::db::query("DELETE FROM numa_memory WHERE resource_provider_id = $1")
        .bind(rp_id)
        .execute(&mut *conn)
        .await?;
    let nodes: Vec<&str> = t.numa_memory_mb.iter().map(|n| n.0.as_str()).collect();
    let mbs: Vec<i64> = t.numa_memory_mb.iter().map(|n| n.1).collect();
    crate::db::query(
        "INSERT INTO numa_memory (resource_provider_id, numa_node, memory_mb)
         SELECT $1, n, m FROM UNNEST($2::text[], $3::bigint[]) AS t(n, m)",
    )
    .bind(rp_id)
    .bind(&nodes)
    .bind(&mbs)
    .execute(conn)
    .await?;
    Ok(())
}

/// Bound shares per (provider, core), in that order. The instances'
/// bindings are summed here rather than in SQL: unnesting and grouping
/// them there costs several times the transfer.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn bound_shares(
    conn: &mut PgConnection,
    rp_ids: &[i64],
) -> Result<Vec<(i64, String, i64)>, sqlx::Error> {
    let rows: Vec<(i64, Vec<String>, Vec<i32>)> = crate::db::query_as(
        "SELECT resource_provider_id, core_ids, core_shares FROM instances
          WHERE resource_provider_id = ANY($1) AND cardinality(core_ids) > 0",
    )
    .bind(rp_ids)
    .fetch_all(conn)
    .await?;
    let mut sums: std::collections::BTreeMap<(i64, String), i64> = Default::default();
    for (rp, cores, shares) in rows {
        for (core, n) in cores.into_iter().zip(shares) {
            *sums.entry((rp, core)).or_default() += i64::from(n);
        }
    }
    Ok(sums.into_iter().map(|((rp, c), n)| (rp, c, n)).collect())
}

/// A deployed instance with its binding.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct InstanceRow {
    /// Consumer id.
    pub consumer_id: i64,
    /// Consumer uuid.
    pub consumer_uuid: uuid::Uuid,
    /// Consumer generation.
    pub generation: i32,
    /// App name.
    pub app: String,
    /// The project (external id) the instance's consumer belongs to.
    pub project_id: String,
    /// Provider id.
    pub resource_provider_id: i64,
    /// Provider uuid.
    pub provider_uuid: uuid::Uuid,
    /// CPUs requested.
    pub cpu: f64,
    /// Bound to cores.
    pub cpu_bind: bool,
    /// Memory, MiB.
    pub memory_mb: i64,
    /// NUMA node it is pinned to.
    pub numa_node: Option<String>,
    /// Core → shares, as JSON object.
    pub cpu_map: sqlx::types::Json<HashMap<String, i64>>,
    /// Its volumes: binding → {disk: bytes} (empty without volumes).
    pub volume_plan: sqlx::types::Json<crate::db::volumes::Plan>,
}

const INSTANCES: &str = "SELECT i.consumer_id, c.uuid AS consumer_uuid, c.generation, i.app,
        (SELECT p.external_id FROM projects p WHERE p.id = c.project_id) AS project_id, i.resource_provider_id,
        rp.uuid AS provider_uuid, i.cpu, i.cpu_bind, i.memory_mb, i.numa_node,
        COALESCE((SELECT jsonb_object_agg(b.core_id, b.shares)
                    FROM UNNEST(i.core_ids, i.core_shares) AS b(core_id, shares)), '{}'::jsonb) AS cpu_map,
        COALESCE((SELECT jsonb_object_agg(v.binding, v.disks)
                    FROM (SELECT binding, jsonb_object_agg(device, size) AS disks FROM volume_bindings
                           WHERE consumer_id = i.consumer_id GROUP BY binding) v), '{}'::jsonb) AS volume_plan
    FROM instances i JOIN consumers c ON c.id = i.consumer_id
    JOIN resource_providers rp ON rp.id = i.resource_provider_id";

/// Instances of an app.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn instances_of(
    conn: &mut PgConnection,
    app: &str,
) -> Result<Vec<InstanceRow>, sqlx::Error> {
    crate::db::query_as(sqlx::AssertSqlSafe(format!(
        "{INSTANCES} WHERE i.app = $1 ORDER BY rp.id, i.consumer_id"
    )))
    .bind(app)
    .fetch_all(conn)
    .await
}

/// One instance by consumer uuid.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn instance(
    conn: &mut PgConnection,
    consumer: uuid::Uuid,
) -> Result<Option<InstanceRow>, sqlx::Error> {
    crate::db::query_as(sqlx::AssertSqlSafe(format!(
        "{INSTANCES} WHERE c.uuid = $1"
    )))
    .bind(consumer)
    .fetch_optional(conn)
    .await
}

/// The non-bound deployment instances on a provider.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn unbound_instances(
    conn: &mut PgConnection,
    rp_id: i64,
) -> Result<Vec<uuid::Uuid>, sqlx::Error> {
    crate::db::query_scalar(
        "SELECT c.uuid FROM instances i JOIN consumers c ON c.id = i.consumer_id
          WHERE i.resource_provider_id = $1 AND NOT i.cpu_bind ORDER BY c.uuid",
    )
    .bind(rp_id)
    .fetch_all(conn)
    .await
}

/// Instance count of an app per provider id.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn app_counts(
    conn: &mut PgConnection,
    app: &str,
) -> Result<HashMap<i64, i64>, sqlx::Error> {
    let rows: Vec<(i64, i64)> = crate::db::query_as(
        "SELECT resource_provider_id, COUNT(*)::bigint FROM instances WHERE app = $1 GROUP BY 1",
    )
    .bind(app)
    .fetch_all(conn)
    .await?;
    Ok(rows.into_iter().collect())
}

/// What an instance holds, for inserting or replacing its row and binding.
pub struct InstanceSpec<'a> {
    /// App name.
    pub app: &'a str,
    /// Provider id.
    pub rp_id: i64,
    /// CPUs requested.
    pub cpu: f64,
    /// Bound to cores.
    pub cpu_bind: bool,
    /// Memory, MiB.
    pub memory_mb: i64,
    /// NUMA node it is pinned to.
    pub numa_node: Option<&'a str>,
    /// Core → shares.
    pub cpu_map: &'a [(String, i64)],
}

/// Records (or replaces) an instance and its core binding.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn put_instance(
    conn: &mut PgConnection,
    consumer_uuid: uuid::Uuid,
    s: &InstanceSpec<'_>,
) -> Result<(), sqlx::Error> {
    let consumer_id: i64 = crate::db::query_scalar("SELECT id FROM consumers WHERE uuid = $1")
        .bind(consumer_uuid)
        .fetch_one(&mut *conn)
        .await?;
    let (cores, shares) = binding_arrays(s.cpu_map);
    crate::db::query(
        "INSERT INTO instances (consumer_id, app, resource_provider_id, cpu, cpu_bind, memory_mb, numa_node,
                                core_ids, core_shares)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
         ON CONFLICT (consumer_id) DO UPDATE SET cpu = EXCLUDED.cpu, cpu_bind = EXCLUDED.cpu_bind,
            memory_mb = EXCLUDED.memory_mb, numa_node = EXCLUDED.numa_node,
            core_ids = EXCLUDED.core_ids, core_shares = EXCLUDED.core_shares",
    )
    .bind(consumer_id)
    .bind(s.app)
    .bind(s.rp_id)
    .bind(s.cpu)
    .bind(s.cpu_bind)
    .bind(s.memory_mb)
    .bind(s.numa_node)
    .bind(&cores)
    .bind(&shares)
    .execute(conn)
    .await?;
    Ok(())
}

/// Locks those of `rp_ids` no other transaction holds, in id order, and
/// returns their current generations; a provider another writer holds is
/// skipped, not waited for (the caller plans again without it).
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn lock_free_providers(
    conn: &mut PgConnection,
    rp_ids: &[i64],
) -> Result<HashMap<i64, i32>, sqlx::Error> {
    let rows: Vec<(i64, i32)> = crate::db::query_as(
        "SELECT id, generation FROM resource_providers WHERE id = ANY($1)
          ORDER BY id FOR UPDATE SKIP LOCKED",
    )
    .bind(rp_ids)
    .fetch_all(conn)
    .await?;
    Ok(rows.into_iter().collect())
}

/// Locks `rp_ids` in id order, waiting for other writers, and returns
/// their current generations.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn lock_providers_waiting(
    conn: &mut PgConnection,
    rp_ids: &[i64],
) -> Result<HashMap<i64, i32>, sqlx::Error> {
    let rows: Vec<(i64, i32)> = crate::db::query_as(
        "SELECT id, generation FROM resource_providers WHERE id = ANY($1) ORDER BY id FOR UPDATE",
    )
    .bind(rp_ids)
    .fetch_all(conn)
    .await?;
    Ok(rows.into_iter().collect())
}

/// A new instance: consumer id, provider id, NUMA node, cpu map.
/// One new instance row: its consumer, provider, NUMA node and binding.
#[derive(Debug, Clone)]
pub struct NewInstance {
    /// The instance's consumer id.
    pub consumer_id: i64,
    /// Its provider's id.
    pub rp_id: i64,
    /// The NUMA node it is pinned to.
    pub numa_node: Option<String>,
    /// Core → shares (empty unless bound).
    pub cpu_map: Vec<(String, i64)>,
}

/// The sizes every instance of one deployment shares.
#[derive(Debug, Clone, Copy)]
pub struct InstanceSizes {
    /// CPUs.
    pub cpu: f64,
    /// Whether it holds whole cores.
    pub cpu_bind: bool,
    /// Memory, MiB.
    pub memory_mb: i64,
}

/// One deployment's new instances: the app and sizes they share.
#[derive(Debug, Clone)]
pub struct DeploymentRows<'a> {
    /// Their app.
    pub app: &'a str,
    /// Their sizes.
    pub sizes: InstanceSizes,
    /// The instances.
    pub instances: Vec<NewInstance>,
}

/// Records the new instances of one or more deployments with their core
/// bindings in one statement.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn insert_instances(
    conn: &mut PgConnection,
    deployments: &[DeploymentRows<'_>],
) -> Result<(), sqlx::Error> {
    let rows = || {
        deployments
            .iter()
            .flat_map(|d| d.instances.iter().map(move |i| (d, i)))
    };
    let consumers: Vec<i64> = rows().map(|(_, i)| i.consumer_id).collect();
    let rps: Vec<i64> = rows().map(|(_, i)| i.rp_id).collect();
    let numas: Vec<Option<String>> = rows().map(|(_, i)| i.numa_node.clone()).collect();
    let apps: Vec<&str> = rows().map(|(d, _)| d.app).collect();
    let cpus: Vec<f64> = rows().map(|(d, _)| d.sizes.cpu).collect();
    let binds: Vec<bool> = rows().map(|(d, _)| d.sizes.cpu_bind).collect();
    let memories: Vec<i64> = rows().map(|(d, _)| d.sizes.memory_mb).collect();
    // The bindings travel flat, each tagged with its instance's position
    // (1-based, as WITH ORDINALITY counts), and are folded back per instance.
    let (mut owner, mut core, mut shares) = (Vec::new(), Vec::new(), Vec::new());
    for (n, (_, instance)) in (1i64..).zip(rows()) {
        for (c, s) in instance.cpu_map.iter().filter(|(_, s)| *s > 0) {
            owner.push(n);
            core.push(c.as_str());
            shares.push(i32::try_from(*s).unwrap_or(i32::MAX));
        }
    }
    crate::db::query(
        "INSERT INTO instances (consumer_id, app, resource_provider_id, cpu, cpu_bind, memory_mb, numa_node,
                                core_ids, core_shares)
         SELECT t.c, t.app, t.rp, t.cpu, t.bind, t.mem, t.numa, COALESCE(b.ids, '{}'), COALESCE(b.shares, '{}')
           FROM UNNEST($1::bigint[], $2::bigint[], $3::text[], $4::text[], $5::float8[], $6::bool[], $7::bigint[])
                WITH ORDINALITY AS t(c, rp, numa, app, cpu, bind, mem, n)
           LEFT JOIN (SELECT n, array_agg(core ORDER BY k) AS ids, array_agg(s ORDER BY k) AS shares
                        FROM UNNEST($8::bigint[], $9::text[], $10::int[]) WITH ORDINALITY AS f(n, core, s, k)
                       GROUP BY n) b ON b.n = t.n",
    )
    .bind(&consumers)
    .bind(&rps)
    .bind(&numas)
    .bind(&apps)
    .bind(&cpus)
    .bind(&binds)
    .bind(&memories)
    .bind(&owner)
    .bind(&core)
    .bind(&shares)
    .execute(conn)
    .await?;
    Ok(())
}

/// A binding as the two arrays an instance row keeps (cores holding no
/// share are left out).
fn binding_arrays(map: &[(String, i64)]) -> (Vec<&str>, Vec<i32>) {
    map.iter()
        .filter(|(_, s)| *s > 0)
        .map(|(c, s)| (c.as_str(), i32::try_from(*s).unwrap_or(i32::MAX)))
        .unzip()
}

/// Notifies `channel` when the caller's transaction commits.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn notify(conn: &mut PgConnection, channel: &str) -> Result<(), sqlx::Error> {
    crate::db::query("SELECT pg_notify($1, '')")
        .bind(channel)
        .execute(conn)
        .await?;
    Ok(())
}

/// A connection of its own (outside the pool) listening on `channel`.
pub async fn listen(
    pool: &sqlx::PgPool,
    channel: &str,
) -> Result<sqlx::postgres::PgListener, sqlx::Error> {
    let mut listener = sqlx::postgres::PgListener::connect_with(pool).await?;
    listener.listen(channel).await?;
    Ok(listener)
}

/// The project an app belongs to, if it was ever deployed.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn app_owner(conn: &mut PgConnection, app: &str) -> Result<Option<String>, sqlx::Error> {
    crate::db::query_scalar("SELECT project_id FROM deployment_apps WHERE app = $1")
        .bind(app)
        .fetch_optional(conn)
        .await
}

/// Gives `app` to `project` unless it belongs to a project already; the
/// project it belongs to afterwards.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn take_app(
    conn: &mut PgConnection,
    app: &str,
    project: &str,
) -> Result<String, sqlx::Error> {
    crate::db::query("INSERT INTO deployment_apps (app, project_id) VALUES ($1, $2) ON CONFLICT (app) DO NOTHING")
        .bind(app)
        .bind(project)
        .execute(&mut *conn)
        .await?;
    // A statement of its own: it sees the owner another writer committed
    // while the insert waited for it.
    crate::db::query_scalar("SELECT project_id FROM deployment_apps WHERE app = $1")
        .bind(app)
        .fetch_one(conn)
        .await
}

/// Every app with its owner, instances and nodes, in name order.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn apps_with_owners(
    conn: &mut PgConnection,
) -> Result<Vec<(String, String, i64, i64)>, sqlx::Error> {
    crate::db::query_as(
        "SELECT a.app, a.project_id, COUNT(i.consumer_id)::bigint,
                COUNT(DISTINCT i.resource_provider_id)::bigint
           FROM deployment_apps a LEFT JOIN instances i ON i.app = a.app
          GROUP BY a.app, a.project_id HAVING COUNT(i.consumer_id) > 0 ORDER BY a.app",
    )
    .fetch_all(conn)
    .await
}
