//! Volume plans: `AUTO:/data:rw:100`-style requests placed on a node's disks (Eru volume plugin).
//!
//! Not covered by eru.md; follows Eru's `resources/volume/schedule` (size only, no IOPS
//! quotas). A binding is `SRC:DST[:FLAGS[:SIZE]]`; a source ending in `AUTO` is scheduled:
//! *normal* (sized) requests share a volume, *monopoly* (`m` flag) requests take a whole
//! unused volume between them, *unlimited* (size 0) requests go to the freest volume.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use super::capacity::NodeCapacity;
use super::error::{SchedError, SchedResult};
use super::memory::ratio;

/// One requested volume binding, e.g. `AUTO:/data:rw:100`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct VolumeBinding {
    /// Host path, or a name ending in `AUTO` to let the scheduler pick a volume.
    pub source: String,
    /// Path inside the workload.
    pub destination: String,
    /// Flags with their characters sorted (`rw`, `mrw` …).
    pub flags: String,
    /// Size in bytes (0 = unlimited).
    pub size: i64,
}

impl VolumeBinding {
    /// The scheduler must choose the volume (source ends in `AUTO`).
    pub fn requires_schedule(&self) -> bool {
        self.source.ends_with("AUTO")
    }

    /// A scheduled volume that must own an unused volume (`m` flag).
    pub fn is_monopoly(&self) -> bool {
        self.requires_schedule() && self.flags.contains('m')
    }

    /// A scheduled volume without a size.
    pub fn is_unlimited(&self) -> bool {
        self.requires_schedule() && self.size == 0
    }
}

impl fmt::Display for VolumeBinding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.flags.is_empty() && self.size == 0 {
            write!(f, "{}:{}", self.source, self.destination)
        } else {
            write!(
                f,
                "{}:{}:{}:{}",
                self.source, self.destination, self.flags, self.size
            )
        }
    }
}

impl FromStr for VolumeBinding {
    type Err = SchedError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = |reason: &str| SchedError::InvalidVolume {
            binding: s.to_owned(),
            reason: reason.to_owned(),
        };
        let parts: Vec<&str> = s.split(':').collect();
        let (source, destination, flags, size) = match parts.as_slice() {
            [src, dst] => (*src, *dst, "", 0),
            [src, dst, flags] => (*src, *dst, *flags, 0),
            [src, dst, flags, size] => (
                *src,
                *dst,
                *flags,
                parse_size(size)
                    .ok_or_else(|| bad("size is not a byte count like 100, 1G or 512MiB"))?,
            ),
            _ => return Err(bad("expected SRC:DST[:FLAGS[:SIZE]]")),
        };
        if destination.is_empty() {
            return Err(bad("destination must be given"));
        }
        if size < 0 {
            return Err(bad("size must not be negative"));
        }
        let mut chars: Vec<char> = flags.chars().collect();
        chars.sort_unstable();
        let vb = VolumeBinding {
            source: source.to_owned(),
            destination: destination.to_owned(),
            flags: chars.into_iter().collect(),
            size,
        };
        if vb.is_monopoly() && vb.is_unlimited() {
            return Err(bad("a monopoly volume needs a size"));
        }
        Ok(vb)
    }
}

/// Parse `100`, `1G`, `512MiB`, `1.5g` (binary units, like Eru's RAMInBytes).
fn parse_size(s: &str) -> Option<i64> {
    let s = s.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let value: f64 = num.parse().ok()?;
    let power = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 1,
        "m" | "mb" | "mib" => 2,
        "g" | "gb" | "gib" => 3,
        "t" | "tb" | "tib" => 4,
        "p" | "pb" | "pib" => 5,
        _ => return None,
    };
    let bytes = (value * 1024f64.powi(power)).trunc();
    (bytes.is_finite() && bytes < i64::MAX as f64).then_some(bytes as i64)
}

/// Bytes per volume (device path → bytes).
pub type VolumeMap = BTreeMap<String, i64>;

/// A node's volumes: total size and bytes in use per volume.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct NodeVolumes {
    /// Size of each volume.
    pub capacity: VolumeMap,
    /// Bytes allocated on each volume.
    pub usage: VolumeMap,
}

/// One instance's volume placement: binding (as a string) → `{volume: bytes}`.
pub type VolumePlan = BTreeMap<String, VolumeMap>;

#[derive(Debug, Clone)]
struct Vol {
    device: String,
    size: i64,
}

fn sort_vols(v: &mut [Vol]) {
    v.sort_by(|a, b| a.size.cmp(&b.size).then_with(|| a.device.cmp(&b.device)));
}

