//! Responses: JSON bodies, `Location`, the `last-modified` /
//! `cache-control` pair Placement adds from microversion 1.15, and the error body.

pub mod error;
pub mod path_prefix;

pub use error::{codes, ApiError, ApiResult, GenerationConflict, PendingError};

use super::microversion::Microversion;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Utc};
use serde::Serialize;

/// Formats a timestamp as an HTTP date (`Tue, 15 Nov 1994 08:12:31 GMT`).
pub fn http_date(t: DateTime<Utc>) -> String {
    t.format("%a, %d %b %Y %H:%M:%S GMT").to_string()
}

/// A success response under construction.
pub struct Reply {
    status: StatusCode,
    body: Option<String>,
    headers: HeaderMap,
}

impl Reply {
    /// A JSON body with `status`.
    pub fn json<T: Serialize>(status: StatusCode, body: &T) -> Self {
        let text = serde_json::to_string(body).unwrap_or_else(|_| "{}".into());
        let mut headers = HeaderMap::new();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        Reply {
            status,
            body: Some(text),
            headers,
        }
    }

    /// 200 with a body already rendered as JSON text.
    pub fn raw_json(body: String) -> Self {
        let mut headers = HeaderMap::new();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        Reply {
            status: StatusCode::OK,
            body: Some(body),
            headers,
        }
    }

    /// 200 with a JSON body.
    pub fn ok<T: Serialize>(body: &T) -> Self {
        Self::json(StatusCode::OK, body)
    }

    /// An empty response (204, or 201 without body).
    pub fn empty(status: StatusCode) -> Self {
        Reply {
            status,
            body: None,
            headers: HeaderMap::new(),
        }
    }

    /// Adds `last-modified` (the given time, or now) and `cache-control:
    /// no-cache` when the version is 1.15 or newer.
    pub fn cache(mut self, mv: Microversion, modified: Option<DateTime<Utc>>) -> Self {
        if mv.at_least(1, 15) {
            let when = modified.unwrap_or_else(Utc::now);
            if let Ok(v) = HeaderValue::from_str(&http_date(when)) {
                self.headers.insert(header::LAST_MODIFIED, v);
            }
            self.headers
                .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
        }
        self
    }

    /// Adds a `Location` header: absolute, from the request's host and the path.
    pub fn location(mut self, request_headers: &HeaderMap, path: &str) -> Self {
        let host = request_headers
            .get(header::HOST)
            .and_then(|h| h.to_str().ok())
            .unwrap_or("localhost");
        let path = path_prefix::apply(path);
        if let Ok(v) = HeaderValue::from_str(&format!("http://{host}{path}")) {
            self.headers.insert(header::LOCATION, v);
        }
        self
    }
}

impl IntoResponse for Reply {
    fn into_response(self) -> Response {
        let mut resp = match self.body {
            Some(b) => (self.status, b).into_response(),
            None => self.status.into_response(),
        };
        resp.headers_mut().extend(self.headers);
        resp
    }
}

