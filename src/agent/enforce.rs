//! The watermarks, enforced on the machine from local samples and the
//! last policy the service gave: memory eviction in real time (a look
//! every `--memory-check-interval-ms`), and twice a second the best-effort
//! CPU limit (suppression) and eviction by CPU satisfaction. The rules
//! are `sched::colocation::node`'s, the ones the service's advice and
//! the vectors use; this file only measures, asks them and acts.
//!
//! It runs on a thread of its own and never waits for the network: the
//! service task hands it the policy and what it knows of the consumers
//! (`Guidance`), and takes from it the report window and the evictions.

use super::cgroups::{CgroupError, Hierarchy, Slot, Tier};
use super::measure::{machine_memory, mb, Sample, Sampler};
use super::reporting::{EvictionRecord, Shared};
use crate::sched::colocation::evict::BeCpu;
use crate::sched::colocation::knobs::Policy;
use crate::sched::colocation::node::{self, Consumer, NodeView};
use crate::sched::colocation::suppress::SuppressPolicy;
use crate::sched::colocation::CpuMem;
use crate::types::PriorityClass;
use std::collections::{HashMap, HashSet, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};
use uuid::Uuid;

/// The evictors' names, as the service records them.
pub const MEMORY_TRIGGER: &str = "memory_usage";
pub const CPU_TRIGGER: &str = "be_cpu_satisfaction";
/// Names of unknown shape logged at most this many times (bounded memory).
const STRANGE_LOGGED: usize = 1000;
/// Time between CPU looks: twice a second, so that the limit follows
/// production within a second of its load rising (a look measures the
/// time since the one before; one a second would see half of a rise
/// first, and follow it only at the next).
const CPU_LOOK: Duration = Duration::from_millis(500);
/// A killed consumer counts as pending release this long at most.
const PENDING_FOR: Duration = Duration::from_secs(600);

/// What the service says of one consumer on this node.
#[derive(Debug, Clone, PartialEq)]
pub struct Known {
    /// Its priority class (prod when it set none).
    pub class: PriorityClass,
    /// Its integer priority.
    pub priority: Option<i64>,
    /// What it allocated here (milli-CPU, MB).
    pub request: CpuMem,
}

/// What the enforcement works from besides the machine: the policy in
/// force on this node, and the consumers the service knows here.
#[derive(Debug, Clone, Default)]
pub struct Guidance {
    pub policy: Policy,
    pub consumers: HashMap<Uuid, Known>,
}

/// The best-effort CPU limit in force.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Applied {
    Quota(i64),
    Cpus(String),
}

/// The enforcement's state between looks.
pub struct Enforcer {
    cgroups: Hierarchy,
    procfs: PathBuf,
    sampler: Sampler,
    shared: Arc<Shared>,
    reserved_memory_mb: i64,
    be_window: VecDeque<BeCpu>,
    applied: Option<Applied>,
    /// What best-effort work may use now, milli-CPU.
    real_limit: i64,
    memory_cool_until: Option<Instant>,
    cpu_cool_until: Option<Instant>,
    killed: HashMap<Uuid, Instant>,
    logged: HashSet<PathBuf>,
    last_error: Option<String>,
}

/// A consumer may be killed only when the machine holds it as
/// best-effort work and the service does not call it production.
fn low_priority(slot: &Slot, known: Option<&Known>) -> bool {
    slot.tier == Tier::BestEffort && known.is_none_or(|k| k.class.low())
}

impl Enforcer {
    pub fn new(
        cgroups: Hierarchy,
        procfs: &Path,
        shared: Arc<Shared>,
        reserved_memory_mb: i64,
    ) -> Enforcer {
        Enforcer {
            cgroups,
            procfs: procfs.to_path_buf(),
            sampler: Sampler::new(procfs),
            shared,
            reserved_memory_mb,
            be_window: VecDeque::new(),
            applied: None,
            real_limit: i64::MAX,
            memory_cool_until: None,
            cpu_cool_until: None,
            killed: HashMap::new(),
            logged: HashSet::new(),
            last_error: None,
        }
    }

    /// Runs for ever: the memory look every `memory_every`, the CPU look
    /// every `CPU_LOOK`.
    pub fn run(mut self, memory_every: Duration) {
        let mut next_cpu = Instant::now();
        loop {
            self.memory_look();
            if Instant::now() >= next_cpu {
                self.cpu_look();
                next_cpu += CPU_LOOK;
                if next_cpu < Instant::now() {
                    next_cpu = Instant::now() + CPU_LOOK;
                }
            }
            std::thread::sleep(memory_every);
        }
    }

