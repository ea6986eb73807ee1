//! The colocation policy: Koordinator's knobs under Koordinator's names
//! (so operators reuse what they know), with its defaults and its
//! validation ranges. The cluster has one; a provider may override any
//! field.

use super::batch_allocatable::CalculatePolicy;
use super::evict::CpuEvictPolicy;
use super::suppress::SuppressPolicy;
use super::CpuMem;
use serde::{Deserialize, Serialize};

/// A pair of percentages by resource (`forbidUsageThresholds`,
/// `estimatedScalingFactors`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CpuMemPercent {
    /// CPU.
    pub cpu: i64,
    /// Memory.
    pub memory: i64,
}

impl CpuMemPercent {
    /// As amounts.
    pub fn as_cpumem(self) -> CpuMem {
        CpuMem::new(self.cpu, self.memory)
    }
}

/// Cooldowns after an eviction, in seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Cooldown {
    /// After a CPU eviction (20).
    pub cpu: i64,
    /// After a memory eviction (4).
    pub memory: i64,
}

/// Every knob, resolved (defaults filled in).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[allow(missing_docs)]
pub struct Policy {
    pub cpu_reclaim_threshold_percent: i64,
    pub memory_reclaim_threshold_percent: i64,
    pub cpu_calculate_policy: CalculatePolicy,
    pub memory_calculate_policy: CalculatePolicy,
    #[serde(rename = "batchCPUThresholdPercent")]
    pub batch_cpu_threshold_percent: Option<i64>,
    pub batch_memory_threshold_percent: Option<i64>,
    pub forbid_usage_thresholds: CpuMemPercent,
    pub estimated_scaling_factors: CpuMemPercent,
    pub cpu_suppress_threshold_percent: i64,
    pub cpu_suppress_min_percent: Option<i64>,
    pub cpu_suppress_policy: SuppressPolicy,
    pub memory_evict_threshold_percent: i64,
    pub memory_evict_lower_percent: Option<i64>,
    #[serde(rename = "cpuEvictBESatisfactionLowerPercent")]
    pub cpu_evict_be_satisfaction_lower_percent: Option<i64>,
    #[serde(rename = "cpuEvictBESatisfactionUpperPercent")]
    pub cpu_evict_be_satisfaction_upper_percent: Option<i64>,
    #[serde(rename = "cpuEvictBEUsageThresholdPercent")]
    pub cpu_evict_be_usage_threshold_percent: i64,
    pub cpu_evict_time_window_seconds: i64,
    pub cpu_evict_policy: CpuEvictPolicy,
    pub degrade_time_minutes: i64,
    pub metric_expiration_seconds: i64,
    pub cooldown: Cooldown,
}

impl Default for Policy {
    /// Koordinator's defaults (B.2–B.7). The satisfaction watermarks have
    /// none upstream: unset, the satisfaction evictor stays off.
    fn default() -> Self {
        Self {
            cpu_reclaim_threshold_percent: 60,
            memory_reclaim_threshold_percent: 65,
            cpu_calculate_policy: CalculatePolicy::Usage,
            memory_calculate_policy: CalculatePolicy::Usage,
            batch_cpu_threshold_percent: None,
            batch_memory_threshold_percent: None,
            forbid_usage_thresholds: CpuMemPercent {
                cpu: 65,
                memory: 95,
            },
            estimated_scaling_factors: CpuMemPercent {
                cpu: 85,
                memory: 70,
            },
            cpu_suppress_threshold_percent: 65,
            cpu_suppress_min_percent: None,
            cpu_suppress_policy: SuppressPolicy::Cpuset,
            memory_evict_threshold_percent: 70,
            memory_evict_lower_percent: None,
            cpu_evict_be_satisfaction_lower_percent: None,
            cpu_evict_be_satisfaction_upper_percent: None,
            cpu_evict_be_usage_threshold_percent: 90,
            cpu_evict_time_window_seconds: 1,
            cpu_evict_policy: CpuEvictPolicy::RealLimit,
            degrade_time_minutes: 15,
            metric_expiration_seconds: 180,
            cooldown: Cooldown { cpu: 20, memory: 4 },
        }
    }
}

impl Policy {
    /// Koordinator's defaults with each scope's fields laid over them in
    /// order (cluster, then provider), checked against the ranges.
    pub fn layered(scopes: &[Option<&serde_json::Value>]) -> Result<Self, String> {
        let mut merged = serde_json::to_value(Self::default()).map_err(|e| e.to_string())?;
        for scope in scopes.iter().flatten() {
            if let (Some(base), Some(fields)) = (merged.as_object_mut(), scope.as_object()) {
                for (k, v) in fields {
                    base.insert(k.clone(), v.clone());
                }
            }
        }
        let p: Self = serde_json::from_value(merged).map_err(|e| e.to_string())?;
        p.validate()?;
        Ok(p)
    }

