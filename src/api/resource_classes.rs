//! `/resource_classes[/{name}]` (1.2+).

use super::extract::{JsonBody, PathParams};
use super::microversion::Microversion;
use super::respond::{latest, Reply};
use super::schema;
use super::schema::bodies::ResourceClassBody;
use super::schema::responses::{Link, ResourceClass, ResourceClassList};
use crate::api::respond::{ApiError, ApiResult};
use crate::db::classes::{self as db, ClassRow, FIRST_CUSTOM_ID};
use crate::state::AppState;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use serde_json::json;

fn class_json(name: &str) -> ResourceClass {
    ResourceClass {
        name: name.to_string(),
        links: vec![Link::new("self", format!("/resource_classes/{name}"))],
    }
}

fn modified(c: &ClassRow) -> Option<chrono::DateTime<chrono::Utc>> {
    c.updated_at.or(c.created_at)
}

fn no_such(name: &str) -> ApiError {
    ApiError::not_found(format!("No such resource class {name}."))
}

/// `GET /resource_classes`.
pub async fn list(State(st): State<AppState>, mv: Microversion) -> ApiResult<Reply> {
    let mut conn = st.pool.acquire().await?;
    let rows = db::list(&mut conn).await?;
    let body = ResourceClassList {
        resource_classes: rows.iter().map(|c| class_json(&c.name)).collect(),
    };
    Ok(Reply::ok(&body).cache(mv, latest(rows.iter().map(modified))))
}

/// `GET /resource_classes/{name}`.
pub async fn show(
    State(st): State<AppState>,
    mv: Microversion,
    PathParams(name): PathParams<String>,
) -> ApiResult<Reply> {
    let mut conn = st.pool.acquire().await?;
    let c = db::get(&mut conn, &name)
        .await?
        .ok_or_else(|| no_such(&name))?;
    Ok(Reply::ok(&class_json(&c.name)).cache(mv, modified(&c)))
}

/// `POST /resource_classes`.
pub async fn create(
    State(st): State<AppState>,
    headers: HeaderMap,
    body: JsonBody,
) -> ApiResult<Reply> {
    let b: ResourceClassBody = body.parse(&schema::resource_class_body())?;
    let name = b.name.as_str();
    let mut tx = st.pool.begin().await?;
    if !db::create(&mut tx, name).await? {
        return Err(ApiError::conflict(format!(
            "Conflicting resource class already exists: {name}"
        )));
    }
    tx.commit().await.map_err(ApiError::commit_failed)?;
    Ok(Reply::empty(StatusCode::CREATED).location(&headers, &format!("/resource_classes/{name}")))
}

/// `PUT /resource_classes/{name}`: rename (1.2–1.6) or create-or-verify (1.7+).
pub async fn update(
    State(st): State<AppState>,
    mv: Microversion,
    headers: HeaderMap,
    PathParams(name): PathParams<String>,
    req: axum::extract::Request,
) -> ApiResult<Reply> {
    let mut tx = st.pool.begin().await?;
    if mv.at_least(1, 7) {
        // The path is validated with the body schema's rules.
        let as_body = JsonBody(json!({"name": name}));
        as_body.parse::<ResourceClassBody>(&schema::resource_class_body())?;
        let created = db::create(&mut tx, &name).await?;
        tx.commit().await.map_err(ApiError::commit_failed)?;
        let status = if created {
            StatusCode::CREATED
        } else {
            StatusCode::NO_CONTENT
        };
        return Ok(Reply::empty(status).location(&headers, &format!("/resource_classes/{name}")));
    }
    let body = <JsonBody as axum::extract::FromRequest<()>>::from_request(req, &()).await?;
    let b: ResourceClassBody = body.parse(&schema::resource_class_body())?;
    let new_name = b.name.as_str();
    let c = db::get(&mut tx, &name)
        .await?
        .ok_or_else(|| no_such(&name))?;
    if c.id < FIRST_CUSTOM_ID {
        return Err(ApiError::bad_request(format!(
            "Cannot update standard resource class {name}"
        )));
    }
    if !db::rename(&mut tx, c.id, new_name).await? {
        return Err(ApiError::conflict(format!(
            "Resource class already exists: {new_name}"
        )));
    }
    tx.commit().await.map_err(ApiError::commit_failed)?;
    Ok(Reply::ok(&class_json(new_name)))
}

/// `DELETE /resource_classes/{name}`.
pub async fn delete(
    State(st): State<AppState>,
    PathParams(name): PathParams<String>,
) -> ApiResult<StatusCode> {
    let mut tx = st.pool.begin().await?;
    let c = db::get(&mut tx, &name)
        .await?
        .ok_or_else(|| no_such(&name))?;
    if c.id < FIRST_CUSTOM_ID {
        return Err(ApiError::bad_request(format!(
            "Error in delete resource class: Cannot delete standard resource class {name}."
        )));
    }
    if db::in_use(&mut tx, c.id).await? {
        return Err(ApiError::conflict(format!(
            "Error in delete resource class: Cannot delete resource class {name}. Class is in use in inventory."
        )));
    }
    db::delete(&mut tx, c.id).await?;
    tx.commit().await.map_err(ApiError::commit_failed)?;
    Ok(StatusCode::NO_CONTENT)
}
