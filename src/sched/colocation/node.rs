//! One provider's colocation state, evaluated as a whole: its batch
//! allocatable, whether a low-priority request may land there, its BE CPU
//! suppression, and its eviction advice. The HTTP endpoints and the
//! `colocation_provider_scenario` vectors both go through here, so the
//! service answers exactly what the vectors prove.

use super::batch_allocatable::{self, HpConsumer, Knobs, NodeState};
use super::evict::{self, BeCpu, BeVictim, SatisfactionKnobs, UsageRelease};
use super::knobs::Policy;
use super::load_aware::{self, LoadCheck, EMPTY_ESTIMATE_MB};
use super::suppress::{self, SuppressInput};
use super::CpuMem;

/// A consumer on the node: its class, priority, request and last
/// measurement.
#[derive(Debug, Clone, PartialEq)]
pub struct Consumer<K> {
    /// Who it is.
    pub key: K,
    /// A `batch` or `free` consumer (best-effort).
    pub low_priority: bool,
    /// Its integer priority.
    pub priority: Option<i64>,
    /// What it allocated (milli-CPU, MB).
    pub request: CpuMem,
    /// What it was last measured using.
    pub used: Option<CpuMem>,
}

/// The node as the last reports describe it.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeView<K> {
    /// Capacity (milli-CPU, MB).
    pub capacity: CpuMem,
    /// What the node keeps for itself.
    pub node_reserved: CpuMem,
    /// What the system uses outside any consumer.
    pub system_used: CpuMem,
    /// What the whole node uses.
    pub node_used: CpuMem,
    /// Its consumers.
    pub consumers: Vec<Consumer<K>>,
    /// BE CPU over the eviction window, and in the latest report.
    pub be_window: Option<BeCpu>,
    /// BE CPU of the latest report.
    pub be_current: Option<BeCpu>,
}

/// The batch allocatable (B.2) from the high-priority consumers.
pub fn batch_allocatable<K>(n: &NodeView<K>, p: &Policy) -> CpuMem {
    let hp: Vec<HpConsumer> = n
        .consumers
        .iter()
        .filter(|c| !c.low_priority)
        .map(|c| HpConsumer {
            request: c.request,
            used: c.used,
        })
        .collect();
    let state = NodeState {
        capacity: n.capacity,
        system_used: n.system_used,
        node_reserved: n.node_reserved,
    };
    let cpu = Knobs {
        reclaim_percent: p.cpu_reclaim_threshold_percent,
        policy: p.cpu_calculate_policy,
        threshold_percent: p.batch_cpu_threshold_percent,
    };
    let memory = Knobs {
        reclaim_percent: p.memory_reclaim_threshold_percent,
        policy: p.memory_calculate_policy,
        threshold_percent: p.batch_memory_threshold_percent,
    };
    batch_allocatable::batch_allocatable(&state, &batch_allocatable::hp_totals(&hp), cpu, memory)
}

/// What low-priority consumers hold (their requests).
pub fn batch_requested<K>(n: &NodeView<K>) -> CpuMem {
    n.consumers
        .iter()
        .filter(|c| c.low_priority)
        .fold(CpuMem::default(), |t, c| t.plus(c.request))
}

/// The estimate of a request under the policy's scaling factors.
pub fn estimate(request: CpuMem, p: &Policy) -> CpuMem {
    load_aware::estimate(
        request,
        CpuMem::default(),
        p.estimated_scaling_factors.as_cpumem(),
        EMPTY_ESTIMATE_MB,
    )
}

/// The LoadAware check of a request: measured use plus `pending` (the
/// estimates of what was placed since the last report) plus the request's
/// own estimate.
pub fn load_check<K>(n: &NodeView<K>, p: &Policy, pending: CpuMem, request: CpuMem) -> LoadCheck {
    load_aware::check(
        n.node_used,
        pending.plus(estimate(request, p)),
        n.capacity,
        p.forbid_usage_thresholds.as_cpumem(),
    )
}

/// Suppression advice (B.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Suppression {
    /// The BE CPU limit, milli.
    pub be_cpu_limit_milli: i64,
    /// The cpuset size under the cpuset policy.
    pub cpuset_size: i64,
    /// The CFS quota for a 100 ms period, µs.
    pub cfs_quota_us: i64,
    /// What BE gets under the configured policy, milli.
    pub effective_be_limit_milli: i64,
}

