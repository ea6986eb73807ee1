//! `/resource_providers/{uuid}/project_reservations/{project_id}` (our
//! extension): capacity on a provider only one project's subtree may use.

use super::extract::{find, find_for_update, stored_project_id, JsonBody, PathParams};
use super::respond::Reply;
use crate::api::respond::{ApiError, ApiResult};
use crate::fairness::reservations::{self as service, ReservationPut};
use crate::state::AppState;
use axum::extract::State;
use axum::http::StatusCode;
use serde_json::{json, Value};

/// The schema its body is validated against (also the OpenAPI document's).
pub(in crate::api) fn schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "resource_provider_generation": {"type": "integer"},
            "resources": {
                "type": "object",
                "patternProperties": {"^[A-Z0-9_]+$": {"type": "integer", "minimum": 1, "maximum": 2147483647}},
                "additionalProperties": false
            }
        },
        "required": ["resource_provider_generation", "resources"],
        "additionalProperties": false
    })
}

/// `GET .../project_reservations/{project_id}`.
pub async fn show(
    State(st): State<AppState>,
    PathParams((id, project)): PathParams<(String, String)>,
) -> ApiResult<Reply> {
    let mut conn = st.pool.acquire().await?;
    let rp = find(&mut conn, &id).await?;
    Ok(Reply::ok(&service::show(&mut conn, &rp, &project).await?))
}

/// `PUT .../project_reservations/{project_id}`.
pub async fn replace(
    State(st): State<AppState>,
    PathParams((id, project)): PathParams<(String, String)>,
    body: JsonBody,
) -> ApiResult<Reply> {
    stored_project_id(&project)?;
    let b: ReservationPut = body.parse_extension(&schema())?;
    let mut tx = st.pool.begin().await?;
    let rp = find_for_update(&mut tx, &id).await?;
    let view = service::replace(&mut tx, &rp, &project, &b).await?;
    tx.commit().await.map_err(ApiError::commit_failed)?;
    Ok(Reply::ok(&view))
}

/// `DELETE .../project_reservations/{project_id}`: 204, or 404 when the
/// project holds no reservation there.
pub async fn remove(
    State(st): State<AppState>,
    PathParams((id, project)): PathParams<(String, String)>,
) -> ApiResult<Reply> {
    let mut tx = st.pool.begin().await?;
    let rp = find_for_update(&mut tx, &id).await?;
    if !service::remove(&mut tx, &rp, &project).await? {
        return Err(ApiError::not_found(format!(
            "Project {project} has no reservation on resource provider {}.",
            rp.uuid
        )));
    }
    tx.commit().await.map_err(ApiError::commit_failed)?;
    Ok(Reply::empty(StatusCode::NO_CONTENT))
}
