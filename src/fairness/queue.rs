//! The fair queue (`POST /queue`, our extension; `fairness_colocation.md`
//! §C.2's stored requests): requests wait in the database until a round
//! admits them (`queue_round`), and their owners read, list, wait for and
//! cancel them here.

use super::admission::AdmittedResources;
use super::submissions::{Stored, Submissions};
use super::Amounts;
use crate::db::fairness::queue::{self as db, CheckedQueued, NewQueued, QueuedRow};
use crate::db::Pool;
use crate::error::{codes, Error, Result};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use utoipa::ToSchema;
use uuid::Uuid;

pub use super::round_request::PriorityClass;

/// The longest a `GET /queue/{id}?wait=` holds its answer, in seconds.
pub const MAX_WAIT_SECONDS: u64 = 60;

/// One request to queue.
// Stored as its JSON without the empty fields: every round reads every
// pending request's body.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct QueueItem {
    /// The consumer to create when admitted.
    pub consumer_uuid: Uuid,
    /// The project asking.
    pub project_id: String,
    /// The user asking.
    pub user_id: String,
    /// Amounts by class, all from one provider.
    pub resources: Amounts,
    /// Traits the provider must have (`!T`: must not have).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub required: Vec<String>,
    /// Aggregates of which the provider (or its root) must be in one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub member_of: Vec<Uuid>,
    /// Priority class (default prod).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_class: Option<PriorityClass>,
    /// Priority inside the class (higher first to keep; default 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<i32>,
    /// Consumer type of the new consumer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consumer_type: Option<String>,
    /// Seconds after which a request still pending leaves as `expired`.
    #[serde(default, skip_serializing)]
    pub expires_in: Option<u32>,
    /// Queue it again when the service preempts its consumer (after a
    /// backoff): Kueue's requeuing, Slurm's `PreemptMode=REQUEUE`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requeue: Option<bool>,
    /// The all-or-nothing batch it was queued in: set by the service (the
    /// body's schema has no such field), stored with the request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(ignore)]
    pub gang: Option<Uuid>,
}

/// `POST /queue`: one request, or many in one transaction.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum QueuePost {
    /// `{"requests": [...]}`.
    Batch {
        /// The requests, in submission order.
        requests: Vec<QueueItem>,
        /// Admit them all in one round, or none (one project's only).
        #[serde(default)]
        all_or_nothing: bool,
        /// Seconds after which the batch's requests still pending leave as
        /// `expired`, for each request without an `expires_in` of its
        /// own: an all-or-nothing batch's timeout.
        #[serde(default)]
        expires_in: Option<u32>,
    },
    /// One request.
    One(Box<QueueItem>),
}

/// A queued request as its owner sees it.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct QueueView {
    /// Its id.
    pub id: Uuid,
    /// pending, admitted, cancelled, expired, preempted (the service
    /// removed its consumer, following preemption advice) or released
    /// (admitted, and its consumer's allocations were deleted since; set
    /// when the consumer is queued again).
    pub state: String,
    /// The consumer it creates.
    pub consumer_uuid: Uuid,
    /// Owner.
    pub project_id: String,
    /// Owner.
    pub user_id: String,
    /// What it asks for.
    pub resources: Amounts,
    /// Pending requests of its project up to and including it (pending only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub position_in_project: Option<i64>,
    /// Why the last round left it pending: no_capacity, never_fits, quota_limit,
    /// headroom, declined or not_reached (none before its first round);
    /// consumer_exists or invalid when it was cancelled by the service.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// When it was queued.
    pub submitted_at: chrono::DateTime<chrono::Utc>,
    /// Seconds it waited (so far, while pending).
    pub waited_seconds: f64,
    /// When it expires, if it does.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<chrono::DateTime<chrono::Utc>>,
    /// The round that admitted it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub round_id: Option<Uuid>,
    /// Where it was admitted: provider uuid → resources.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allocations: Option<BTreeMap<Uuid, AdmittedResources>>,
    /// The room preemption advice holds for it while it waits (added to
    /// its project's reservation on that provider), if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub held: Option<HeldRoom>,
    /// The all-or-nothing batch it was queued in (`"all_or_nothing":
    /// true`): its pending members are admitted in one round, or none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gang: Option<Uuid>,
    /// A request queued again after its consumer was preempted: not tried
    /// before this time (reason `requeue_backoff` until then).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eligible_at: Option<chrono::DateTime<chrono::Utc>>,
    /// How many times its consumer was preempted and queued again.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub requeues: i32,
    /// The database's clock when this was read (not shown): a long poll
    /// waits for the expiry by it, not by this server's clock.
    #[serde(skip)]
    #[schema(ignore)]
    pub read_at: chrono::DateTime<chrono::Utc>,
}

