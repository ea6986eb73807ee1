//! What can go wrong in the services, said in their own terms and without
//! HTTP: a request the service cannot take, something that does not exist,
//! a conflict with the stored state, a lost race to run again, a database
//! or identity service out of reach, a deployment refused node by node, or
//! a bug. Each carries Placement's stable error code. `api::respond::error` maps
//! them to statuses and bodies, once.

use serde::Serialize;
use uuid::Uuid;

/// One node's part in a deployment's answer or refusal: its capacity for
/// the request, or why it has none, with the numbers.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct NodeReport {
    /// The node (its root provider).
    pub node: Uuid,
    /// Instances it could take (absent for nodes the candidate search
    /// ruled out before planning).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capacity: Option<i64>,
    /// Why it takes none: a stable reason word (`no_topology`,
    /// `insufficient_memory`, `capacity`, ...).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The numbers behind the reason.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<serde_json::Value>,
}

/// A deployment no node could take: every node's report.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Refusal {
    /// Per node, planned nodes first, then those the search ruled out.
    pub nodes: Vec<NodeReport>,
}

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
    /// 409: the app belongs to another project.
    pub const DEPLOY_APP_OWNED: &str = "placement.deploy.app_owned";
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
    /// An extension's request body does not validate; the detail names
    /// the offending field and where it is (Placement's own routes keep
    /// Placement's texts and `placement.undefined_code`).
    pub const BODY_INVALID: &str = "placement.body.invalid";
    /// 409: a queued request's consumer is already queued (pending or admitted).
    pub const QUEUE_CONSUMER_QUEUED: &str = "placement.queue.consumer_queued";
    /// 409: a project's pending requests would pass the per-project limit.
    pub const QUEUE_PROJECT_FULL: &str = "placement.queue.project_full";
    /// 409: a queued request's consumer already exists (holds allocations).
    pub const QUEUE_CONSUMER_EXISTS: &str = "placement.queue.consumer_exists";
    /// 409: only a pending request can be cancelled.
    pub const QUEUE_NOT_PENDING: &str = "placement.queue.not_pending";
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

/// What kind of failure an [`Error`] is.
#[derive(Debug, Clone)]
pub enum Kind {
    /// The request cannot be taken as it is (a bad value, an unknown name).
    Invalid,
    /// What it names does not exist.
    NotFound,
    /// It conflicts with what is stored (a generation, a capacity, a quota).
    Conflict,
    /// A database race (deadlock, serialisation failure) lost: running the
    /// whole operation again may succeed.
    LostRace,
    /// A deployment no node can take, with every node's reasons.
    Refused(Box<Refusal>),
    /// The caller has no valid credentials; `challenge` names where to get
    /// them (Keystone's URI), if anywhere.
    Unauthenticated {
        /// Keystone's root, for `WWW-Authenticate`.
        challenge: Option<String>,
    },
    /// The database cannot be reached.
    DatabaseUnavailable,
    /// The connection died during COMMIT: the outcome is unknown.
    OutcomeUnknown,
    /// The identity service cannot validate tokens.
    IdentityUnavailable,
    /// A bug: the cause is logged, the caller told nothing more.
    Internal,
}

/// A failure of a service, with its message and stable code.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub struct Error {
    /// What kind of failure.
    pub kind: Kind,
    /// The specific message for the caller.
    pub message: String,
    /// The stable error code.
    pub code: &'static str,
    /// Lost to a concurrent writer (as well as whatever the kind says):
    /// the whole operation may be run again.
    race: bool,
}

/// Result alias of the services.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    fn of(kind: Kind, message: impl Into<String>) -> Self {
        Error {
            kind,
            message: message.into(),
            code: codes::UNDEFINED,
            race: false,
        }
    }

    /// The request cannot be taken as it is.
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::of(Kind::Invalid, message)
    }

    /// What the request names does not exist.
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::of(Kind::NotFound, message)
    }

    /// The request conflicts with what is stored.
    pub fn conflict(message: impl Into<String>) -> Self {
        Self::of(Kind::Conflict, message)
    }

    /// A deployment refused, with its reasons.
    pub fn refused(message: impl Into<String>, refusal: Refusal) -> Self {
        Self::of(Kind::Refused(Box::new(refusal)), message)
    }

    /// No valid credentials (Keystone's URI to get some, when known).
    pub fn unauthenticated(challenge: Option<String>) -> Self {
        let message = match challenge {
            Some(_) => "The request you have made requires authentication.",
            None => "",
        };
        Self::of(Kind::Unauthenticated { challenge }, message)
    }

    /// The identity service cannot validate tokens: never fail open.
    pub fn identity_unavailable(cause: impl std::fmt::Display) -> Self {
        tracing::warn!(error = %cause, "identity service unavailable");
        Self::of(
            Kind::IdentityUnavailable,
            "The identity service cannot validate the token; retry later.",
        )
        .code(codes::IDENTITY_UNAVAILABLE)
    }

    /// A bug: the cause is logged, never shown.
    pub fn internal(cause: impl std::fmt::Display) -> Self {
        tracing::error!(error = %cause, "internal error");
        Self::of(Kind::Internal, "")
    }

    /// The database cannot be reached: callers retry after a second.
    pub fn database_unavailable(cause: impl std::fmt::Display) -> Self {
        tracing::warn!(error = %cause, "database unavailable");
        // The primary may have moved: the pool looks for it now.
        DATABASE_FAILED.notify_waiters();
        Self::of(
            Kind::DatabaseUnavailable,
            "The database is unavailable; retry later.",
        )
        .code(codes::DATABASE_UNAVAILABLE)
    }

    /// The request's database work outlived its deadline
    /// (`db::deadline`): the database hangs, or does not answer.
    pub fn deadline_passed(deadline: std::time::Duration, write_sent: bool) -> Self {
        let cause = format!(
            "the database did not answer within the request's deadline ({} s)",
            deadline.as_secs()
        );
        if write_sent {
            tracing::warn!(error = %cause, "a write's outcome is unknown");
            Self::outcome_unknown()
        } else {
            Self::database_unavailable(cause)
        }
    }

    /// The error for a failed COMMIT: a lost connection there means the
    /// write may or may not be stored, which the caller must be told.
    pub fn commit_failed(e: sqlx::Error) -> Self {
        match classify(&e) {
            DbFailure::Unavailable => {
                tracing::warn!(error = %e, "connection lost during commit");
                Self::outcome_unknown()
            }
            _ => Self::from(e),
        }
    }

    /// A write whose connection was lost once it was sent (at its COMMIT,
    /// or while a statement that commits on its own ran): it may or may
    /// not be stored.
    pub fn outcome_unknown() -> Self {
        Self::of(
            Kind::OutcomeUnknown,
            "The database connection was lost while committing: the outcome of this write is unknown. Read the resource before retrying.",
        )
        .code(codes::OUTCOME_UNKNOWN)
    }

    /// A provider generation the client had wrong (or that moved under
    /// it), worded as Placement words it on the inventories routes.
    pub fn inventory_generation_conflict() -> Self {
        Self::conflict("resource provider generation conflict").code(codes::CONCURRENT_UPDATE)
    }

    /// Sets the stable error code.
    pub fn code(mut self, code: &'static str) -> Self {
        self.code = code;
        self
    }

    /// The same failure, known to come from a concurrent writer (a node
    /// taken between planning and locking): answered as it is if it
    /// persists, but the operation may be run again first.
    pub fn lost_race(self) -> Self {
        Error { race: true, ..self }
    }

    /// Whether running the whole operation again may succeed.
    pub fn is_lost_race(&self) -> bool {
        self.race || matches!(self.kind, Kind::LostRace)
    }
}

