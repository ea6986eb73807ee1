//! Whether a provider may take new low-priority work (B.3, §C.3): its last
//! report is fresh, and the LoadAware filter passes with estimates for
//! what was placed there since that report and for the request itself.
//! Capacity is the batch inventory's business; this is the rest.

use super::knobs::Policy;
use super::load_aware::{self, Resource};
use super::node::estimate;
use super::CpuMem;

/// What the filter knows of one provider.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostLoad<'a> {
    /// Capacity in the colocation units (VCPU × 1000, MEMORY_MB).
    pub capacity: CpuMem,
    /// Measured node usage in the last report.
    pub node_used: CpuMem,
    /// Seconds since that report was sampled.
    pub report_age_seconds: i64,
    /// Requests of the consumers placed since that report (not yet in it).
    pub pending: &'a [CpuMem],
}

/// Why a provider gets no new low-priority work.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Its last report is older than `metricExpirationSeconds`.
    Stale,
    /// The LoadAware filter is above `forbidUsageThresholds` for this
    /// resource, at these rounded percentages.
    Overloaded(Resource, CpuMem),
}

/// The refusal of a low-priority `request` at `host`, if any. Staleness
/// comes first: estimates over stale measurements mean nothing.
pub fn refusal(host: &HostLoad<'_>, policy: &Policy, request: CpuMem) -> Option<Refusal> {
    refusal_with(host, policy, estimate(request, policy))
}

/// How many instances of `per` the filter accepts at `host`, at most
/// `cap`: each one placed counts as not yet measured for the next, as
/// Koordinator's scheduler counts the pods it has assumed.
pub fn instances_accepted(host: &HostLoad<'_>, policy: &Policy, per: CpuMem, cap: i64) -> i64 {
    let one = estimate(per, policy);
    let times = |k: i64| CpuMem::new(one.cpu.saturating_mul(k), one.memory.saturating_mul(k));
    let accepts = |k: i64| k == 0 || refusal_with(host, policy, times(k)).is_none();
    // The filter is monotone in k: the largest accepted k by bisection.
    let (mut lo, mut hi) = (0, cap.max(0));
    while lo < hi {
        let mid = lo + (hi - lo + 1) / 2;
        if accepts(mid) {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    lo
}

/// The refusal at `host` of work already estimated at `incoming`.
fn refusal_with(host: &HostLoad<'_>, policy: &Policy, incoming: CpuMem) -> Option<Refusal> {
    if host.report_age_seconds > policy.metric_expiration_seconds {
        return Some(Refusal::Stale);
    }
    let pending = host
        .pending
        .iter()
        .fold(CpuMem::default(), |t, r| t.plus(estimate(*r, policy)));
    let checked = load_aware::check(
        host.node_used,
        pending.plus(incoming),
        host.capacity,
        policy.forbid_usage_thresholds.as_cpumem(),
    );
    checked
        .rejected
        .map(|r| Refusal::Overloaded(r, checked.percent))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(used: CpuMem, pending: &[CpuMem], age: i64) -> HostLoad<'_> {
        HostLoad {
            capacity: CpuMem::new(10_000, 10_000),
            node_used: used,
            report_age_seconds: age,
            pending,
        }
    }

    #[test]
    fn a_stale_report_refuses_whatever_the_load() {
        let p = Policy::default();
        let h = host(CpuMem::default(), &[], 181);
        assert_eq!(refusal(&h, &p, CpuMem::new(1, 1)), Some(Refusal::Stale));
        let h = host(CpuMem::default(), &[], 180);
        assert_eq!(refusal(&h, &p, CpuMem::new(1, 1)), None);
    }

    #[test]
    fn pending_placements_count_with_their_estimates() {
        let p = Policy::default();
        // 5,000 used + 1,000 × 85 % = 5,850 → 59 %: passes at 65 %.
        let h = host(CpuMem::new(5_000, 0), &[], 0);
        assert_eq!(refusal(&h, &p, CpuMem::new(1_000, 100)), None);
        // A pending 1,000 adds 850 more: 6,700 → 67 % > 65 %.
        let pending = [CpuMem::new(1_000, 100)];
        let h = host(CpuMem::new(5_000, 0), &pending, 0);
        assert!(matches!(
            refusal(&h, &p, CpuMem::new(1_000, 100)),
            Some(Refusal::Overloaded(Resource::Cpu, CpuMem { cpu: 67, .. }))
        ));
    }

    #[test]
    fn instances_stop_where_their_estimates_cross_the_threshold() {
        let p = Policy::default();
        // 5,000 used; each instance of 1,000 is estimated at 850: four
        // make 8,400 (84 %), so at 65 % only one fits (5,850; two: 6,700).
        let h = host(CpuMem::new(5_000, 0), &[], 0);
        let per = CpuMem::new(1_000, 100);
        assert_eq!(instances_accepted(&h, &p, per, 10), 1);
        assert_eq!(instances_accepted(&h, &p, per, 0), 0);
        let idle = host(CpuMem::default(), &[], 0);
        // 7 × 850 = 5,950 (60 %), 8 × 850 = 6,800 (68 %).
        assert_eq!(instances_accepted(&idle, &p, per, 100), 7);
        assert_eq!(instances_accepted(&idle, &p, per, 3), 3);
        let stale = host(CpuMem::default(), &[], 181);
        assert_eq!(instances_accepted(&stale, &p, per, 100), 0);
    }

    #[test]
    fn equality_with_the_threshold_passes() {
        let p = Policy::default();
        // 5,650 + 850 = 6,500 → exactly 65 %.
        let h = host(CpuMem::new(5_650, 0), &[], 0);
        assert_eq!(refusal(&h, &p, CpuMem::new(1_000, 100)), None);
    }
}
