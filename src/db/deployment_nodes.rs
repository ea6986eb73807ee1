//! What a deployment plans over, per node, read in one statement: the
//! provider's generation and topology version, its MEMORY_MB and VCPU
//! stock, its disks, and its instances (what each holds). A node's state
//! is read again after every change to it, in each process: one statement
//! where six were (a deployment changes a node, every process re-reads it).

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
    /// Its instances: (app, NUMA node, CPUs, bound, MiB, cores, shares
    /// on each), summed by the caller (grouping them here cost more than
    /// the rest of the statement).
    pub instances: Json<Vec<HeldInstance>>,
}

/// One instance as a node's state counts it (a JSON array in the row).
#[derive(Debug, serde::Deserialize)]
pub struct HeldInstance {
    /// Its app.
    pub app: String,
    /// The NUMA node it is pinned to.
    pub numa_node: Option<String>,
    /// Its CPUs.
    pub cpu: f64,
    /// Bound to cores.
    pub cpu_bind: bool,
    /// Its memory, MiB.
    pub memory_mb: i64,
    /// The cores it is bound to.
    pub cores: Vec<String>,
    /// Its shares on each of them.
    pub shares: Vec<i64>,
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

/// One row per provider: its stock joined in, its disks and instances
/// read by their provider index (a thousand nodes after a large
/// deployment: 25 ms, where summing the instances here took 45).
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
       (SELECT coalesce(json_agg(json_build_array(i.app, i.numa_node, i.cpu, i.cpu_bind,
                                                  i.memory_mb, i.core_ids, i.core_shares)), '[]')
          FROM instances i WHERE i.resource_provider_id = rp.id) AS instances
  FROM resource_providers rp
  LEFT JOIN cpu_topologies t ON t.resource_provider_id = rp.id
  LEFT JOIN stock m ON m.rp = rp.id AND m.name = 'MEMORY_MB'
  LEFT JOIN stock v ON v.rp = rp.id AND v.name = 'VCPU'
 WHERE rp.id = ANY($1)";