/// Woken whenever a request finds the database unreachable or read-only:
/// the pool's follower (`db::primary`) looks for the primary at once.
pub static DATABASE_FAILED: tokio::sync::Notify = tokio::sync::Notify::const_new();

/// What a database error means for the caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DbFailure {
    /// The database cannot be reached or dropped the connection: 503.
    Unavailable,
    /// A deadlock or serialisation failure: run the write again, or 409.
    LostRace,
    /// Anything else: a bug, 500.
    Other,
}

/// Whether a write sent on its own (a statement that commits by itself,
/// or a COMMIT) may have been stored despite `e`: the connection failed
/// under it. An error PostgreSQL answered with rolled the write back.
pub fn lost_in_flight(e: &sqlx::Error) -> bool {
    !matches!(e, sqlx::Error::Database(_)) && classify(e) == DbFailure::Unavailable
}

/// Sorts a database error by what the caller should be told.
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

impl From<sqlx::Error> for Error {
    fn from(e: sqlx::Error) -> Self {
        match classify(&e) {
            DbFailure::Unavailable => Error::database_unavailable(e),
            DbFailure::LostRace => {
                tracing::debug!(error = %e, "lost a database race");
                Error::of(
                    Kind::LostRace,
                    "Inventory and/or allocations changed while attempting to allocate: another writer held the same providers or consumers; retry the request.",
                )
                .code(codes::CONCURRENT_UPDATE)
            }
            DbFailure::Other => Error::internal(e),
        }
    }
}

/// Runs `attempt` again while it fails with a lost database race, at most
/// `retries` more times; the last failure is answered (a 409).
pub async fn with_retries<T, F, Fut>(retries: u32, mut attempt: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T>>,
{
    let mut tries = 0;
    loop {
        match attempt().await {
            Err(e) if e.is_lost_race() && tries < retries => tries += 1,
            done => return done,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::borrow::Cow;

    /// An error as PostgreSQL answers it, with a SQLSTATE.
    #[derive(Debug)]
    struct Answered(&'static str);

    impl std::fmt::Display for Answered {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "SQLSTATE {}", self.0)
        }
    }

    impl std::error::Error for Answered {}

    impl sqlx::error::DatabaseError for Answered {
        fn message(&self) -> &str {
            "answered"
        }
        fn code(&self) -> Option<Cow<'_, str>> {
            Some(Cow::Borrowed(self.0))
        }
        fn as_error(&self) -> &(dyn std::error::Error + Send + Sync + 'static) {
            self
        }
        fn as_error_mut(&mut self) -> &mut (dyn std::error::Error + Send + Sync + 'static) {
            self
        }
        fn into_error(self: Box<Self>) -> Box<dyn std::error::Error + Send + Sync + 'static> {
            self
        }
        fn kind(&self) -> sqlx::error::ErrorKind {
            sqlx::error::ErrorKind::Other
        }
    }

    /// A write sent on its own may be stored only when the connection
    /// failed under it: an error PostgreSQL answered with (even one that
    /// is a 503, as a read-only host's) rolled it back.
    #[test]
    fn only_a_connection_failing_under_a_write_leaves_it_unknown() {
        let io = sqlx::Error::Io(std::io::Error::other("connection reset by peer"));
        assert!(lost_in_flight(&io));
        assert!(lost_in_flight(&sqlx::Error::Protocol(
            "unexpected end".into()
        )));
        let read_only = sqlx::Error::Database(Box::new(Answered("25006")));
        assert_eq!(classify(&read_only), DbFailure::Unavailable);
        assert!(!lost_in_flight(&read_only));
        assert!(!lost_in_flight(&sqlx::Error::Database(Box::new(Answered(
            "23505"
        )))));
        assert!(!lost_in_flight(&sqlx::Error::RowNotFound));
    }
}