/// Room held for a waiting request (`GET /preemptions` names the consumers
/// whose removal makes it).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct HeldRoom {
    /// The provider.
    pub resource_provider_uuid: Uuid,
    /// Until when.
    pub until: chrono::DateTime<chrono::Utc>,
}

/// The answer of a batch `POST /queue` and of `GET /queue`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct QueueList {
    /// In submission order.
    pub requests: Vec<QueueView>,
}

fn is_zero(n: &i32) -> bool {
    *n == 0
}

impl QueueView {
    fn of(row: QueuedRow) -> QueueView {
        let item: Option<QueueItem> = serde_json::from_value(row.request).ok();
        let gang = item.as_ref().and_then(|i| i.gang);
        let until = row.decided_at.unwrap_or(row.now);
        // (A request past its time reads as expired: `db::fairness::queue`.)
        QueueView {
            id: row.id,
            state: row.state,
            consumer_uuid: row.consumer_uuid,
            project_id: row.project_id,
            user_id: row.user_id,
            resources: item.map(|i| i.resources).unwrap_or_default(),
            position_in_project: row.position_in_project,
            reason: row.reason,
            submitted_at: row.submitted_at,
            waited_seconds: (until - row.submitted_at).as_seconds_f64().max(0.0),
            expires_at: row.expires_at,
            round_id: row.round_id,
            allocations: row.allocations.and_then(|a| serde_json::from_value(a).ok()),
            held: match (row.held_on, row.held_until) {
                (Some(resource_provider_uuid), Some(until)) => Some(HeldRoom {
                    resource_provider_uuid,
                    until,
                }),
                _ => None,
            },
            gang,
            eligible_at: row.eligible_at,
            requeues: row.requeues,
            read_at: row.now,
        }
    }

    /// Still waiting for a round.
    pub fn is_pending(&self) -> bool {
        self.state == "pending"
    }
}

impl QueuePost {
    /// The requests, in submission order.
    pub fn items(&self) -> Vec<&QueueItem> {
        match self {
            QueuePost::Batch { requests, .. } => requests.iter().collect(),
            QueuePost::One(item) => vec![item],
        }
    }
}

/// The fair queue as one process serves it, with what it needs: the pool,
/// the submissions it stores together, the wake-ups of its long polls and
/// the cap on a project's pending requests (`AppState::queue`).
pub struct Queue<'a> {
    /// The database.
    pub pool: &'a Pool,
    /// Single submissions waiting to be stored by one statement.
    pub submissions: &'a Submissions,
    /// Wakes this process's long polls.
    pub signals: &'a super::long_polls::QueueSignals,
    /// At most this many pending requests per project.
    pub max_pending_per_project: u32,
}

impl Queue<'_> {
    /// Queues `post`'s requests (see [`submit`]).
    pub async fn submit(&self, post: &QueuePost) -> Result<Vec<QueueView>> {
        submit(
            self.pool,
            self.submissions,
            post,
            self.max_pending_per_project,
        )
        .await
    }

    /// A queued request as it stands.
    pub async fn show(&self, id: Uuid) -> Result<QueueView> {
        show(self.pool, id).await
    }
}

/// Queues the requests in one transaction: 400 for a consumer named
/// twice or an unknown class or trait; 409 when a consumer is already
/// queued or already exists. A single request goes with the others
/// arriving at the same time (`submissions`); one that is left out comes
/// back here to learn why.
async fn submit(
    pool: &Pool,
    together: &Submissions,
    post: &QueuePost,
    max_pending_per_project: u32,
) -> Result<Vec<QueueView>> {
    let cap = i64::from(max_pending_per_project);
    if let QueuePost::One(item) = post {
        let checked = CheckedQueued {
            row: new_row(item),
            classes: item.resources.keys().cloned().collect(),
            traits: super::trait_names(&item.required),
        };
        match together.store(pool, checked, cap).await {
            Stored::Row(row) => return Ok(vec![QueueView::of(*row)]),
            Stored::Unknown => return Err(Error::outcome_unknown()),
            Stored::Unavailable(cause) => return Err(Error::database_unavailable(cause)),
            Stored::LeftOut => {}
        }
    }
    submit_alone(pool, post, cap).await
}

