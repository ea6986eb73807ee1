//! What a deployment plans over, per node, read in one statement: the
//! provider's generation and topology version, its MEMORY_MB and VCPU
//! stock, its disks, the shares bound on each core, what its instances use
//! per NUMA node and how many each app has there. A node's state is read
//! again after every change to it, in each process: one statement where
//! eight were (a deployment changes a node, every process re-reads it).

use sqlx::types::Json;
use sqlx::PgConnection;

/// One node's state as stored (topology cores apart: see
/// [`super::deployments::topologies`]).
#[derive(Debug, sqlx::FromRow)]
pub struct NodeRow {
    /// Provider id.
    pub id: i64,
    /// Provider uuid.
    pub uuid: uuid::Uuid,
    /// Provider generation.
    pub generation: i32,
    /// Its CPU topology's version (None: it has none).
    pub topology_version: Option<i64>,
    /// MEMORY_MB: [capacity, used] (None: no such inventory).
    pub memory: Option<Vec<i64>>,
    /// VCPU: [capacity, used].
    pub vcpu: Option<Vec<i64>>,
    /// Disks: (device, bytes, bytes bound).
    pub volumes: Json<Vec<(String, i64, i64)>>,
    /// Shares bound per core: (core, shares).
    pub bound: Json<Vec<(String, i64)>>,
    /// Per NUMA node (None: instances not pinned): (node, CPUs of its
    /// instances, MiB of its bound instances).
    pub usage: Json<Vec<(Option<String>, f64, i64)>>,
    /// Instances per app.
    pub apps: Json<Vec<(String, i64)>>,
}

/// The states of the providers among `rp_ids` (any provider: the caller
/// tells deployment nodes from the rest).
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn node_rows(
    conn: &mut PgConnection,
    rp_ids: &[i64],
) -> Result<Vec<NodeRow>, sqlx::Error> {
    crate::db::query_as(NODE_ROWS)
        .bind(rp_ids)
        .fetch_all(conn)
        .await
}

/// One row per provider: its stock joined in, the rest correlated reads
/// of that provider's rows by their provider index.
const NODE_ROWS: &str = "
WITH stock AS (
  SELECT i.resource_provider_id AS rp, c.name,
         ARRAY[FLOOR(placement_capacity(i.total, i.reserved, i.allocation_ratio))::bigint,
               COALESCE((SELECT SUM(a.used) FROM allocations a
                          WHERE a.resource_provider_id = i.resource_provider_id
                            AND a.resource_class_id = i.resource_class_id), 0)::bigint] AS stock
    FROM inventories i JOIN resource_classes c ON c.id = i.resource_class_id
   WHERE i.resource_provider_id = ANY($1) AND c.name IN ('MEMORY_MB', 'VCPU'))
SELECT rp.id, rp.uuid, rp.generation, t.version AS topology_version,
       m.stock AS memory, v.stock AS vcpu,
       (SELECT coalesce(json_agg(json_build_array(d.device, d.size,
                 COALESCE((SELECT SUM(b.size) FROM volume_bindings b
                            WHERE b.resource_provider_id = d.resource_provider_id
                              AND b.device = d.device), 0)::bigint)), '[]')
          FROM node_volumes d WHERE d.resource_provider_id = rp.id) AS volumes,
       (SELECT coalesce(json_agg(json_build_array(s.core, s.shares)), '[]')
          FROM (SELECT b.core, SUM(b.share)::bigint AS shares
                  FROM instances i, unnest(i.core_ids, i.core_shares) AS b(core, share)
                 WHERE i.resource_provider_id = rp.id AND cardinality(i.core_ids) > 0
                 GROUP BY b.core) s) AS bound,
       (SELECT coalesce(json_agg(json_build_array(u.numa_node, u.cpu, u.bound_memory_mb)), '[]')
          FROM (SELECT numa_node, SUM(cpu)::float8 AS cpu,
                       COALESCE(SUM(memory_mb) FILTER (WHERE cpu_bind), 0)::bigint AS bound_memory_mb
                  FROM instances WHERE resource_provider_id = rp.id GROUP BY 1) u) AS usage,
       (SELECT coalesce(json_agg(json_build_array(a.app, a.n)), '[]')
          FROM (SELECT app, COUNT(*)::bigint AS n
                  FROM instances WHERE resource_provider_id = rp.id GROUP BY 1) a) AS apps
  FROM resource_providers rp
  LEFT JOIN cpu_topologies t ON t.resource_provider_id = rp.id
  LEFT JOIN stock m ON m.rp = rp.id AND m.name = 'MEMORY_MB'
  LEFT JOIN stock v ON v.rp = rp.id AND v.name = 'VCPU'
 WHERE rp.id = ANY($1)";