/// Volume plans for one node, at most `max_deploy_count` (Eru `GetVolumePlans`).
///
/// Volumes with nothing allocated start *unused*; normal requests only go to *used* volumes,
/// and unused ones (smallest first) are turned into used ones while monopoly capacity
/// exceeds normal capacity. Each normal request takes the smallest volume it fits in.
/// E.g. `/sda0:1000, /sda1:200` and `AUTO:/data:rw:100` → 12 plans (2 on sda1, 10 on sda0).
// Long on purpose: it follows Eru's planner step by step (docs/eru.md), so
// the two can be compared line by line.
pub fn volume_plans(
    node: &NodeVolumes,
    request: &[VolumeBinding],
    max_deploy_count: usize,
) -> SchedResult<Vec<VolumePlan>> {
    refuse_repeated_destinations(request)?;
    if !request.iter().any(VolumeBinding::requires_schedule) {
        return Ok(vec![VolumePlan::new(); max_deploy_count]);
    }
    let (mut used, mut unused) = split_by_use(node);
    let mut normal: Vec<&VolumeBinding> = request
        .iter()
        .filter(|v| v.requires_schedule() && !v.is_monopoly() && v.size > 0)
        .collect();
    let mut mono: Vec<&VolumeBinding> = request.iter().filter(|v| v.is_monopoly()).collect();
    let unlimited: Vec<&VolumeBinding> = request
        .iter()
        .filter(|v| v.is_unlimited() && !v.is_monopoly())
        .collect();
    normal.sort_by_key(|v| v.size);
    mono.sort_by_key(|v| v.size);
    if used.is_empty() && unused.is_empty() {
        return Ok(Vec::new());
    }
    let min_normal = normal.iter().map(|v| v.size).min().unwrap_or(i64::MAX);
    let mut best = plans_for(&used, &unused, &normal, &mono, max_deploy_count);
    while best.1.len() > best.0.len() {
        // Turn the smallest unused volume that fits a normal request into a shared one.
        let Some(p) = unused.iter().position(|v| v.size >= min_normal) else {
            break;
        };
        used.push(unused.remove(p));
        best = plans_for(&used, &unused, &normal, &mono, max_deploy_count);
    }
    let (normal_plans, mono_plans) = best;
    let capacity = normal_plans.len().min(mono_plans.len());
    let unlimited_device = match unlimited.is_empty() {
        true => None,
        false => roomiest_after(&used, &unused, normal_plans.iter().chain(&mono_plans)),
    };
    Ok(normal_plans
        .into_iter()
        .zip(mono_plans)
        .take(capacity)
        .map(|(mut plan, mono_plan)| {
            plan.extend(mono_plan);
            if let Some(dev) = &unlimited_device {
                for vb in &unlimited {
                    plan.insert(vb.to_string(), VolumeMap::from([(dev.clone(), 0)]));
                }
            }
            plan
        })
        .collect())
}

/// A destination may be bound once per request.
fn refuse_repeated_destinations(request: &[VolumeBinding]) -> SchedResult<()> {
    let mut seen = std::collections::BTreeSet::new();
    match request
        .iter()
        .find(|vb| !seen.insert(vb.destination.as_str()))
    {
        None => Ok(()),
        Some(vb) => Err(SchedError::InvalidVolume {
            binding: vb.to_string(),
            reason: "destination requested twice".into(),
        }),
    }
}

/// The node's volumes with their free space, split into those already in
/// use (shared by normal requests) and the untouched ones (monopoly
/// requests), each sorted.
fn split_by_use(node: &NodeVolumes) -> (Vec<Vol>, Vec<Vol>) {
    let (mut used, mut unused) = (Vec::new(), Vec::new());
    for (device, &size) in &node.capacity {
        let taken = node.usage.get(device).copied().unwrap_or(0);
        let vol = Vol {
            device: device.clone(),
            size: size - taken,
        };
        if taken == 0 {
            unused.push(vol);
        } else {
            used.push(vol);
        }
    }
    sort_vols(&mut used);
    sort_vols(&mut unused);
    (used, unused)
}

/// The volume with the most space left after every plan (ties: the lower
/// device name), where unlimited bindings go.
fn roomiest_after<'a>(
    used: &[Vol],
    unused: &[Vol],
    plans: impl Iterator<Item = &'a VolumePlan>,
) -> Option<String> {
    let mut left: BTreeMap<&str, i64> = used
        .iter()
        .chain(unused)
        .map(|v| (v.device.as_str(), v.size))
        .collect();
    for plan in plans {
        for vm in plan.values() {
            for (dev, size) in vm {
                if let Some(l) = left.get_mut(dev.as_str()) {
                    *l -= size;
                }
            }
        }
    }
    left.iter()
        .max_by(|a, b| a.1.cmp(b.1).then_with(|| b.0.cmp(a.0)))
        .map(|(d, _)| (*d).to_owned())
}

/// Normal plans over the used volumes and monopoly plans over the unused ones.
fn plans_for(
    used: &[Vol],
    unused: &[Vol],
    normal: &[&VolumeBinding],
    mono: &[&VolumeBinding],
    max: usize,
) -> (Vec<VolumePlan>, Vec<VolumePlan>) {
    let normal_plans = if normal.is_empty() {
        vec![VolumePlan::new(); max]
    } else {
        let mut vols = used.to_vec();
        let mut plans = Vec::new();
        while plans.len() < max {
            let Some(plan) = normal_plan(&mut vols, normal) else {
                break;
            };
            plans.push(plan);
        }
        plans
    };
    let mono_plans = if mono.is_empty() {
        vec![VolumePlan::new(); max]
    } else {
        let total: i64 = mono.iter().map(|v| v.size).sum();
        unused
            .iter()
            .filter(|v| v.size >= total)
            .take(max)
            .map(|v| mono_plan(v, mono, total))
            .collect()
    };
    (normal_plans, mono_plans)
}

