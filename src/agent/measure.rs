//! What the machine and each consumer use, from the kernel's counters:
//! the node's CPU from `/proc/stat`, its memory from `/proc/meminfo`
//! (total less available, as Koordinator's node metric counts it), each
//! consumer's CPU and memory from its cgroup. CPU counters become
//! milli-CPU over the time between two samples.

use super::cgroups::{Hierarchy, OpenCounters, Slot};
use crate::sched::colocation::CpuMem;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// What the node's counters say at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct NodeCpu {
    busy_ticks: u64,
    all_ticks: u64,
}

/// The machine's memory, in MB.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MachineMemory {
    pub total_mb: i64,
    pub used_mb: i64,
}

/// Why the node could not be measured.
#[derive(Debug, thiserror::Error)]
#[error("{path}: {what}")]
pub struct NodeReadError {
    path: PathBuf,
    what: String,
}

fn node_error(path: &Path, what: impl Into<String>) -> NodeReadError {
    NodeReadError {
        path: path.to_path_buf(),
        what: what.into(),
    }
}

/// `/proc/stat`'s first line: busy and all ticks (guest time is inside
/// user time already), and how many CPUs it lists.
fn node_cpu(procfs: &Path) -> Result<(NodeCpu, i64), NodeReadError> {
    let path = procfs.join("stat");
    let text = std::fs::read_to_string(&path).map_err(|e| node_error(&path, e.to_string()))?;
    let mut lines = text.lines();
    let fields: Vec<u64> = lines
        .next()
        .filter(|l| l.starts_with("cpu "))
        .ok_or_else(|| node_error(&path, "no cpu line"))?
        .split_whitespace()
        .skip(1)
        .take(8)
        .map(|f| f.parse().unwrap_or(0))
        .collect();
    if fields.len() < 8 {
        return Err(node_error(&path, "a cpu line of fewer than 8 fields"));
    }
    // user nice system idle iowait irq softirq steal
    let idle = fields[3] + fields[4];
    let all: u64 = fields.iter().sum();
    let cpus = lines.filter(|l| l.starts_with("cpu")).count();
    Ok((
        NodeCpu {
            busy_ticks: all - idle,
            all_ticks: all,
        },
        i64::try_from(cpus).unwrap_or(i64::MAX),
    ))
}

/// `/proc/meminfo`'s total and available memory.
pub fn machine_memory(procfs: &Path) -> Result<MachineMemory, NodeReadError> {
    let path = procfs.join("meminfo");
    let text = std::fs::read_to_string(&path).map_err(|e| node_error(&path, e.to_string()))?;
    let kb = |key: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<i64>().ok())
            .ok_or_else(|| node_error(&path, format!("no {key}")))
    };
    let total = kb("MemTotal:")?;
    let available = kb("MemAvailable:")?;
    Ok(MachineMemory {
        total_mb: total / 1024,
        used_mb: (total - available).max(0) / 1024,
    })
}

/// Bytes as whole MB.
pub fn mb(bytes: u64) -> i64 {
    i64::try_from(bytes / (1024 * 1024)).unwrap_or(i64::MAX)
}

/// One sample of the node and its consumers.
#[derive(Debug, Clone)]
pub struct Sample {
    /// The node's CPUs, as milli-CPU.
    pub cpu_capacity: i64,
    /// The machine's memory.
    pub memory: MachineMemory,
    /// What the whole node used since the last sample (milli-CPU).
    pub node_cpu: i64,
    /// Each consumer measured: its CPU since the last sample and its
    /// memory now.
    pub consumers: Vec<(Slot, CpuMem)>,
}

impl Sample {
    /// The node's use in the colocation units.
    pub fn node_used(&self) -> CpuMem {
        CpuMem::new(self.node_cpu, self.memory.used_mb)
    }
}

/// Looks between two readings of the consumers' memory (their CPU is
/// read every look): memory is a level, reported as last measured, and
/// eviction reads it afresh when a watermark is crossed.
const MEMORY_EVERY: u32 = 4;

