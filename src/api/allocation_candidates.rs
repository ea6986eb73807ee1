//! `GET /allocation_candidates` (1.10+): the query validated for the
//! microversion, the candidate engine's answer rendered for it.

use super::extract::QueryPairs;
use super::microversion::Microversion;
use super::respond::Reply;
use super::schema;
use crate::candidates::find as candidates_find;
use crate::candidates::render::{render, Shape};
use crate::error::ApiResult;
use crate::state::AppState;
use axum::extract::State;

/// `GET /allocation_candidates`.
pub async fn list(State(st): State<AppState>, mv: Microversion, q: QueryPairs) -> ApiResult<Reply> {
    q.validate(&schema::candidates_query(mv))?;
    let started = std::time::Instant::now();
    let cap = usize::try_from(st.settings.max_allocation_candidates).ok();
    let found = candidates_find::find(&st.engine(), &q.0, (mv.major, mv.minor), cap).await?;
    let searched = started.elapsed();
    crate::metrics::metrics()
        .candidates_returned
        .inc_by(u64::try_from(found.candidates.len()).unwrap_or(0));
    let shape = Shape {
        dict_form: mv.at_least(1, 12),
        traits: mv.at_least(1, 17),
        all_classes: mv.at_least(1, 27),
        nested: mv.at_least(1, 29),
        mappings: mv.at_least(1, 34),
    };
    let body = st
        .cpu_work(move || {
            render(
                &found.snap,
                &found.suffixes,
                &found.requested,
                &found.candidates,
                shape,
            )
        })
        .await?;
    let reply = Reply::raw_json(body).cache(mv, None);
    tracing::debug!(
        search_ms = searched.as_secs_f64() * 1e3,
        render_ms = (started.elapsed() - searched).as_secs_f64() * 1e3,
        "allocation candidates"
    );
    Ok(reply)
}
