//! The consumers' cgroups, as the kernel holds them: the convention that
//! names a consumer, its measurements (CPU time, memory working set), the
//! best-effort limit, and the kill of a whole consumer. cgroup v1 (the
//! `memory`, `cpuacct`, `cpu` and `cpuset` controllers, each mounted
//! apart or together) and cgroup v2 (one hierarchy with those controllers).
//!
//! The convention, under `--cgroup-parent` in every controller:
//! `prod/<consumer uuid>` and `mid/<uuid>` for production work, which the
//! agent measures and never touches; `be/<uuid>` for batch and free work,
//! which it limits (on `be` itself) and may kill. Anything else there is
//! logged once and left alone.
//!
//! The agent runs as root and writes to these files: every write opens
//! the file without following a final symbolic link and checks, on the
//! open file, that it is on a cgroup filesystem, so that no link or bind
//! mount another user could plant turns a write into one elsewhere.

use super::cgroup_files::{io, key_in, read_number};
pub use super::cgroup_files::{read_text, write_cgroup, CgroupError, OpenCounters};
use std::collections::BTreeSet;
use std::path::{Component, Path, PathBuf};
use uuid::Uuid;

/// The CFS period the limit is written for (the policy's quota is per
/// 100 ms).
const CFS_PERIOD_US: i64 = 100_000;
/// Rounds of reading a cgroup's processes and killing them, for work
/// that forks while it is killed.
const KILL_ROUNDS: usize = 50;

/// A consumer's place in the convention.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Tier {
    /// `prod/`: production, never touched.
    Prod,
    /// `mid/`: mid priority, never touched.
    Mid,
    /// `be/`: batch and free work, limited and evicted.
    BestEffort,
}

impl Tier {
    /// Every tier, with its directory.
    pub const ALL: [(Tier, &'static str); 3] = [
        (Tier::Prod, "prod"),
        (Tier::Mid, "mid"),
        (Tier::BestEffort, "be"),
    ];

    /// The tier's directory under the parent.
    pub fn dir(self) -> &'static str {
        match self {
            Tier::Prod => "prod",
            Tier::Mid => "mid",
            Tier::BestEffort => "be",
        }
    }
}

/// A consumer's cgroup.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Slot {
    pub tier: Tier,
    pub consumer: Uuid,
}

impl Slot {
    fn rel(&self) -> PathBuf {
        Path::new(self.tier.dir()).join(self.consumer.to_string())
    }
}

/// Where each controller's copy of the parent is.
#[derive(Debug, Clone)]
pub enum Hierarchy {
    /// cgroup v1: one directory per controller (the same one when they
    /// are mounted together).
    V1 {
        memory: PathBuf,
        cpuacct: PathBuf,
        cpu: PathBuf,
        cpuset: Option<PathBuf>,
    },
    /// cgroup v2: one directory.
    V2 { dir: PathBuf },
}

/// The parent must stay under the root: a relative path without `..`.
fn checked_parent(parent: &Path) -> Result<&Path, CgroupError> {
    let plain = parent
        .components()
        .all(|c| matches!(c, Component::Normal(_)));
    if plain && parent.components().next().is_some() {
        Ok(parent)
    } else {
        Err(CgroupError::Setup(format!(
            "--cgroup-parent {} must be a relative path without '..'",
            parent.display()
        )))
    }
}

/// The v1 mount holding `controller` (`cpu` may be mounted as
/// `cpu,cpuacct`).
fn v1_mount(root: &Path, controller: &str) -> Option<PathBuf> {
    let direct = root.join(controller);
    if direct.is_dir() {
        return Some(direct);
    }
    ["cpu,cpuacct", "cpuacct,cpu"]
        .iter()
        .map(|m| root.join(m))
        .find(|p| p.is_dir() && m_has(p, controller))
}

fn m_has(mount: &Path, controller: &str) -> bool {
    mount
        .file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.split(',').any(|c| c == controller))
}

/// The v2 hierarchy at `dir` when it offers memory and cpu.
fn v2_at(dir: &Path) -> bool {
    std::fs::read_to_string(dir.join("cgroup.controllers")).is_ok_and(|c| {
        let have: BTreeSet<&str> = c.split_whitespace().collect();
        have.contains("memory") && have.contains("cpu")
    })
}