    fn guidance(&self) -> Guidance {
        self.shared.guidance().clone()
    }

    /// One line per distinct failure, not one a second.
    fn trouble(&mut self, what: &str, e: &dyn std::fmt::Display) {
        let line = format!("{what}: {e}");
        if self.last_error.as_deref() != Some(line.as_str()) {
            tracing::warn!(target: "placement::agent", "{line}");
            self.last_error = Some(line);
        }
    }

    /// The consumers under the parent; a name of unknown shape is
    /// logged once.
    fn slots(&mut self) -> Vec<Slot> {
        let (slots, strange) = self.cgroups.slots();
        for path in strange {
            if self.logged.len() < STRANGE_LOGGED && self.logged.insert(path.clone()) {
                tracing::warn!(target: "placement::agent", path = %path.display(),
                    "a cgroup that is not named by a consumer's uuid: left alone");
            }
        }
        let present: HashSet<Uuid> = slots.iter().map(|s| s.consumer).collect();
        let now = Instant::now();
        self.killed
            .retain(|u, at| present.contains(u) && now.duration_since(*at) < PENDING_FOR);
        // A killed consumer whose cgroup runs work again was started
        // again: it is a candidate like any other.
        let cgroups = &self.cgroups;
        self.killed.retain(|u, _| {
            slots
                .iter()
                .find(|s| s.consumer == *u)
                .is_none_or(|s| !cgroups.has_processes(s))
        });
        slots
    }

    fn pending(&self) -> Vec<Uuid> {
        self.killed.keys().copied().collect()
    }

    /// Memory, in real time: past `memoryEvictThresholdPercent` of the
    /// machine (or of the parent's limit, where the kernel would OOM-kill
    /// first), best-effort consumers go in the design's order until the
    /// lower watermark is reached.
    pub fn memory_look(&mut self) {
        // The policy alone (no map copied) on a look that finds no pressure.
        let policy = self.shared.guidance().policy.clone();
        let Some((capacity, used)) = self.memory_pressure(&policy) else {
            return;
        };
        if self.memory_cool_until.is_some_and(|t| Instant::now() < t) {
            return;
        }
        let known = self.shared.guidance().consumers.clone();
        let slots = self.slots();
        let consumers: Vec<Consumer<Uuid>> = slots
            .iter()
            .filter(|s| low_priority(s, known.get(&s.consumer)))
            .filter_map(|s| {
                let bytes = self.cgroups.memory_bytes(s).ok()?;
                Some(consumer(
                    s,
                    known.get(&s.consumer),
                    CpuMem::new(0, mb(bytes)),
                ))
            })
            .collect();
        let view = NodeView {
            capacity: CpuMem::new(0, capacity),
            node_reserved: CpuMem::default(),
            system_used: CpuMem::default(),
            node_used: CpuMem::new(0, used),
            consumers,
            be_window: None,
            be_current: None,
        };
        let (usage, e) = node::memory_eviction(&view, &policy, &self.pending());
        if e.victims.is_empty() {
            return;
        }
        tracing::warn!(target: "placement::agent", usage_percent = usage.usage_percent,
            threshold_percent = policy.memory_evict_threshold_percent,
            lower_percent = usage.lower_percent, release_mb = e.release,
            victims = e.victims.len(), "memory past its eviction watermark");
        self.evict(&slots, &e.victims, MEMORY_TRIGGER);
        self.memory_cool_until =
            Some(Instant::now() + Duration::from_secs(policy.cooldown.memory.unsigned_abs()));
    }

