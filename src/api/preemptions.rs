//! `GET /preemptions` (our extension): the fair queue's preemption advice,
//! consumers their owners are asked to remove so that a project below its
//! guarantee gets its share back.

use super::extract::QueryPairs;
use super::policy::{project_target, Authorize};
use super::respond::Reply;
use super::schema::extensions::project_id_schema;
use crate::api::respond::ApiResult;
use crate::fairness::preemption::{self as service, Listed, PreemptionList};
use crate::state::AppState;
use axum::extract::State;
use serde::Deserialize;
use serde_json::{json, Value};

/// The schema its query is validated against (also the OpenAPI document's parameters).
pub(in crate::api) fn query_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "project_id": project_id_schema(),
            "state": {"enum": ["advised", "enforced"]}
        },
        "additionalProperties": false
    })
}

/// The query of `GET /preemptions`.
#[derive(Debug, Deserialize)]
struct Filter {
    project_id: Option<String>,
    #[serde(default)]
    state: Listed,
}

/// `GET /preemptions[?project_id=…][&state=advised|enforced]`: the
/// advised victims, or the removals the service carried out (of one
/// project when named; the policy target is that project). The request each
/// victim makes room for (its project, id and needs) is shown only to a
/// caller who passes the rule for that request's project too.
pub async fn list(
    State(st): State<AppState>,
    auth: Authorize,
    query: QueryPairs,
) -> ApiResult<Reply> {
    let f: Filter = query.typed(&query_schema())?;
    auth.check([project_target(f.project_id.as_deref(), None)])?;
    let preemptions = service::list(&st.pool, f.project_id.as_deref(), f.state)
        .await?
        .into_iter()
        .map(|p| {
            let theirs = project_target(p.for_project_id.as_deref(), None);
            match auth.allows(&theirs) {
                true => p,
                false => p.without_beneficiary(),
            }
        })
        .collect();
    Ok(Reply::ok(&PreemptionList { preemptions }))
}