impl Hierarchy {
    /// Finds the controllers under `root` (`/sys/fs/cgroup`): v1 when its
    /// memory and cpuacct controllers are mounted, else v2 (at the root,
    /// or at `unified/` on a hybrid machine) when it has memory and cpu.
    pub fn detect(root: &Path, parent: &Path) -> Result<Hierarchy, CgroupError> {
        let parent = checked_parent(parent)?;
        let (memory, cpuacct) = (v1_mount(root, "memory"), v1_mount(root, "cpuacct"));
        if let (Some(memory), Some(cpuacct)) = (memory, cpuacct) {
            let cpu = v1_mount(root, "cpu").ok_or_else(|| {
                CgroupError::Setup(format!("{}: no cpu controller", root.display()))
            })?;
            return Ok(Hierarchy::V1 {
                memory: memory.join(parent),
                cpuacct: cpuacct.join(parent),
                cpu: cpu.join(parent),
                cpuset: v1_mount(root, "cpuset").map(|c| c.join(parent)),
            });
        }
        for dir in [root.to_path_buf(), root.join("unified")] {
            if v2_at(&dir) {
                return Ok(Hierarchy::V2 {
                    dir: dir.join(parent),
                });
            }
        }
        Err(CgroupError::Setup(format!(
            "{}: neither cgroup v1's memory and cpuacct controllers nor a cgroup v2 \
             hierarchy with memory and cpu",
            root.display()
        )))
    }

