//! `GET /preemptions` (our extension): the fair queue's preemption advice,
//! consumers their owners are asked to remove so that a project below its
//! guarantee gets its share back.

use super::extract::QueryPairs;
use super::respond::Reply;
use super::schema::extensions::project_id_schema;
use crate::api::respond::ApiResult;
use crate::fairness::preemption::{self as service, PreemptionList};
use crate::state::AppState;
use axum::extract::State;
use serde::Deserialize;
use serde_json::{json, Value};

fn query_schema() -> Value {
    json!({
        "type": "object",
        "properties": {"project_id": project_id_schema()},
        "additionalProperties": false
    })
}

/// The query of `GET /preemptions`.
#[derive(Debug, Deserialize)]
struct Filter {
    project_id: Option<String>,
}

/// `GET /preemptions[?project_id=…]`: the advised victims (of one project
/// when named; the policy target is that project).
pub async fn list(State(st): State<AppState>, query: QueryPairs) -> ApiResult<Reply> {
    let f: Filter = query.typed(&query_schema())?;
    let preemptions = service::list(&st.pool, f.project_id.as_deref()).await?;
    Ok(Reply::ok(&PreemptionList { preemptions }))
}
