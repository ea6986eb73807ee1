//! `/resource_providers/{uuid}/volumes` (our extension): the disks a
//! deployment node offers to Eru's volume scheduling, in bytes, with what
//! instances hold on each.

use super::extract::{find, find_for_update, JsonBody, PathParams};
use super::respond::Reply;
use super::schema::bodies::VolumesBody;
use super::schema::responses::{VolumeUse, Volumes};
use crate::api::respond::{codes, ApiError, ApiResult};
use crate::db::{providers, volumes as db};
use crate::state::AppState;
use axum::extract::State;
use serde_json::{json, Value};
use sqlx::PgConnection;

/// The schema its body is validated against (also the OpenAPI document's).
pub(in crate::api) fn schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "volumes": {
                "type": "object",
                "maxProperties": 256,
                "patternProperties": {"^.{1,255}$": {"type": "integer", "minimum": 1, "maximum": 9223372036854775807_i64}},
                "additionalProperties": false
            },
            "force": {"type": "boolean"}
        },
        "required": ["volumes"],
        "additionalProperties": false
    })
}

async fn render(conn: &mut PgConnection, rp: &providers::ProviderRow) -> ApiResult<Volumes> {
    let node = db::volumes(conn, &[rp.id])
        .await?
        .remove(&rp.id)
        .unwrap_or_default();
    let volumes = node
        .capacity
        .iter()
        .map(|(device, &size)| {
            let used = node.usage.get(device).copied().unwrap_or(0);
            let free = size - used;
            (device.clone(), VolumeUse { size, used, free })
        })
        .collect();
    Ok(Volumes {
        volumes,
        resource_provider_generation: providers::generation(conn, rp.id).await?,
    })
}

/// `GET /resource_providers/{uuid}/volumes`.
pub async fn show(
    State(st): State<AppState>,
    PathParams(id): PathParams<String>,
) -> ApiResult<Reply> {
    let mut conn = st.pool.acquire().await?;
    let rp = find(&mut conn, &id).await?;
    Ok(Reply::ok(&render(&mut conn, &rp).await?))
}

/// `PUT /resource_providers/{uuid}/volumes`: replace the disks. Removing a
/// disk instances hold, or shrinking one below what they hold, needs
/// `"force": true`.
pub async fn replace(
    State(st): State<AppState>,
    PathParams(id): PathParams<String>,
    body: JsonBody,
) -> ApiResult<Reply> {
    let b: VolumesBody = body.parse_extension(&schema())?;
    let mut tx = st.pool.begin().await?;
    let rp = find_for_update(&mut tx, &id).await?;
    let held = db::volumes(&mut tx, &[rp.id])
        .await?
        .remove(&rp.id)
        .unwrap_or_default()
        .usage;
    let short = held
        .iter()
        .find(|(device, &used)| b.volumes.get(*device).is_none_or(|&size| size < used));
    if let (Some((device, used)), false) = (short, b.force) {
        return Err(ApiError::conflict(format!(
            "Instances hold {used} bytes of volume {device} of resource provider {}: it cannot be removed or shrunk below that (send \"force\": true to override).",
            rp.uuid
        ))
        .code(codes::INVENTORY_INUSE));
    }
    db::set_volumes(&mut tx, rp.id, &b.volumes).await?;
    providers::bump_locked(&mut tx, &[rp.id]).await?;
    let answer = render(&mut tx, &rp).await?;
    tx.commit().await.map_err(ApiError::commit_failed)?;
    Ok(Reply::ok(&answer))
}
