//! CORS with oslo.middleware's behaviour: a preflight (`OPTIONS` with an
//! `Origin`) is answered here, 200 always, with the `Access-Control-*`
//! headers only when the origin, the method and every requested header are
//! allowed; an actual request from an allowed origin gets the origin, the
//! credentials flag and the exposed headers added to its answer. Anything
//! not allowed simply gets no CORS headers, which the browser enforces.

use crate::config::security::CorsRules;
use axum::body::Body;
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::Response;

/// Methods a cross-origin call may use (Placement's `allow_methods`).
const ALLOW_METHODS: &[&str] = &["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"];

/// Headers browsers may always send (the CORS "simple" ones).
const SIMPLE_HEADERS: &[&str] = &[
    "cache-control",
    "content-language",
    "content-type",
    "expires",
    "last-modified",
    "pragma",
];

/// Whether this request is a preflight CORS answers itself.
pub fn is_preflight(method: &Method, headers: &HeaderMap) -> bool {
    method == Method::OPTIONS && headers.contains_key(header::ORIGIN)
}

fn allowed(rules: &CorsRules, origin: &HeaderValue) -> bool {
    origin
        .to_str()
        .is_ok_and(|text| rules.allowed_origins.iter().any(|o| o == "*" || o == text))
}

/// The answer to a preflight.
pub fn preflight(rules: &CorsRules, headers: &HeaderMap) -> Response {
    let mut resp = Response::new(Body::empty());
    *resp.status_mut() = StatusCode::OK;
    if let Some((origin, method, requested)) = admitted(rules, headers) {
        let h = resp.headers_mut();
        h.insert(header::VARY, HeaderValue::from_static("Origin"));
        h.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin);
        h.insert(
            header::ACCESS_CONTROL_ALLOW_CREDENTIALS,
            HeaderValue::from_static("true"),
        );
        h.insert(
            header::ACCESS_CONTROL_MAX_AGE,
            HeaderValue::from(rules.max_age),
        );
        h.insert(header::ACCESS_CONTROL_ALLOW_METHODS, method);
        if let Some(v) = requested {
            h.insert(header::ACCESS_CONTROL_ALLOW_HEADERS, v);
        }
    }
    resp
}

/// The origin, method and requested headers of an allowed preflight.
fn admitted(
    rules: &CorsRules,
    headers: &HeaderMap,
) -> Option<(HeaderValue, HeaderValue, Option<HeaderValue>)> {
    let origin = headers
        .get(header::ORIGIN)
        .filter(|o| allowed(rules, o))?
        .clone();
    let method = headers.get(header::ACCESS_CONTROL_REQUEST_METHOD)?;
    let name = method.to_str().ok()?.trim();
    if !ALLOW_METHODS.contains(&name) && name != "OPTIONS" {
        return None;
    }
    let requested = match headers.get(header::ACCESS_CONTROL_REQUEST_HEADERS) {
        None => None,
        Some(v) => {
            let wanted: Vec<String> = v
                .to_str()
                .ok()?
                .split(',')
                .map(|h| h.trim().to_ascii_lowercase())
                .filter(|h| !h.is_empty())
                .collect();
            let allowed = |h: &String| {
                SIMPLE_HEADERS.contains(&h.as_str()) || rules.allow_headers.contains(h)
            };
            if !wanted.iter().all(allowed) {
                return None;
            }
            HeaderValue::from_str(&wanted.join(",")).ok()
        }
    };
    Some((origin, method.clone(), requested))
}

/// Adds the CORS headers of an actual request from an allowed origin.
pub fn decorate(rules: &CorsRules, origin: &HeaderValue, resp: &mut Response) {
    if !allowed(rules, origin) {
        return;
    }
    let h = resp.headers_mut();
    h.append(header::VARY, HeaderValue::from_static("Origin"));
    h.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin.clone());
    h.insert(
        header::ACCESS_CONTROL_ALLOW_CREDENTIALS,
        HeaderValue::from_static("true"),
    );
    if let Ok(v) = HeaderValue::from_str(&rules.expose_headers.join(",")) {
        if !rules.expose_headers.is_empty() {
            h.insert(header::ACCESS_CONTROL_EXPOSE_HEADERS, v);
        }
    }
}