    /// The scope under the most pressure, as (capacity MB, used MB), when
    /// one is at or past the threshold.
    fn memory_pressure(&mut self, p: &Policy) -> Option<(i64, i64)> {
        let release = |used: i64, cap: i64| {
            crate::sched::colocation::evict::usage_release(
                used,
                cap,
                p.memory_evict_threshold_percent,
                p.memory_evict_lower_percent,
            )
            .release
        };
        let mut scopes = Vec::with_capacity(2);
        match machine_memory(&self.procfs) {
            Ok(m) => scopes.push((m.total_mb, m.used_mb)),
            Err(e) => self.trouble("machine memory", &e),
        }
        match self.cgroups.parent_memory() {
            // Usage with its cache under the watermark: no closer look.
            Ok((Some(limit), usage)) if release(mb(usage), mb(limit)) > 0 => {
                match self.cgroups.parent_working_set() {
                    Ok(used) => scopes.push((mb(limit), mb(used))),
                    Err(e) => self.trouble("the parent cgroup's memory", &e),
                }
            }
            Ok(_) => {}
            Err(e) => self.trouble("the parent cgroup's memory", &e),
        }
        scopes
            .into_iter()
            .map(|(cap, used)| (release(used, cap), cap, used))
            .filter(|(r, _, _)| *r > 0)
            .max_by_key(|(r, _, _)| *r)
            .map(|(_, cap, used)| (cap, used))
    }

    /// Kills the victims' cgroups and records each kill for the service.
    /// Every victim is killed before any record is kept: keeping one
    /// syncs a file, and no victim waits on the disk.
    fn evict(&mut self, slots: &[Slot], victims: &[Uuid], trigger: &str) {
        let mut evicted = Vec::with_capacity(victims.len());
        for victim in victims {
            let Some(slot) = slots.iter().find(|s| s.consumer == *victim) else {
                continue;
            };
            match self.cgroups.kill(slot) {
                Ok(processes) => {
                    tracing::warn!(target: "placement::agent", consumer = %victim, trigger,
                        processes, "best-effort consumer evicted");
                    self.killed.insert(*victim, Instant::now());
                    evicted.push(EvictionRecord {
                        consumer: *victim,
                        trigger: trigger.to_string(),
                        at: crate::clock::now(),
                    });
                }
                Err(e) => self.trouble("eviction", &e),
            }
        }
        self.shared.record(evicted);
    }

    /// The CPU look: sample, limit best-effort CPU, evict by CPU
    /// satisfaction, and add the sample to the report window.
    pub fn cpu_look(&mut self) {
        let slots = self.slots();
        let sample = match self.sampler.sample(&self.cgroups, &slots) {
            Ok(s) => s,
            Err(e) => return self.trouble("the node's counters", &e),
        };
        let g = self.guidance();
        let view = self.view(&sample, &g);
        let limit = node::suppression(&view, &g.policy);
        self.apply(&g.policy, limit.cfs_quota_us, limit.cpuset_size);
        self.real_limit = limit.effective_be_limit_milli;
        if let Some(be) = view.be_current {
            let looks_a_second = 1000 / CPU_LOOK.as_millis();
            let keep = usize::try_from(g.policy.cpu_evict_time_window_seconds.max(1))
                .unwrap_or(1)
                .saturating_mul(usize::try_from(looks_a_second).unwrap_or(1));
            self.be_window.push_back(be);
            while self.be_window.len() > keep {
                self.be_window.pop_front();
            }
        }
        self.cpu_eviction(&slots, &view, &g.policy);
        self.shared.add_sample(&sample, &view);
    }

    /// The node as this sample shows it, in the rules' terms.
    fn view(&self, sample: &Sample, g: &Guidance) -> NodeView<Uuid> {
        let consumers: Vec<Consumer<Uuid>> = sample
            .consumers
            .iter()
            .map(|(s, used)| consumer(s, g.consumers.get(&s.consumer), *used))
            .collect();
        let measured = consumers
            .iter()
            .fold(CpuMem::default(), |t, c| t.plus(c.used.unwrap_or_default()));
        let node_used = sample.node_used();
        let be = consumers.iter().filter(|c| c.low_priority);
        let be_current = BeCpu {
            used: be.clone().map(|c| c.used.map_or(0, |u| u.cpu)).sum(),
            request: be.map(|c| c.request.cpu).sum(),
            real_limit: self.real_limit.min(sample.cpu_capacity),
        };
        NodeView {
            capacity: CpuMem::new(sample.cpu_capacity, sample.memory.total_mb),
            node_reserved: CpuMem::new(0, self.reserved_memory_mb),
            system_used: CpuMem::new(
                (node_used.cpu - measured.cpu).max(0),
                (node_used.memory - measured.memory).max(0),
            ),
            node_used,
            consumers,
            be_window: average(&self.be_window, be_current),
            be_current: Some(be_current),
        }
    }