/// The latest of a set of optional timestamps, for list responses.
pub fn latest<I: IntoIterator<Item = Option<DateTime<Utc>>>>(times: I) -> Option<DateTime<Utc>> {
    times.into_iter().flatten().max()
}
/// Renders an error's final body per `Accept`: Placement's
/// `{"errors": [{"status", "title", "detail", "code", "request_id"}]}`, or
/// HTML or plain text for clients that ask for them, as webob does.
pub fn render_error(
    e: &ApiError,
    request_id: &str,
    with_code: bool,
    accept: Option<&str>,
) -> Response {
    let (ctype, body) = match preferred_error_format(accept) {
        ErrorFormat::Json => {
            let mut obj = serde_json::Map::new();
            obj.insert("status".into(), e.status.as_u16().into());
            obj.insert("title".into(), e.title().into());
            obj.insert("detail".into(), e.detail.clone().into());
            if with_code {
                obj.insert("code".into(), e.code.into());
            }
            obj.insert("request_id".into(), request_id.into());
            if let Some(nodes) = &e.nodes {
                obj.insert(
                    "nodes".into(),
                    serde_json::to_value(nodes).unwrap_or_default(),
                );
            }
            if e.version_bounds {
                obj.insert(
                    "max_version".into(),
                    crate::microversions::LATEST.to_string().into(),
                );
                obj.insert(
                    "min_version".into(),
                    crate::microversions::MIN.to_string().into(),
                );
            }
            let body = serde_json::json!({ "errors": [obj] });
            ("application/json", body.to_string())
        }
        ErrorFormat::Html => {
            let head = format!("{} {}", e.status.as_u16(), e.title());
            let text = html_escape(&e.detail).replace("\n\n", "<br /><br />\n");
            (
                "text/html; charset=UTF-8",
                format!("<html>\n <head>\n  <title>{head}</title>\n </head>\n <body>\n  <h1>{head}</h1>\n  {text}\n </body>\n</html>"),
            )
        }
        ErrorFormat::Plain => (
            "text/plain; charset=UTF-8",
            format!("{} {}\n\n{}\n", e.status.as_u16(), e.title(), e.detail),
        ),
    };
    let mut resp = (e.status, body).into_response();
    resp.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(ctype));
    if let Some(secs) = e.retry_after {
        resp.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(secs));
    }
    if let Some(allow) = &e.allow {
        if let Ok(v) = HeaderValue::from_str(allow) {
            resp.headers_mut().insert(header::ALLOW, v);
        }
    }
    if let Some(challenge) = &e.www_authenticate {
        if let Ok(v) = HeaderValue::from_str(challenge) {
            resp.headers_mut().insert(header::WWW_AUTHENTICATE, v);
        }
    }
    resp
}

fn html_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

enum ErrorFormat {
    Json,
    Html,
    Plain,
}

/// webob's choice among HTML, JSON and plain text; a missing `Accept` or a
/// bare `*/*` means JSON, as Placement's clients expect.
fn preferred_error_format(accept: Option<&str>) -> ErrorFormat {
    let Some(accept) = accept
        .map(str::trim)
        .filter(|a| !a.is_empty() && *a != "*/*")
    else {
        return ErrorFormat::Json;
    };
    let q_html = accept_quality(accept, "text/html");
    let q_json = accept_quality(accept, "application/json");
    match (q_html, q_json) {
        (h, j) if h > 0.0 && h >= j => ErrorFormat::Html,
        (_, j) if j > 0.0 => ErrorFormat::Json,
        _ => ErrorFormat::Plain,
    }
}

/// The quality with which `accept` admits `offer` (`type/subtype`), 0 when not at all.
pub fn accept_quality(accept: &str, offer: &str) -> f32 {
    let (otype, _) = offer.split_once('/').unwrap_or((offer, ""));
    let mut best: Option<(u8, f32)> = None;
    for range in accept.split(',') {
        let mut parts = range.split(';');
        let media = parts.next().unwrap_or("").trim().to_ascii_lowercase();
        let q = parts
            .filter_map(|p| p.trim().strip_prefix("q=").map(str::to_string))
            .find_map(|q| q.trim().parse::<f32>().ok())
            .unwrap_or(1.0);
        let specificity = if media == offer {
            3
        } else if media == format!("{otype}/*") {
            2
        } else if media == "*/*" {
            1
        } else {
            continue;
        };
        if best.is_none_or(|(s, _)| specificity > s) {
            best = Some((specificity, q));
        }
    }
    best.map(|(_, q)| q).unwrap_or(0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accept_rules() {
        assert!(accept_quality("application/json", "application/json") > 0.0);
        assert!(
            accept_quality(
                "text/html,application/xml;q=0.9,*/*;q=0.8",
                "application/json"
            ) > 0.0
        );
        assert_eq!(
            accept_quality("text/html,application/xml;q=0.9", "application/json"),
            0.0
        );
        assert_eq!(accept_quality("text/plain", "application/json"), 0.0);
        assert_eq!(
            accept_quality("application/json;q=0", "application/json"),
            0.0
        );
    }
}
