//! Koordinator's colocation rules (`shared/docs/fairness_colocation.md`
//! Part B) as pure functions over integer milli-CPU and memory amounts:
//! the batch allocatable computed from measured usage (B.2), the LoadAware
//! filter and its estimates (B.3), BE CPU suppression (B.4) and the
//! evictors (B.5–B.7). `tests/fairness_vectors.rs` proves them against
//! the `koord_*` and `colocation_provider_scenario` vectors.
//!
//! Rounding follows Koordinator exactly, because the vectors sit on the
//! boundaries: memory percentages floor, the load filter rounds, the load
//! filter rejects above its threshold, the evictors trigger at it.

pub mod batch_allocatable;
pub mod evict;
pub mod knobs;
pub mod load_aware;
pub mod node;
pub mod placement;
pub mod suppress;

/// A CPU amount in milli-cores and a memory amount (MB in the service,
/// bytes in some upstream vectors: the formulas do not care).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CpuMem {
    /// Milli-cores.
    pub cpu: i64,
    /// Memory, in the caller's unit.
    pub memory: i64,
}

impl CpuMem {
    /// Both amounts.
    pub const fn new(cpu: i64, memory: i64) -> Self {
        Self { cpu, memory }
    }

    /// Component-wise sum.
    #[must_use]
    pub fn plus(self, o: Self) -> Self {
        Self::new(
            self.cpu.saturating_add(o.cpu),
            self.memory.saturating_add(o.memory),
        )
    }
}

/// `x × pct / 100`, truncated, without overflow.
pub(crate) fn percent_of(x: i64, pct: i64) -> i64 {
    clamp_i64(i128::from(x) * i128::from(pct) / 100)
}

/// `floor(used × 100 / capacity)`, the evictors' usage percentage (0 for
/// an empty capacity).
pub fn floor_percent(used: i64, capacity: i64) -> i64 {
    if capacity <= 0 {
        return 0;
    }
    clamp_i64((i128::from(used) * 100).div_euclid(i128::from(capacity)))
}

pub(crate) fn clamp_i64(v: i128) -> i64 {
    i64::try_from(v).unwrap_or(if v < 0 { i64::MIN } else { i64::MAX })
}
