//! The batch allocatable (B.2, `CalculateBatchResourceByPolicy`): what
//! low-priority work may allocate on a node, computed from what
//! high-priority work measurably uses rather than what it reserved.

use super::{clamp_i64, percent_of, CpuMem};

/// How high-priority usage is counted (`cpuCalculatePolicy`,
/// `memoryCalculatePolicy`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum CalculatePolicy {
    /// Measured usage (the default).
    #[default]
    #[serde(rename = "usage")]
    Usage,
    /// Requests, against the node reservation (memory only upstream).
    #[serde(rename = "request")]
    Request,
    /// The larger of request and usage, per consumer.
    #[serde(rename = "maxUsageRequest")]
    MaxUsageRequest,
}

/// One high-priority consumer on the node.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HpConsumer {
    /// What it requested (allocated).
    pub request: CpuMem,
    /// What it was last measured using; None: not reported yet (its
    /// request counts instead).
    pub used: Option<CpuMem>,
}

/// The node's side of the formula.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NodeState {
    /// The node's capacity.
    pub capacity: CpuMem,
    /// What the system (outside any consumer) uses.
    pub system_used: CpuMem,
    /// What the node keeps for itself.
    pub node_reserved: CpuMem,
}

/// The knobs of one resource.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Knobs {
    /// `cpuReclaimThresholdPercent` / `memoryReclaimThresholdPercent`.
    pub reclaim_percent: i64,
    /// How high-priority usage is counted.
    pub policy: CalculatePolicy,
    /// `batchCPUThresholdPercent` / `batchMemoryThresholdPercent`.
    pub threshold_percent: Option<i64>,
}

/// High-priority totals: usage (a request stands in for a missing
/// measurement), requests, and Σ max(request, usage).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HpTotals {
    /// Σ used (request when unmeasured).
    pub used: CpuMem,
    /// Σ request.
    pub request: CpuMem,
    /// Σ max(request, used).
    pub max_used_request: CpuMem,
}

/// Sums the high-priority consumers.
pub fn hp_totals(consumers: &[HpConsumer]) -> HpTotals {
    consumers.iter().fold(HpTotals::default(), |t, c| {
        let used = c.used.unwrap_or(c.request);
        HpTotals {
            used: t.used.plus(used),
            request: t.request.plus(c.request),
            max_used_request: t.max_used_request.plus(CpuMem::new(
                used.cpu.max(c.request.cpu),
                used.memory.max(c.request.memory),
            )),
        }
    })
}

/// The batch allocatable of both resources.
pub fn batch_allocatable(node: &NodeState, hp: &HpTotals, cpu: Knobs, memory: Knobs) -> CpuMem {
    let pick = |f: fn(CpuMem) -> i64, k: Knobs| {
        one(
            f(node.capacity),
            f(node.system_used),
            f(node.node_reserved),
            match k.policy {
                CalculatePolicy::Usage => f(hp.used),
                CalculatePolicy::Request => f(hp.request),
                CalculatePolicy::MaxUsageRequest => f(hp.max_used_request),
            },
            k,
        )
    };
    CpuMem::new(pick(|c| c.cpu, cpu), pick(|c| c.memory, memory))
}

/// capacity − safetyMargin − system − hp, clamped at 0 and capped by the
/// threshold percent. The margin is capacity × (100 − reclaim)/100; the
/// whole is computed exactly and floored once (Koordinator works in bytes
/// and milli-cores, so a fractional margin never rounds in batch's favour).
fn one(capacity: i64, system_used: i64, reserved: i64, hp: i64, k: Knobs) -> i64 {
    let system = match k.policy {
        CalculatePolicy::Request => reserved,
        _ => system_used.max(reserved),
    };
    let scaled = i128::from(capacity) * i128::from(k.reclaim_percent)
        - 100 * (i128::from(system) + i128::from(hp));
    let batch = clamp_i64(scaled.div_euclid(100)).max(0);
    match k.threshold_percent {
        Some(pct) => batch.min(percent_of(capacity, pct)),
        None => batch,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn knobs(reclaim: i64) -> Knobs {
        Knobs {
            reclaim_percent: reclaim,
            policy: CalculatePolicy::Usage,
            threshold_percent: None,
        }
    }

    #[test]
    fn the_upstream_worked_case() {
        let node = NodeState {
            capacity: CpuMem::new(100_000, 120_000),
            system_used: CpuMem::new(7_000, 12_000),
            node_reserved: CpuMem::default(),
        };
        let hp = HpTotals {
            used: CpuMem::new(33_000, 33_000),
            ..HpTotals::default()
        };
        assert_eq!(
            batch_allocatable(&node, &hp, knobs(65), knobs(65)),
            CpuMem::new(25_000, 33_000)
        );
    }

    #[test]
    fn never_negative() {
        let node = NodeState {
            capacity: CpuMem::new(1_000, 1_000),
            ..NodeState::default()
        };
        let hp = HpTotals {
            used: CpuMem::new(5_000, 5_000),
            ..HpTotals::default()
        };
        assert_eq!(
            batch_allocatable(&node, &hp, knobs(60), knobs(60)),
            CpuMem::default()
        );
    }
}
