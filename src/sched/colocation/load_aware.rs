//! The LoadAware filter (B.3, `loadaware/load_aware.go` and its default
//! estimator): a node is refused for new low-priority work when its
//! measured usage, plus estimates for what was placed since the last
//! measurement and for the incoming request, is above the threshold.

use super::CpuMem;

/// What an empty request is estimated at: 250 milli-CPU and 200 MiB (in
/// the caller's memory unit).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EmptyEstimate(pub CpuMem);

/// 200 MiB in MB.
pub const EMPTY_ESTIMATE_MB: EmptyEstimate = EmptyEstimate(CpuMem::new(250, 200));

/// Estimates one request: round(max(request, limit) × factor/100), capped
/// at the limit when there is one; an empty request gets `empty`.
pub fn estimate(request: CpuMem, limit: CpuMem, factors: CpuMem, empty: EmptyEstimate) -> CpuMem {
    let one = |req: i64, lim: i64, factor: i64, dflt: i64| {
        let base = req.max(lim);
        if base <= 0 {
            return dflt;
        }
        // Go's math.Round over float64, half away from zero.
        let est = (base as f64 * factor as f64 / 100.0).round() as i64;
        if lim > 0 {
            est.min(lim)
        } else {
            est
        }
    };
    CpuMem::new(
        one(request.cpu, limit.cpu, factors.cpu, empty.0.cpu),
        one(request.memory, limit.memory, factors.memory, empty.0.memory),
    )
}

/// round(used / allocatable × 100), as the filter computes it (0 for an
/// empty allocatable).
pub fn round_percent(used: i64, allocatable: i64) -> i64 {
    if allocatable <= 0 {
        return 0;
    }
    (used as f64 / allocatable as f64 * 100.0).round() as i64
}

/// The filter's view of one node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoadCheck {
    /// Usage percentages with every estimate.
    pub percent: CpuMem,
    /// The first resource above its threshold, if any.
    pub rejected: Option<Resource>,
}

/// A resource the filter looks at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Resource {
    /// CPU.
    Cpu,
    /// Memory.
    Memory,
}

/// Checks a node: `usage` is its last measurement, `estimated` the sum of
/// the estimates (recent placements and the incoming request). Equality
/// with the threshold passes.
pub fn check(
    usage: CpuMem,
    estimated: CpuMem,
    allocatable: CpuMem,
    thresholds: CpuMem,
) -> LoadCheck {
    let total = usage.plus(estimated);
    let percent = CpuMem::new(
        round_percent(total.cpu, allocatable.cpu),
        round_percent(total.memory, allocatable.memory),
    );
    let rejected = if percent.cpu > thresholds.cpu {
        Some(Resource::Cpu)
    } else if percent.memory > thresholds.memory {
        Some(Resource::Memory)
    } else {
        None
    };
    LoadCheck { percent, rejected }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equality_passes_and_above_rejects() {
        let alloc = CpuMem::new(1000, 1000);
        let t = CpuMem::new(65, 95);
        assert_eq!(
            check(CpuMem::new(650, 0), CpuMem::default(), alloc, t).rejected,
            None
        );
        assert_eq!(
            check(CpuMem::new(656, 0), CpuMem::default(), alloc, t).rejected,
            Some(Resource::Cpu)
        );
    }

    #[test]
    fn estimates_scale_and_cap_at_the_limit() {
        let f = CpuMem::new(85, 70);
        assert_eq!(
            estimate(
                CpuMem::new(1000, 2048),
                CpuMem::default(),
                f,
                EMPTY_ESTIMATE_MB
            ),
            CpuMem::new(850, 1434)
        );
        assert_eq!(
            estimate(CpuMem::default(), CpuMem::default(), f, EMPTY_ESTIMATE_MB),
            CpuMem::new(250, 200)
        );
    }
}
