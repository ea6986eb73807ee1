//! `POST /declines` and `DELETE /declines?project_id=…` (our extension):
//! Mesos' decline filters and revive.

use super::extract::{JsonBody, QueryPairs};
use super::respond::Reply;
use super::schema::extensions::{amounts_schema, project_id_schema};
use crate::error::{ApiError, ApiResult};
use crate::fairness::declines::{self as service, DeclinePost};
use crate::state::AppState;
use axum::extract::State;
use axum::http::StatusCode;
use serde_json::{json, Value};

fn schema() -> Value {
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

fn query_schema() -> Value {
    json!({
        "type": "object",
        "properties": {"project_id": project_id_schema(), "user_id": project_id_schema()},
        "required": ["project_id"],
        "additionalProperties": false
    })
}

/// `POST /declines`: 201 with the filter installed.
pub async fn create(State(st): State<AppState>, body: JsonBody) -> ApiResult<Reply> {
    let b: DeclinePost = body.parse(&schema())?;
    Ok(Reply::json(
        StatusCode::CREATED,
        &service::decline(&st.pool, b).await?,
    ))
}

/// `DELETE /declines?project_id=…[&user_id=…]`: revive; 204.
pub async fn revive(State(st): State<AppState>, query: QueryPairs) -> ApiResult<Reply> {
    query.validate(&query_schema())?;
    let get = |k: &str| {
        query
            .0
            .iter()
            .find(|(key, _)| key == k)
            .map(|(_, v)| v.clone())
    };
    let project =
        get("project_id").ok_or_else(|| ApiError::bad_request("project_id is required"))?;
    service::revive(&st.pool, &project, get("user_id").as_deref()).await?;
    Ok(Reply::empty(StatusCode::NO_CONTENT))
}
