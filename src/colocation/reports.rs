//! Usage reports from node agents: checked, stored append-only (the
//! provider's generation never moves), then the batch inventory is
//! recomputed by B.2 and written when it moved enough (hysteresis).

use super::{provider_from, with_samples, Loaded};
use crate::db::colocation::{self as db, ConsumerSample, NodeConsumer, Sample};
use crate::error::{Error, Result};
use crate::sched::colocation::node;
use crate::sched::colocation::CpuMem;
use chrono::{DateTime, Duration, Utc};
use serde::{Deserialize, Serialize};
use sqlx::PgConnection;
use std::collections::HashSet;
use utoipa::ToSchema;
use uuid::Uuid;

/// CPU and memory used.
#[derive(Debug, Clone, Copy, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Used {
    /// Milli-CPU used.
    pub cpu_milli_used: i64,
    /// MB used.
    pub memory_mb_used: i64,
}

/// One consumer's measurement.
#[derive(Debug, Clone, Copy, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ConsumerUsed {
    /// A consumer allocated on this provider.
    pub consumer_uuid: Uuid,
    /// Milli-CPU used.
    pub cpu_milli_used: i64,
    /// MB used.
    pub memory_mb_used: i64,
}

/// Best-effort CPU aggregates.
#[derive(Debug, Clone, Copy, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BeReport {
    /// BE CPU used, milli.
    pub cpu_milli_used: i64,
    /// Σ BE batch CPU requests, milli.
    pub cpu_milli_request: i64,
    /// What the agent lets BE use now, milli.
    pub cpu_milli_real_limit: i64,
}

/// `POST /resource_providers/{uuid}/usage_reports`, after its schema check.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UsageReport {
    /// When the agent measured (at most an hour old, not in the future).
    pub sampled_at: DateTime<Utc>,
    /// The measurement window, 1–3600 s.
    pub window_seconds: i32,
    /// The whole node.
    pub node: Used,
    /// The system, outside any consumer.
    pub system: Used,
    /// Consumers allocated here.
    #[serde(default)]
    pub consumers: Vec<ConsumerUsed>,
    /// Best-effort CPU aggregates.
    #[serde(default)]
    pub be: Option<BeReport>,
}

/// The answer to a report.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ReportAccepted {
    /// The batch allocatable computed from this report (milli-CPU, MB).
    pub batch_allocatable: BatchAmounts,
    /// Whether the BATCH_* inventory was rewritten (hysteresis: a move
    /// above 10 % or a value older than 300 s).
    pub batch_inventory_updated: bool,
    /// Batch consumers hold more than the batch inventory now.
    pub batch_overcommitted: bool,
}

/// Batch amounts.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BatchAmounts {
    /// BATCH_VCPU_MILLI.
    #[serde(rename = "BATCH_VCPU_MILLI")]
    pub cpu: i64,
    /// BATCH_MEMORY_MB.
    #[serde(rename = "BATCH_MEMORY_MB")]
    pub memory: i64,
}

/// 400 unless every amount is sane: not above ten times the node's
/// capacity, and the time inside the last hour (5 min of clock skew
/// allowed). The body's schema (`api::colocation::report_schema`) holds
/// the window to 1–3600 s and amounts to 0 or more.
fn check(r: &UsageReport, cap: CpuMem) -> Result<()> {
    let now = crate::clock::now();
    if r.sampled_at > now + Duration::minutes(5) || r.sampled_at < now - Duration::hours(1) {
        return Err(Error::invalid(format!(
            "sampled_at {} is not within the last hour.",
            r.sampled_at
        )));
    }
    let bound = |what: &str, v: i64, cap: i64| {
        if v > cap.saturating_mul(10) {
            Err(Error::invalid(format!(
                "{what} {v} is above ten times the node's capacity ({cap})."
            )))
        } else {
            Ok(())
        }
    };
    for (what, u) in [("node", r.node), ("system", r.system)] {
        bound(&format!("{what}.cpu_milli_used"), u.cpu_milli_used, cap.cpu)?;
        bound(
            &format!("{what}.memory_mb_used"),
            u.memory_mb_used,
            cap.memory,
        )?;
    }
    for c in &r.consumers {
        bound("cpu_milli_used", c.cpu_milli_used, cap.cpu)?;
        bound("memory_mb_used", c.memory_mb_used, cap.memory)?;
    }
    if let Some(be) = r.be {
        bound("be.cpu_milli_used", be.cpu_milli_used, cap.cpu)?;
        bound("be.cpu_milli_request", be.cpu_milli_request, cap.cpu)?;
        bound("be.cpu_milli_real_limit", be.cpu_milli_real_limit, cap.cpu)?;
    }
    Ok(())
}

/// 400 for a consumer the report names that has no allocations here.
fn check_consumers(r: &UsageReport, allocated: &[NodeConsumer]) -> Result<()> {
    let known: HashSet<Uuid> = allocated.iter().map(|c| c.consumer_uuid).collect();
    match r
        .consumers
        .iter()
        .find(|c| !known.contains(&c.consumer_uuid))
    {
        None => Ok(()),
        Some(c) => Err(Error::invalid(format!(
            "Consumer {} has no allocations on this provider.",
            c.consumer_uuid
        ))),
    }
}

