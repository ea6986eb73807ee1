//! `/resource_providers/{uuid}/cpu_topology` (our extension): a node's
//! CPU topology for CPU-bound deployments. The rules live in
//! `deploy::topology`; this reads the request and renders the view.

use super::extract::{find, find_for_update};
use super::extract::{JsonBody, PathParams};
use super::respond::Reply;
use super::schema::bodies::TopologyBody;
use super::schema::responses::{CoreShares, CpuTopology, SharedPool};
use crate::api::respond::{ApiError, ApiResult};
use crate::db::deployments::Topology;
use crate::deploy::topology::{self as service, TopologyView};
use crate::state::AppState;
use axum::extract::State;
use serde_json::{json, Value};

/// The schema its body is validated against (also the OpenAPI document's).
pub(in crate::api) fn schema() -> Value {
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

fn rendered(v: TopologyView) -> CpuTopology {
    CpuTopology {
        share_base: v.share_base,
        max_fragment_cores: v.max_fragment_cores,
        cores: v
            .cores
            .into_iter()
            .map(|c| CoreShares {
                id: c.id,
                numa_node: c.numa_node,
                used_shares: c.used_shares,
                free_shares: c.free_shares,
            })
            .collect(),
        numa_memory_mb: v.numa_memory_mb.into_iter().collect(),
        shared_pool: SharedPool {
            cores: v.shared_cores,
            instances: v.shared_instances,
        },
        resource_provider_generation: v.generation,
    }
}

/// `GET .../cpu_topology`.
pub async fn show(
    State(st): State<AppState>,
    PathParams(id): PathParams<String>,
) -> ApiResult<Reply> {
    let mut conn = st.pool.acquire().await?;
    let rp = find(&mut conn, &id).await?;
    Ok(Reply::ok(&rendered(service::view(&mut conn, &rp).await?)))
}

/// `PUT .../cpu_topology`: replace it (see `deploy::topology::replace`).
pub async fn replace(
    State(st): State<AppState>,
    PathParams(id): PathParams<String>,
    body: JsonBody,
) -> ApiResult<Reply> {
    let b: TopologyBody = body.parse_extension(&schema())?;
    let mut tx = st.pool.begin().await?;
    let rp = find_for_update(&mut tx, &id).await?;
    let t = Topology {
        share_base: b.share_base,
        max_fragment_cores: b.max_fragment_cores,
        cores: b.cores.into_iter().map(|c| (c.id, c.numa_node)).collect(),
        numa_memory_mb: b.numa_memory_mb.0,
    };
    service::replace(&mut tx, &rp, t, b.force).await?;
    let view = service::view(&mut tx, &rp).await?;
    tx.commit().await.map_err(ApiError::commit_failed)?;
    Ok(Reply::ok(&rendered(view)))
}
