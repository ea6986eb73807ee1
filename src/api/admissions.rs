//! `POST /admissions` (our extension): one DRF admission round.

use super::extract::JsonBody;
use super::policy::{project_target, Authorize};
use super::respond::Reply;
use super::schema::extensions::{amounts_schema, project_id_schema};
use crate::api::respond::ApiResult;
use crate::fairness::admission::{self as service, AdmissionPost, RoundSettings};
use crate::state::AppState;
use axum::extract::State;
use serde_json::{json, Value};
use std::collections::BTreeSet;

fn schema() -> Value {
    let mut resources = amounts_schema(1);
    resources["minProperties"] = json!(1);
    json!({
        "type": "object",
        "properties": {
            "dry_run": {"type": "boolean"},
            "seed": {"type": "integer", "minimum": 0, "maximum": 4294967295_u64},
            "requests": {"type": "array", "maxItems": 100000, "items": {
                "type": "object",
                "properties": {
                    "id": {"type": "string", "minLength": 1, "maxLength": 255},
                    "consumer_uuid": {"type": "string", "format": "uuid"},
                    "project_id": project_id_schema(),
                    "user_id": project_id_schema(),
                    "resources": resources,
                    "required": {"type": "array", "maxItems": 64, "items": {"type": "string", "pattern": "^!?[A-Z0-9_]{1,255}$"}},
                    "member_of": {"type": "array", "maxItems": 64, "items": {"type": "string", "format": "uuid"}},
                    "priority_class": {"enum": ["prod", "mid", "batch", "free"]},
                    "consumer_type": {"type": "string", "pattern": "^[A-Z0-9_]+$", "maxLength": 255}
                },
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
    let b: AdmissionPost = body.parse(&schema())?;
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
    let settings = RoundSettings {
        excluded: st.settings.fairness_excluded_resource_classes.clone(),
        max_steps: match st.settings.admission_max_steps {
            0 => u64::MAX,
            n => n,
        },
        retries: st.settings.allocation_conflict_retry_count,
    };
    let round = service::run(&st.pool, &settings, b).await?;
    crate::metrics::metrics().admission_rounds.inc();
    Ok(Reply::ok(&round))
}