    /// Writes the best-effort limit when it changed.
    fn apply(&mut self, p: &Policy, quota_us: i64, cpuset_size: i64) {
        let wanted = match p.cpu_suppress_policy {
            SuppressPolicy::CfsQuota => Applied::Quota(quota_us),
            SuppressPolicy::Cpuset => match self.cgroups.parent_cpus() {
                Ok(cpus) => Applied::Cpus(last_cpus(&cpus, cpuset_size)),
                Err(e) => return self.trouble("the parent's cpuset", &e),
            },
        };
        if self.applied.as_ref() == Some(&wanted) {
            return;
        }
        let written: Result<(), CgroupError> = match &wanted {
            Applied::Quota(q) => self.cgroups.set_be_quota(*q),
            Applied::Cpus(list) => self
                .cgroups
                .clear_be_quota()
                .and_then(|()| self.cgroups.set_be_cpus(list)),
        };
        match written {
            Ok(()) => {
                tracing::info!(target: "placement::agent", limit = ?wanted, "best-effort CPU limit");
                self.applied = Some(wanted);
            }
            Err(e) => self.trouble("the best-effort CPU limit", &e),
        }
    }

    /// BE satisfaction over the window (B.5), outside its cooldown.
    fn cpu_eviction(&mut self, slots: &[Slot], view: &NodeView<Uuid>, p: &Policy) {
        if self.cpu_cool_until.is_some_and(|t| Instant::now() < t) {
            return;
        }
        let batch_cpu = node::batch_allocatable(view, p).cpu;
        let Some((check, e)) = node::cpu_eviction(view, p, batch_cpu, &self.pending()) else {
            return;
        };
        if e.release <= 0 || e.victims.is_empty() {
            return;
        }
        tracing::warn!(target: "placement::agent", satisfaction = check.satisfaction,
            be_usage_ratio = check.usage_ratio, release_milli = e.release,
            "best-effort CPU satisfaction under its watermark");
        self.evict(slots, &e.victims, CPU_TRIGGER);
        self.cpu_cool_until =
            Some(Instant::now() + Duration::from_secs(p.cooldown.cpu.unsigned_abs()));
    }
}

/// A measured consumer in the rules' terms.
fn consumer(slot: &Slot, known: Option<&Known>, used: CpuMem) -> Consumer<Uuid> {
    Consumer {
        key: slot.consumer,
        low_priority: low_priority(slot, known),
        priority: known.and_then(|k| k.priority),
        request: known.map_or_else(CpuMem::default, |k| k.request),
        used: Some(used),
    }
}

/// The window's average, the newest sample included.
fn average(window: &VecDeque<BeCpu>, newest: BeCpu) -> Option<BeCpu> {
    let n = i64::try_from(window.len()).ok()? + 1;
    let sum = window.iter().fold(newest, |t, s| BeCpu {
        used: t.used + s.used,
        request: t.request + s.request,
        real_limit: t.real_limit + s.real_limit,
    });
    Some(BeCpu {
        used: sum.used / n,
        request: sum.request / n,
        real_limit: sum.real_limit / n,
    })
}

/// The `size` highest-numbered of `cpus`, as a cpuset list: best-effort
/// work keeps away from CPU 0, where the system's own work lands.
fn last_cpus(cpus: &[u32], size: i64) -> String {
    let size = usize::try_from(size).unwrap_or(usize::MAX).min(cpus.len());
    let mut picked: Vec<u32> = cpus.iter().rev().take(size).copied().collect();
    picked.sort_unstable();
    picked
        .iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn production_is_never_low_priority() {
        let slot = |tier| Slot {
            tier,
            consumer: Uuid::nil(),
        };
        let known = |class| Known {
            class,
            priority: None,
            request: CpuMem::default(),
        };
        assert!(low_priority(&slot(Tier::BestEffort), None));
        assert!(low_priority(
            &slot(Tier::BestEffort),
            Some(&known(PriorityClass::Free))
        ));
        assert!(!low_priority(
            &slot(Tier::BestEffort),
            Some(&known(PriorityClass::Prod))
        ));
        assert!(!low_priority(
            &slot(Tier::Prod),
            Some(&known(PriorityClass::Batch))
        ));
        assert_eq!(last_cpus(&[0, 1, 2, 3], 2), "2,3");
        assert_eq!(last_cpus(&[0, 1], 5), "0,1");
    }
}
