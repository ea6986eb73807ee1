//! Low-priority placement (§C.3). A `priority_class=batch|free` query may
//! ask only for the batch classes (and DISK_GB); its capacity check is the
//! batch inventory, computed from measured usage. On top of that, a
//! provider whose last report is stale, or whose measured load plus the
//! estimates of what was placed since and of the request is above the
//! policy's `forbidUsageThresholds`, offers no batch capacity to it.
//! Other classes keep Placement's semantics (the load filter for them is
//! off, as §C.6 recommends).

use super::snapshot::Snapshot;
use crate::db::classes::{MEMORY_MB_ID, VCPU_ID};
use crate::db::colocation::{placement as db, BATCH_MEMORY_MB, BATCH_VCPU_MILLI};
use crate::error::{codes, ApiError, ApiResult};
use crate::sched::colocation::placement::{refusal, HostLoad};
use crate::sched::colocation::policy::Policy;
use crate::sched::colocation::CpuMem;
use crate::types::PriorityClass;
use chrono::Utc;
use sqlx::PgConnection;
use std::collections::HashMap;

/// The query's `priority_class` (prod without one; the schema has
/// already checked the value).
pub fn priority_of(pairs: &[(String, String)]) -> ApiResult<PriorityClass> {
    match pairs.iter().find(|(k, _)| k == "priority_class") {
        None => Ok(PriorityClass::Prod),
        Some((_, v)) => PriorityClass::ALL
            .into_iter()
            .find(|c| c.name() == v)
            .ok_or_else(|| ApiError::bad_request(format!("Invalid priority_class: {v}."))),
    }
}

/// 400 unless every requested class is one `priority` may allocate. Only
/// low-priority queries are held to it: a Placement client may still ask
/// what a BATCH_* request would get, as for any class.
pub fn check_classes<'a>(
    priority: PriorityClass,
    classes: impl IntoIterator<Item = &'a String>,
) -> ApiResult<()> {
    if !priority.low() {
        return Ok(());
    }
    match classes.into_iter().find(|c| !priority.may_allocate(c)) {
        None => Ok(()),
        Some(c) => Err(ApiError::bad_request(format!(
            "priority_class {} may request only BATCH_VCPU_MILLI, BATCH_MEMORY_MB and DISK_GB, not {c}.",
            priority.name()
        ))
        .code(codes::COLOCATION_CLASS_NOT_ALLOWED)),
    }
}

/// The snapshot a low-priority `request` (batch CPU milli, batch memory
/// MB, summed over its groups) sees: refused providers lose their batch
/// inventory.
pub async fn restrict(
    conn: &mut PgConnection,
    snap: &Snapshot,
    request: CpuMem,
) -> ApiResult<Snapshot> {
    let refused = refused_hosts(conn, snap, request).await?;
    Ok(snap.without_stock(&refused, &[BATCH_VCPU_MILLI.0, BATCH_MEMORY_MB.0]))
}

/// Providers that may take no new low-priority work now. Their reports
/// are in the snapshot; only the policy scopes are read here.
async fn refused_hosts(
    conn: &mut PgConnection,
    snap: &Snapshot,
    request: CpuMem,
) -> ApiResult<Vec<i64>> {
    let scopes = db::policy_scopes(conn).await?;
    let cluster = scopes.iter().find(|(rp, _)| rp.is_none()).map(|(_, v)| v);
    let cluster_policy = Policy::layered(&[cluster]).unwrap_or_default();
    let overrides: HashMap<i64, &serde_json::Value> = scopes
        .iter()
        .filter_map(|(rp, v)| rp.map(|rp| (rp, v)))
        .collect();
    let now = Utc::now();
    let mut refused = Vec::new();
    for node in &snap.nodes {
        let Some(report) = &node.report else {
            continue;
        };
        // An override that no longer fits the cluster's policy refuses
        // (fail safe) until an operator mends it.
        let own = overrides
            .get(&node.id)
            .map(|own| Policy::layered(&[cluster, Some(own)]).ok());
        let policy = match &own {
            None => Some(&cluster_policy),
            Some(p) => p.as_ref(),
        };
        let total = |class: i32| node.stock(class).map_or(0, |s| s.total);
        let host = HostLoad {
            capacity: CpuMem::new(total(VCPU_ID).saturating_mul(1000), total(MEMORY_MB_ID)),
            node_used: report.node_used,
            report_age_seconds: (now - report.sampled_at).num_seconds(),
            pending: &report.pending,
        };
        if policy.is_none_or(|p| refusal(&host, p, request).is_some()) {
            refused.push(node.id);
        }
    }
    Ok(refused)
}
