//! Low-priority placement (§C.3). A `priority_class=batch|free` query may
//! ask only for the batch classes (and DISK_GB); its capacity check is the
//! batch inventory, computed from measured usage. On top of that, a
//! provider whose last report is stale, or whose measured load plus the
//! estimates of what was placed since and of the request is above the
//! policy's `forbidUsageThresholds`, offers no batch capacity to it.
//! Other classes keep Placement's semantics (the load filter for them is
//! off, as §C.6 recommends).

use super::snapshot::{Node, Report, Snapshot};
use crate::db::classes::{MEMORY_MB_ID, VCPU_ID};
use crate::db::colocation::{placement as db, BATCH_MEMORY_MB, BATCH_VCPU_MILLI};
use crate::error::{codes, Error, Result};
use crate::sched::colocation::knobs::Policy;
use crate::sched::colocation::load_aware::Resource;
use crate::sched::colocation::placement::{instances_accepted, refusal, HostLoad, Refusal};
use crate::sched::colocation::CpuMem;
use crate::types::PriorityClass;
use chrono::{DateTime, Utc};
use sqlx::PgConnection;
use std::collections::HashMap;

/// 400 unless every requested class is one `priority` may allocate. Only
/// low-priority queries are held to it: a Placement client may still ask
/// what a BATCH_* request would get, as for any class.
pub fn check_classes<'a>(
    priority: PriorityClass,
    classes: impl IntoIterator<Item = &'a String>,
) -> Result<()> {
    if !priority.low() {
        return Ok(());
    }
    match classes.into_iter().find(|c| !priority.may_allocate(c)) {
        None => Ok(()),
        Some(c) => Err(Error::invalid(format!(
            "priority_class {} may request only BATCH_VCPU_MILLI, BATCH_MEMORY_MB and DISK_GB, not {c}.",
            priority.name()
        ))
        .code(codes::COLOCATION_CLASS_NOT_ALLOWED)),
    }
}

/// The snapshot a low-priority `request` (batch CPU milli, batch memory
/// MB, summed over its groups) sees: refused providers lose their batch
/// inventory. Also returns why each was refused, for explanations.
pub async fn restrict(
    conn: &mut PgConnection,
    snap: &Snapshot,
    request: CpuMem,
) -> Result<(Snapshot, HashMap<i64, LoadRefusal>)> {
    let judge = LoadJudge::load(conn).await?;
    let refused: HashMap<i64, LoadRefusal> = snap
        .nodes
        .iter()
        .filter_map(|n| judge.refusal(n, request).map(|r| (n.id, r)))
        .collect();
    let ids: Vec<i64> = refused.keys().copied().collect();
    let restricted = snap.without_stock(&ids, &[BATCH_VCPU_MILLI.0, BATCH_MEMORY_MB.0]);
    Ok((restricted, refused))
}

/// Why the load filter gives a provider no low-priority work, with the
/// numbers an operator needs.
#[derive(Debug, Clone, PartialEq)]
pub enum LoadRefusal {
    /// Its policy override no longer fits the cluster's policy (fail safe
    /// until an operator mends it).
    InvalidPolicy,
    /// Its last report is older than the policy allows.
    Stale {
        /// Seconds since the report was sampled.
        age_seconds: i64,
        /// `metricExpirationSeconds`.
        expiration_seconds: i64,
    },
    /// Measured load plus estimates is above `forbidUsageThresholds`.
    Overloaded {
        /// The resource over its threshold.
        resource: Resource,
        /// The estimated usage percentages with the request.
        percent: CpuMem,
        /// The thresholds.
        threshold: CpuMem,
    },
}

/// The load filter as configured now: the cluster's policy, each
/// provider's override, and the time the ages are counted from.
pub struct LoadJudge {
    cluster: Policy,
    /// Merged overrides; None where one no longer fits the cluster's
    /// policy, which refuses (fail safe) until an operator mends it.
    overrides: HashMap<i64, Option<Policy>>,
    now: DateTime<Utc>,
}

impl LoadJudge {
    /// Reads the policy scopes (a handful of rows: reports are in the
    /// snapshot).
    pub async fn load(conn: &mut PgConnection) -> Result<Self> {
        let scopes = db::policy_scopes(conn).await?;
        let cluster = scopes.iter().find(|(rp, _)| rp.is_none()).map(|(_, v)| v);
        let overrides = scopes
            .iter()
            .filter_map(|(rp, own)| rp.map(|rp| (rp, Policy::layered(&[cluster, Some(own)]).ok())))
            .collect();
        Ok(Self {
            cluster: Policy::layered(&[cluster]).unwrap_or_default(),
            overrides,
            now: crate::clock::now(),
        })
    }

    fn policy(&self, rp: i64) -> Option<&Policy> {
        match self.overrides.get(&rp) {
            None => Some(&self.cluster),
            Some(own) => own.as_ref(),
        }
    }

    fn host<'a>(&self, node: &'a Node, report: &'a Report) -> HostLoad<'a> {
        let total = |class: i32| {
            node.stock(class)
                .map_or(0, |s| i64::from(s.inventory.total))
        };
        HostLoad {
            capacity: CpuMem::new(total(VCPU_ID).saturating_mul(1000), total(MEMORY_MB_ID)),
            node_used: report.node_used,
            report_age_seconds: (self.now - report.sampled_at).num_seconds(),
            pending: &report.pending,
        }
    }

    /// Why `node` refuses a low-priority `request`, if it does (one never
    /// reported has no batch inventory, and is not judged).
    pub fn refusal(&self, node: &Node, request: CpuMem) -> Option<LoadRefusal> {
        let report = node.report.as_ref()?;
        let Some(policy) = self.policy(node.id) else {
            return Some(LoadRefusal::InvalidPolicy);
        };
        let host = self.host(node, report);
        Some(match refusal(&host, policy, request)? {
            Refusal::Stale => LoadRefusal::Stale {
                age_seconds: host.report_age_seconds,
                expiration_seconds: policy.metric_expiration_seconds,
            },
            Refusal::Overloaded(resource, percent) => LoadRefusal::Overloaded {
                resource,
                percent,
                threshold: policy.forbid_usage_thresholds.as_cpumem(),
            },
        })
    }

    /// How many instances of `per` the filter takes at `node`, at most `cap`.
    pub fn instances(&self, node: &Node, per: CpuMem, cap: i64) -> i64 {
        match (&node.report, self.policy(node.id)) {
            (Some(report), Some(policy)) => {
                instances_accepted(&self.host(node, report), policy, per, cap)
            }
            (None, _) => cap,
            (Some(_), None) => 0,
        }
    }
}