/// Suppression advice for the node.
pub fn suppression<K>(n: &NodeView<K>, p: &Policy) -> Suppression {
    let input = SuppressInput {
        capacity: n.capacity.cpu,
        node_reserved: n.node_reserved.cpu,
        node_used: n.node_used.cpu,
        consumers: n
            .consumers
            .iter()
            .filter_map(|c| c.used.map(|u| (c.low_priority, u.cpu)))
            .collect(),
    };
    let limit = suppress::be_suppress_milli(
        &input,
        p.cpu_suppress_threshold_percent,
        p.cpu_suppress_min_percent,
    );
    Suppression {
        be_cpu_limit_milli: limit,
        cpuset_size: suppress::cpuset_size(limit),
        cfs_quota_us: suppress::cfs_quota_us(limit),
        effective_be_limit_milli: suppress::effective_limit_milli(p.cpu_suppress_policy, limit),
    }
}

/// The low-priority consumers as eviction victims.
fn victims<K: Clone>(n: &NodeView<K>) -> Vec<BeVictim<K>> {
    n.consumers
        .iter()
        .filter(|c| c.low_priority)
        .map(|c| BeVictim {
            key: c.key.clone(),
            priority: c.priority,
            cpu_request: c.request.cpu,
            cpu_used: c.used.map(|u| u.cpu),
            memory_used: c.used.map(|u| u.memory),
        })
        .collect()
}

/// One evictor's advice.
#[derive(Debug, Clone, PartialEq)]
pub struct Eviction<K> {
    /// What must be released (0: no pressure).
    pub release: i64,
    /// Every low-priority consumer in the evictor's order.
    pub sorted: Vec<K>,
    /// The victims, in order.
    pub victims: Vec<K>,
    /// What the victims release.
    pub released: i64,
}

/// The BE satisfaction evictor (B.5), with its two ratios from the
/// window; off (None) while the policy has no satisfaction watermarks or
/// there is no BE sample. `pending` consumers were evicted already and
/// still hold their allocations: they count as released (B.7).
pub fn cpu_eviction<K: Clone + PartialEq>(
    n: &NodeView<K>,
    p: &Policy,
    batch_cpu_allocatable: i64,
    pending: &[K],
) -> Option<(evict::SatisfactionCheck, Eviction<K>)> {
    let (lower, upper) = (
        p.cpu_evict_be_satisfaction_lower_percent?,
        p.cpu_evict_be_satisfaction_upper_percent?,
    );
    let window = n.be_window?;
    let k = SatisfactionKnobs {
        lower_percent: lower,
        upper_percent: upper,
        usage_threshold_percent: p.cpu_evict_be_usage_threshold_percent,
        policy: p.cpu_evict_policy,
    };
    let check = evict::satisfaction(window, k, batch_cpu_allocatable);
    let release = evict::be_cpu_release(window, n.be_current, k, batch_cpu_allocatable);
    let mut all = victims(n);
    evict::sort_for_cpu(&mut all);
    let e = in_order(all, pending, release, |v| v.cpu_request);
    Some((check, e))
}

/// The BE memory evictor (B.6) on the latest report.
pub fn memory_eviction<K: Clone + PartialEq + Ord>(
    n: &NodeView<K>,
    p: &Policy,
    pending: &[K],
) -> (UsageRelease, Eviction<K>) {
    let usage = evict::usage_release(
        n.node_used.memory,
        n.capacity.memory,
        p.memory_evict_threshold_percent,
        p.memory_evict_lower_percent,
    );
    let mut all = victims(n);
    evict::sort_for_memory(&mut all);
    let e = in_order(all, pending, usage.release, |v| v.memory_used.unwrap_or(0));
    (usage, e)
}

/// Picks victims from `all` (in the evictor's order) for `target`: those
/// already evicted (`pending`) count as released and are not picked again.
fn in_order<K: Clone + PartialEq>(
    all: Vec<BeVictim<K>>,
    pending: &[K],
    target: i64,
    amount: impl Fn(&BeVictim<K>) -> i64,
) -> Eviction<K> {
    let pending_release: i64 = all
        .iter()
        .filter(|v| pending.contains(&v.key))
        .map(&amount)
        .sum();
    let open: Vec<BeVictim<K>> = all
        .iter()
        .filter(|v| !pending.contains(&v.key))
        .cloned()
        .collect();
    let (victims, released) = evict::pick(&open, target, pending_release, &amount);
    Eviction {
        release: target,
        sorted: all.into_iter().map(|v| v.key).collect(),
        victims,
        released,
    }
}
