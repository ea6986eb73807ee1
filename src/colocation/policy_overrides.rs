//! The colocation policy: the cluster's and a provider's override, each
//! stored as the fields set and merged over Koordinator's defaults.

use crate::db::colocation as db;
use crate::error::{Error, Result};
use crate::sched::colocation::knobs::Policy;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use sqlx::PgConnection;
use utoipa::ToSchema;

/// A policy scope's answer.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PolicyView {
    /// The fields set at this scope.
    #[schema(value_type = Object)]
    pub overrides: Value,
    /// Every knob in force here (defaults, then the cluster, then the
    /// provider).
    #[schema(value_type = Object)]
    pub policy: Value,
}

/// The policy in force at a scope (None: the cluster) with one scope's
/// fields replaced by `candidate` when given (to validate a PUT).
async fn merged(
    conn: &mut sqlx::PgConnection,
    provider: Option<i64>,
    candidate: Option<&Value>,
) -> Result<Policy> {
    let (cluster, own) = match (provider, candidate) {
        (None, Some(c)) => (Some(c.clone()), None),
        (None, None) => (db::policy(conn, None).await?, None),
        (Some(_), Some(c)) => (db::policy(conn, None).await?, Some(c.clone())),
        (Some(rp), None) => db::policy_layers(conn, rp).await?,
    };
    Policy::layered(&[cluster.as_ref(), own.as_ref()])
        .map_err(|e| Error::invalid(format!("Invalid colocation policy: {e}")))
}

/// The policy in force at a provider (or the cluster).
pub async fn resolve(conn: &mut PgConnection, provider: Option<i64>) -> Result<Policy> {
    merged(conn, provider, None).await
}

/// A scope's view.
pub async fn show(conn: &mut PgConnection, provider: Option<i64>) -> Result<PolicyView> {
    let overrides = db::policy(conn, provider)
        .await?
        .unwrap_or_else(|| Value::Object(Map::new()));
    let policy = serde_json::to_value(resolve(conn, provider).await?).map_err(Error::internal)?;
    Ok(PolicyView { overrides, policy })
}

/// Replaces a scope's fields after checking the merged result against
/// Koordinator's ranges (400, nothing stored, on failure).
pub async fn put(
    conn: &mut PgConnection,
    provider: Option<i64>,
    fields: Value,
) -> Result<PolicyView> {
    merged(conn, provider, Some(&fields)).await?;
    db::put_policy(conn, provider, &fields).await?;
    show(conn, provider).await
}

/// Removes a scope's fields (404 when there were none).
pub async fn delete(conn: &mut PgConnection, provider: Option<i64>) -> Result<()> {
    if db::delete_policy(conn, provider).await? {
        Ok(())
    } else {
        Err(Error::not_found("No colocation policy is set here."))
    }
}
