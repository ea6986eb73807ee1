//! `POST /admissions` (our extension): one DRF admission round.

use super::extract::JsonBody;
use super::policy::{project_target, Authorize};
use super::respond::Reply;
use super::schema::extensions::admission_request_properties;
use crate::api::respond::ApiResult;
use crate::fairness::admission::AdmissionPost;
use crate::state::AppState;
use axum::extract::State;
use serde_json::{json, Value};
use std::collections::BTreeSet;

/// The schema its body is validated against (also the OpenAPI document's).
pub(in crate::api) fn schema() -> Value {
    let mut item = admission_request_properties();
    item.insert(
        "id".into(),
        json!({"type": "string", "minLength": 1, "maxLength": 255}),
    );
    json!({
        "type": "object",
        "properties": {
            "dry_run": {"type": "boolean"},
            "seed": {"type": "integer", "minimum": 0, "maximum": 4294967295_u64},
            "requests": {"type": "array", "maxItems": 100000, "items": {
                "type": "object",
                "properties": item,
                "required": ["id", "consumer_uuid", "project_id", "user_id", "resources"],
                "additionalProperties": false
            }}
        },
        "required": ["requests"],
        "additionalProperties": false
    })
}

/// `POST /admissions`: checked against every project and user whose
/// requests it holds.
pub async fn create(
    State(st): State<AppState>,
    auth: Authorize,
    body: JsonBody,
) -> ApiResult<Reply> {
    let b: AdmissionPost = body.parse_extension(&schema())?;
    let owners: BTreeSet<(&str, &str)> = b
        .requests
        .iter()
        .map(|r| (r.project_id.as_str(), r.user_id.as_str()))
        .collect();
    auth.check(
        owners
            .into_iter()
            .map(|(p, u)| project_target(Some(p), Some(u))),
    )?;
    let round = st.admissions().run(b).await?;
    crate::metrics::metrics().admission_rounds.inc();
    Ok(Reply::ok(&round))
}
