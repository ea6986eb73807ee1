//! `/resource_providers/{uuid}/usages` and `/usages` (1.9+; by consumer type from 1.38).

use super::extract::{find_or, Missing, PathParams, QueryPairs};
use super::microversion::Microversion;
use super::respond::Reply;
use super::schema;
use super::schema::responses::{ProjectUsages, ProviderUsages};
use crate::api::respond::ApiResult;
use crate::db::usages as db;
use crate::state::AppState;
use axum::extract::State;
use indexmap::IndexMap;
use serde::Deserialize;
use serde_json::json;

/// The key beside the classes of a consumer type's usage (1.38+).
const CONSUMER_COUNT: &str = "consumer_count";

/// `GET /resource_providers/{uuid}/usages`.
pub async fn provider(
    State(st): State<AppState>,
    mv: Microversion,
    PathParams(id): PathParams<String>,
) -> ApiResult<Reply> {
    let mut conn = st.pool.acquire().await?;
    let rp = find_or(&mut conn, &id, Missing::TraitsOrUsages).await?;
    let rows = db::of_provider(&mut conn, rp.id).await?;
    let body = ProviderUsages {
        resource_provider_generation: rp.generation,
        usages: rows.into_iter().collect(),
    };
    Ok(Reply::ok(&body).cache(mv, None))
}

/// The query of `GET /usages`: the same values the policy target was
/// built from (the last of each, from the one parse of the query).
#[derive(Debug, Deserialize)]
struct UsagesQuery {
    project_id: String,
    user_id: Option<String>,
    consumer_type: Option<String>,
}

/// `GET /usages?project_id=&user_id=[&consumer_type=]`.
pub async fn project(
    State(st): State<AppState>,
    mv: Microversion,
    q: QueryPairs,
) -> ApiResult<Reply> {
    let q: UsagesQuery = q.typed(&schema::usages_query(mv))?;
    let project = q.project_id.as_str();
    let user = q.user_id.as_deref();
    let mut conn = st.pool.acquire().await?;
    let rows = db::of_project(&mut conn, project, user).await?;
    if !mv.at_least(1, 38) {
        let mut usages: IndexMap<String, i64> = IndexMap::new();
        for r in rows {
            *usages.entry(r.resource_class).or_default() += r.used;
        }
        return Ok(Reply::ok(&ProjectUsages {
            usages: usages.into_iter().map(|(k, v)| (k, json!(v))).collect(),
        })
        .cache(mv, None));
    }
    let counts = db::consumer_counts(&mut conn, project, user).await?;
    let filter = q.consumer_type.as_deref();
    // Which group a consumer type falls in, or None when filtered out.
    let group = |t: &Option<String>| -> Option<String> {
        let name = t.clone().unwrap_or_else(|| "unknown".to_string());
        match filter {
            None => Some(name),
            Some("all") => Some("all".into()),
            Some("unknown") => t.is_none().then_some(name),
            Some(f) => (t.as_deref() == Some(f)).then_some(name),
        }
    };
    // Placement's order: groups as first met in class order, and in each
    // group its classes with `consumer_count` right after the first one
    // (where its dict first received the count).
    let mut usages: IndexMap<String, IndexMap<String, i64>> = IndexMap::new();
    for r in rows {
        if let Some(g) = group(&r.consumer_type) {
            let entry = usages.entry(g).or_default();
            *entry.entry(r.resource_class).or_default() += r.used;
            entry.entry(CONSUMER_COUNT.to_string()).or_default();
        }
    }
    for (t, n) in counts {
        if let Some(m) = group(&t).and_then(|g| usages.get_mut(&g)) {
            *m.entry(CONSUMER_COUNT.to_string()).or_default() += n;
        }
    }
    Ok(Reply::ok(&ProjectUsages {
        usages: usages.into_iter().map(|(k, v)| (k, json!(v))).collect(),
    })
    .cache(mv, None))
}