    /// Koordinator's ranges and choices (`RANGES`, `CHOICES`), then the
    /// rules that relate two knobs; the first violation, named by field.
    pub fn validate(&self) -> Result<(), String> {
        let wire = serde_json::to_value(self).map_err(|e| e.to_string())?;
        let at = |name: &str| wire.pointer(&format!("/{}", name.replace('.', "/")));
        for &(name, least, most) in RANGES {
            // Unset (null) optional knobs have no value to check.
            let Some(v) = at(name).and_then(serde_json::Value::as_i64) else {
                continue;
            };
            match most {
                Some(most) if !(least..=most).contains(&v) => {
                    return Err(format!(
                        "{name} must be between {least} and {most}, not {v}"
                    ))
                }
                None if v < least => {
                    return Err(format!("{name} must be at least {least}, not {v}"))
                }
                _ => {}
            }
        }
        for &(name, choices) in CHOICES {
            if let Some(v) = at(name).and_then(serde_json::Value::as_str) {
                if !choices.contains(&v) {
                    return Err(format!("{name} must be {}, not {v}", choices.join(" or ")));
                }
            }
        }
        if let Some(lower) = self.memory_evict_lower_percent {
            if lower > self.memory_evict_threshold_percent {
                return Err(
                    "memoryEvictLowerPercent must not be above memoryEvictThresholdPercent".into(),
                );
            }
        }
        match (
            self.cpu_evict_be_satisfaction_lower_percent,
            self.cpu_evict_be_satisfaction_upper_percent,
        ) {
            (None, None) => Ok(()),
            (Some(lower), Some(upper)) if upper < lower => {
                Err("cpuEvictBESatisfactionUpperPercent must not be below the lower percent".into())
            }
            (Some(_), Some(_)) => Ok(()),
            _ => Err(
                "cpuEvictBESatisfactionLowerPercent and cpuEvictBESatisfactionUpperPercent go together"
                    .into(),
            ),
        }
    }
}

/// Each knob's own range, by its wire name (a nested one as
/// `outer.inner`): the least it may be and the most, where there is a
/// most (reclaim above 100 % is allowed: it overcommits, as upstream).
/// `Policy::validate` checks them; the API's document states them.
pub const RANGES: &[(&str, i64, Option<i64>)] = &[
    ("cpuReclaimThresholdPercent", 0, None),
    ("memoryReclaimThresholdPercent", 0, None),
    ("batchCPUThresholdPercent", 0, None),
    ("batchMemoryThresholdPercent", 0, None),
    ("forbidUsageThresholds.cpu", 0, Some(100)),
    ("forbidUsageThresholds.memory", 0, Some(100)),
    ("estimatedScalingFactors.cpu", 1, Some(100)),
    ("estimatedScalingFactors.memory", 1, Some(100)),
    ("cpuSuppressThresholdPercent", 0, Some(100)),
    ("cpuSuppressMinPercent", 0, Some(100)),
    ("memoryEvictThresholdPercent", 0, Some(100)),
    ("memoryEvictLowerPercent", 0, Some(100)),
    ("cpuEvictBEUsageThresholdPercent", 0, Some(100)),
    // lower in (0, 60], upper in (0, 100)
    ("cpuEvictBESatisfactionLowerPercent", 1, Some(60)),
    ("cpuEvictBESatisfactionUpperPercent", 1, Some(99)),
    ("cpuEvictTimeWindowSeconds", 1, None),
    ("degradeTimeMinutes", 1, None),
    ("metricExpirationSeconds", 1, None),
    ("cooldown.cpu", 0, None),
    ("cooldown.memory", 0, None),
];

/// The values each named knob may take (CPU is never counted by request:
/// upstream counts memory alone that way).
pub const CHOICES: &[(&str, &[&str])] = &[
    ("cpuCalculatePolicy", &["usage", "maxUsageRequest"]),
    (
        "memoryCalculatePolicy",
        &["usage", "request", "maxUsageRequest"],
    ),
    ("cpuSuppressPolicy", &["cpuset", "cfsQuota"]),
    (
        "cpuEvictPolicy",
        &["evictByRealLimit", "evictByAllocatable"],
    ),
];
