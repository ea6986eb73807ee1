//! The evictors (B.5–B.7): how much a node under pressure must release,
//! and which low-priority consumers go first. Advice only: the node agent
//! acts, and the service records what it did.

use super::{floor_percent, percent_of};
use std::cmp::Ordering;

/// Which limit the BE satisfaction is measured against (`cpuEvictPolicy`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum CpuEvictPolicy {
    /// What the suppressor lets BE use (the default).
    #[default]
    #[serde(rename = "evictByRealLimit")]
    RealLimit,
    /// The node's batch CPU allocatable.
    #[serde(rename = "evictByAllocatable")]
    Allocatable,
}

/// Best-effort CPU aggregates of one sample (or a window average), milli.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BeCpu {
    /// What BE work used.
    pub used: i64,
    /// Σ batch CPU requests of BE work.
    pub request: i64,
    /// What the suppressor let BE work use.
    pub real_limit: i64,
}

/// The BE satisfaction evictor's knobs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SatisfactionKnobs {
    /// `cpuEvictBESatisfactionLowerPercent`.
    pub lower_percent: i64,
    /// `cpuEvictBESatisfactionUpperPercent`.
    pub upper_percent: i64,
    /// `cpuEvictBEUsageThresholdPercent` (90 when unset).
    pub usage_threshold_percent: i64,
    /// `cpuEvictPolicy`.
    pub policy: CpuEvictPolicy,
}

/// One sample's verdict.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SatisfactionCheck {
    /// limit / request (0 when nothing is requested).
    pub satisfaction: f64,
    /// used / limit (0 without a limit).
    pub usage_ratio: f64,
    /// The batch CPU request to release (0: none).
    pub release: i64,
}

/// Checks one sample: both BE usage near its limit and satisfaction at or
/// below the lower watermark are needed; the release brings satisfaction
/// back to the upper one.
pub fn satisfaction(s: BeCpu, k: SatisfactionKnobs, batch_allocatable: i64) -> SatisfactionCheck {
    let limit = match k.policy {
        CpuEvictPolicy::RealLimit => s.real_limit,
        CpuEvictPolicy::Allocatable => batch_allocatable.max(1),
    } as f64;
    let (used, request) = (s.used as f64, s.request as f64);
    let usage_ratio = if limit > 0.0 { used / limit } else { 0.0 };
    let high =
        limit > 0.0 && (limit < 1000.0 || usage_ratio >= k.usage_threshold_percent as f64 / 100.0);
    let satisfaction = if request > 0.0 { limit / request } else { 0.0 };
    let release = if !high || request <= 0.0 || satisfaction > k.lower_percent as f64 / 100.0 {
        0
    } else {
        let gap = k.upper_percent as f64 / 100.0 - satisfaction;
        if gap <= 0.0 {
            0
        } else {
            (request * gap) as i64
        }
    };
    SatisfactionCheck {
        satisfaction,
        usage_ratio,
        release,
    }
}

/// The release of the satisfaction evictor over the window average and the
/// latest sample: both must call for it; the average's answer stands when
/// request and limit did not move, the smaller of the two otherwise.
pub fn be_cpu_release(
    avg: BeCpu,
    current: Option<BeCpu>,
    k: SatisfactionKnobs,
    batch_allocatable: i64,
) -> i64 {
    let a = satisfaction(avg, k, batch_allocatable).release;
    if a <= 0 {
        return 0;
    }
    let Some(cur) = current else { return a };
    let c = satisfaction(cur, k, batch_allocatable).release;
    if c <= 0 {
        0
    } else if cur.request == avg.request && cur.real_limit == avg.real_limit {
        a
    } else {
        a.min(c)
    }
}

/// A usage-watermark verdict (memory eviction, the generic evictors).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UsageRelease {
    /// floor(used × 100 / capacity).
    pub usage_percent: i64,
    /// The watermark released down to.
    pub lower_percent: i64,
    /// What to release (0: below the threshold).
    pub release: i64,
}

/// Triggers at `usage% ≥ threshold` and releases capacity × (usage% −
/// lower)/100, lower defaulting to threshold − 2.
pub fn usage_release(used: i64, capacity: i64, threshold: i64, lower: Option<i64>) -> UsageRelease {
    let usage_percent = floor_percent(used, capacity);
    let lower_percent = lower.unwrap_or(threshold - 2);
    let release = if usage_percent >= threshold {
        percent_of(capacity, usage_percent - lower_percent).max(0)
    } else {
        0
    };
    UsageRelease {
        usage_percent,
        lower_percent,
        release,
    }
}

