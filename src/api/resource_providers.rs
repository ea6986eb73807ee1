//! `/resource_providers` and `/resource_providers/{uuid}`.

use super::extract::{find, find_for_update};
use super::extract::{JsonBody, PathParams, QueryPairs};
use super::microversion::Microversion;
use super::respond::{latest, Reply};
use super::schema;
use super::schema::bodies::{ProviderCreate, ProviderUpdate};
use super::schema::responses::{Link, Provider, ProviderList};
use crate::api::respond::{codes, ApiError, ApiResult};
use crate::candidates::request::{parse_member_of, parse_required};
use crate::db::providers::{self, CreateError, DeleteBlock, ProviderFilter, ProviderRow};
use crate::db::{classes, traits};
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
    q.validate(&schema::provider_list_query(mv))?;
    let v = mv.engine();
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
            crate::candidates::request::parse_resources(r).map_err(ApiError::bad_request)?;
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
    let name = b.name;
    let uuid = b.uuid.map_or_else(Uuid::new_v4, |u| u.0);
    // The schema allows "", Placement's object does not (a rename to ""
    // through PUT is accepted by both).
    if name.is_empty() {
        return Err(ApiError::bad_request(format!(
            "Unable to create resource provider \"\", {uuid}: Object action create failed because: name is required"
        )));
    }
    let mut tx = st.pool.begin().await?;
    let parent = match b.parent_provider_uuid.map(|u| u.0) {
        None => None,
        Some(p) if p == uuid => {
            return Err(ApiError::bad_request(format!(
                "Unable to create resource provider \"{name}\", {uuid}: parent provider UUID cannot be same as UUID. Please modify your request."
            )))
        }
        Some(p) => match providers::get(&mut tx, p).await? {
            Some(row) => Some((row.id, row.root_provider_id)),
            None => {
                return Err(ApiError::bad_request(format!(
                    "Unable to create resource provider \"{name}\", {uuid}: Object action create failed because: parent provider UUID does not exist."
                )))
            }
        },
    };
    match providers::create(&mut tx, uuid, &name, parent).await {
        Ok(()) => {}
        Err(CreateError::DuplicateName) => {
            return Err(ApiError::conflict(format!(
                "Conflicting resource provider name: {name} already exists."
            ))
            .code(codes::DUPLICATE_NAME))
        }
        Err(CreateError::DuplicateUuid) => {
            return Err(ApiError::conflict(format!(
                "Conflicting resource provider uuid: {uuid} already exists."
            ))
            .code(codes::DUPLICATE_NAME))
        }
        Err(CreateError::Db(e)) => return Err(e.into()),
    }
    let rp = providers::get(&mut tx, uuid)
        .await?
        .ok_or_else(|| ApiError::internal("provider vanished"))?;
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
    let name = b.name;
    let fail = |why: &str| {
        ApiError::bad_request(format!(
            "Unable to save resource provider {}: Object action update failed because: {why}",
            rp.uuid
        ))
    };
    let current_parent = match rp.parent_uuid {
        Some(p) => providers::get(&mut tx, p)
            .await?
            .map(|r| (r.id, r.root_provider_id)),
        None => None,
    };
    let parent = match b.parent_provider_uuid.map(|p| p.map(|u| u.0)) {
        None => current_parent,
        Some(None) if rp.parent_uuid.is_some() && !mv.at_least(1, 37) => {
            return Err(fail("un-parenting a provider is not currently allowed."))
        }
        Some(None) => None,
        Some(Some(p)) => {
            let Some(prow) = providers::get(&mut tx, p).await? else {
                return Err(fail("parent provider UUID does not exist."));
            };
            if rp.parent_uuid.is_some_and(|cur| cur != p) && !mv.at_least(1, 37) {
                return Err(fail("re-parenting a provider is not currently allowed."));
            }
            if providers::is_in_subtree(&mut tx, rp.id, prow.id).await? {
                return Err(fail("creating loop in the provider tree is not allowed."));
            }
            Some((prow.id, prow.root_provider_id))
        }
    };
    if !providers::update(&mut tx, rp.id, &name, parent).await? {
        return Err(ApiError::conflict(format!(
            "Conflicting resource provider {name} already exists."
        ))
        .code(codes::DUPLICATE_NAME));
    }
    let updated = providers::get(&mut tx, rp.uuid)
        .await?
        .ok_or_else(|| ApiError::internal("provider vanished"))?;
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
        if e.status == StatusCode::NOT_FOUND {
            ApiError::not_found(format!(
                "No resource provider with uuid {id} found for delete"
            ))
        } else {
            e
        }
    })?;
    match providers::delete(&mut tx, rp.id).await? {
        Some(DeleteBlock::HasChildren) => Err(ApiError::conflict(format!(
            "Unable to delete parent resource provider {}: It has child resource providers.",
            rp.uuid
        ))
        .code(codes::CANNOT_DELETE_PARENT)),
        Some(DeleteBlock::HasAllocations) => Err(ApiError::conflict(format!(
            "Unable to delete resource provider {}: Resource provider has allocations.",
            rp.uuid
        ))
        .code(codes::PROVIDER_INUSE)),
        None => {
            tx.commit().await.map_err(ApiError::commit_failed)?;
            Ok(StatusCode::NO_CONTENT)
        }
    }
}