    /// "cgroup v1" or "cgroup v2", for the log.
    pub fn version(&self) -> &'static str {
        match self {
            Hierarchy::V1 { .. } => "cgroup v1",
            Hierarchy::V2 { .. } => "cgroup v2",
        }
    }

    /// Every directory of the parent, one per controller mount.
    fn parents(&self) -> Vec<&Path> {
        let mut out: Vec<&Path> = match self {
            Hierarchy::V1 {
                memory,
                cpuacct,
                cpu,
                cpuset,
            } => [Some(memory), Some(cpuacct), Some(cpu), cpuset.as_ref()]
                .into_iter()
                .flatten()
                .map(PathBuf::as_path)
                .collect(),
            Hierarchy::V2 { dir } => vec![dir.as_path()],
        };
        out.sort();
        out.dedup();
        out
    }

    /// The memory controller's copy of the parent (where consumers are
    /// listed and killed).
    fn memory_dir(&self) -> &Path {
        match self {
            Hierarchy::V1 { memory, .. } => memory,
            Hierarchy::V2 { dir } => dir,
        }
    }

    /// Makes the parent and its tiers in every controller (a cpuset
    /// level gets its parent's CPUs and memory nodes, as v1 requires
    /// before anything may join it; v2 levels pass the controllers down).
    pub fn prepare(&self) -> Result<(), CgroupError> {
        for base in self.parents() {
            for (_, tier) in Tier::ALL {
                let dir = base.join(tier);
                std::fs::create_dir_all(&dir).map_err(io(&dir))?;
            }
        }
        match self {
            Hierarchy::V1 {
                cpuset: Some(cpuset),
                ..
            } => {
                init_cpuset_chain(cpuset)?;
                for (_, tier) in Tier::ALL {
                    init_cpuset_level(&cpuset.join(tier))?;
                    // A consumer's cgroup, made by whoever starts the
                    // work, takes its tier's CPUs and nodes at birth.
                    write_cgroup(&cpuset.join(tier).join("cgroup.clone_children"), "1")?;
                }
            }
            Hierarchy::V1 { .. } => {}
            Hierarchy::V2 { dir } => {
                for level in [dir.as_path(), &dir.join(Tier::BestEffort.dir())] {
                    enable_v2_controllers(level)?;
                }
            }
        }
        Ok(())
    }

    /// The consumers the convention names, and the names under a tier
    /// that are not a consumer's uuid (for one log line each).
    pub fn slots(&self) -> (Vec<Slot>, Vec<PathBuf>) {
        let mut slots = Vec::new();
        let mut strange = Vec::new();
        for (tier, name) in Tier::ALL {
            let dir = self.memory_dir().join(name);
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            for entry in entries.flatten() {
                let is_dir = entry.file_type().is_ok_and(|t| t.is_dir());
                if !is_dir {
                    continue;
                }
                match entry.file_name().to_str().map(Uuid::parse_str) {
                    Some(Ok(consumer)) => slots.push(Slot { tier, consumer }),
                    _ => strange.push(entry.path()),
                }
            }
        }
        slots.sort();
        (slots, strange)
    }

    /// A consumer's counters, opened once for every later look.
    pub fn open_counters(&self, slot: &Slot) -> Result<OpenCounters, CgroupError> {
        let (cpu, cpu_key, inactive_key) = match self {
            Hierarchy::V1 { cpuacct, .. } => (
                cpuacct.join(slot.rel()).join("cpuacct.usage"),
                None,
                "total_inactive_file",
            ),
            Hierarchy::V2 { dir } => (
                dir.join(slot.rel()).join("cpu.stat"),
                Some("usage_usec"),
                "inactive_file",
            ),
        };
        let memory = self.memory_dir().join(slot.rel());
        let usage = match self {
            Hierarchy::V1 { .. } => memory.join("memory.usage_in_bytes"),
            Hierarchy::V2 { .. } => memory.join("memory.current"),
        };
        OpenCounters::open(&cpu, cpu_key, &usage, inactive_key, &memory)
    }

    /// A consumer's memory working set in bytes (usage less the inactive
    /// file cache the kernel reclaims first, as the kubelet counts it).
    pub fn memory_bytes(&self, slot: &Slot) -> Result<u64, CgroupError> {
        self.working_set(&self.memory_dir().join(slot.rel()))
    }

    /// The parent's memory limit in bytes (None: unlimited), and its
    /// usage with the file cache in it (never below the working set, so
    /// a usage under a watermark needs no closer look).
    pub fn parent_memory(&self) -> Result<(Option<u64>, u64), CgroupError> {
        let dir = self.memory_dir();
        let (limit, usage) = match self {
            Hierarchy::V1 { .. } => {
                let l = read_number(&dir.join("memory.limit_in_bytes"))?;
                // v1 writes "no limit" as the largest page-aligned i64.
                ((l < (1 << 62)).then_some(l), "memory.usage_in_bytes")
            }
            Hierarchy::V2 { .. } => {
                let path = dir.join("memory.max");
                match read_text(&path)?.trim() {
                    "max" => (None, "memory.current"),
                    _ => (Some(read_number(&path)?), "memory.current"),
                }
            }
        };
        Ok((limit, read_number(&dir.join(usage))?))
    }

    /// The parent's working set: the scope the kernel OOM-kills in at its
    /// limit (its memory.stat sums every child: read only when needed).
    pub fn parent_working_set(&self) -> Result<u64, CgroupError> {
        self.working_set(self.memory_dir())
    }

    fn working_set(&self, dir: &Path) -> Result<u64, CgroupError> {
        let (usage, stat, inactive) = match self {
            Hierarchy::V1 { .. } => (
                "memory.usage_in_bytes",
                "memory.stat",
                "total_inactive_file",
            ),
            Hierarchy::V2 { .. } => ("memory.current", "memory.stat", "inactive_file"),
        };
        let used = read_number(&dir.join(usage))?;
        let inactive = key_in(&read_text(&dir.join(stat))?, inactive).unwrap_or(0);
        Ok(used.saturating_sub(inactive))
    }

    /// Limits best-effort work to `quota_us` of CPU per 100 ms (CFS).
    pub fn set_be_quota(&self, quota_us: i64) -> Result<(), CgroupError> {
        match self {
            Hierarchy::V1 { cpu, .. } => {
                let be = cpu.join(Tier::BestEffort.dir());
                write_cgroup(&be.join("cpu.cfs_period_us"), &CFS_PERIOD_US.to_string())?;
                write_cgroup(&be.join("cpu.cfs_quota_us"), &quota_us.to_string())
            }
            Hierarchy::V2 { dir } => write_cgroup(
                &dir.join(Tier::BestEffort.dir()).join("cpu.max"),
                &format!("{quota_us} {CFS_PERIOD_US}"),
            ),
        }
    }

    /// Lifts the CFS limit on best-effort work.
    pub fn clear_be_quota(&self) -> Result<(), CgroupError> {
        match self {
            Hierarchy::V1 { cpu, .. } => write_cgroup(
                &cpu.join(Tier::BestEffort.dir()).join("cpu.cfs_quota_us"),
                "-1",
            ),
            Hierarchy::V2 { dir } => write_cgroup(
                &dir.join(Tier::BestEffort.dir()).join("cpu.max"),
                &format!("max {CFS_PERIOD_US}"),
            ),
        }
    }

    /// Confines best-effort work to `cpus` (a cpuset list, "2-7"). v1
    /// wants every child inside its parent: the consumers are narrowed
    /// before `be` when it shrinks, and after it when it grows.
    pub fn set_be_cpus(&self, cpus: &str) -> Result<(), CgroupError> {
        let be = match self {
            Hierarchy::V1 {
                cpuset: Some(c), ..
            } => c.join(Tier::BestEffort.dir()),
            Hierarchy::V1 { cpuset: None, .. } => {
                return Err(CgroupError::Setup("no cpuset controller".into()))
            }
            Hierarchy::V2 { dir } => {
                return write_cgroup(&dir.join(Tier::BestEffort.dir()).join("cpuset.cpus"), cpus)
            }
        };
        let children: Vec<PathBuf> = std::fs::read_dir(&be)
            .map_err(io(&be))?
            .flatten()
            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
            .map(|e| e.path().join("cpuset.cpus"))
            .collect();
        let own = be.join("cpuset.cpus");
        let shrinking = parse_cpu_list(cpus).len() < parse_cpu_list(&read_text(&own)?).len();
        if !shrinking {
            write_cgroup(&own, cpus)?;
        }
        for child in &children {
            write_cgroup(child, cpus)?;
        }
        if shrinking {
            write_cgroup(&own, cpus)?;
        }
        Ok(())
    }

    /// Whether a consumer's cgroup holds a process (work started again
    /// after a kill is a new start).
    pub fn has_processes(&self, slot: &Slot) -> bool {
        read_text(&self.memory_dir().join(slot.rel()).join("cgroup.procs"))
            .is_ok_and(|t| !t.trim().is_empty())
    }

    /// The CPUs the parent may use (what a cpuset limit picks from).
    pub fn parent_cpus(&self) -> Result<Vec<u32>, CgroupError> {
        let path = match self {
            Hierarchy::V1 {
                cpuset: Some(c), ..
            } => c.join("cpuset.cpus"),
            Hierarchy::V1 { cpuset: None, .. } => {
                return Err(CgroupError::Setup("no cpuset controller".into()))
            }
            Hierarchy::V2 { dir } => dir.join("cpuset.cpus.effective"),
        };
        Ok(parse_cpu_list(&read_text(&path)?))
    }

    /// Kills every process of a best-effort consumer (v2's `cgroup.kill`
    /// where the kernel has it; else each process, again until none is
    /// left, for work that forks meanwhile). Production is refused here,
    /// whatever the caller decided.
    pub fn kill(&self, slot: &Slot) -> Result<usize, CgroupError> {
        if slot.tier != Tier::BestEffort {
            return Err(CgroupError::Setup(format!(
                "consumer {} is production work; never killed",
                slot.consumer
            )));
        }
        let dir = self.memory_dir().join(slot.rel());
        if matches!(self, Hierarchy::V2 { .. }) && dir.join("cgroup.kill").exists() {
            write_cgroup(&dir.join("cgroup.kill"), "1")?;
            return Ok(1);
        }
        let procs = dir.join("cgroup.procs");
        let mut killed = 0;
        for _ in 0..KILL_ROUNDS {
            let pids: Vec<i32> = read_text(&procs)?
                .split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect();
            if pids.is_empty() {
                break;
            }
            for pid in pids
                .iter()
                .filter_map(|p| rustix::process::Pid::from_raw(*p))
            {
                // Gone meanwhile is what was wanted.
                if rustix::process::kill_process(pid, rustix::process::Signal::KILL).is_ok() {
                    killed += 1;
                }
            }
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        Ok(killed)
    }
}