/// The gang of an all-or-nothing batch (a new id), after checking that
/// its requests are one project's; None for any other submission.
fn gang_of(post: &QueuePost) -> Result<Option<Uuid>> {
    let QueuePost::Batch {
        requests,
        all_or_nothing: true,
        ..
    } = post
    else {
        return Ok(None);
    };
    let Some(first) = requests.first() else {
        return Ok(None);
    };
    match requests.iter().find(|r| r.project_id != first.project_id) {
        Some(other) => Err(Error::invalid(format!(
            "An all-or-nothing batch is one project's: it names {} and {}.",
            first.project_id, other.project_id
        ))),
        None => Ok(Some(Uuid::new_v4())),
    }
}

/// [`submit`] in a transaction of its own, each check its own statement.
async fn submit_alone(pool: &Pool, post: &QueuePost, cap: i64) -> Result<Vec<QueueView>> {
    let gang = gang_of(post)?;
    let batch_expiry = match post {
        QueuePost::Batch { expires_in, .. } => *expires_in,
        QueuePost::One(_) => None,
    };
    // A gang's members carry its id; a batch's timeout goes to each
    // request without one of its own.
    let completed: Vec<QueueItem> = match (gang, batch_expiry) {
        (None, None) => Vec::new(),
        _ => post
            .items()
            .into_iter()
            .map(|i| QueueItem {
                gang,
                expires_in: i.expires_in.or(batch_expiry),
                ..i.clone()
            })
            .collect(),
    };
    let items = match completed.is_empty() {
        true => post.items(),
        false => completed.iter().collect(),
    };
    let mut consumers = BTreeSet::new();
    if let Some(dup) = items.iter().find(|i| !consumers.insert(i.consumer_uuid)) {
        let c = dup.consumer_uuid;
        return Err(Error::invalid(format!(
            "Consumer {c} appears in two requests."
        )));
    }
    let uuids: Vec<Uuid> = consumers.into_iter().collect();
    let mut tx = pool.begin_keyed().await?;
    check_names(&mut tx, &items).await?;
    // A consumer admitted before whose allocations are gone since (its
    // owner deleted them) may be queued again.
    db::release_ended(&mut tx, &uuids).await?;
    check_not_taken(&mut tx, &uuids).await?;
    check_room(&mut tx, &items, cap).await?;
    // The names were checked above, in this transaction.
    let rows: Vec<CheckedQueued> = items
        .iter()
        .map(|i| CheckedQueued {
            row: new_row(i),
            classes: Vec::new(),
            traits: Vec::new(),
        })
        .collect();
    let stored = db::insert_checked(&mut tx, &rows, cap).await?;
    // The statement returns only rows it stored: one is missing when a
    // consumer was queued or created since the check, and the insert
    // waited for that writer to commit (the check sees it now).
    let ids: BTreeSet<Uuid> = stored.iter().map(|s| s.id).collect();
    if let Some(left_out) = rows.iter().find(|r| !ids.contains(&r.row.id)) {
        check_not_taken(&mut tx, &uuids).await?;
        return Err(queued_already(left_out.row.consumer_uuid));
    }
    tx.commit().await.map_err(Error::commit_failed)?;
    Ok(stored.into_iter().map(QueueView::of).collect())
}

/// 409 `placement.queue.project_full` when a project would have more than
/// `cap` pending requests with these; the projects' queue locks are held
/// until the transaction ends, so the count stays true for the insert.
async fn check_room(conn: &mut sqlx::PgConnection, items: &[&QueueItem], cap: i64) -> Result<()> {
    let projects: Vec<&str> = items.iter().map(|i| i.project_id.as_str()).collect();
    for (project, pending) in db::pending_in_locked(conn, &projects).await? {
        let adding = items.iter().filter(|i| i.project_id == project).count();
        let adding = i64::try_from(adding).unwrap_or(i64::MAX);
        if pending.saturating_add(adding) > cap {
            return Err(Error::conflict(format!(
                "Project {project} has {pending} pending requests in the queue; \
                 {adding} more would pass its limit of {cap} (--queue-max-pending-per-project)."
            ))
            .code(codes::QUEUE_PROJECT_FULL));
        }
    }
    Ok(())
}

