//! `/queue` (our extension): the fair queue. Requests are submitted and
//! wait in the service; rounds admit them (`fairness::queue_round`).

use super::extract::{JsonBody, PathParams, QueryPairs};
use super::policy::{project_target, Authorize};
use super::respond::Reply;
use super::schema::extensions::{admission_request_properties, project_id_schema};
use crate::api::respond::ApiResult;
use crate::error::Error;
use crate::fairness::queue::{self as service, ListFilter, QueueList, QueuePost, QueueView};
use crate::state::AppState;
use axum::extract::State;
use axum::http::StatusCode;
use serde::Deserialize;
use serde_json::{json, Value};
use std::sync::LazyLock;
use std::time::Duration;

fn item_schema() -> Value {
    let mut item = admission_request_properties();
    item.insert(
        "priority".into(),
        json!({"type": "integer", "minimum": -2147483648_i64, "maximum": 2147483647}),
    );
    item.insert(
        "expires_in".into(),
        json!({"type": "integer", "minimum": 1, "maximum": 31536000}),
    );
    item.insert("requeue".into(), json!({"type": "boolean"}));
    json!({
        "type": "object",
        "properties": item,
        "required": ["consumer_uuid", "project_id", "user_id", "resources"],
        "additionalProperties": false
    })
}

/// Built once: a submission is small, and building the schema cost more
/// than checking the body against it.
static SCHEMA: LazyLock<Value> = LazyLock::new(schema);

/// The schema its body is validated against (also the OpenAPI document's).
pub(in crate::api) fn schema() -> Value {
    json!({
        "anyOf": [
            {
                "type": "object",
                "properties": {
                    "requests": {"type": "array", "minItems": 1, "maxItems": 10000, "items": item_schema()},
                    "all_or_nothing": {"type": "boolean"},
                    "expires_in": {"type": "integer", "minimum": 1, "maximum": 31536000}
                },
                "required": ["requests"],
                "additionalProperties": false
            },
            item_schema()
        ]
    })
}

/// `POST /queue`: 202 with the queued request (or `{"requests": [...]}`
/// for a list of submissions); checked against every project and user it names.
pub async fn create(
    State(st): State<AppState>,
    auth: Authorize,
    body: JsonBody,
) -> ApiResult<Reply> {
    let post: QueuePost = body.parse_extension(&SCHEMA)?;
    let items = post.items();
    auth.check(
        items
            .iter()
            .map(|i| project_target(Some(&i.project_id), Some(&i.user_id))),
    )?;
    let mut views = st.queue().submit(&post).await?;
    Ok(match post {
        QueuePost::One(_) if views.len() == 1 => {
            Reply::json(StatusCode::ACCEPTED, &views.remove(0))
        }
        _ => Reply::json(StatusCode::ACCEPTED, &QueueList { requests: views }),
    })
}

/// The query of `GET /queue/{id}`.
#[derive(Debug, Deserialize)]
struct Wait {
    /// Digits only (the schema's pattern).
    wait: Option<String>,
}

/// The schema its query is validated against (also the OpenAPI document's parameters).
pub(in crate::api) fn wait_schema() -> Value {
    json!({
        "type": "object",
        "properties": {"wait": {"type": "string", "pattern": "^[0-9]{1,9}$"}},
        "additionalProperties": false
    })
}

fn queue_id(raw: &str) -> Result<uuid::Uuid, Error> {
    raw.parse()
        .map_err(|_| Error::not_found(format!("No queued request {raw}.")))
}

/// `GET /queue/{id}[?wait=N]`: the request, checked against its owner;
/// with `wait`, held until it leaves `pending` or N seconds pass (at most
/// 60).
pub async fn show(
    State(st): State<AppState>,
    auth: Authorize,
    PathParams(id): PathParams<String>,
    query: QueryPairs,
) -> ApiResult<Reply> {
    let w: Wait = query.typed(&wait_schema())?;
    let wait = digits(w.wait.as_deref())?.unwrap_or(0);
    let id = queue_id(&id)?;
    // Subscribed before the first read, so a decision between the read
    // and the wait is not missed.
    let queue = st.queue();
    let mut decided = queue.signals.subscribe();
    let mut view = queue.show(id).await?;
    auth.check([project_target(Some(&view.project_id), Some(&view.user_id))])?;
    // Past the long-poll budget (overall or this project's), the answer
    // comes at once: the caller polls again.
    let slot = match wait {
        0 => None,
        _ => queue.signals.poll_slot(&view.project_id),
    };
    let seconds = slot
        .as_ref()
        .map_or(0, |_| wait.min(service::MAX_WAIT_SECONDS));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(seconds);
    while view.is_pending() && still_waiting(&mut decided, deadline, &view).await {
        view = queue.show(id).await?;
    }
    Ok(Reply::ok(&view))
}

