//! Success responses: JSON bodies, `Location`, and the `last-modified` /
//! `cache-control` pair Placement adds from microversion 1.15.

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
