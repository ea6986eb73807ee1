//! The colocation policy: Koordinator's knobs under Koordinator's names
//! (so operators reuse what they know), with its defaults and its
//! validation ranges. The cluster has one; a provider may override any
//! field.

use super::batch::CalculatePolicy;
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

    /// Koordinator's ranges; the first violation, named by field.
    pub fn validate(&self) -> Result<(), String> {
        self.validate_batch()?;
        self.validate_load()?;
        self.validate_watermarks()?;
        self.validate_satisfaction()?;
        at_least(
            "cpuEvictTimeWindowSeconds",
            self.cpu_evict_time_window_seconds,
            1,
        )?;
        at_least("degradeTimeMinutes", self.degrade_time_minutes, 1)?;
        at_least("metricExpirationSeconds", self.metric_expiration_seconds, 1)?;
        at_least("cooldown.cpu", self.cooldown.cpu, 0)?;
        at_least("cooldown.memory", self.cooldown.memory, 0)
    }

    /// The batch allocatable's knobs (reclaim above 100 % is allowed: it
    /// overcommits, as upstream).
    fn validate_batch(&self) -> Result<(), String> {
        at_least(
            "cpuReclaimThresholdPercent",
            self.cpu_reclaim_threshold_percent,
            0,
        )?;
        at_least(
            "memoryReclaimThresholdPercent",
            self.memory_reclaim_threshold_percent,
            0,
        )?;
        if self.cpu_calculate_policy == CalculatePolicy::Request {
            return Err("cpuCalculatePolicy must be usage or maxUsageRequest".into());
        }
        if let Some(v) = self.batch_cpu_threshold_percent {
            at_least("batchCPUThresholdPercent", v, 0)?;
        }
        if let Some(v) = self.batch_memory_threshold_percent {
            at_least("batchMemoryThresholdPercent", v, 0)?;
        }
        Ok(())
    }

    /// The LoadAware filter's thresholds and estimation factors.
    fn validate_load(&self) -> Result<(), String> {
        percent(
            "forbidUsageThresholds.cpu",
            self.forbid_usage_thresholds.cpu,
        )?;
        percent(
            "forbidUsageThresholds.memory",
            self.forbid_usage_thresholds.memory,
        )?;
        at_least(
            "estimatedScalingFactors.cpu",
            self.estimated_scaling_factors.cpu,
            1,
        )?;
        percent(
            "estimatedScalingFactors.cpu",
            self.estimated_scaling_factors.cpu,
        )?;
        at_least(
            "estimatedScalingFactors.memory",
            self.estimated_scaling_factors.memory,
            1,
        )?;
        percent(
            "estimatedScalingFactors.memory",
            self.estimated_scaling_factors.memory,
        )
    }

    /// Suppression and memory eviction watermarks.
    fn validate_watermarks(&self) -> Result<(), String> {
        percent(
            "cpuSuppressThresholdPercent",
            self.cpu_suppress_threshold_percent,
        )?;
        if let Some(v) = self.cpu_suppress_min_percent {
            percent("cpuSuppressMinPercent", v)?;
        }
        percent(
            "memoryEvictThresholdPercent",
            self.memory_evict_threshold_percent,
        )?;
        if let Some(v) = self.memory_evict_lower_percent {
            percent("memoryEvictLowerPercent", v)?;
            if v > self.memory_evict_threshold_percent {
                return Err(
                    "memoryEvictLowerPercent must not be above memoryEvictThresholdPercent".into(),
                );
            }
        }
        percent(
            "cpuEvictBEUsageThresholdPercent",
            self.cpu_evict_be_usage_threshold_percent,
        )
    }

    /// lower in (0, 60], upper in (0, 100), upper ≥ lower; both or neither.
    fn validate_satisfaction(&self) -> Result<(), String> {
        match (self.cpu_evict_be_satisfaction_lower_percent, self.cpu_evict_be_satisfaction_upper_percent) {
            (None, None) => Ok(()),
            (Some(lower), Some(upper)) => {
                if !(1..=60).contains(&lower) {
                    return Err(format!("cpuEvictBESatisfactionLowerPercent must be in (0, 60], not {lower}"));
                }
                if !(1..100).contains(&upper) {
                    return Err(format!("cpuEvictBESatisfactionUpperPercent must be in (0, 100), not {upper}"));
                }
                if upper < lower {
                    return Err("cpuEvictBESatisfactionUpperPercent must not be below the lower percent".into());
                }
                Ok(())
            }
            _ => Err("cpuEvictBESatisfactionLowerPercent and cpuEvictBESatisfactionUpperPercent go together".into()),
        }
    }
}

fn percent(name: &str, v: i64) -> Result<(), String> {
    (0..=100)
        .contains(&v)
        .then_some(())
        .ok_or(format!("{name} must be between 0 and 100, not {v}"))
}

fn at_least(name: &str, v: i64, min: i64) -> Result<(), String> {
    (v >= min)
        .then_some(())
        .ok_or(format!("{name} must be at least {min}, not {v}"))
}
