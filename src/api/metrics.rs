//! `GET /metrics`: the process's counters in Prometheus' text format, no
//! token (like `/healthcheck`); 404 when `--metrics false`.

use crate::api::respond::ApiError;
use crate::state::AppState;
use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};

/// `GET /metrics`.
pub async fn scrape(State(st): State<AppState>) -> Response {
    if !st.settings.metrics {
        return ApiError::not_found("").into_response();
    }
    let m = crate::metrics::metrics();
    m.pool_state(
        st.pool.size(),
        st.pool.num_idle(),
        st.pool.options().get_max_connections(),
    );
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        m.render(),
    )
        .into_response()
}
