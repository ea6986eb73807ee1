//! The one error type of the API and its rendering in Placement's format:
//! `{"errors": [{"status", "title", "detail", "code", "request_id"}]}`.
//!
//! Handlers return [`ApiError`]; its `IntoResponse` only stores the error in
//! the response extensions. The request pipeline (`api::middleware`) renders
//! the body, because only it knows the request id, the negotiated
//! microversion (`code` appears from 1.23) and the `Accept` header (HTML or
//! plain text bodies for clients that ask for them, as webob does).

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

/// Stable error codes, as Placement defines them. Never change a value.
pub mod codes {
    /// Any error without a more specific code.
    pub const UNDEFINED: &str = "placement.undefined_code";
    /// A provider or consumer generation did not match, or a race was lost.
    pub const CONCURRENT_UPDATE: &str = "placement.concurrent_update";
    /// An inventory that still has allocations against it would be removed.
    pub const INVENTORY_INUSE: &str = "placement.inventory.inuse";
    /// A provider name (or uuid) is already taken.
    pub const DUPLICATE_NAME: &str = "placement.duplicate_name";
    /// A provider with allocations cannot be deleted.
    pub const PROVIDER_INUSE: &str = "placement.resource_provider.inuse";
    /// A provider with children cannot be deleted.
    pub const CANNOT_DELETE_PARENT: &str = "placement.resource_provider.cannot_delete_parent";
    /// The reshaper names a provider that does not exist.
    pub const PROVIDER_NOT_FOUND: &str = "placement.resource_provider.not_found";
    /// A query parameter that may appear once appeared more often.
    pub const QUERY_DUPLICATE_KEY: &str = "placement.query.duplicate_key";
    /// A query parameter has a value that cannot be used.
    pub const QUERY_BAD_VALUE: &str = "placement.query.bad_value";
    /// A query lacks a value it needs.
    pub const QUERY_MISSING_VALUE: &str = "placement.query.missing_value";
    /// The database cannot be reached (503; retry after `Retry-After`).
    pub const DATABASE_UNAVAILABLE: &str = "placement.database.unavailable";
    /// The connection died during COMMIT: the write may or may not be stored.
    pub const OUTCOME_UNKNOWN: &str = "placement.database.outcome_unknown";
}

/// An error answered to the client; 500s keep their cause for the log only.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{status}: {detail}")]
pub struct ApiError {
    /// HTTP status.
    pub status: StatusCode,
    /// The full `detail` text: the status's generic explanation, a blank
    /// line, then the specific message (webob's flattened template).
    pub detail: String,
    /// The stable error code (shown from microversion 1.23).
    pub code: &'static str,
    /// `Allow` header value for 405s.
    pub allow: Option<String>,
    /// Whether the body carries `min_version`/`max_version` (406 from version parsing).
    pub version_bounds: bool,
    /// Seconds for a `Retry-After` header (503s).
    pub retry_after: Option<u32>,
    /// A lost database race (deadlock, serialisation failure) that the
    /// handler may run again from the start.
    pub retryable: bool,
}

/// Result alias for handlers and the data layer.
pub type ApiResult<T> = Result<T, ApiError>;

fn explanation(status: StatusCode) -> &'static str {
    match status.as_u16() {
        400 => "The server could not comply with the request since it is either malformed or otherwise incorrect.",
        401 => "This server could not verify that you are authorized to access the document you requested. Either you supplied the wrong credentials (e.g., bad password), or your browser does not understand how to supply the credentials required.",
        403 => "Access was denied to this resource.",
        404 => "The resource could not be found.",
        409 => "There was a conflict when trying to complete your request.",
        413 => "The request body is larger than this server accepts.",
        408 => "The server timed out waiting for the request.",
        503 => "The server is currently unavailable. Please try again at a later time.",
        _ => "The server has either erred or is incapable of performing the requested operation.",
    }
}

impl ApiError {
    /// An error with the generic explanation for `status` and a specific message.
    pub fn new(status: StatusCode, message: impl AsRef<str>) -> Self {
        Self::with_prefix(status, explanation(status), message)
    }