/// Waits for the next decision (a round's, or a cancel in any process:
/// both announce it), or the request's expiry; false once `deadline`
/// passed. A poll reads the database when something may have changed,
/// not on a timer, so held polls cost nothing between decisions.
async fn still_waiting(
    decided: &mut tokio::sync::watch::Receiver<u64>,
    deadline: tokio::time::Instant,
    view: &QueueView,
) -> bool {
    let now = tokio::time::Instant::now();
    // The expiry is the database's time; what is left of it, measured
    // from the database's clock at the read, is waited on this clock.
    let lapses = view.expires_at.map(|at| {
        let left = (at - view.read_at).to_std().unwrap_or_default();
        now + left + Duration::from_millis(50)
    });
    // A missed announcement (a listener reconnecting) costs at most this.
    let next = deadline
        .min(now + Duration::from_secs(10))
        .min(lapses.unwrap_or(deadline));
    // Waiting for a decision is not database work: the request's
    // database deadline is paused meanwhile.
    let _ =
        crate::db::deadline::paused_while(tokio::time::timeout_at(next, decided.changed())).await;
    tokio::time::Instant::now() < deadline
}

/// The schema its query is validated against (also the OpenAPI document's parameters).
pub(in crate::api) fn list_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "project_id": project_id_schema(),
            "state": {"enum": ["pending", "admitted", "cancelled", "expired", "preempted", "released"]},
            "limit": {"type": "string", "pattern": "^[1-9][0-9]{0,3}$"},
            "marker": {"type": "string", "format": "uuid"}
        },
        "additionalProperties": false
    })
}

/// The query of `GET /queue`.
#[derive(Debug, Deserialize)]
struct ListQuery {
    project_id: Option<String>,
    state: Option<String>,
    /// Digits only (the schema's pattern).
    limit: Option<String>,
    marker: Option<uuid::Uuid>,
}

/// A number the schema has already checked is digits.
fn digits(raw: Option<&str>) -> Result<Option<u64>, Error> {
    raw.map(|r| {
        r.parse().map_err(|_| {
            Error::invalid(format!(
                "Invalid query string parameters: {r} is not a number"
            ))
        })
    })
    .transpose()
}

/// `GET /queue[?project_id=…&state=…&limit=…&marker=…]`: requests in
/// submission order, at most `limit` (1000, default 100) after `marker`.
pub async fn list(State(st): State<AppState>, query: QueryPairs) -> ApiResult<Reply> {
    let q: ListQuery = query.typed(&list_schema())?;
    let limit = digits(q.limit.as_deref())?.unwrap_or(100).min(1000);
    let filter = ListFilter {
        project_id: q.project_id,
        state: q.state,
        marker: q.marker,
        limit: i64::try_from(limit).unwrap_or(1000),
    };
    let requests: Vec<QueueView> = service::list(&st.pool, &filter).await?;
    Ok(Reply::ok(&QueueList { requests }))
}

/// `DELETE /queue/{id}`: cancels a pending request (204), and with it every
/// pending member of its gang, checked against its owner; 409 once
/// admitted, cancelled or expired.
pub async fn cancel(
    State(st): State<AppState>,
    auth: Authorize,
    PathParams(id): PathParams<String>,
) -> ApiResult<Reply> {
    let id = queue_id(&id)?;
    let view = st.queue().show(id).await?;
    auth.check([project_target(Some(&view.project_id), Some(&view.user_id))])?;
    service::cancel(&st.pool, id).await?;
    Ok(Reply::empty(StatusCode::NO_CONTENT))
}
