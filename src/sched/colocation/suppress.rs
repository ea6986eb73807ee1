//! BE CPU suppression (B.4, `cpusuppress/cpu_suppress.go`): how much CPU
//! the node agent should let best-effort work use now, so that
//! high-priority work keeps its headroom.

/// How the agent applies the limit (`cpuSuppressPolicy`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum SuppressPolicy {
    /// A cpuset of whole CPUs (the default).
    #[default]
    #[serde(rename = "cpuset")]
    Cpuset,
    /// A CFS quota on the best-effort cgroup.
    #[serde(rename = "cfsQuota")]
    CfsQuota,
}

/// The node's measurements, in milli-CPU.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SuppressInput {
    /// The node's CPU capacity.
    pub capacity: i64,
    /// What the node keeps for itself.
    pub node_reserved: i64,
    /// What the whole node uses.
    pub node_used: i64,
    /// Usage of every measured consumer: (is best-effort, used). A
    /// consumer measured but unknown counts as not best-effort.
    pub consumers: Vec<(bool, i64)>,
}

/// suppress(BE) = capacity × threshold% − Σ used(non-BE) −
/// max(node used − Σ used(all), node reserved), the first term of the max
/// floored at 0; raised to capacity × min% when that is set.
pub fn be_suppress_milli(
    input: &SuppressInput,
    threshold_percent: i64,
    min_percent: Option<i64>,
) -> i64 {
    let all: i64 = input.consumers.iter().map(|(_, u)| u).sum();
    let non_be: i64 = input
        .consumers
        .iter()
        .filter(|(be, _)| !be)
        .map(|(_, u)| u)
        .sum();
    let system = (input.node_used - all).max(0).max(input.node_reserved);
    let suppress = super::percent_of(input.capacity, threshold_percent) - non_be - system;
    match min_percent {
        Some(min) => suppress.max(super::percent_of(input.capacity, min)),
        None => suppress,
    }
}

/// The cpuset size: max(ceil(suppress / 1000), 2) CPUs.
pub fn cpuset_size(suppress_milli: i64) -> i64 {
    suppress_milli
        .div_euclid(1000)
        .saturating_add(i64::from(suppress_milli.rem_euclid(1000) > 0))
        .max(2)
}

/// The CFS quota for a 100 ms period: max(suppress × 100, 2000) µs.
pub fn cfs_quota_us(suppress_milli: i64) -> i64 {
    suppress_milli.saturating_mul(100).max(2000)
}

/// The limit best-effort work actually gets under the policy, in milli-CPU.
pub fn effective_limit_milli(policy: SuppressPolicy, suppress_milli: i64) -> i64 {
    match policy {
        SuppressPolicy::Cpuset => cpuset_size(suppress_milli) * 1000,
        SuppressPolicy::CfsQuota => cfs_quota_us(suppress_milli) / 100,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floors_of_both_policies() {
        assert_eq!(cpuset_size(-5), 2);
        assert_eq!(cpuset_size(2001), 3);
        assert_eq!(cfs_quota_us(-5), 2000);
        assert_eq!(effective_limit_milli(SuppressPolicy::CfsQuota, 8800), 8800);
    }
}