    fn with_prefix(status: StatusCode, prefix: &str, message: impl AsRef<str>) -> Self {
        let message = message.as_ref();
        let detail = if message.is_empty() {
            prefix.to_string()
        } else {
            format!("{prefix}\n\n {message}  ")
        };
        ApiError {
            status,
            detail,
            code: codes::UNDEFINED,
            allow: None,
            version_bounds: false,
            retry_after: None,
            retryable: false,
        }
    }

    /// 400 Bad Request.
    pub fn bad_request(message: impl AsRef<str>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, message)
    }

    /// 404 Not Found.
    pub fn not_found(message: impl AsRef<str>) -> Self {
        Self::new(StatusCode::NOT_FOUND, message)
    }

    /// 409 Conflict (with `placement.undefined_code` unless [`Self::code`] changes it).
    pub fn conflict(message: impl AsRef<str>) -> Self {
        Self::new(StatusCode::CONFLICT, message)
    }

    /// 403 for a policy rule the caller's roles do not satisfy.
    pub fn forbidden(rule: &str) -> Self {
        Self::new(
            StatusCode::FORBIDDEN,
            format!("Policy does not allow {rule} to be performed."),
        )
    }

    /// 401 for a request without credentials.
    pub fn unauthorized() -> Self {
        Self::new(StatusCode::UNAUTHORIZED, "")
    }

    /// 405 with the route's allowed methods.
    pub fn method_not_allowed(method: &str, allow: Option<String>) -> Self {
        let mut e = Self::with_prefix(
            StatusCode::METHOD_NOT_ALLOWED,
            &format!("The method {method} is not allowed for this resource."),
            "",
        );
        e.allow = allow;
        e
    }

    /// 406 for an `Accept` header that excludes JSON.
    pub fn not_acceptable(accept: &str, message: impl AsRef<str>) -> Self {
        Self::with_prefix(
            StatusCode::NOT_ACCEPTABLE,
            &format!(
                "The resource could not be generated that was acceptable to your browser (content of type {accept}."
            ),
            message,
        )
    }

    /// 415 for a body that is not `application/json`.
    pub fn unsupported_media(content_type: Option<&str>) -> Self {
        let shown = content_type.unwrap_or("None");
        Self::with_prefix(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            &format!("The request media type {shown} is not supported by this server."),
            format!("The media type {shown} is not supported, use application/json"),
        )
    }

    /// 500: the cause is logged, the client sees only the generic text.
    pub fn internal(cause: impl std::fmt::Display) -> Self {
        tracing::error!(error = %cause, "internal error");
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, "")
    }

    /// 503 while the database cannot be reached: clients retry after a second.
    pub fn unavailable(cause: impl std::fmt::Display) -> Self {
        tracing::warn!(error = %cause, "database unavailable");
        let mut e = Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "The database is unavailable; retry later.",
        )
        .code(codes::DATABASE_UNAVAILABLE);
        e.retry_after = Some(1);
        e
    }

    /// The error for a failed COMMIT: a lost connection there means the
    /// write may or may not be stored, which the client must be told.
    pub fn commit_failed(e: sqlx::Error) -> Self {
        match classify(&e) {
            DbFailure::Unavailable => {
                let mut e = Self::unavailable(e);
                e.detail = Self::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "The database connection was lost while committing: the outcome of this write is unknown. Read the resource before retrying.",
                )
                .detail;
                e.code(codes::OUTCOME_UNKNOWN)
            }
            _ => Self::from(e),
        }
    }

    /// Sets the stable error code.
    pub fn code(mut self, code: &'static str) -> Self {
        self.code = code;
        self
    }

    /// The standard reason phrase for the status.
    pub fn title(&self) -> &'static str {
        self.status.canonical_reason().unwrap_or("Error")
    }

    /// Renders the final response body per `Accept`.
    pub fn render(&self, request_id: &str, with_code: bool, accept: Option<&str>) -> Response {
        let (ctype, body) = match preferred_error_format(accept) {
            ErrorFormat::Json => {
                let mut obj = serde_json::Map::new();
                obj.insert("status".into(), self.status.as_u16().into());
                obj.insert("title".into(), self.title().into());
                obj.insert("detail".into(), self.detail.clone().into());
                if with_code {
                    obj.insert("code".into(), self.code.into());
                }
                obj.insert("request_id".into(), request_id.into());
                if self.version_bounds {
                    obj.insert(
                        "max_version".into(),
                        crate::api::microversion::MAX.to_string().into(),
                    );
                    obj.insert(
                        "min_version".into(),
                        crate::api::microversion::MIN.to_string().into(),
                    );
                }
                let body = serde_json::json!({ "errors": [obj] });
                ("application/json", body.to_string())
            }
            ErrorFormat::Html => {
                let head = format!("{} {}", self.status.as_u16(), self.title());
                let text = html_escape(&self.detail).replace("\n\n", "<br /><br />\n");
                (
                    "text/html; charset=UTF-8",
                    format!("<html>\n <head>\n  <title>{head}</title>\n </head>\n <body>\n  <h1>{head}</h1>\n  {text}\n </body>\n</html>"),
                )
            }
            ErrorFormat::Plain => (
                "text/plain; charset=UTF-8",
                format!(
                    "{} {}\n\n{}\n",
                    self.status.as_u16(),
                    self.title(),
                    self.detail
                ),
            ),
        };
        let mut resp = (self.status, body).into_response();
        resp.headers_mut()
            .insert(header::CONTENT_TYPE, HeaderValue::from_static(ctype));
        if let Some(secs) = self.retry_after {
            resp.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        if let Some(allow) = &self.allow {
            if let Ok(v) = HeaderValue::from_str(allow) {
                resp.headers_mut().insert(header::ALLOW, v);
            }
        }
        resp
    }
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
    let q_html = crate::api::middleware::accept_quality(accept, "text/html");
    let q_json = crate::api::middleware::accept_quality(accept, "application/json");
    match (q_html, q_json) {
        (h, j) if h > 0.0 && h >= j => ErrorFormat::Html,
        (_, j) if j > 0.0 => ErrorFormat::Json,
        _ => ErrorFormat::Plain,
    }
}

