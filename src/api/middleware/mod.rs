//! The request pipeline, in Placement's order: request id and log line →
//! CORS preflight → authentication (noauth2 or Keystone) →
//! content-length/content-type rules → microversion negotiation → routing
//! → policy and `Accept` checks per route → error rendering, version and
//! CORS headers on the way out.

mod body;
pub mod cors;
mod request_line;

pub use body::BodyLimits;
use request_line::RequestLine;

use super::extract::QueryPairs;
use super::microversion::{self, Microversion};
use super::policy::{target_of, Authorize};
use super::routes::{Route, Subject};
use crate::api::respond::{ApiError, PendingError};
use crate::policy::{Credentials, Decision};
use crate::state::Security;
use axum::body::Body;
use axum::extract::{FromRequestParts, MatchedPath, RawPathParams, Request, State};
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tracing::Instrument;

/// The request id (`req-<uuid4>`) shared by the response header, error bodies and logs.
#[derive(Debug, Clone)]
pub struct RequestId(pub String);

/// Marks an answer whose request's body was read whole.
#[derive(Debug, Clone, Copy)]
struct BodyTaken;

/// Whether a route's handler reads a body.
fn takes_body(route: &Route) -> bool {
    matches!(route.method, Method::POST | Method::PUT | Method::PATCH)
}

/// Whether `rule` passes for the caller with its own project and user as
/// the target (Placement's default target).
fn passes_for_itself(gate: &Gate, rule: &str, caller: &Credentials) -> bool {
    gate.security
        .policy
        .current()
        .enforce(rule, caller, &super::policy::caller_target(caller))
        == Decision::Allowed
}

/// Reads the body of a request that passed its route's checks, then runs
/// the handler with the body's memory reserved. A body that could not be
/// read closes the connection: its rest was never read.
async fn with_body(gate: &Gate, route: Option<&Route>, req: Request, next: Next) -> Response {
    if !route.is_some_and(takes_body) {
        // GET and DELETE (or a method the path does not have) never read
        // a body: the handler sees none, and the unread rest closes the
        // connection.
        let (parts, _unread) = req.into_parts();
        return handle(gate, Request::from_parts(parts, Body::empty()), next).await;
    }
    match body::read_body(req, &gate.limits).await {
        Ok((req, _reserved)) => {
            let mut resp = handle(gate, req, next).await;
            resp.extensions_mut().insert(BodyTaken);
            resp
        }
        Err(e) => {
            let mut resp = e.into_response();
            resp.headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
            if resp.status() == StatusCode::SERVICE_UNAVAILABLE {
                resp.headers_mut()
                    .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
            }
            resp
        }
    }
}

/// Runs the handler within the request's database deadline.
async fn handle(gate: &Gate, req: Request, next: Next) -> Response {
    match crate::db::deadline::within(gate.db_deadline, next.run(req)).await {
        Ok(resp) => resp,
        Err(passed) => ApiError::from(crate::error::Error::deadline_passed(
            gate.db_deadline,
            passed.write_sent,
        ))
        .into_response(),
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
    /// How long a request's database work may take (`db::deadline`).
    pub db_deadline: Duration,
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
        let span = tracing::Span::current();
        span.record(
            "user_id",
            tracing::field::display(request_line::loggable_id(&caller.user_id)),
        );
        if let Some(p) = &caller.project_id {
            span.record(
                "project_id",
                tracing::field::display(request_line::loggable_id(p)),
            );
        }
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
    super::respond::render_error(e, request_id, codes, accept)
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
        // Keep the headers set on purpose (a refused body's), drop the rest.
        for name in [header::RETRY_AFTER, header::CONNECTION] {
            if let Some(v) = resp.headers().get(&name) {
                rendered.headers_mut().insert(name, v.clone());
            }
        }
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
    let line = request_line::RequestLine::of(&req);
    let global_request_id = request_line::global_request_id(&req);
    let span = tracing::info_span!(
        "request",
        request_id = %request_id,
        global_request_id = %global_request_id.as_deref().unwrap_or("None"),
        method = %req.method(),
        path = %path,
        user_id = tracing::field::Empty,
        project_id = tracing::field::Empty,
        route = tracing::field::Empty,
        microversion = tracing::field::Empty,
        status = tracing::field::Empty,
    );
    let method = req.method().clone();
    let has_body = {
        use http_body::Body as _;
        !req.body().is_end_stream()
    };
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
            Ok(v) => Ok((v, req)),
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
        let finish = ResponseFinish {
            started,
            method: &method,
            has_body,
            cors: cors.as_ref().zip(origin.as_ref()),
        };
        finish.apply(resp, line, mv)
    }
    .instrument(span)
    .await
}