/// Place every normal request (smallest first) on the smallest volume it fits; all or nothing.
fn normal_plan(vols: &mut [Vol], normal: &[&VolumeBinding]) -> Option<VolumePlan> {
    let mut plan = VolumePlan::new();
    for vb in normal {
        let vol = vols
            .iter_mut()
            .filter(|v| v.size >= vb.size)
            .min_by(|a, b| a.size.cmp(&b.size).then_with(|| a.device.cmp(&b.device)))?;
        vol.size -= vb.size;
        plan.insert(
            vb.to_string(),
            VolumeMap::from([(vol.device.clone(), vb.size)]),
        );
    }
    Some(plan)
}

/// Split a whole volume among the monopoly requests in proportion to their sizes; the
/// rounding remainder goes to the first (smallest) request.
fn mono_plan(vol: &Vol, mono: &[&VolumeBinding], total: i64) -> VolumePlan {
    let mut plan = VolumePlan::new();
    let mut left = vol.size;
    let mut sizes: Vec<i64> = mono
        .iter()
        .map(|vb| (vb.size as f64 / total as f64 * vol.size as f64) as i64)
        .collect();
    for s in &sizes {
        left -= s;
    }
    if let Some(first) = sizes.first_mut() {
        *first += left;
    }
    for (vb, size) in mono.iter().zip(sizes) {
        plan.insert(
            vb.to_string(),
            VolumeMap::from([(vol.device.clone(), size)]),
        );
    }
    plan
}

/// Volume capacity of a node for a request, to merge with the CPU/memory capacity.
///
/// Capacity = number of volume plans (at most `max_deploy_count`); usage and rate are the
/// used and requested bytes over the node's total volume size; weight 1.
pub fn volume_capacity(
    node: &NodeVolumes,
    request: &[VolumeBinding],
    max_deploy_count: usize,
) -> SchedResult<NodeCapacity> {
    let plans = volume_plans(node, request, max_deploy_count)?;
    let total = node.capacity.values().sum::<i64>() as f64;
    Ok(NodeCapacity {
        capacity: plans.len() as i64,
        usage: ratio(node.usage.values().sum::<i64>() as f64, total),
        rate: ratio(request.iter().map(|v| v.size).sum::<i64>() as f64, total),
        weight: 1,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vols(pairs: &[(&str, i64)]) -> VolumeMap {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect()
    }

    fn req(s: &[&str]) -> Vec<VolumeBinding> {
        s.iter()
            .map(|b| b.parse().expect("valid binding"))
            .collect()
    }

    #[test]
    fn issue_example_capacity_12() {
        let node = NodeVolumes {
            capacity: vols(&[("/sda0", 1000), ("/sda1", 200)]),
            usage: VolumeMap::new(),
        };
        let plans = volume_plans(&node, &req(&["AUTO:/data:rw:100"]), 1000).expect("ok");
        assert_eq!(plans.len(), 12);
        let on = |dev: &str| {
            plans
                .iter()
                .filter(|p| p["AUTO:/data:rw:100"].contains_key(dev))
                .count()
        };
        assert_eq!((on("/sda0"), on("/sda1")), (10, 2));
    }

    #[test]
    fn monopoly_takes_whole_unused_volumes() {
        let node = NodeVolumes {
            capacity: vols(&[("/a", 1000), ("/b", 1000), ("/c", 1000)]),
            usage: vols(&[("/a", 500)]),
        };
        let plans = volume_plans(
            &node,
            &req(&["AUTO:/x:rw:100", "AUTO:/m1:rwm:100", "AUTO:/m2:mrw:300"]),
            1000,
        )
        .expect("ok");
        // /a (used) hosts the normal requests; /b and /c are monopolised, one per instance.
        assert_eq!(plans.len(), 2);
        for p in &plans {
            let m1 = &p["AUTO:/m1:mrw:100"];
            let m2 = &p["AUTO:/m2:mrw:300"];
            assert_eq!(m1.keys().next(), m2.keys().next());
            assert_eq!(m1.values().sum::<i64>() + m2.values().sum::<i64>(), 1000);
            assert_eq!(p["AUTO:/x:rw:100"], vols(&[("/a", 100)]));
        }
    }

    #[test]
    fn parses_and_rejects() {
        let vb: VolumeBinding = "AUTO:/data:wr:1K".parse().expect("valid");
        assert_eq!((vb.flags.as_str(), vb.size), ("rw", 1024));
        assert!("AUTO".parse::<VolumeBinding>().is_err());
        assert!("AUTO:/d:m".parse::<VolumeBinding>().is_err());
        assert!("AUTO:/d:rw:1Q".parse::<VolumeBinding>().is_err());
    }

    #[test]
    fn no_scheduled_volume_means_no_limit() {
        let plans = volume_plans(&NodeVolumes::default(), &req(&["/host:/data"]), 5).expect("ok");
        assert_eq!(plans.len(), 5);
    }
}
