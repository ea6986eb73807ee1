//! Eru's volumes: the disks of deployment nodes and the instances' shares
//! of them.

use sqlx::PgConnection;
use std::collections::{BTreeMap, HashMap};

/// A node's disks: size by device, and bytes bound by device.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Disks {
    /// Bytes per disk.
    pub capacity: BTreeMap<String, i64>,
    /// Bytes bound per disk (disks with none left out).
    pub usage: BTreeMap<String, i64>,
}

/// One instance's volumes: binding → {disk: bytes}.
pub type Plan = BTreeMap<String, BTreeMap<String, i64>>;

/// Each provider's disks with the bytes bound on them.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn volumes(
    conn: &mut PgConnection,
    rp_ids: &[i64],
) -> Result<HashMap<i64, Disks>, sqlx::Error> {
    let rows: Vec<(i64, String, i64, i64)> = crate::db::query_as(
        "SELECT v.resource_provider_id, v.device, v.size,
                COALESCE((SELECT SUM(b.size) FROM volume_bindings b
                           WHERE b.resource_provider_id = v.resource_provider_id AND b.device = v.device), 0)::bigint
           FROM node_volumes v WHERE v.resource_provider_id = ANY($1)",
    )
    .bind(rp_ids)
    .fetch_all(conn)
    .await?;
    let mut out: HashMap<i64, Disks> = HashMap::new();
    for (rp, device, size, used) in rows {
        let node = out.entry(rp).or_default();
        node.capacity.insert(device.clone(), size);
        if used > 0 {
            node.usage.insert(device, used);
        }
    }
    Ok(out)
}

/// Replaces a provider's disks.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn set_volumes(
    conn: &mut PgConnection,
    rp_id: i64,
    disks: &BTreeMap<String, i64>,
) -> Result<(), sqlx::Error> {
    let devices: Vec<&str> = disks.keys().map(String::as_str).collect();
    let sizes: Vec<i64> = disks.values().copied().collect();
    crate::db::query(
        "DELETE FROM node_volumes WHERE resource_provider_id = $1 AND NOT device = ANY($2)",
    )
    .bind(rp_id)
    .bind(&devices)
    .execute(&mut *conn)
    .await?;
    crate::db::query(
        "INSERT INTO node_volumes (resource_provider_id, device, size)
         SELECT $1, d, s FROM UNNEST($2::text[], $3::bigint[]) AS t(d, s)
         ON CONFLICT (resource_provider_id, device) DO UPDATE SET size = EXCLUDED.size",
    )
    .bind(rp_id)
    .bind(&devices)
    .bind(&sizes)
    .execute(conn)
    .await?;
    Ok(())
}

/// One new instance's volume plan on its provider.
#[derive(Debug, Clone)]
pub struct NewBindings {
    /// The instance's consumer id.
    pub consumer_id: i64,
    /// Its provider's id.
    pub rp_id: i64,
    /// Binding → {disk: bytes}.
    pub plan: Plan,
}

/// Records the volume plans of new instances in one statement.
#[tracing::instrument(level = "debug", skip_all, err(level = "debug"))]
pub async fn insert_bindings(
    conn: &mut PgConnection,
    plans: &[NewBindings],
) -> Result<(), sqlx::Error> {
    let (mut consumers, mut rps, mut bindings, mut devices, mut sizes) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for p in plans {
        for (binding, on) in &p.plan {
            for (device, size) in on {
                consumers.push(p.consumer_id);
                rps.push(p.rp_id);
                bindings.push(binding.as_str());
                devices.push(device.as_str());
                sizes.push(*size);
            }
        }
    }
    if consumers.is_empty() {
        return Ok(());
    }
    crate::db::query(
        "INSERT INTO volume_bindings (consumer_id, resource_provider_id, binding, device, size)
         SELECT * FROM UNNEST($1::bigint[], $2::bigint[], $3::text[], $4::text[], $5::bigint[])",
    )
    .bind(&consumers)
    .bind(&rps)
    .bind(&bindings)
    .bind(&devices)
    .bind(&sizes)
    .execute(conn)
    .await?;
    Ok(())
}
