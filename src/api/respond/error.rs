//! The HTTP side of errors: a service's [`Error`] mapped to a status and
//! Placement's body `{"errors": [{"status", "title", "detail", "code",
//! "request_id"}]}`, once, here; and the errors only HTTP has (405, 406,
//! 413, 415, 408, 403).
//!
//! Handlers return [`ApiError`]; its `IntoResponse` only stores the error in
//! the response extensions. The request pipeline renders the body
//! (`api::respond`), because only it knows the request id, the negotiated
//! microversion (`code` appears from 1.23) and the `Accept` header.

pub use crate::error::codes;
use crate::error::{Error, Kind, NodeReport};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

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
    /// `WWW-Authenticate` header value for 401s under Keystone.
    pub www_authenticate: Option<String>,
    /// Whether the body carries `min_version`/`max_version` (406 from version parsing).
    pub version_bounds: bool,
    /// Seconds for a `Retry-After` header (503s).
    pub retry_after: Option<u32>,
    /// A deployment refusal's per-node reasons, shown as the error's
    /// `nodes` (our extension endpoints only).
    pub nodes: Option<Box<Vec<NodeReport>>>,
}

/// Placement's two wordings of a provider generation conflict.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GenerationConflict {
    /// The inventories routes.
    Inventory,
    /// The traits and aggregates routes.
    Changed,
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
        // webob's strip_tags turns every newline of the message into a
        // space (jsonschema's multi-line texts arrive on one line).
        let message = message.as_ref().replace('\n', " ").replace('\r', "");
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
            www_authenticate: None,
            version_bounds: false,
            retry_after: None,
            nodes: None,
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

    /// 409 concurrent_update for a provider generation the client had
    /// wrong (or that moved under it). Placement words it per route:
    /// [`GenerationConflict::Inventory`] for inventories,
    /// [`GenerationConflict::Changed`] for traits and aggregates.
    pub fn generation_conflict(wording: GenerationConflict) -> Self {
        let text = match wording {
            GenerationConflict::Inventory => "resource provider generation conflict",
            GenerationConflict::Changed => "Resource provider's generation already changed. Please update the generation and try again.",
        };
        Self::conflict(text).code(codes::CONCURRENT_UPDATE)
    }

    /// 403 for a policy rule the caller's roles do not satisfy.
    pub fn forbidden(rule: &str) -> Self {
        Self::new(
            StatusCode::FORBIDDEN,
            format!("Policy does not allow {rule} to be performed."),
        )
    }

    /// 405 with the route's allowed methods (Placement's router adds its
    /// second sentence), or without them for a method the route has only
    /// from a later microversion (Placement's bare 405). webob's 405
    /// template has its own spacing and no trailing blanks.
    pub fn method_not_allowed(method: &str, allow: Option<String>) -> Self {
        let second = match allow {
            Some(_) => "The method specified is not allowed for this resource.",
            None => "",
        };
        let mut e = Self::new(StatusCode::METHOD_NOT_ALLOWED, "");
        e.detail = format!("The method {method} is not allowed for this resource. \n\n {second}");
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

    /// A failed COMMIT (the outcome may be unknown): see [`Error::commit_failed`].
    pub fn commit_failed(e: sqlx::Error) -> Self {
        Error::commit_failed(e).into()
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

impl From<Error> for ApiError {
    /// The one mapping of a service's failure to HTTP.
    fn from(e: Error) -> Self {
        let status = match &e.kind {
            Kind::Invalid => StatusCode::BAD_REQUEST,
            Kind::NotFound => StatusCode::NOT_FOUND,
            Kind::Conflict | Kind::LostRace | Kind::Refused(_) => StatusCode::CONFLICT,
            Kind::Unauthenticated { .. } => StatusCode::UNAUTHORIZED,
            Kind::DatabaseUnavailable | Kind::OutcomeUnknown | Kind::IdentityUnavailable => {
                StatusCode::SERVICE_UNAVAILABLE
            }
            Kind::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        };
        let mut api = ApiError::new(status, &e.message).code(e.code);
        match e.kind {
            Kind::Refused(refusal) => api.nodes = Some(Box::new(refusal.nodes)),
            Kind::Unauthenticated {
                challenge: Some(uri),
            } => api.www_authenticate = Some(format!("Keystone uri=\"{uri}\"")),
            Kind::DatabaseUnavailable | Kind::OutcomeUnknown | Kind::IdentityUnavailable => {
                api.retry_after = Some(1)
            }
            _ => {}
        }
        api
    }
}

impl From<crate::api::microversion::VersionRefusal> for ApiError {
    fn from(r: crate::api::microversion::VersionRefusal) -> Self {
        use crate::api::microversion::VersionRefusal as R;
        match r {
            R::Invalid(message) => ApiError::bad_request(message),
            R::Unacceptable(raw) => {
                let mut e = ApiError::new(
                    StatusCode::NOT_ACCEPTABLE,
                    format!("Invalid microversion: Unacceptable version header: {raw}"),
                );
                e.detail = format!(
                    "The resource could not be generated that was acceptable to your browser (content of type application/json.\n\n Invalid microversion: Unacceptable version header: {raw}  "
                );
                e.version_bounds = true;
                e
            }
        }
    }
}

impl From<sqlx::Error> for ApiError {
    fn from(e: sqlx::Error) -> Self {
        Error::from(e).into()
    }
}