/// Marker carried in response extensions until the pipeline renders it.
#[derive(Clone)]
pub struct PendingError(pub ApiError);

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut resp = self.status.into_response();
        resp.extensions_mut().insert(PendingError(self));
        resp
    }
}

/// What a database error means for the client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DbFailure {
    /// The database cannot be reached or dropped the connection: 503.
    Unavailable,
    /// A deadlock or serialisation failure: run the write again, or 409.
    LostRace,
    /// Anything else: a bug, 500.
    Other,
}

/// Sorts a database error by what the client should be told.
pub fn classify(e: &sqlx::Error) -> DbFailure {
    use sqlx::Error as E;
    match e {
        E::Io(_)
        | E::Tls(_)
        | E::Protocol(_)
        | E::PoolTimedOut
        | E::PoolClosed
        | E::WorkerCrashed => DbFailure::Unavailable,
        E::Database(d) => match d.code().as_deref() {
            Some("40P01" | "40001") => DbFailure::LostRace,
            // connection_exception, admin/crash shutdown, cannot connect
            // now, too many connections, read-only standby after failover.
            Some(c)
                if c.starts_with("08")
                    || matches!(c, "57P01" | "57P02" | "57P03" | "53300" | "25006") =>
            {
                DbFailure::Unavailable
            }
            _ => DbFailure::Other,
        },
        _ => DbFailure::Other,
    }
}

impl From<sqlx::Error> for ApiError {
    fn from(e: sqlx::Error) -> Self {
        match classify(&e) {
            DbFailure::Unavailable => ApiError::unavailable(e),
            DbFailure::LostRace => {
                tracing::debug!(error = %e, "lost a database race");
                let mut err = ApiError::conflict(
                    "Inventory and/or allocations changed while attempting to allocate: another writer held the same providers or consumers; retry the request.",
                )
                .code(codes::CONCURRENT_UPDATE);
                err.retryable = true;
                err
            }
            DbFailure::Other => ApiError::internal(e),
        }
    }
}

/// Runs `attempt` again while it fails with a lost database race, at most
/// `retries` more times; the last failure is answered (a 409).
pub async fn with_retries<T, F, Fut>(retries: u32, mut attempt: F) -> ApiResult<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = ApiResult<T>>,
{
    let mut tries = 0;
    loop {
        match attempt().await {
            Err(e) if e.retryable && tries < retries => tries += 1,
            done => return done,
        }
    }
}
