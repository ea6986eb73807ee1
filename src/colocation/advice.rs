//! Advice for the node agent: BE CPU suppression (B.4), eviction
//! candidates (B.5, B.6, with the pending-release ledger of B.7), and the
//! record of what the agent evicted. The service never deletes
//! allocations itself, and never lists production consumers.

use super::{load, Loaded};
use crate::db::colocation as db;
use crate::error::{Error, Result};
use crate::sched::colocation::node;
use crate::sched::colocation::suppress::SuppressPolicy;
use chrono::{DateTime, Duration, Utc};
use serde::{Deserialize, Serialize};
use sqlx::PgConnection;
use std::collections::BTreeMap;
use utoipa::ToSchema;
use uuid::Uuid;

/// Whether the provider's last report is older than the policy allows.
fn stale(l: &Loaded) -> bool {
    l.samples.as_ref().is_none_or(|s| {
        crate::clock::now() - s.latest.sampled_at
            > Duration::seconds(l.policy.metric_expiration_seconds)
    })
}

/// `GET /resource_providers/{uuid}/suppression`.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SuppressionView {
    /// The BE CPU limit, milli.
    pub be_cpu_limit_milli: i64,
    /// How the agent should apply it.
    #[schema(value_type = String)]
    pub policy: SuppressPolicy,
    /// The CFS quota for a 100 ms period, µs (cfsQuota policy).
    pub cfs_quota_us: i64,
    /// The cpuset size (cpuset policy).
    pub cpuset_size: i64,
    /// What BE gets under the policy, milli.
    pub effective_be_limit_milli: i64,
    /// The numbers it came from.
    pub computed_from: BTreeMap<String, i64>,
    /// The report it came from.
    pub sampled_at: DateTime<Utc>,
    /// The report is older than metricExpirationSeconds.
    pub stale: bool,
}

/// Suppression advice; 409 before the provider's first report.
pub async fn suppression(conn: &mut PgConnection, rp: i64) -> Result<SuppressionView> {
    let l = load(conn, rp).await?;
    let Some(s) = l.samples.as_ref() else {
        return Err(Error::conflict("The provider has not reported usage yet.")
            .code(crate::error::codes::COLOCATION_NO_REPORT));
    };
    let a = node::suppression(&l.view, &l.policy);
    let non_be: i64 = l
        .view
        .consumers
        .iter()
        .filter(|c| !c.low_priority)
        .filter_map(|c| c.used.map(|u| u.cpu))
        .sum();
    let computed_from = BTreeMap::from([
        ("capacity_milli".to_string(), l.view.capacity.cpu),
        ("node_used_milli".to_string(), l.view.node_used.cpu),
        ("node_reserved_milli".to_string(), l.view.node_reserved.cpu),
        ("non_be_used_milli".to_string(), non_be),
        (
            "threshold_percent".to_string(),
            l.policy.cpu_suppress_threshold_percent,
        ),
    ]);
    Ok(SuppressionView {
        be_cpu_limit_milli: a.be_cpu_limit_milli,
        policy: l.policy.cpu_suppress_policy,
        cfs_quota_us: a.cfs_quota_us,
        cpuset_size: a.cpuset_size,
        effective_be_limit_milli: a.effective_be_limit_milli,
        computed_from,
        sampled_at: s.latest.sampled_at,
        stale: stale(&l),
    })
}

/// One evictor that fired.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Trigger {
    /// `be_cpu_satisfaction` or `memory_usage`.
    pub kind: String,
    /// Its numbers (satisfaction, be_usage_ratio, percents, release).
    #[schema(value_type = Object)]
    pub detail: serde_json::Value,
}

/// One consumer the agent should evict, in order.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Victim {
    /// 1 first.
    pub rank: usize,
    /// The consumer.
    pub consumer_uuid: Uuid,
    /// Its project.
    pub project_id: String,
    /// Its integer priority.
    pub priority: Option<i32>,
    /// The evictor that picked it.
    pub trigger: String,
    /// What evicting it releases.
    pub releases: BTreeMap<String, i64>,
    /// Why it comes at this rank.
    pub why: String,
}

/// `GET /resource_providers/{uuid}/eviction_candidates`.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct EvictionAdvice {
    /// When this was computed.
    pub evaluated_at: DateTime<Utc>,
    /// The latest cooldown still running, if any.
    pub cooldown_until: Option<DateTime<Utc>>,
    /// No advice from stale or missing reports.
    pub stale: bool,
    /// The evictors that fired.
    pub triggers: Vec<Trigger>,
    /// Consumers to evict, in order.
    pub victims: Vec<Victim>,
    /// Consumers evicted already and still allocated (pending release).
    pub pending_release: Vec<Uuid>,
}

/// Eviction advice: nothing from stale reports, nothing from an evictor in
/// its cooldown; consumers already evicted count as released.
pub async fn eviction_candidates(conn: &mut PgConnection, rp: i64) -> Result<EvictionAdvice> {
    let l = load(conn, rp).await?;
    let now = crate::clock::now();
    let db::Cooldowns {
        cpu_until: cpu_cool,
        memory_until: mem_cool,
    } = db::cooldowns(conn, rp).await?;
    let cooling = |t: Option<DateTime<Utc>>| t.filter(|t| *t > now);
    let pending: Vec<Uuid> = l
        .consumers
        .iter()
        .filter(|c| c.evicted && c.priority_class >= 2)
        .map(|c| c.consumer_uuid)
        .collect();
    let mut advice = EvictionAdvice {
        evaluated_at: now,
        cooldown_until: cooling(cpu_cool).max(cooling(mem_cool)),
        stale: stale(&l),
        triggers: Vec::new(),
        victims: Vec::new(),
        pending_release: pending.clone(),
    };
    if advice.stale {
        return Ok(advice);
    }
    if cooling(cpu_cool).is_none() {
        cpu_advice(&l, &pending, &mut advice);
    }
    if cooling(mem_cool).is_none() {
        memory_advice(&l, &pending, &mut advice);
    }
    Ok(advice)
}

