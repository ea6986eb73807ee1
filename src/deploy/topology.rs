//! A node's CPU topology (Eru's cores, share base, fragment limit and
//! NUMA memory): replacing it without losing what bound instances hold
//! (unless forced), with the share inventory that follows it, and the view
//! of its cores and of the pool non-bound instances share.

use super::CPU_SHARES;
use crate::db::classes;
use crate::db::deployments::{self as db, Topology};
use crate::db::inventories;
use crate::db::providers::{self, ProviderRow};
use crate::error::{codes, Error, Result};
use crate::sched;
use crate::types::Inventory;
use sqlx::PgConnection;
use std::collections::HashMap;
use uuid::Uuid;

/// One core with its shares.
#[derive(Debug, Clone)]
pub struct CoreUse {
    /// Core id.
    pub id: String,
    /// NUMA node, if any.
    pub numa_node: Option<String>,
    /// Shares bound to instances.
    pub used_shares: i64,
    /// Shares still free.
    pub free_shares: i64,
}

/// A node's topology as it is used now.
#[derive(Debug, Clone)]
pub struct TopologyView {
    /// Shares in one whole core.
    pub share_base: i32,
    /// Most cores that may hold fragments; -1 = unlimited.
    pub max_fragment_cores: i32,
    /// Cores with their shares.
    pub cores: Vec<CoreUse>,
    /// Memory per NUMA node, MiB.
    pub numa_memory_mb: Vec<(String, i64)>,
    /// The cores non-bound instances share (Eru's remap).
    pub shared_cores: Vec<String>,
    /// The non-bound deployment instances on the node.
    pub shared_instances: Vec<Uuid>,
    /// The provider's generation.
    pub generation: i32,
}

/// The topology of `rp` with its use; not found when it has none.
pub async fn view(conn: &mut PgConnection, rp: &ProviderRow) -> Result<TopologyView> {
    let tops = db::topologies(conn, &[rp.id]).await?;
    let t = tops.get(&rp.id).ok_or_else(|| {
        Error::not_found(format!("No CPU topology for resource provider {}", rp.uuid))
    })?;
    let bound: HashMap<String, i64> = db::bound_shares(conn, &[rp.id])
        .await?
        .into_iter()
        .map(|(_, c, s)| (c, s))
        .collect();
    let cores = t
        .cores
        .iter()
        .map(|(id, numa)| {
            let used = bound.get(id).copied().unwrap_or(0);
            CoreUse {
                id: id.clone(),
                numa_node: numa.clone(),
                used_shares: used,
                free_shares: i64::from(t.share_base) - used,
            }
        })
        .collect();
    Ok(TopologyView {
        share_base: t.share_base,
        max_fragment_cores: t.max_fragment_cores,
        cores,
        numa_memory_mb: t.numa_memory_mb.to_vec(),
        shared_cores: pool(t, &bound),
        shared_instances: db::unbound_instances(conn, rp.id).await?,
        generation: providers::generation(conn, rp.id).await?,
    })
}

fn pool(t: &Topology, bound: &HashMap<String, i64>) -> Vec<String> {
    let base = i64::from(t.share_base);
    let map = |f: &dyn Fn(&str) -> i64| -> sched::CpuMap {
        t.cores
            .iter()
            .map(|(id, _)| (sched::CoreId(id.clone()), f(id)))
            .collect()
    };
    let node = sched::NodeResourceInfo {
        capacity: sched::NodeResource {
            cpu_map: map(&|_| base),
            ..Default::default()
        },
        usage: sched::NodeResource {
            cpu_map: map(&|id| bound.get(id).copied().unwrap_or(0)),
            ..Default::default()
        },
    };
    let shared: std::collections::HashSet<String> = sched::shared_pool(&node, base)
        .into_iter()
        .map(|c| c.0)
        .collect();
    t.cores
        .iter()
        .filter(|(id, _)| shared.contains(id))
        .map(|(id, _)| id.clone())
        .collect()
}

/// Bound shares survive a replacement: same share base, no core they
/// hold removed.
async fn keeps_bound_cores(
    tx: &mut PgConnection,
    rp: &ProviderRow,
    t: &Topology,
    bound: &[(i64, String, i64)],
) -> Result<()> {
    let old = db::topologies(tx, &[rp.id]).await?;
    if old
        .get(&rp.id)
        .is_some_and(|o| o.share_base != t.share_base)
    {
        return Err(Error::conflict(format!(
            "Cores of resource provider {} have bound shares: the share base cannot change (send \"force\": true to override).",
            rp.uuid
        ))
        .code(codes::INVENTORY_INUSE));
    }
    let lost: Vec<&str> = bound
        .iter()
        .filter(|(_, c, _)| !t.cores.iter().any(|(id, _)| id == c))
        .map(|(_, c, _)| c.as_str())
        .collect();
    if !lost.is_empty() {
        return Err(Error::conflict(format!(
            "Cores {} of resource provider {} have bound shares and cannot be removed (send \"force\": true to override).",
            lost.join(", "),
            rp.uuid
        ))
        .code(codes::INVENTORY_INUSE));
    }
    Ok(())
}

/// Replaces the topology of `rp` (locked by the caller) and sets its share
/// inventory to match; refuses (409) to lose what bound instances hold
/// unless `force`, and a duplicated core (400).
pub async fn replace(
    tx: &mut PgConnection,
    rp: &ProviderRow,
    t: Topology,
    force: bool,
) -> Result<()> {
    if let Some(id) = t
        .cores
        .iter()
        .enumerate()
        .find(|(i, (id, _))| t.cores[..*i].iter().any(|(other, _)| other == id))
        .map(|(_, (id, _))| id)
    {
        return Err(Error::invalid(format!("Core {id} is listed twice.")));
    }
    let bound = db::bound_shares(tx, &[rp.id]).await?;
    if !force && !bound.is_empty() {
        keeps_bound_cores(tx, rp, &t, &bound).await?;
    }
    db::set_topology(tx, rp.id, &t).await?;
    classes::create(tx, CPU_SHARES).await?;
    let class = classes::get(tx, CPU_SHARES)
        .await?
        .ok_or_else(|| Error::internal("CPU share class missing"))?;
    let cores = i64::try_from(t.cores.len()).unwrap_or(i64::MAX);
    let total = cores.saturating_mul(i64::from(t.share_base));
    let used: i64 = bound.iter().map(|b| b.2).sum();
    if used > total && !force {
        return Err(Error::conflict(format!(
            "Resource provider {} has {used} bound CPU shares, more than the {total} the new topology offers (send \"force\": true to override).",
            rp.uuid
        ))
        .code(codes::INVENTORY_INUSE));
    }
    let total = i32::try_from(total)
        .map_err(|_| Error::invalid("Too many CPU shares for one provider."))?;
    let inv = Inventory {
        total,
        reserved: 0,
        min_unit: 1,
        max_unit: total,
        step_size: 1,
        allocation_ratio: 1.0,
    };
    inventories::upsert(tx, rp.id, class.id, &inv).await?;
    providers::bump_locked(tx, &[rp.id]).await?;
    Ok(())
}