/// One consumer followed from look to look.
struct Followed {
    files: OpenCounters,
    cpu_ns: u64,
    at: Instant,
    memory_mb: i64,
}

/// Turns counters into rates between two samples.
pub struct Sampler {
    procfs: PathBuf,
    last_node: Option<(NodeCpu, Instant)>,
    followed: HashMap<Slot, Followed>,
    looks: u32,
}

/// milli-CPU from a counter's move in nanoseconds over `elapsed`.
fn milli(delta_ns: u64, elapsed: std::time::Duration) -> i64 {
    let per_ns = elapsed.as_nanos().max(1);
    i64::try_from(u128::from(delta_ns) * 1000 / per_ns).unwrap_or(i64::MAX)
}

impl Sampler {
    pub fn new(procfs: &Path) -> Sampler {
        Sampler {
            procfs: procfs.to_path_buf(),
            last_node: None,
            followed: HashMap::new(),
            looks: 0,
        }
    }

    /// Samples the node and the consumers in `slots`. A consumer whose
    /// cgroup went meanwhile is left out (and forgotten, its files
    /// closed); its first sample counts no CPU.
    pub fn sample(&mut self, h: &Hierarchy, slots: &[Slot]) -> Result<Sample, NodeReadError> {
        let now = Instant::now();
        let (cpu, cpus) = node_cpu(&self.procfs)?;
        let memory = machine_memory(&self.procfs)?;
        let node_cpu = match self.last_node.replace((cpu, now)) {
            Some((before, _)) => {
                let all = cpu.all_ticks.saturating_sub(before.all_ticks).max(1);
                let busy = cpu.busy_ticks.saturating_sub(before.busy_ticks);
                i64::try_from(
                    u128::from(busy) * 1000 * u128::from(cpus.unsigned_abs()) / u128::from(all),
                )
                .unwrap_or(i64::MAX)
            }
            None => 0,
        };
        let memory_look = self.looks.is_multiple_of(MEMORY_EVERY);
        self.looks = self.looks.wrapping_add(1);
        let mut before = std::mem::take(&mut self.followed);
        let mut consumers = Vec::with_capacity(slots.len());
        for slot in slots {
            let followed = match before.remove(slot) {
                Some(f) => follow(f, now, memory_look),
                None => first_look(h, slot, now),
            };
            // Only the consumers still there are kept: memory stays bounded.
            let Some((cpu, f)) = followed else { continue };
            consumers.push((*slot, CpuMem::new(cpu, f.memory_mb)));
            self.followed.insert(*slot, f);
        }
        Ok(Sample {
            cpu_capacity: cpus.saturating_mul(1000),
            memory,
            node_cpu,
            consumers,
        })
    }
}

/// A consumer seen before: its CPU since then (and its memory, on a
/// memory look); None when its cgroup went.
fn follow(mut f: Followed, now: Instant, memory_look: bool) -> Option<(i64, Followed)> {
    let ns = f.files.cpu_ns().ok()?;
    if memory_look {
        f.memory_mb = mb(f.files.memory_bytes().ok()?);
    }
    let cpu = milli(ns.saturating_sub(f.cpu_ns), now - f.at);
    f.cpu_ns = ns;
    f.at = now;
    Some((cpu, f))
}

/// A consumer seen for the first time: its files opened, no CPU yet.
fn first_look(h: &Hierarchy, slot: &Slot, now: Instant) -> Option<(i64, Followed)> {
    let mut files = h.open_counters(slot).ok()?;
    let cpu_ns = files.cpu_ns().ok()?;
    let memory_mb = mb(files.memory_bytes().ok()?);
    Some((
        0,
        Followed {
            files,
            cpu_ns,
            at: now,
            memory_mb,
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_machine_reads() {
        let m = machine_memory(Path::new("/proc")).unwrap();
        assert!(m.total_mb > 0 && m.used_mb <= m.total_mb, "{m:?}");
        assert_eq!(milli(500_000_000, std::time::Duration::from_secs(1)), 500);
        assert_eq!(mb(3 * 1024 * 1024 + 5), 3);
    }
}