/// 409 when one of `uuids` is live in the queue or a consumer already.
async fn check_not_taken(conn: &mut sqlx::PgConnection, uuids: &[Uuid]) -> Result<()> {
    let taken = db::taken_consumers(conn, uuids).await?;
    if let Some((c, _)) = taken.iter().find(|(_, queued)| *queued) {
        return Err(queued_already(*c));
    }
    match taken.first() {
        Some((c, _)) => Err(Error::conflict(format!(
            "Consumer {c} already exists: a queued request creates a new consumer."
        ))
        .code(codes::QUEUE_CONSUMER_EXISTS)),
        None => Ok(()),
    }
}

fn new_row(item: &QueueItem) -> NewQueued {
    NewQueued {
        id: Uuid::new_v4(),
        consumer_uuid: item.consumer_uuid,
        project_id: item.project_id.clone(),
        user_id: item.user_id.clone(),
        request: serde_json::to_string(item).unwrap_or_default(),
        expires_in: item.expires_in.map(f64::from),
    }
}

fn queued_already(consumer: Uuid) -> Error {
    Error::conflict(format!("Consumer {consumer} is already queued."))
        .code(codes::QUEUE_CONSUMER_QUEUED)
}

/// 400 naming the first class or trait that does not exist.
async fn check_names(conn: &mut sqlx::PgConnection, items: &[&QueueItem]) -> Result<()> {
    let classes = super::sorted_distinct(items.iter().flat_map(|i| i.resources.keys().cloned()));
    super::class_ids(conn, &classes).await?;
    let traits = super::trait_names(items.iter().flat_map(|i| &i.required));
    let missing = crate::db::traits::resolve(conn, &traits).await?.missing;
    match missing.is_empty() {
        true => Ok(()),
        false => Err(Error::invalid(format!(
            "No such trait(s): {}.",
            missing.join(", ")
        ))),
    }
}

/// One request, or 404.
async fn show(pool: &Pool, id: Uuid) -> Result<QueueView> {
    let mut conn = pool.acquire().await?;
    match db::get(&mut conn, id).await? {
        Some(row) => Ok(QueueView::of(row)),
        None => Err(Error::not_found(format!("No queued request {id}."))),
    }
}

/// What `GET /queue` filters on.
#[derive(Debug, Clone, Default)]
pub struct ListFilter {
    /// Only this project's.
    pub project_id: Option<String>,
    /// Only in this state.
    pub state: Option<String>,
    /// After this request (the previous page's last).
    pub marker: Option<Uuid>,
    /// At most this many.
    pub limit: i64,
}

/// A page of requests in submission order; 400 for an unknown marker.
pub async fn list(pool: &Pool, filter: &ListFilter) -> Result<Vec<QueueView>> {
    let mut conn = pool.acquire().await?;
    let after = match filter.marker {
        None => None,
        Some(m) => Some(
            db::seq_of(&mut conn, m)
                .await?
                .ok_or_else(|| Error::invalid(format!("No queued request {m} to page after.")))?,
        ),
    };
    let rows = db::list(
        &mut conn,
        filter.project_id.as_deref(),
        filter.state.as_deref(),
        after,
        filter.limit,
    )
    .await?;
    Ok(rows.into_iter().map(QueueView::of).collect())
}

/// Cancels a pending request; 409 once it left `pending`.
pub async fn cancel(pool: &Pool, id: Uuid) -> Result<()> {
    let mut tx = pool.begin().await?;
    crate::db::fairness::lock_admissions_shared(&mut tx).await?;
    if !db::cancel(&mut tx, id).await? {
        let state = db::get(&mut tx, id).await?.map(|r| r.state);
        return Err(match state {
            None => Error::not_found(format!("No queued request {id}.")),
            Some(s) => Error::conflict(format!(
                "Queued request {id} is {s}: only a pending request can be cancelled."
            ))
            .code(codes::QUEUE_NOT_PENDING),
        });
    }
    tx.commit().await.map_err(Error::commit_failed)?;
    Ok(())
}
