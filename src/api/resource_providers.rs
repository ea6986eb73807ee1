//! `/resource_providers` and `/resource_providers/{uuid}`.

use super::extract::{find, find_for_update};
use super::extract::{JsonBody, PathParams, QueryPairs};
use super::microversion::Microversion;
use super::respond::{latest, Reply};
use super::schema;
use super::schema::bodies::{ProviderCreate, ProviderUpdate};
use super::schema::responses::{Link, Provider, ProviderList};
use crate::api::respond::{ApiError, ApiResult};
use crate::candidates::query_grammar::{parse_member_of, parse_required};
use crate::db::providers::{self, ProviderFilter, ProviderRow};
use crate::db::{classes, traits};
use crate::provider::{self, ParentChange};
use crate::state::AppState;
use crate::types::parse_uuid_like;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use uuid::Uuid;

/// The provider representation for a microversion.
pub fn provider_json(rp: &ProviderRow, mv: Microversion) -> Provider {
    let base = format!("/resource_providers/{}", rp.uuid);
    let mut links = vec![
        Link::new("self", base.clone()),
        Link::new("inventories", format!("{base}/inventories")),
        Link::new("usages", format!("{base}/usages")),
    ];
    for (since, rel) in [(1, "aggregates"), (6, "traits"), (11, "allocations")] {
        if mv.at_least(1, since) {
            links.push(Link::new(rel, format!("{base}/{rel}")));
        }
    }
    let nested = mv.at_least(1, 14);
    Provider {
        uuid: rp.uuid,
        name: rp.name.clone(),
        generation: rp.generation,
        links,
        parent_provider_uuid: nested.then_some(rp.parent_uuid),
        root_provider_uuid: nested.then_some(rp.root_uuid),
    }
}

fn modified(rp: &ProviderRow) -> Option<chrono::DateTime<chrono::Utc>> {
    rp.updated_at.or(rp.created_at)
}

/// `GET /resource_providers`.
pub async fn list(State(st): State<AppState>, mv: Microversion, q: QueryPairs) -> ApiResult<Reply> {
    q.validate_repeating(
        &schema::provider_list_query(mv),
        schema::provider_list_repeats,
    )?;
    let v = mv;
    let mut conn = st.pool.acquire().await?;
    let mut f = ProviderFilter {
        // An empty `name=` filters nothing, as in Placement (`if name:`).
        name: q.last("name").filter(|n| !n.is_empty()).map(str::to_string),
        uuid: q.last("uuid").and_then(parse_uuid_like),
        in_tree: q.last("in_tree").and_then(parse_uuid_like),
        ..Default::default()
    };
    if mv.at_least(1, 3) {
        f.member_of = parse_member_of(&q.all("member_of"), v, "").map_err(ApiError::bad_request)?;
    }
    if let Some(r) = q.last("resources") {
        let wanted =
            crate::candidates::query_grammar::parse_resources(r).map_err(ApiError::bad_request)?;
        let names: Vec<String> = wanted.iter().map(|(n, _)| n.clone()).collect();
        let ids = classes::ids(&mut conn, &names).await?.map_err(|rc| {
            ApiError::bad_request(format!(
                "Invalid resource class in resources parameter: No such resource class {rc}."
            ))
        })?;
        f.resources = ids
            .into_iter()
            .zip(wanted.iter().map(|(_, n)| *n))
            .collect();
    }
    if mv.at_least(1, 18) {
        let filter = parse_required(&q.all("required"), v).map_err(ApiError::bad_request)?;
        let names: Vec<String> = filter.names().into_iter().collect();
        let traits::Resolved { found, missing } = traits::resolve(&mut conn, &names).await?;
        if !missing.is_empty() {
            return Err(ApiError::bad_request(format!(
                "Invalid trait(s) in \"required\" parameter: No such trait(s): {}.",
                missing.join(", ")
            )));
        }
        let id_of = |n: &String| {
            found
                .iter()
                .find(|(f, _)| f == n)
                .map(|(_, id)| *id)
                .unwrap_or(-1)
        };
        f.required_trait_ids = filter
            .required
            .iter()
            .map(|set| set.iter().map(id_of).collect())
            .collect();
        f.forbidden_trait_ids = filter.forbidden.iter().map(id_of).collect();
    }
    let rows = providers::list(&mut conn, &f).await?;
    let body = ProviderList {
        resource_providers: rows.iter().map(|r| provider_json(r, mv)).collect(),
    };
    Ok(Reply::ok(&body).cache(mv, latest(rows.iter().map(modified))))
}

/// `GET /resource_providers/{uuid}`.
pub async fn show(
    State(st): State<AppState>,
    mv: Microversion,
    PathParams(id): PathParams<String>,
) -> ApiResult<Reply> {
    let mut conn = st.pool.acquire().await?;
    let rp = find(&mut conn, &id).await?;
    Ok(Reply::ok(&provider_json(&rp, mv)).cache(mv, modified(&rp)))
}

/// `POST /resource_providers`: 201 without body before 1.20, 200 with it after.
pub async fn create(
    State(st): State<AppState>,
    mv: Microversion,
    headers: HeaderMap,
    body: JsonBody,
) -> ApiResult<Reply> {
    let b: ProviderCreate = body.parse(&schema::provider_create(mv))?;
    let uuid = b.uuid.map_or_else(Uuid::new_v4, |u| u.0);
    let parent = b.parent_provider_uuid.map(|u| u.0);
    let mut tx = st.pool.begin().await?;
    let rp = provider::create(&mut tx, uuid, &b.name, parent).await?;
    tx.commit().await.map_err(ApiError::commit_failed)?;
    let path = format!("/resource_providers/{uuid}");
    if mv.at_least(1, 20) {
        Ok(Reply::ok(&provider_json(&rp, mv))
            .location(&headers, &path)
            .cache(mv, modified(&rp)))
    } else {
        Ok(Reply::empty(StatusCode::CREATED).location(&headers, &path))
    }
}

/// `PUT /resource_providers/{uuid}`: rename, and set or change the parent
/// (changing or removing an existing parent needs 1.37).
pub async fn update(
    State(st): State<AppState>,
    mv: Microversion,
    PathParams(id): PathParams<String>,
    body: JsonBody,
) -> ApiResult<Reply> {
    let mut tx = st.pool.begin().await?;
    let rp = find_for_update(&mut tx, &id).await?;
    let b: ProviderUpdate = body.parse(&schema::provider_update(mv))?;
    let change = match b.parent_provider_uuid.map(|p| p.map(|u| u.0)) {
        None => ParentChange::Keep,
        Some(None) => ParentChange::Remove,
        Some(Some(p)) => ParentChange::Set(p),
    };
    let updated = provider::update(&mut tx, &rp, &b.name, change, mv.at_least(1, 37)).await?;
    tx.commit().await.map_err(ApiError::commit_failed)?;
    Ok(Reply::ok(&provider_json(&updated, mv)).cache(mv, modified(&rp)))
}

/// `DELETE /resource_providers/{uuid}`.
pub async fn delete(
    State(st): State<AppState>,
    PathParams(id): PathParams<String>,
) -> ApiResult<StatusCode> {
    let mut tx = st.pool.begin().await?;
    let rp = find_for_update(&mut tx, &id).await.map_err(|e| {
        match e.status == StatusCode::NOT_FOUND {
            true => ApiError::not_found(format!(
                "No resource provider with uuid {id} found for delete"
            )),
            false => e,
        }
    })?;
    provider::delete(&mut tx, &rp).await?;
    tx.commit().await.map_err(ApiError::commit_failed)?;
    Ok(StatusCode::NO_CONTENT)
}
