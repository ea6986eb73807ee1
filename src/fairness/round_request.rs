//! What an admission round is asked: the pending requests of
//! `POST /admissions`, each for one provider's worth of resources. Shared by
//! the round (`admission`) and the reads it starts with (`load`).

use super::Amounts;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use uuid::Uuid;

pub use crate::colocation::priority::PriorityClass;

/// `POST /admissions`, after its schema check.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
pub struct AdmissionPost {
    /// Decide without writing anything.
    #[serde(default)]
    pub dry_run: bool,
    /// The provider shuffle's seed (random when absent); echoed back.
    #[serde(default)]
    pub seed: Option<u32>,
    /// Pending requests; each project's served by priority class, then
    /// in the order given.
    pub requests: Vec<AdmissionItem>,
}

/// One pending request.
#[derive(Debug, Clone, Deserialize, Serialize, ToSchema)]
pub struct AdmissionItem {
    /// The caller's name for it, unique in the batch.
    pub id: String,
    /// The consumer to create when admitted.
    pub consumer_uuid: Uuid,
    /// The project asking.
    pub project_id: String,
    /// The user asking.
    pub user_id: String,
    /// Amounts by class, all from one provider.
    pub resources: Amounts,
    /// Traits the provider must have (`!T`: must not have).
    #[serde(default)]
    pub required: Vec<String>,
    /// Aggregates of which the provider (or its root) must be in one.
    #[serde(default)]
    pub member_of: Vec<Uuid>,
    /// Priority class (default prod).
    #[serde(default)]
    pub priority_class: Option<PriorityClass>,
    /// Consumer type of the new consumer.
    #[serde(default)]
    pub consumer_type: Option<String>,
    /// Priority inside the class, which orders the project's requests
    /// (`sched::admission::Precedence`). Queued requests give it;
    /// `POST /admissions` does not take it, and serves each project's
    /// requests by class, then in the order given.
    #[serde(skip)]
    pub priority: Option<i32>,
    /// The all-or-nothing batch it was queued in (`sched::admission`'s
    /// gang). Queued requests only, as `priority`.
    #[serde(skip)]
    pub gang: Option<Uuid>,
}