/// Stores a report and recomputes the batch inventory, in the caller's
/// transaction: the rows are written with the provider's lock, in one
/// round trip, and a refusal afterwards rolls them back with it (404: no
/// such provider).
pub async fn ingest(
    conn: &mut PgConnection,
    provider: &str,
    r: &UsageReport,
    retention_seconds: i64,
) -> Result<ReportAccepted> {
    let sample = Sample {
        sampled_at: r.sampled_at,
        window_seconds: r.window_seconds,
        node_cpu_milli: r.node.cpu_milli_used,
        node_memory_mb: r.node.memory_mb_used,
        system_cpu_milli: r.system.cpu_milli_used,
        system_memory_mb: r.system.memory_mb_used,
        be_cpu_used: r.be.map(|b| b.cpu_milli_used),
        be_cpu_request: r.be.map(|b| b.cpu_milli_request),
        be_cpu_real_limit: r.be.map(|b| b.cpu_milli_real_limit),
    };
    let consumers: Vec<ConsumerSample> = r
        .consumers
        .iter()
        .map(|c| ConsumerSample {
            consumer: c.consumer_uuid,
            cpu_milli: c.cpu_milli_used,
            memory_mb: c.memory_mb_used,
        })
        .collect();
    // Before the write: one sample row per consumer.
    let mut seen = HashSet::new();
    if let Some(c) = r.consumers.iter().find(|c| !seen.insert(c.consumer_uuid)) {
        return Err(Error::invalid(format!(
            "Consumer {} is reported twice.",
            c.consumer_uuid
        )));
    }
    let target = match crate::types::parse_uuid_like(provider) {
        Some(u) => db::record_report(conn, u, &sample, &consumers, retention_seconds).await?,
        None => None,
    };
    let target = target.ok_or_else(|| {
        Error::not_found(format!("No resource provider with uuid {provider} found"))
    })?;
    let node = provider_from(&target)?;
    check(r, node.capacity)?;
    let loaded = with_samples(conn, target.rp, node).await?;
    check_consumers(r, &loaded.consumers)?;
    recompute(conn, target.rp, loaded).await
}

/// Recomputes the batch inventory from the latest state and writes it
/// when it moved by more than 10 % or is older than 300 s.
async fn recompute(conn: &mut PgConnection, rp: i64, loaded: Loaded) -> Result<ReportAccepted> {
    // A late report can be the newest one there is: batch capacity from
    // measurements older than degradeTimeMinutes is none (Koordinator
    // resets batch resources on a stale NodeMetric).
    let degraded = loaded.samples.as_ref().is_none_or(|s| {
        crate::clock::now() - s.latest.sampled_at
            > Duration::minutes(loaded.policy.degrade_time_minutes)
    });
    let batch = if degraded {
        CpuMem::default()
    } else {
        node::batch_allocatable(&loaded.view, &loaded.policy)
    };
    let ledger = match loaded.ledger {
        Some(l) => l,
        None => db::batch_ledger(conn, rp).await?,
    };
    let moved = |new: i64, old: Option<i64>| match old {
        None => true,
        Some(o) => (new - o).abs() * 10 > o.abs() || (o == 0) != (new == 0),
    };
    let old = ledger
        .computed_at
        .is_none_or(|t| crate::clock::now() - t > Duration::seconds(300));
    let update =
        old || moved(batch.cpu, ledger.cpu_total) || moved(batch.memory, ledger.memory_total);
    let clamp = |v: i64| i32::try_from(v).unwrap_or(i32::MAX);
    let (cpu, memory) = if update {
        (batch.cpu, batch.memory)
    } else {
        (
            ledger.cpu_total.unwrap_or(0),
            ledger.memory_total.unwrap_or(0),
        )
    };
    let overcommitted = ledger.cpu_allocated > cpu || ledger.memory_allocated > memory;
    if update {
        if ledger.cpu_total.is_none() {
            // The provider's first batch rows: the classes may not exist yet.
            db::ensure_batch_classes(conn).await?;
        }
        db::write_batch(conn, rp, clamp(cpu), clamp(memory), overcommitted).await?;
    }
    Ok(ReportAccepted {
        batch_allocatable: BatchAmounts {
            cpu: batch.cpu,
            memory: batch.memory,
        },
        batch_inventory_updated: update,
        batch_overcommitted: overcommitted,
    })
}

/// Sets to 0 the batch inventory of providers whose reports stopped for
/// longer than their degradeTimeMinutes; how many inventories changed.
pub async fn degrade_stale(conn: &mut PgConnection) -> Result<u64> {
    let cluster = super::policy_overrides::resolve(conn, None).await?;
    Ok(db::degrade_stale(conn, cluster.degrade_time_minutes).await?)
}
