//! `GET /fairness/shares` (our extension): every project's DRF standing.

use super::respond::Reply;
use crate::api::respond::ApiResult;
use crate::state::AppState;
use axum::extract::State;

/// `GET /fairness/shares`.
pub async fn list(State(st): State<AppState>) -> ApiResult<Reply> {
    let excluded = &st.settings.fairness_excluded_resource_classes;
    Ok(Reply::ok(
        &crate::fairness::shares::shares(&st.pool, excluded).await?,
    ))
}
