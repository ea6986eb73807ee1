//! Decline ("refuse") filters: a project tells the service not to offer it
//! a provider for requests no larger than what it refused, for
//! `refuse_seconds` (Mesos' defaults and clamps, `sched::decline`); revive
//! clears them. Admission rounds honour them.

use super::{class_ids, project_row, Amounts};
use crate::db::fairness as db;
use crate::db::providers;
use crate::db::Pool;
use crate::error::{Error, Result};
use crate::sched::decline::filter_seconds;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use uuid::Uuid;

/// Admission rounds are synchronous, so a filter need only outlive the
/// round that saw it: Mesos' one-interval floor becomes zero.
const ALLOCATION_INTERVAL: f64 = 0.0;

/// `POST /declines`, after its schema check.
#[derive(Debug, Deserialize, ToSchema)]
pub struct DeclinePost {
    /// The project declining.
    pub project_id: String,
    /// Only this user's requests (absent: the whole project's).
    #[serde(default)]
    pub user_id: Option<String>,
    /// The provider declined.
    pub resource_provider_uuid: Uuid,
    /// What was refused: requests no larger are hidden.
    pub resources: Amounts,
    /// How long (default 5; 0: no filter; negative: 5; at most 365 days).
    #[serde(default)]
    pub refuse_seconds: Option<f64>,
}

/// What a decline installed.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DeclineView {
    /// False when `refuse_seconds` was 0 (no filter).
    pub filtered: bool,
    /// The effective duration.
    pub refuse_seconds: f64,
    /// When it expires (absent without a filter).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<String>,
}

/// Installs a decline filter.
pub async fn decline(pool: &Pool, body: DeclinePost) -> Result<DeclineView> {
    let mut tx = pool.begin().await?;
    let rp = providers::get(&mut tx, body.resource_provider_uuid)
        .await?
        .ok_or_else(|| {
            Error::invalid(format!(
                "No resource provider with uuid {} found",
                body.resource_provider_uuid
            ))
        })?;
    let names: Vec<String> = body.resources.keys().cloned().collect();
    class_ids(&mut tx, &names).await?;
    let Some(seconds) = filter_seconds(body.refuse_seconds, ALLOCATION_INTERVAL) else {
        return Ok(DeclineView {
            filtered: false,
            refuse_seconds: 0.0,
            expires_at: None,
        });
    };
    let project = project_row(&mut tx, &body.project_id).await?;
    let resources = serde_json::to_value(&body.resources).unwrap_or_default();
    let expires = db::insert_decline(
        &mut tx,
        project,
        body.user_id.as_deref(),
        rp.id,
        &resources,
        seconds,
    )
    .await?;
    tx.commit().await.map_err(Error::commit_failed)?;
    Ok(DeclineView {
        filtered: true,
        refuse_seconds: seconds,
        expires_at: Some(expires.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)),
    })
}

/// Clears a project's filters (one user's when named); how many went.
pub async fn revive(pool: &Pool, project: &str, user: Option<&str>) -> Result<u64> {
    let mut tx = pool.begin().await?;
    let Some(id) = db::project_id(&mut tx, project).await? else {
        return Ok(0);
    };
    let revived = db::revive(&mut tx, id, user).await?;
    tx.commit().await.map_err(Error::commit_failed)?;
    Ok(revived)
}
