//! `/resource_providers/{uuid}/cpu_topology` (our extension): the cores,
//! NUMA layout and share base a provider offers to the scheduler.
//! Registering one sets the provider's `CUSTOM_CPU_SHARES` inventory
//! (cores × share_base) so Placement usages and candidates stay true.

use super::extract::{find, find_for_update};
use super::extract::{JsonBody, PathParams};
use super::respond::Reply;
use super::schema::bodies::TopologyBody;
use super::schema::responses::{CoreShares, CpuTopology, SharedPool};
use crate::api::respond::{codes, ApiError, ApiResult};
use crate::db::deployments::{self as db, Topology};
use crate::db::inventories::{self, Inventory};
use crate::db::{classes, providers};
use crate::deploy::CPU_SHARES;
use crate::sched;
use crate::state::AppState;
use axum::extract::State;
use serde_json::{json, Value};
use sqlx::PgConnection;
use std::collections::HashMap;

fn schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "share_base": {"type": "integer", "minimum": 1, "maximum": 100000},
            "max_fragment_cores": {"type": "integer", "minimum": -1, "maximum": 100000},
            "cores": {"type": "array", "minItems": 1, "maxItems": 4096, "items": {
                "type": "object",
                "properties": {
                    "id": {"type": "string", "minLength": 1, "maxLength": 64},
                    "numa_node": {"type": ["string", "null"], "maxLength": 64}
                },
                "required": ["id"],
                "additionalProperties": false
            }},
            "numa_memory_mb": {"type": "object", "patternProperties": {"^.{1,64}$": {"type": "integer", "minimum": 0, "maximum": 1099511627776_i64}}, "additionalProperties": false},
            "force": {"type": "boolean"}
        },
        "required": ["cores"],
        "additionalProperties": false
    })
}

async fn render(conn: &mut PgConnection, rp: &providers::ProviderRow) -> ApiResult<CpuTopology> {
    let tops = db::topologies(conn, &[rp.id]).await?;
    let t = tops.get(&rp.id).ok_or_else(|| {
        ApiError::not_found(format!("No CPU topology for resource provider {}", rp.uuid))
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
            CoreShares {
                id: id.clone(),
                numa_node: numa.clone(),
                used_shares: used,
                free_shares: i64::from(t.share_base) - used,
            }
        })
        .collect();
    Ok(CpuTopology {
        share_base: t.share_base,
        max_fragment_cores: t.max_fragment_cores,
        shared_pool: SharedPool {
            cores: pool(t, &bound),
            instances: db::unbound_instances(conn, rp.id).await?,
        },
        cores,
        numa_memory_mb: t.numa_memory_mb.iter().cloned().collect(),
        resource_provider_generation: providers::generation(conn, rp.id).await?,
    })
}

/// Eru's remap pool of a topology with these bound shares, in topology order.
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

/// `GET /resource_providers/{uuid}/cpu_topology`: cores with used and free shares.
pub async fn show(
    State(st): State<AppState>,
    PathParams(id): PathParams<String>,
) -> ApiResult<Reply> {
    let mut conn = st.pool.acquire().await?;
    let rp = find(&mut conn, &id).await?;
    Ok(Reply::ok(&render(&mut conn, &rp).await?))
}

/// Refuses (without `force`) a topology that changes the share base under
/// bound shares or drops a core that holds some.
async fn keeps_bound_cores(
    tx: &mut sqlx::PgConnection,
    rp: &crate::db::providers::ProviderRow,
    t: &Topology,
    bound: &[(i64, String, i64)],
) -> ApiResult<()> {
    let old = db::topologies(tx, &[rp.id]).await?;
    if old
        .get(&rp.id)
        .is_some_and(|o| o.share_base != t.share_base)
    {
        return Err(ApiError::conflict(format!(
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
        return Err(ApiError::conflict(format!(
            "Cores {} of resource provider {} have bound shares and cannot be removed (send \"force\": true to override).",
            lost.join(", "),
            rp.uuid
        ))
        .code(codes::INVENTORY_INUSE));
    }
    Ok(())
}

/// `PUT /resource_providers/{uuid}/cpu_topology`: set the topology and the
/// CPU-share inventory. Removing bound cores, changing the share base under
/// bindings, or shrinking shares below their usage needs `"force": true`.
pub async fn replace(
    State(st): State<AppState>,
    PathParams(id): PathParams<String>,
    body: JsonBody,
) -> ApiResult<Reply> {
    let b: TopologyBody = body.parse(&schema())?;
    let mut tx = st.pool.begin().await?;
    let rp = find_for_update(&mut tx, &id).await?;
    let force = b.force;
    let mut cores: Vec<(String, Option<String>)> = Vec::new();
    for c in b.cores {
        if cores.iter().any(|(id, _)| *id == c.id) {
            return Err(ApiError::bad_request(format!(
                "Core {} is listed twice.",
                c.id
            )));
        }
        cores.push((c.id, c.numa_node));
    }
    let t = Topology {
        share_base: b.share_base,
        max_fragment_cores: b.max_fragment_cores,
        cores,
        numa_memory_mb: b.numa_memory_mb.0,
    };
    let bound = db::bound_shares(&mut tx, &[rp.id]).await?;
    if !force && !bound.is_empty() {
        keeps_bound_cores(&mut tx, &rp, &t, &bound).await?;
    }
    db::set_topology(&mut tx, rp.id, &t).await?;
    classes::create(&mut tx, CPU_SHARES).await?;
    let class = classes::get(&mut tx, CPU_SHARES)
        .await?
        .ok_or_else(|| ApiError::internal("CPU share class missing"))?;
    let total = t.cores.len() as i64 * i64::from(t.share_base);
    let used: i64 = bound.iter().map(|b| b.2).sum();
    if used > total && !force {
        return Err(ApiError::conflict(format!(
            "Resource provider {} has {used} bound CPU shares, more than the {total} the new topology offers (send \"force\": true to override).",
            rp.uuid
        ))
        .code(codes::INVENTORY_INUSE));
    }
    let total = i32::try_from(total)
        .map_err(|_| ApiError::bad_request("Too many CPU shares for one provider."))?;
    let inv = Inventory {
        total,
        reserved: 0,
        min_unit: 1,
        max_unit: total,
        step_size: 1,
        allocation_ratio: 1.0,
    };
    inventories::upsert(&mut tx, rp.id, class.id, &inv).await?;
    providers::bump_locked(&mut tx, &[rp.id]).await?;
    let body = render(&mut tx, &rp).await?;
    tx.commit().await.map_err(ApiError::commit_failed)?;
    Ok(Reply::ok(&body))
}