/// What every answer gets on its way out, refused or served.
struct ResponseFinish<'a> {
    started: Instant,
    method: &'a axum::http::Method,
    /// The request came with a body.
    has_body: bool,
    /// CORS rules and the request's Origin, when both are there.
    cors: Option<(&'a crate::config::security::CorsRules, &'a HeaderValue)>,
}

impl ResponseFinish<'_> {
    /// Closes a connection whose body was never read, counts the answer,
    /// adds the CORS headers and logs the request's line.
    fn apply(self, mut resp: Response, line: RequestLine, mv: Option<Microversion>) -> Response {
        if self.has_body && resp.extensions().get::<BodyTaken>().is_none() {
            // The body was never read (refused from its head): this
            // connection cannot carry another request.
            resp.headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
        let route = resp.extensions().get::<MatchedRoute>().map(|r| r.0.clone());
        crate::metrics::metrics().request(
            route.as_deref().unwrap_or(""),
            self.method.as_str(),
            resp.status().as_u16(),
            self.started.elapsed().as_secs_f64(),
        );
        if let Some((rules, origin)) = self.cors {
            cors::decorate(rules, origin, &mut resp);
        }
        let status = resp.status().as_u16();
        tracing::Span::current().record("status", status);
        let ms = self.started.elapsed().as_secs_f64() * 1000.0;
        line.log(&resp, mv.map(|v| v.to_string()), ms);
        resp
    }
}

/// Per-route checks after routing, in Placement's order: the route's
/// microversion (404 when the request is older; 405 for DELETE of all
/// inventories before 1.5), `Accept` for GETs (406), then the route's
/// policy rule (403).
pub async fn route_guard(State(gate): State<Gate>, req: Request, next: Next) -> Response {
    // Under `--path-prefix` the route is known by its name in the table:
    // without this, a route reached under the prefix found no rule.
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map(|m| super::respond::path_prefix::strip(m.as_str()).to_string())
        .unwrap_or_default();
    let mut resp = guarded(&gate, &route, req, next).await;
    // For the pipeline's metrics: the route pattern, never the raw path.
    resp.extensions_mut().insert(MatchedRoute(route));
    resp
}

/// The matched route pattern of an answer (none: no route matched).
#[derive(Debug, Clone)]
pub struct MatchedRoute(pub String);

async fn guarded(gate: &Gate, route: &str, req: Request, next: Next) -> Response {
    let route = route.to_string();
    let mv = req
        .extensions()
        .get::<Microversion>()
        .copied()
        .unwrap_or(crate::microversions::MIN);
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
        None => with_body(gate, declared, req, next).await,
        Some((rule, subject)) => authorized(gate, declared, rule, subject, req, next).await,
    }
}

/// Checks the route's rule against its target and runs the handler. The
/// query is parsed here, once: the target and the handler read the same
/// [`QueryPairs`]. A route whose target only the handler can read gets an
/// [`Authorize`] to call, and answers 500 instead of a success if it did
/// not (fail closed).
async fn authorized(
    gate: &Gate,
    route: Option<&Route>,
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
            if gate
                .security
                .policy
                .current()
                .enforce(rule, &caller, &target)
                != Decision::Allowed
            {
                return ApiError::forbidden(rule).into_response();
            }
            None
        }
        None => {
            // The target is in the body (or stored with what the path
            // names): before a byte of a body is read, the caller must
            // pass the rule for its own project, the case every owner
            // writing its own work is in. A caller who could not pass for
            // any project it may name is refused from the head, and never
            // holds a body budget (issue 64).
            if route.is_some_and(takes_body) && !passes_for_itself(gate, rule, &caller) {
                return ApiError::forbidden(rule).into_response();
            }
            let check = Authorize::new(rule, caller, gate.security.clone());
            parts.extensions.insert(check.clone());
            Some(check)
        }
    };
    parts.extensions.insert(query);
    let resp = with_body(gate, route, Request::from_parts(parts, body), next).await;
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
