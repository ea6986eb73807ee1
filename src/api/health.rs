//! `GET /healthcheck` in oslo.middleware's shape, without a token: 200
//! `OK` while the database answers, 503 while it does not (load balancers
//! take the process out of rotation). HEAD answers 204. The reason shown
//! is generic, since anyone may ask; the database's own words (which name
//! hosts, databases and roles) go to the log with the request id.

use crate::state::AppState;
use axum::extract::State;
use axum::http::{header, HeaderMap, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use std::time::Duration;

/// How long the database may take to answer `SELECT 1`.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// The reason every unhealthy answer gives.
const UNAVAILABLE: &str = "database unavailable";

/// The database's state in one line ("OK" when it answers); the detail of
/// a failure is logged, not returned.
async fn database_reason(st: &AppState) -> Result<&'static str, &'static str> {
    let probe = async {
        let mut conn = st.pool.acquire().await?;
        crate::db::query("SELECT 1").execute(&mut *conn).await
    };
    match tokio::time::timeout(PROBE_TIMEOUT, probe).await {
        Ok(Ok(_)) => Ok("OK"),
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "health check: database unavailable");
            Err(UNAVAILABLE)
        }
        Err(_) => {
            tracing::warn!(
                timeout_s = PROBE_TIMEOUT.as_secs(),
                "health check: the database did not answer"
            );
            Err(UNAVAILABLE)
        }
    }
}

/// `GET|HEAD /healthcheck`.
pub async fn check(State(st): State<AppState>, method: Method, headers: HeaderMap) -> Response {
    let (healthy, reason) = match database_reason(&st).await {
        Ok(ok) => (true, ok),
        Err(why) => (false, why),
    };
    let status = match (healthy, method == Method::HEAD) {
        (true, true) => StatusCode::NO_CONTENT,
        (true, false) => StatusCode::OK,
        (false, _) => StatusCode::SERVICE_UNAVAILABLE,
    };
    let accept = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    // oslo.middleware answers every Accept: JSON when it is preferred,
    // else text (text/html and application/xml get text, too).
    let json = super::respond::accept_quality(accept, "application/json")
        > super::respond::accept_quality(accept, "text/plain");
    if json {
        let body = serde_json::json!({"detailed": false, "reasons": [reason]});
        (
            status,
            [(header::CONTENT_TYPE, "application/json")],
            body.to_string(),
        )
            .into_response()
    } else {
        (
            status,
            [(header::CONTENT_TYPE, "text/plain; charset=UTF-8")],
            reason,
        )
            .into_response()
    }
}
