//! The request pipeline, in Placement's order: request id and log line →
//! CORS preflight → authentication (noauth2 or Keystone) →
//! content-length/content-type rules → microversion negotiation → routing
//! → policy and `Accept` checks per route → error rendering, version and
//! CORS headers on the way out.

pub mod cors;

use super::extract::QueryPairs;
use super::microversion::{self, Microversion};
use super::policy::{target_of, Authorize};
use super::routes::Subject;
use crate::api::respond::{ApiError, PendingError};
use crate::policy::{Credentials, Decision};
use crate::state::Security;
use axum::body::Body;
use axum::extract::{FromRequestParts, MatchedPath, RawPathParams, Request, State};
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http_body_util::{BodyExt, LengthLimitError, Limited};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tracing::Instrument;

/// The request id (`req-<uuid4>`) shared by the response header, error bodies and logs.
#[derive(Debug, Clone)]
pub struct RequestId(pub String);

/// How much of a request body is read, and for how long.
#[derive(Debug, Clone, Copy)]
pub struct BodyLimits {
    /// Larger bodies get 413.
    pub max_bytes: usize,
    /// A body not received in full by then gets 408 (slow clients).
    pub timeout: Duration,
}

impl From<&crate::config::Settings> for BodyLimits {
    fn from(s: &crate::config::Settings) -> Self {
        BodyLimits {
            max_bytes: s.http_max_body_bytes,
            timeout: Duration::from_secs(s.http_body_timeout_secs),
        }
    }
}

/// Reads the whole body within the limits, so handlers never wait on a
/// slow client and never see more than `max_bytes`.
async fn read_body(req: Request, limits: BodyLimits) -> Result<Request, ApiError> {
    let too_large = || {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!(
                "The request body is over the limit of {} bytes.",
                limits.max_bytes
            ),
        )
    };
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    if declared.is_some_and(|n| n > limits.max_bytes as u64) {
        return Err(too_large());
    }
    let (parts, body) = req.into_parts();
    let read = tokio::time::timeout(
        limits.timeout,
        Limited::new(body, limits.max_bytes).collect(),
    )
    .await;
    match read {
        Err(_) => Err(ApiError::new(
            StatusCode::REQUEST_TIMEOUT,
            format!(
                "The request body was not received within {} seconds.",
                limits.timeout.as_secs()
            ),
        )),
        Ok(Err(e)) if e.is::<LengthLimitError>() => Err(too_large()),
        Ok(Err(e)) => Err(ApiError::bad_request(format!(
            "The request body could not be read: {e}"
        ))),
        Ok(Ok(body)) => Ok(Request::from_parts(parts, Body::from(body.to_bytes()))),
    }
}

/// Paths served without a token.
fn is_public(path: &str) -> bool {
    path.is_empty()
        || path == "/"
        || path == "/healthcheck"
        || path == "/metrics"
        || path == "/openapi.json"
        || path.starts_with("/docs")
        || path == "/ui"
        || path.starts_with("/ui/")
}

/// What the pipeline needs: body limits and the security settings.
#[derive(Clone)]
pub struct Gate {
    /// How much of a body is read, and for how long.
    pub limits: BodyLimits,
    /// Authentication, policy and CORS.
    pub security: Arc<Security>,
}

/// Before routing, in Placement's order: the caller (outside the public
/// paths, which never ask Keystone: 401 without a valid token, 503 when
/// Keystone cannot say), content-length/content-type rules, then the
/// microversion.
async fn admit(
    req: &mut Request,
    path: &str,
    security: &Security,
) -> Result<Microversion, ApiError> {
    if !is_public(path) {
        let headers = req.headers();
        let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
        let presented = crate::auth::Presented {
            // A token that is not text is presented, and refused, as "".
            token: headers
                .get("x-auth-token")
                .map(|v| v.to_str().map(str::trim).unwrap_or("")),
            project_id: text("x-project-id"),
            roles: text("x-roles"),
            system_scope: text("openstack-system-scope"),
        };
        let caller = security
            .auth
            .identify(presented)
            .await?
            .ok_or_else(|| security.auth.missing_token())?;
        req.extensions_mut().insert(caller);
    }
    let headers = req.headers();
    if let Some(len) = headers.get(header::CONTENT_LENGTH) {
        let n: u64 = len
            .to_str()
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .ok_or_else(|| ApiError::bad_request("content-length header must be an integer"))?;
        if n > 0 && !headers.contains_key(header::CONTENT_TYPE) {
            return Err(ApiError::bad_request(
                "content-type header required when content-length > 0",
            ));
        }
    }
    Ok(microversion::negotiate(headers)?)
}

