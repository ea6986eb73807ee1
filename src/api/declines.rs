//! `POST /declines` and `DELETE /declines?project_id=…` (our extension):
//! Mesos' decline filters and revive.

use super::extract::{JsonBody, QueryPairs};
use super::policy::{project_target, Authorize};
use super::respond::Reply;
use super::schema::extensions::{amounts_schema, project_id_schema};
use crate::api::respond::ApiResult;
use crate::fairness::declines::{self as service, DeclinePost};
use crate::state::AppState;
use axum::extract::State;
use axum::http::StatusCode;
use serde::Deserialize;
use serde_json::{json, Value};

/// The schema its body is validated against (also the OpenAPI document's).
pub(in crate::api) fn schema() -> Value {
    let mut resources = amounts_schema(1);
    resources["minProperties"] = json!(1);
    json!({
        "type": "object",
        "properties": {
            "project_id": project_id_schema(),
            "user_id": project_id_schema(),
            "resource_provider_uuid": {"type": "string", "format": "uuid"},
            "resources": resources,
            "refuse_seconds": {"type": "number"}
        },
        "required": ["project_id", "resource_provider_uuid", "resources"],
        "additionalProperties": false
    })
}

/// The schema its query is validated against (also the OpenAPI document's parameters).
pub(in crate::api) fn query_schema() -> Value {
    json!({
        "type": "object",
        "properties": {"project_id": project_id_schema(), "user_id": project_id_schema()},
        "required": ["project_id"],
        "additionalProperties": false
    })
}

/// `POST /declines`: 201 with the filter installed; checked against the
/// project (and user) declining.
pub async fn create(
    State(st): State<AppState>,
    auth: Authorize,
    body: JsonBody,
) -> ApiResult<Reply> {
    let b: DeclinePost = body.parse_extension(&schema())?;
    auth.check([project_target(Some(&b.project_id), b.user_id.as_deref())])?;
    Ok(Reply::json(
        StatusCode::CREATED,
        &service::decline(&st.pool, b).await?,
    ))
}

/// The query of `DELETE /declines`.
#[derive(Debug, Deserialize)]
struct Revival {
    project_id: String,
    user_id: Option<String>,
}

/// `DELETE /declines?project_id=…[&user_id=…]`: revive; 204. The policy
/// target is the query's project and user, read from the same parsed query.
pub async fn revive(State(st): State<AppState>, query: QueryPairs) -> ApiResult<Reply> {
    let r: Revival = query.typed(&query_schema())?;
    service::revive(&st.pool, &r.project_id, r.user_id.as_deref()).await?;
    Ok(Reply::empty(StatusCode::NO_CONTENT))
}
