//! `/resource_providers/{uuid}/aggregates` (1.1+; generations from 1.19).

use super::extract::{find, find_for_update};
use super::extract::{JsonBody, PathParams};
use super::microversion::Microversion;
use super::respond::Reply;
use super::schema;
use super::schema::bodies::AggregatesPut;
use super::schema::responses::Aggregates;
use crate::api::respond::{ApiError, ApiResult, GenerationConflict};
use crate::db::{aggregates as db, providers};
use crate::state::AppState;
use axum::extract::State;
use uuid::Uuid;

fn body(aggs: &[Uuid], generation: i32, mv: Microversion) -> Aggregates {
    Aggregates {
        aggregates: aggs.to_vec(),
        resource_provider_generation: mv.at_least(1, 19).then_some(generation),
    }
}

/// `GET .../aggregates`.
pub async fn show(
    State(st): State<AppState>,
    mv: Microversion,
    PathParams(id): PathParams<String>,
) -> ApiResult<Reply> {
    let mut conn = st.pool.acquire().await?;
    let rp = find(&mut conn, &id).await?;
    let aggs = db::of_provider(&mut conn, rp.id).await?;
    Ok(Reply::ok(&body(&aggs, rp.generation, mv)).cache(mv, None))
}

/// `PUT .../aggregates`: a bare list before 1.19; with a checked, bumped generation after.
pub async fn replace(
    State(st): State<AppState>,
    mv: Microversion,
    PathParams(id): PathParams<String>,
    req: JsonBody,
) -> ApiResult<Reply> {
    // Placement's order (404, then 400), and the body checked before the
    // provider's row is locked.
    find(&mut *st.pool.acquire().await?, &id).await?;
    let b: AggregatesPut = req.parse(&schema::aggregates_put(mv))?;
    let mut tx = st.pool.begin().await?;
    let rp = find_for_update(&mut tx, &id).await?;
    let (aggs, given) = match b {
        AggregatesPut::Checked {
            aggregates,
            resource_provider_generation,
        } if mv.at_least(1, 19) => (aggregates, Some(resource_provider_generation)),
        AggregatesPut::Checked { aggregates, .. } => (aggregates, None),
        AggregatesPut::Bare(aggregates) => (aggregates.0, None),
    };
    let aggs: Vec<Uuid> = aggs.into_iter().map(|u| u.0).collect();
    let mut gen = rp.generation;
    if mv.at_least(1, 19) {
        let conflict = || ApiError::generation_conflict(GenerationConflict::Changed);
        if !given.is_some_and(|g| g.matches(gen)) {
            return Err(conflict());
        }
        if !providers::bump_generation(&mut tx, rp.id, gen).await? {
            return Err(conflict());
        }
        gen += 1;
    }
    db::set_for_provider(&mut tx, rp.id, &aggs).await?;
    let stored = db::of_provider(&mut tx, rp.id).await?;
    tx.commit().await.map_err(ApiError::commit_failed)?;
    Ok(Reply::ok(&body(&stored, gen, mv)).cache(mv, None))
}