/// A low-priority consumer the BE evictors may pick.
#[derive(Debug, Clone, PartialEq)]
pub struct BeVictim<K> {
    /// Who it is.
    pub key: K,
    /// Its integer priority (None: unset).
    pub priority: Option<i64>,
    /// Its batch CPU request, milli.
    pub cpu_request: i64,
    /// Its measured CPU, milli (None: unmeasured).
    pub cpu_used: Option<i64>,
    /// Its measured memory (None: unmeasured).
    pub memory_used: Option<i64>,
}

impl<K> BeVictim<K> {
    /// used / request, 0 without a request or a measurement.
    pub fn cpu_ratio(&self) -> f64 {
        match self.cpu_used {
            Some(u) if self.cpu_request > 0 => u as f64 / self.cpu_request as f64,
            _ => 0.0,
        }
    }
}

/// Lower priority first, when both have one.
fn by_priority<K>(a: &BeVictim<K>, b: &BeVictim<K>) -> Ordering {
    match (a.priority, b.priority) {
        (Some(x), Some(y)) => x.cmp(&y),
        _ => Ordering::Equal,
    }
}

/// The CPU evictor's order: lower priority, then higher used/request.
pub fn sort_for_cpu<K>(v: &mut [BeVictim<K>]) {
    v.sort_by(|a, b| by_priority(a, b).then_with(|| b.cpu_ratio().total_cmp(&a.cpu_ratio())));
}

/// The memory evictor's order: lower priority, then larger usage (equal
/// usage keeps the given order); the unmeasured or idle last, among
/// themselves by key descending.
pub fn sort_for_memory<K: Ord>(v: &mut [BeVictim<K>]) {
    v.sort_by(|a, b| {
        let (ua, ub) = (a.memory_used.unwrap_or(0), b.memory_used.unwrap_or(0));
        let idle = ua <= 0 && ub <= 0;
        (ua <= 0)
            .cmp(&(ub <= 0))
            .then_with(|| by_priority(a, b))
            .then_with(|| ub.cmp(&ua))
            .then_with(|| {
                if idle {
                    b.key.cmp(&a.key)
                } else {
                    Ordering::Equal
                }
            })
    });
}

/// Takes victims in order until what they release, plus what is already
/// pending release, reaches the target (B.7: consumers evicted earlier but
/// still allocated count as pending, so no extra victims are picked for
/// the same pressure). Returns the picked and what they release.
pub fn pick<K: Clone>(
    ordered: &[BeVictim<K>],
    target: i64,
    pending: i64,
    amount: impl Fn(&BeVictim<K>) -> i64,
) -> (Vec<K>, i64) {
    let mut released = 0;
    let mut picked = Vec::new();
    for v in ordered {
        if released + pending >= target {
            break;
        }
        released += amount(v);
        picked.push(v.key.clone());
    }
    (picked, released)
}

/// A consumer the generic usage evictor looks at.
#[derive(Debug, Clone, PartialEq)]
pub struct UsageCandidate<K> {
    /// Who it is.
    pub key: K,
    /// Its integer priority.
    pub priority: i64,
    /// Koordinator's `koordinator.sh/priority` label (defaults to priority).
    pub label_priority: Option<i64>,
    /// The eviction-priority annotation (missing or invalid: 0).
    pub eviction_priority: i64,
    /// Its measured usage.
    pub used: i64,
}

/// The generic evictor's order: eviction priority, priority, label
/// priority ascending, then usage descending.
pub fn sort_for_usage<K>(v: &mut [UsageCandidate<K>]) {
    v.sort_by(|a, b| {
        a.eviction_priority
            .cmp(&b.eviction_priority)
            .then(a.priority.cmp(&b.priority))
            .then(
                a.label_priority
                    .unwrap_or(a.priority)
                    .cmp(&b.label_priority.unwrap_or(b.priority)),
            )
            .then(b.used.cmp(&a.used))
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_upstream_memory_case() {
        let r = usage_release(115, 120, 80, None);
        assert_eq!((r.usage_percent, r.lower_percent), (95, 78));
    }

    #[test]
    fn pending_release_picks_fewer() {
        let v: Vec<BeVictim<u8>> = (0..3)
            .map(|k| BeVictim {
                key: k,
                priority: Some(1),
                cpu_request: 1000,
                cpu_used: None,
                memory_used: None,
            })
            .collect();
        assert_eq!(pick(&v, 2000, 0, |v| v.cpu_request).0, vec![0, 1]);
        assert_eq!(pick(&v, 2000, 1000, |v| v.cpu_request).0, vec![0]);
        assert!(pick(&v, 2000, 2000, |v| v.cpu_request).0.is_empty());
    }
}
