//! The one error type of the API and its rendering in Placement's format:
//! `{"errors": [{"status", "title", "detail", "code", "request_id"}]}`.
//!
//! Handlers return [`ApiError`]; its `IntoResponse` only stores the error in
//! the response extensions. The request pipeline renders the body
//! (`api::error_body`), because only it knows the request id, the negotiated
//! microversion (`code` appears from 1.23) and the `Accept` header.

use axum::http::StatusCode;
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
    /// A deployment cannot be placed: not enough nodes or capacity.
    pub const DEPLOY_INSUFFICIENT_CAPACITY: &str = "placement.deploy.insufficient_capacity";
    /// A deployment's resources do not fit (a node's CPU, memory or volumes).
    pub const DEPLOY_INSUFFICIENT_RESOURCE: &str = "placement.deploy.insufficient_resource";
    /// A CPU-bound deployment found no candidate node with a CPU topology.
    pub const DEPLOY_NO_TOPOLOGY: &str = "placement.deploy.no_topology";
    /// FILL found every chosen node already at its target.
    pub const DEPLOY_ALREADY_FILLED: &str = "placement.deploy.already_filled";
    /// A deployment request the scheduler cannot take (strategy, count,
    /// CPU, memory or volume values).
    pub const DEPLOY_INVALID_REQUEST: &str = "placement.deploy.invalid_request";
    /// 409: a write would take a project over a quota limit.
    pub const QUOTA_EXCEEDED: &str = "placement.quota.exceeded";
    /// 409: the capacity a write needs is reserved for other projects.
    pub const RESERVATION_UNAVAILABLE: &str = "placement.reservation.unavailable";
    /// 409: a new limit is below what the project consumes (use `force`).
    pub const QUOTA_BELOW_CONSUMPTION: &str = "placement.quota.below_consumption";
    /// A provider has not reported usage yet.
    pub const COLOCATION_NO_REPORT: &str = "placement.colocation.no_report";
    /// A consumer's priority class may not use a resource class (§C.3:
    /// `BATCH_*` only for batch and free work, which uses nothing else but
    /// DISK_GB).
    pub const COLOCATION_CLASS_NOT_ALLOWED: &str = "placement.colocation.class_not_allowed";
    /// Keystone cannot be reached, or refuses the service's own
    /// credentials (503; retry after `Retry-After`).
    pub const IDENTITY_UNAVAILABLE: &str = "placement.identity.unavailable";
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
    /// `WWW-Authenticate` header value for 401s under Keystone.
    pub www_authenticate: Option<String>,
    /// Whether the body carries `min_version`/`max_version` (406 from version parsing).
    pub version_bounds: bool,
    /// Seconds for a `Retry-After` header (503s).
    pub retry_after: Option<u32>,
    /// A lost database race (deadlock, serialisation failure) that the
    /// handler may run again from the start.
    pub retryable: bool,
    /// A deployment refusal's per-node reasons, shown as the error's
    /// `nodes` (our extension endpoints only).
    pub nodes: Option<Box<serde_json::Value>>,
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
            retryable: false,
            nodes: None,
        }
    }

    /// The same error with per-node reasons.
    pub fn with_nodes(mut self, nodes: serde_json::Value) -> Self {
        self.nodes = Some(Box::new(nodes));
        self
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

    /// 401 for a request without credentials.
    pub fn unauthorized() -> Self {
        Self::new(StatusCode::UNAUTHORIZED, "")
    }

    /// 401 under Keystone: the token is missing, malformed, expired or
    /// revoked; the header tells the client where to get one
    /// (keystonemiddleware's answer).
    pub fn unauthorized_keystone(identity_uri: &str) -> Self {
        let mut e = Self::new(
            StatusCode::UNAUTHORIZED,
            "The request you have made requires authentication.",
        );
        e.www_authenticate = Some(format!("Keystone uri=\"{identity_uri}\""));
        e
    }

    /// 503 while Keystone cannot validate tokens: never fail open.
    pub fn identity_unavailable(cause: impl std::fmt::Display) -> Self {
        tracing::warn!(error = %cause, "identity service unavailable");
        let mut e = Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "The identity service cannot validate the token; retry later.",
        )
        .code(codes::IDENTITY_UNAVAILABLE);
        e.retry_after = Some(1);
        e
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
            // now, database dropped, insufficient resources (too many
            // connections, disk full, out of memory), read-only standby
            // after failover, the database gone or refusing this role.
            Some(c)
                if c.starts_with("08")
                    || c.starts_with("53")
                    || c.starts_with("57P")
                    || matches!(c, "25006" | "3D000" | "28000" | "28P01") =>
            {
                DbFailure::Unavailable
            }
            // `database "X" is not currently accepting connections`.
            Some("55000") if d.message().contains("accepting connections") => {
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
