//! The one line logged per request, with what operators grep Placement's
//! request log for: the client's address, method, path with its query,
//! status, length and microversion (placement.requestlog's words), and in
//! the request's span the request ids, user and project that oslo.log
//! puts in its context brackets.

use axum::extract::{ConnectInfo, Request};
use axum::response::Response;
use std::net::SocketAddr;

/// The log target of request lines (where the log's format needs it).
pub use crate::log_output::REQUEST_LOG_TARGET as TARGET;

/// What is known of a request when it arrives.
pub struct RequestLine {
    remote: String,
    method: String,
    uri: String,
}

impl RequestLine {
    /// Read from the request before anything else touches it.
    pub fn of(req: &Request) -> RequestLine {
        let remote = req
            .extensions()
            .get::<ConnectInfo<SocketAddr>>()
            .map_or_else(|| "-".to_string(), |c| c.0.ip().to_string());
        let uri = req
            .uri()
            .path_and_query()
            .map_or_else(|| req.uri().path().to_string(), |p| p.as_str().to_string());
        RequestLine {
            remote,
            method: req.method().to_string(),
            uri: printable(&uri),
        }
    }

    /// The line, once the answer is known: INFO, or ERROR for a 5xx.
    pub fn log(self, resp: &Response, microversion: Option<String>, ms: f64) {
        let status = resp.status().as_u16();
        let len = http_body::Body::size_hint(resp.body())
            .exact()
            .map_or_else(|| "-".to_string(), |n| n.to_string());
        let microversion = microversion.unwrap_or_else(|| "-".to_string());
        let RequestLine {
            remote,
            method,
            uri,
        } = self;
        if status >= 500 {
            tracing::error!(target: TARGET, %remote, %method, %uri, status, %len, %microversion, ms, "request failed");
        } else {
            tracing::info!(target: TARGET, %remote, %method, %uri, status, %len, %microversion, ms, "request");
        }
    }
}

/// An id a caller chose (`X-Openstack-Request-Id`, noauth2's user) as it
/// may appear in a log line: letters, digits and `-_.@` kept, anything
/// else (spaces, brackets, newlines a caller could forge lines with)
/// replaced by `_`, at most 64 characters.
pub fn loggable_id(id: &str) -> String {
    id.chars()
        .take(64)
        .map(|c| {
            if c.is_ascii_alphanumeric() || "-_.@".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// A path as one token of a line. hyper refuses spaces and control
/// characters in a request target; a `"` it lets through is escaped as
/// its percent-encoding, so the quoted `"METHOD URI"` stays one field.
fn printable(uri: &str) -> String {
    uri.replace('"', "%22")
}

/// The caller's global request id (oslo.middleware's: `X-Openstack-Request-Id`
/// as `req-` and a UUID, what Nova sends so one id follows a boot through
/// every service); anything else is ignored, as oslo.middleware ignores it.
pub fn global_request_id(req: &Request) -> Option<String> {
    let v = req.headers().get("x-openstack-request-id")?.to_str().ok()?;
    let id = v.strip_prefix("req-")?;
    uuid::Uuid::parse_str(id)
        .ok()
        .filter(|u| u.hyphenated().to_string() == id)
        .map(|_| v.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_callers_ids_cannot_forge_a_line() {
        assert_eq!(loggable_id("admin"), "admin");
        assert_eq!(loggable_id("a b]\nINFO x"), "a_b__INFO_x");
        assert_eq!(printable("/a\"b"), "/a%22b");
    }

    #[test]
    fn a_global_request_id_is_req_and_a_uuid() {
        let with = |v: &str| {
            let req = Request::builder()
                .header("x-openstack-request-id", v)
                .body(axum::body::Body::empty())
                .unwrap();
            global_request_id(&req)
        };
        let id = "req-6f1c5a4e-2b1d-4c7a-9a57-0f3c3a2b1d4e";
        assert_eq!(with(id).as_deref(), Some(id));
        assert_eq!(with("req-x y"), None);
        assert_eq!(with("6f1c5a4e-2b1d-4c7a-9a57-0f3c3a2b1d4e"), None);
    }
}