/// The answer to a request refused before routing.
/// A 503 (the identity service is down) carries its code to clients of
/// 1.23 and later, as handlers' errors do; the rest are Placement's
/// pre-routing answers, which have none.
fn refused(e: &ApiError, request_id: &str, accept: Option<&str>, codes: bool) -> Response {
    let codes = codes && e.status == StatusCode::SERVICE_UNAVAILABLE;
    let mut resp = super::respond::render_error(e, request_id, codes, accept);
    if matches!(e.status.as_u16(), 408 | 413) {
        // The rest of the body was never read: this connection cannot
        // carry another request.
        resp.headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    resp
}

/// Routes the request and renders a handler's error in Placement's body.
async fn routed(
    mut req: Request,
    next: Next,
    mv: Microversion,
    request_id: &str,
    accept: Option<&str>,
) -> Response {
    req.extensions_mut().insert(mv);
    req.extensions_mut()
        .insert(RequestId(request_id.to_string()));
    let mut resp = next.run(req).await;
    if let Some(PendingError(e)) = resp.extensions_mut().remove::<PendingError>() {
        let mut rendered = super::respond::render_error(&e, request_id, mv.at_least(1, 23), accept);
        // Keep headers a handler set on purpose (none today), drop the rest.
        std::mem::swap(rendered.extensions_mut(), resp.extensions_mut());
        resp = rendered;
    }
    resp
}

/// The request id and version headers every answer carries.
fn stamp(resp: &mut Response, request_id: &str, mv: Option<Microversion>) {
    let headers = resp.headers_mut();
    if let Ok(v) = HeaderValue::from_str(request_id) {
        headers.insert("x-openstack-request-id", v);
    }
    if let Some(v) = mv {
        if let Ok(h) = HeaderValue::from_str(&format!("placement {v}")) {
            headers.insert("openstack-api-version", h);
        }
        headers.insert(
            header::VARY,
            HeaderValue::from_static("openstack-api-version"),
        );
    }
}

/// The outermost middleware: everything that happens before routing, the
/// rendering of every error afterwards, and one log line per request in a
/// span carrying the request id, the matched route (recorded by the route
/// guard), the microversion and the status.
pub async fn pipeline(State(gate): State<Gate>, mut req: Request, next: Next) -> Response {
    let started = Instant::now();
    let request_id = format!("req-{}", uuid::Uuid::new_v4());
    let accept = req
        .headers()
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let path = req.uri().path().to_string();
    let span = tracing::info_span!(
        "request",
        request_id = %request_id,
        method = %req.method(),
        path = %path,
        route = tracing::field::Empty,
        microversion = tracing::field::Empty,
        status = tracing::field::Empty,
    );
    let method = req.method().clone();
    let cors = gate.security.cors.clone();
    // Only the Origin is kept for the answer's CORS headers, not every header.
    let origin = cors
        .as_ref()
        .and_then(|_| req.headers().get(header::ORIGIN).cloned());
    async move {
        if let Some(rules) = &cors {
            if cors::is_preflight(req.method(), req.headers()) {
                let mut resp = cors::preflight(rules, req.headers());
                stamp(&mut resp, &request_id, None);
                tracing::info!(status = 200, "preflight");
                return resp;
            }
        }
        // A refusal before routing shows its code when the request asked
        // for 1.23+; the version is only parsed on that (rare) path.
        let admitted = match admit(&mut req, &path, &gate.security).await {
            Ok(v) => read_body(req, gate.limits)
                .await
                .map(|r| (v, r))
                .map_err(|e| (e, false)),
            Err(e) => {
                let codes = microversion::negotiate(req.headers()).is_ok_and(|v| v.at_least(1, 23));
                Err((e, codes))
            }
        };
        let (mut resp, mv) = match admitted {
            Err((e, codes)) => (refused(&e, &request_id, accept.as_deref(), codes), None),
            Ok((v, req)) => {
                tracing::Span::current().record("microversion", tracing::field::display(v));
                (
                    routed(req, next, v, &request_id, accept.as_deref()).await,
                    Some(v),
                )
            }
        };
        stamp(&mut resp, &request_id, mv);
        let route = resp.extensions().get::<MatchedRoute>().map(|r| r.0.clone());
        crate::metrics::metrics().request(
            route.as_deref().unwrap_or(""),
            method.as_str(),
            resp.status().as_u16(),
            started.elapsed().as_secs_f64(),
        );
        if let (Some(rules), Some(o)) = (&cors, &origin) {
            cors::decorate(rules, o, &mut resp);
        }
        let status = resp.status().as_u16();
        tracing::Span::current().record("status", status);
        let ms = started.elapsed().as_secs_f64() * 1000.0;
        if status >= 500 {
            tracing::error!(status, ms, "request failed");
        } else {
            tracing::info!(status, ms, "request");
        }
        resp
    }
    .instrument(span)
    .await
}

/// Per-route checks after routing, in Placement's order: the route's
/// microversion (404 when the request is older; 405 for DELETE of all
/// inventories before 1.5), `Accept` for GETs (406), then the route's
/// policy rule (403).
pub async fn route_guard(
    State(security): State<Arc<Security>>,
    req: Request,
    next: Next,
) -> Response {
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map(|m| m.as_str().to_string())
        .unwrap_or_default();
    let mut resp = guarded(&security, &route, req, next).await;
    // For the pipeline's metrics: the route pattern, never the raw path.
    resp.extensions_mut().insert(MatchedRoute(route));
    resp
}

/// The matched route pattern of an answer (none: no route matched).
#[derive(Debug, Clone)]
pub struct MatchedRoute(pub String);

async fn guarded(security: &Arc<Security>, route: &str, req: Request, next: Next) -> Response {
    let route = route.to_string();
    let mv = req
        .extensions()
        .get::<Microversion>()
        .copied()
        .unwrap_or(microversion::MIN);
    tracing::Span::current().record("route", route.as_str());
    // HEAD is served by the GET handler.
    let method = match req.method() {
        &Method::HEAD => Method::GET,
        m => m.clone(),
    };
    let declared = super::routes::find(&route, &method);
    if let Some(since) = declared.map(|r| r.since) {
        if mv < since {
            let e = if route.ends_with("/inventories") && req.method() == Method::DELETE {
                ApiError::method_not_allowed("DELETE", None)
            } else {
                ApiError::not_found("")
            };
            return e.into_response();
        }
    }
    if req.method() == Method::GET && !super::routes::OWN_MEDIA_TYPES.contains(&route.as_str()) {
        if let Some(accept) = req
            .headers()
            .get(header::ACCEPT)
            .and_then(|v| v.to_str().ok())
        {
            if !accept.trim().is_empty()
                && super::respond::accept_quality(accept, "application/json") <= 0.0
            {
                return ApiError::not_acceptable(accept, "Only application/json is provided")
                    .into_response();
            }
        }
    }
    match declared.and_then(|r| r.rule.map(|rule| (rule, r.target))) {
        None => next.run(req).await,
        Some((rule, subject)) => authorized(security, rule, subject, req, next).await,
    }
}

/// Checks the route's rule against its target and runs the handler. The
/// query is parsed here, once: the target and the handler read the same
/// [`QueryPairs`]. A route whose target only the handler can read gets an
/// [`Authorize`] to call, and answers 500 instead of a success if it did
/// not (fail closed).
async fn authorized(
    security: &Arc<Security>,
    rule: &'static str,
    subject: Subject,
    req: Request,
    next: Next,
) -> Response {
    let (mut parts, body) = req.into_parts();
    let query = QueryPairs::parse(parts.uri.query());
    let path_project = match RawPathParams::from_request_parts(&mut parts, &()).await {
        Ok(params) => params
            .iter()
            .find(|(k, _)| *k == "project_id")
            .map(|(_, v)| v.to_string()),
        Err(_) => None,
    };
    let Some(caller) = parts.extensions.get::<Credentials>().cloned() else {
        return ApiError::forbidden(rule).into_response();
    };
    let deferred = match target_of(subject, &caller, &query, path_project.as_deref()) {
        Some(target) => {
            if security.policy.current().enforce(rule, &caller, &target) != Decision::Allowed {
                return ApiError::forbidden(rule).into_response();
            }
            None
        }
        None => {
            let check = Authorize::new(rule, caller, security.clone());
            parts.extensions.insert(check.clone());
            Some(check)
        }
    };
    parts.extensions.insert(query);
    let resp = next.run(Request::from_parts(parts, body)).await;
    match deferred {
        Some(check) if resp.status().is_success() && !check.was_checked() => ApiError::internal(
            format!("{rule}: the handler answered without its policy check"),
        )
        .into_response(),
        _ => resp,
    }
}

/// A handler answering 405 with the route's `Allow` list.
pub fn method_not_allowed(
    allow: String,
) -> impl Fn(Method) -> std::future::Ready<ApiError> + Clone + Send + Sync + 'static {
    move |method: Method| {
        std::future::ready(ApiError::method_not_allowed(
            method.as_str(),
            Some(allow.clone()),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_route_rule_is_registered_with_the_policy() {
        let security = crate::state::Security::noauth();
        for r in crate::api::routes::all() {
            if let Some(rule) = r.rule {
                assert!(
                    security.policy.current().knows(rule),
                    "{rule} is not in policy::defaults"
                );
            }
        }
    }

    #[test]
    fn routes_carry_placement_rule_names() {
        let rule = |p: &str, m: Method| crate::api::routes::find(p, &m).and_then(|r| r.rule);
        assert_eq!(
            rule("/resource_providers", Method::GET),
            Some("placement:resource_providers:list")
        );
        assert_eq!(
            rule("/resource_providers/{uuid}/traits", Method::DELETE),
            Some("placement:resource_providers:traits:delete")
        );
        assert_eq!(
            rule("/allocations", Method::POST),
            Some("placement:allocations:manage")
        );
        assert_eq!(
            rule("/reshaper", Method::POST),
            Some("placement:reshaper:reshape")
        );
        assert_eq!(rule("/", Method::GET), None);
    }
}
