//! Colocation of batch work with production, Koordinator's rules over
//! Placement data (`fairness_colocation.md` Part B and §C.3): consumer
//! priorities, the colocation policy, usage reports with the
//! server-computed batch inventory, and the node agent's advice
//! (suppression, eviction candidates, recorded evictions). The formulas
//! are `sched::colocation`; the SQL is `db::colocation`.
//!
//! Compatibility: a consumer's priority lives beside Placement's consumer
//! (`PUT /consumers/{uuid}/priority`), never in Placement's bodies, and the
//! `BATCH_*` classes exist only once a provider reports usage, so a
//! Placement client at 1.0–1.39 sees exactly Placement.

pub mod advice;
pub mod policy_overrides;
pub mod priority;
pub mod reports;

use crate::db::colocation::{self as db, NodeConsumer, Samples};
use crate::db::inventories;
use crate::error::{Error, Result};
use crate::sched::colocation::evict::BeCpu;
use crate::sched::colocation::knobs::Policy;
use crate::sched::colocation::node::{Consumer, NodeView};
use crate::sched::colocation::CpuMem;
use sqlx::PgConnection;
use uuid::Uuid;

/// A provider's capacity and node reservation in the colocation units
/// (milli-CPU from VCPU, MB), from its VCPU and MEMORY_MB inventory.
pub async fn capacity(conn: &mut PgConnection, rp: i64) -> Result<(CpuMem, CpuMem)> {
    let rows = inventories::of_provider(conn, rp).await?;
    let find = |name: &str| rows.iter().find(|r| r.resource_class == name);
    match (find("VCPU"), find("MEMORY_MB")) {
        (Some(c), Some(m)) => Ok((
            CpuMem::new(
                i64::from(c.inventory.total) * 1000,
                i64::from(m.inventory.total),
            ),
            CpuMem::new(
                i64::from(c.inventory.reserved) * 1000,
                i64::from(m.inventory.reserved),
            ),
        )),
        _ => Err(no_cpu_memory()),
    }
}

/// Everything the evaluation of one provider needs.
pub struct Loaded {
    /// The node as its reports describe it.
    pub view: NodeView<Uuid>,
    /// Its consumers as stored.
    pub consumers: Vec<NodeConsumer>,
    /// Its samples (None: never reported).
    pub samples: Option<Samples>,
    /// Its batch ledger, read with the samples (None: never reported).
    pub ledger: Option<db::BatchLedger>,
    /// The policy in force there.
    pub policy: Policy,
}

/// What a provider's evaluation needs besides what its reports change:
/// read once per report, before it is stored, and reused after.
pub struct Provider {
    /// The policy in force there.
    pub policy: Policy,
    /// Capacity in the colocation units.
    pub capacity: CpuMem,
    /// Node reservation in the same units.
    pub reserved: CpuMem,
}

/// Reads a provider's policy and capacity.
pub async fn provider(conn: &mut PgConnection, rp: i64) -> Result<Provider> {
    let policy = policy_overrides::resolve(conn, Some(rp)).await?;
    let (capacity, reserved) = capacity(conn, rp).await?;
    Ok(Provider {
        policy,
        capacity,
        reserved,
    })
}

/// A report target's policy and capacity, as locked and read with it.
pub fn provider_from(t: &db::ReportTarget) -> Result<Provider> {
    let policy = Policy::layered(&[t.cluster_policy.as_ref(), t.own_policy.as_ref()])
        .map_err(|e| Error::invalid(format!("Invalid colocation policy: {e}")))?;
    let (Some(cpu), Some(memory)) = (t.vcpu_total, t.memory_total) else {
        return Err(no_cpu_memory());
    };
    Ok(Provider {
        policy,
        capacity: CpuMem::new(cpu.saturating_mul(1000), memory),
        reserved: CpuMem::new(
            t.vcpu_reserved.unwrap_or(0).saturating_mul(1000),
            t.memory_reserved.unwrap_or(0),
        ),
    })
}

fn no_cpu_memory() -> Error {
    Error::invalid("Colocation needs VCPU and MEMORY_MB inventory on the reporting provider.")
}

/// Loads a provider's colocation state.
pub async fn load(conn: &mut PgConnection, rp: i64) -> Result<Loaded> {
    let p = provider(conn, rp).await?;
    with_samples(conn, rp, p).await
}

/// Completes a provider's state with its samples and its consumers with
/// their latest measurements.
pub async fn with_samples(conn: &mut PgConnection, rp: i64, p: Provider) -> Result<Loaded> {
    let Provider {
        policy,
        capacity: cap,
        reserved,
    } = p;
    let (samples, ledger, consumers) =
        match db::samples(conn, rp, policy.cpu_evict_time_window_seconds).await? {
            Some(state) => (Some(state.samples), Some(state.ledger), state.consumers),
            None => (None, None, db::node_consumers(conn, rp).await?),
        };
    let view = NodeView {
        capacity: cap,
        node_reserved: reserved,
        system_used: samples
            .as_ref()
            .map(|s| CpuMem::new(s.latest.system_cpu_milli, s.latest.system_memory_mb))
            .unwrap_or_default(),
        node_used: samples
            .as_ref()
            .map(|s| CpuMem::new(s.latest.node_cpu_milli, s.latest.node_memory_mb))
            .unwrap_or_default(),
        consumers: consumers.iter().map(consumer).collect(),
        be_window: samples.as_ref().and_then(|s| be_window(s, &policy)),
        be_current: samples.as_ref().and_then(|s| {
            let l = &s.latest;
            Some(BeCpu {
                used: l.be_cpu_used?,
                request: l.be_cpu_request?,
                real_limit: l.be_cpu_real_limit?,
            })
        }),
    };
    Ok(Loaded {
        view,
        consumers,
        samples,
        ledger,
        policy,
    })
}

/// The BE window average, if its samples cover a third of the window.
fn be_window(s: &Samples, p: &Policy) -> Option<BeCpu> {
    let (used, request, real_limit) = s.be_avg?;
    (s.covered_seconds * 3 >= p.cpu_evict_time_window_seconds).then_some(BeCpu {
        used,
        request,
        real_limit,
    })
}

fn consumer(c: &NodeConsumer) -> Consumer<Uuid> {
    Consumer {
        key: c.consumer_uuid,
        low_priority: c.priority_class >= 2,
        priority: c.priority.map(i64::from),
        request: CpuMem::new(c.request_cpu_milli, c.request_memory_mb),
        used: c
            .used_cpu_milli
            .zip(c.used_memory_mb)
            .map(|(cpu, mem)| CpuMem::new(cpu, mem)),
    }
}