/// The CPUs of a cpuset list ("0-3,8").
pub fn parse_cpu_list(list: &str) -> Vec<u32> {
    let mut out = Vec::new();
    for part in list.trim().split(',').filter(|p| !p.is_empty()) {
        let (lo, hi) = part.split_once('-').unwrap_or((part, part));
        if let (Ok(lo), Ok(hi)) = (lo.trim().parse::<u32>(), hi.trim().parse::<u32>()) {
            out.extend(lo..=hi.min(lo.saturating_add(4096)));
        }
    }
    out
}

/// Each level of a v1 cpuset path from the mount down gets its parent's
/// CPUs and memory nodes when it has none.
fn init_cpuset_chain(dir: &Path) -> Result<(), CgroupError> {
    let mut levels: Vec<&Path> = dir.ancestors().collect();
    levels.reverse();
    for level in levels {
        if level.join("cpuset.cpus").exists()
            && level
                .parent()
                .is_some_and(|p| p.join("cpuset.cpus").exists())
        {
            init_cpuset_level(level)?;
        }
    }
    Ok(())
}

/// A v1 cpuset level without CPUs or memory nodes gets its parent's.
pub fn init_cpuset_level(level: &Path) -> Result<(), CgroupError> {
    let Some(up) = level.parent() else {
        return Ok(());
    };
    for file in ["cpuset.cpus", "cpuset.mems"] {
        if read_text(&level.join(file))?.trim().is_empty() {
            write_cgroup(&level.join(file), read_text(&up.join(file))?.trim())?;
        }
    }
    Ok(())
}

/// A v2 level passes memory, cpu and cpuset down to its children.
fn enable_v2_controllers(level: &Path) -> Result<(), CgroupError> {
    let have = read_text(&level.join("cgroup.controllers"))?;
    let wanted: Vec<String> = ["memory", "cpu", "cpuset"]
        .iter()
        .filter(|c| have.split_whitespace().any(|h| h == **c))
        .map(|c| format!("+{c}"))
        .collect();
    write_cgroup(&level.join("cgroup.subtree_control"), &wanted.join(" "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists_and_parents() {
        assert_eq!(parse_cpu_list("0-2,5\n"), [0, 1, 2, 5]);
        assert!(parse_cpu_list("").is_empty());
        assert!(checked_parent(Path::new("placement")).is_ok());
        assert!(checked_parent(Path::new("a/../b")).is_err());
        assert!(checked_parent(Path::new("/abs")).is_err());
        assert!(checked_parent(Path::new("")).is_err());
    }
}