fn add_victims(
    l: &Loaded,
    advice: &mut EvictionAdvice,
    picked: &[Uuid],
    trigger: &str,
    why: impl Fn(&crate::db::colocation::NodeConsumer) -> String,
) {
    for key in picked {
        if advice.victims.iter().any(|v| v.consumer_uuid == *key) {
            continue;
        }
        let Some(c) = l.consumers.iter().find(|c| c.consumer_uuid == *key) else {
            continue;
        };
        let releases = BTreeMap::from([
            ("BATCH_VCPU_MILLI".to_string(), c.request_cpu_milli),
            ("BATCH_MEMORY_MB".to_string(), c.request_memory_mb),
        ]);
        advice.victims.push(Victim {
            rank: advice.victims.len() + 1,
            consumer_uuid: *key,
            project_id: c.project_id.clone(),
            priority: c.priority,
            trigger: trigger.to_string(),
            releases,
            why: why(c),
        });
    }
}

fn cpu_advice(l: &Loaded, pending: &[Uuid], advice: &mut EvictionAdvice) {
    let batch_cpu = node::batch_allocatable(&l.view, &l.policy).cpu;
    let Some((check, e)) = node::cpu_eviction(&l.view, &l.policy, batch_cpu, pending) else {
        return;
    };
    if e.release <= 0 {
        return;
    }
    advice.triggers.push(Trigger {
        kind: "be_cpu_satisfaction".into(),
        detail: serde_json::json!({
            "satisfaction": check.satisfaction, "be_usage_ratio": check.usage_ratio,
            "lower_percent": l.policy.cpu_evict_be_satisfaction_lower_percent,
            "upper_percent": l.policy.cpu_evict_be_satisfaction_upper_percent,
            "release_request_milli": e.release}),
    });
    add_victims(l, advice, &e.victims, "be_cpu_satisfaction", |c| {
        let ratio = match (c.used_cpu_milli, c.request_cpu_milli) {
            (Some(u), r) if r > 0 => u as f64 / r as f64,
            _ => 0.0,
        };
        format!("lowest priority first; used/request {ratio:.3}")
    });
}

fn memory_advice(l: &Loaded, pending: &[Uuid], advice: &mut EvictionAdvice) {
    let (usage, e) = node::memory_eviction(&l.view, &l.policy, pending);
    if e.release <= 0 {
        return;
    }
    advice.triggers.push(Trigger {
        kind: "memory_usage".into(),
        detail: serde_json::json!({
            "usage_percent": usage.usage_percent, "threshold_percent": l.policy.memory_evict_threshold_percent,
            "lower_percent": usage.lower_percent, "release_mb": e.release}),
    });
    add_victims(l, advice, &e.victims, "memory_usage", |c| {
        format!(
            "lowest priority first; memory used {} MB",
            c.used_memory_mb.unwrap_or(0)
        )
    });
}

/// `POST /resource_providers/{uuid}/evictions`, after its schema check.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct EvictionsPost {
    /// The consumers the agent evicted.
    pub consumer_uuids: Vec<Uuid>,
    /// `be_cpu_satisfaction` or `memory_usage`.
    pub trigger: String,
}

/// What was recorded.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct EvictionsRecorded {
    /// How many consumers.
    pub recorded: usize,
    /// The trigger's cooldown.
    pub cooldown_until: Option<DateTime<Utc>>,
}

/// Records evictions: 400 for a consumer not allocated here or not
/// batch/free (production is never evicted).
pub async fn record(
    conn: &mut PgConnection,
    rp: i64,
    b: &EvictionsPost,
) -> Result<EvictionsRecorded> {
    let policy = super::policy_overrides::resolve(conn, Some(rp)).await?;
    let cooldown = match b.trigger.as_str() {
        "be_cpu_satisfaction" => policy.cooldown.cpu,
        "memory_usage" => policy.cooldown.memory,
        other => {
            return Err(Error::invalid(format!(
                "Unknown trigger {other}: use be_cpu_satisfaction or memory_usage."
            )))
        }
    };
    let here = db::node_consumers(conn, rp).await?;
    for u in &b.consumer_uuids {
        match here.iter().find(|c| c.consumer_uuid == *u) {
            None => {
                return Err(Error::invalid(format!(
                    "Consumer {u} has no allocations on this provider."
                )))
            }
            Some(c) if c.priority_class < 2 => {
                return Err(Error::invalid(format!(
                    "Consumer {u} is not batch or free work; it is never evicted."
                )))
            }
            Some(_) => {}
        }
    }
    let until = db::record_evictions(conn, rp, &b.consumer_uuids, &b.trigger, cooldown).await?;
    Ok(EvictionsRecorded {
        recorded: b.consumer_uuids.len(),
        cooldown_until: until,
    })
}
