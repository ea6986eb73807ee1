//! `/projects/{project_id}/fairness` and `/projects/{project_id}/quota`
//! (our extension, the Mesos allocator's weights and quotas).

use super::extract::{stored_project_id, JsonBody, PathParams};
use super::respond::Reply;
use super::schema::extensions::{amounts_schema, project_id_schema};
use crate::api::respond::ApiResult;
use crate::fairness::projects::{
    self as service, FairnessPut, Preemption, Queueing, QuotaPut, WithinProject,
};
use crate::state::AppState;
use axum::extract::State;
use serde_json::{json, Value};

/// The schema its body is validated against (also the OpenAPI document's).
pub(in crate::api) fn fairness_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "weight": {"type": "number"},
            "parent_project_id": {"anyOf": [project_id_schema(), {"type": "null"}]},
            "queueing": {"enum": Queueing::names()},
            "preemption": {"enum": Preemption::names()},
            "preemption_grace_seconds": {
                "type": "integer",
                "minimum": 0,
                "maximum": service::MAX_PREEMPTION_GRACE_SECONDS
            },
            "within_project_preemption": {"enum": WithinProject::names()}
        },
        "required": ["weight"],
        "additionalProperties": false
    })
}

/// The schema its body is validated against (also the OpenAPI document's).
pub(in crate::api) fn quota_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "limits": amounts_schema(0),
            "guarantees": amounts_schema(0),
            "lending_limits": amounts_schema(0),
            "force": {"type": "boolean"}
        },
        "additionalProperties": false
    })
}

/// `GET /projects/{project_id}/fairness`.
pub async fn show_fairness(
    State(st): State<AppState>,
    PathParams(project): PathParams<String>,
) -> ApiResult<Reply> {
    Ok(Reply::ok(&service::fairness(&st.pool, &project).await?))
}

/// `PUT /projects/{project_id}/fairness`.
pub async fn set_fairness(
    State(st): State<AppState>,
    PathParams(project): PathParams<String>,
    body: JsonBody,
) -> ApiResult<Reply> {
    stored_project_id(&project)?;
    let b: FairnessPut = body.parse_extension(&fairness_schema())?;
    Ok(Reply::ok(
        &service::set_fairness(&st.pool, &project, b).await?,
    ))
}

/// `GET /projects/{project_id}/quota`.
pub async fn show_quota(
    State(st): State<AppState>,
    PathParams(project): PathParams<String>,
) -> ApiResult<Reply> {
    Ok(Reply::ok(&service::quota(&st.pool, &project).await?))
}

/// `PUT /projects/{project_id}/quota`.
pub async fn set_quota(
    State(st): State<AppState>,
    PathParams(project): PathParams<String>,
    body: JsonBody,
) -> ApiResult<Reply> {
    stored_project_id(&project)?;
    let b: QuotaPut = body.parse_extension(&quota_schema())?;
    Ok(Reply::ok(&service::set_quota(&st.pool, &project, b).await?))
}
