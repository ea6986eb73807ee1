//! `GET /allocation_candidates` (1.10+): the query validated for the
//! microversion, the candidate engine's answer rendered for it; and the
//! extension `GET /allocation_candidates/explain`: the same query, the same
//! validation, and for every root provider whether it fits and if not why.

pub mod answer_json;
pub mod query;

use super::extract::QueryPairs;
use super::microversion::Microversion;
use super::respond::Reply;
use super::schema;
use crate::api::respond::ApiResult;
use crate::candidates::{explain, find as candidates_find};
use crate::fairness;
use crate::state::AppState;
use answer_json::Shape;
use axum::extract::State;

/// `GET /allocation_candidates`.
pub async fn list(State(st): State<AppState>, mv: Microversion, q: QueryPairs) -> ApiResult<Reply> {
    q.validate_with_extension(
        &query::schema(mv),
        query::repeats,
        query::extension_schema(),
    )?;
    let started = std::time::Instant::now();
    let cap = usize::try_from(st.settings.max_allocation_candidates).ok();
    let shape = Shape {
        dict_form: mv.at_least(1, 12),
        traits: mv.at_least(1, 17),
        all_classes: mv.at_least(1, 27),
        nested: mv.at_least(1, 29),
        mappings: mv.at_least(1, 34),
    };
    let search = query::search_of_query(&q.0, mv, cap)?;
    let writer = answer_json::writer(shape);
    let (found, body) = candidates_find::run_writing(&st.engine(), &search, &writer).await?;
    let searched = started.elapsed();
    crate::metrics::metrics()
        .candidates_returned
        .inc_by(u64::try_from(found.candidates.len()).unwrap_or(0));
    let reply = Reply::raw_json(body).cache(mv, None);
    tracing::debug!(
        search_ms = searched.as_secs_f64() * 1e3,
        "allocation candidates (searched and rendered)"
    );
    Ok(reply)
}

/// `GET /allocation_candidates/explain` (extension). `limit` bounds the
/// providers reported, not the search: every tree is searched (up to the
/// step budget) until it anchors one candidate, so that a tree is reported
/// fitting exactly when it anchors a candidate, in memory bounded by the
/// number of trees.
pub async fn explain(
    State(st): State<AppState>,
    mv: Microversion,
    q: QueryPairs,
) -> ApiResult<Reply> {
    q.validate_with_extension(
        &query::schema(mv),
        query::repeats,
        query::extension_schema(),
    )?;
    // The first `limit`, as the candidates query reads it.
    let limit: Option<usize> = q.all("limit").first().and_then(|v| v.parse().ok());
    let pairs: Vec<(String, String)> = q.0.iter().filter(|(k, _)| k != "limit").cloned().collect();
    let mut search = query::search_of_query(&pairs, mv, None)?;
    search.one_per_anchor = true;
    let found = candidates_find::run(&st.engine(), &search).await?;
    let Some(request) = &found.request else {
        // An unknown in_tree matches nothing: there is nothing to explain.
        return Ok(Reply::ok(&schema::responses::Explanation {
            complete: true,
            ..Default::default()
        }));
    };
    let query = explain::Query {
        snap: &found.snap,
        request,
        adjusted: &found.adjusted,
    };
    let verdicts = explain::explain(&query, &found.candidates);
    // The project the policy target named (the same parsed query).
    let quota = match q.last("project_id") {
        Some(project) => {
            let asked = explain::requested_by_class(&found.snap, request);
            fairness::projects::quota_shortfalls(&st.pool, project, &asked).await?
        }
        None => Vec::new(),
    };
    let summary = explain::summary(&verdicts);
    let providers = verdicts
        .iter()
        .take(limit.unwrap_or(usize::MAX))
        .map(|v| schema::responses::RootExplanation {
            root_provider_uuid: found.snap.nodes[v.root].uuid,
            fits: v.reason.is_none(),
            reason: v.reason.as_ref().map(|r| r.kind.to_string()),
            group: v.reason.as_ref().and_then(|r| r.group.clone()),
            detail: v.reason.as_ref().map(|r| r.detail.clone()),
        })
        .collect();
    Ok(Reply::ok(&schema::responses::Explanation {
        providers,
        summary,
        complete: !found.cut,
        quota,
    }))
}
