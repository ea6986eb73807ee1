//! What the enforcement thread and the service task share, and the
//! service task's side of it: the guidance it fetches (the policy in
//! force, the consumers allocated here with their priorities), the
//! samples it reports as window aggregates, and the evictions it records,
//! kept on disk until the service took them, so that a service that is
//! down, or an agent that restarts, loses none.

use super::enforce::{Guidance, Known};
use super::measure::Sample;
use super::service::{Service, ServiceError};
use super::state_dir::StateDir;
use crate::colocation::advice::{EvictionsPost, EvictionsRecorded};
use crate::colocation::priority::PriorityView;
use crate::colocation::reports::{BeReport, ConsumerUsed, ReportAccepted, UsageReport, Used};
use crate::sched::colocation::knobs::Policy;
use crate::sched::colocation::node::NodeView;
use crate::sched::colocation::CpuMem;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, MutexGuard};
use uuid::Uuid;

/// Evictions kept for the service at most (a record is ~100 bytes); past
/// it the oldest go, each with a log line.
const OUTBOX_LIMIT: usize = 10_000;
/// The file of the evictions the service has not taken yet.
const OUTBOX_FILE: &str = "evictions.json";
/// The file of the last policy the service gave.
const POLICY_FILE: &str = "policy.json";

/// One eviction, as the agent did it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EvictionRecord {
    pub consumer: Uuid,
    pub trigger: String,
    pub at: DateTime<Utc>,
}

/// Sums of one report window.
#[derive(Debug, Default)]
struct Window {
    started: Option<DateTime<Utc>>,
    samples: i64,
    node_cpu: i64,
    node_memory: i64,
    consumers: HashMap<Uuid, (i64, i64, i64)>,
    be_used: i64,
    be_request: i64,
    be_limit: i64,
}

/// What the two sides share.
pub struct Shared {
    guidance: Mutex<Guidance>,
    window: Mutex<Window>,
    outbox: Mutex<Vec<EvictionRecord>>,
    state: StateDir,
}

/// A lock, whatever a panic elsewhere left in it (the data are plain).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Shared {
    /// Starts from what the state directory kept: the last policy (else
    /// Koordinator's defaults) and the evictions not yet recorded.
    pub fn new(state: StateDir) -> Shared {
        let policy: Policy = state.load(POLICY_FILE).unwrap_or_default();
        let outbox: Vec<EvictionRecord> = state.load(OUTBOX_FILE).unwrap_or_default();
        if !outbox.is_empty() {
            tracing::info!(target: "placement::agent", evictions = outbox.len(),
                "evictions not yet recorded by the service, kept from before");
        }
        Shared {
            guidance: Mutex::new(Guidance {
                policy,
                consumers: HashMap::new(),
            }),
            window: Mutex::new(Window::default()),
            outbox: Mutex::new(outbox),
            state,
        }
    }

    /// The guidance in force.
    pub fn guidance(&self) -> MutexGuard<'_, Guidance> {
        lock(&self.guidance)
    }

    /// Keeps evictions for the service, on disk first (one write for all).
    pub fn record(&self, records: Vec<EvictionRecord>) {
        if records.is_empty() {
            return;
        }
        let mut outbox = lock(&self.outbox);
        outbox.extend(records);
        while outbox.len() > OUTBOX_LIMIT {
            let dropped = outbox.remove(0);
            tracing::error!(target: "placement::agent", consumer = %dropped.consumer,
                "more evictions than the agent keeps for the service: the oldest dropped");
        }
        self.state.save(OUTBOX_FILE, &*outbox);
    }

    /// Adds a CPU look's sample to the report window.
    pub fn add_sample(&self, s: &Sample, view: &NodeView<Uuid>) {
        let mut w = lock(&self.window);
        w.started.get_or_insert_with(crate::clock::now);
        w.samples += 1;
        w.node_cpu += s.node_cpu;
        w.node_memory = s.memory.used_mb;
        for c in &view.consumers {
            let used = c.used.unwrap_or_default();
            let e = w.consumers.entry(c.key).or_default();
            *e = (e.0 + used.cpu, used.memory, e.2 + 1);
        }
        if let Some(be) = view.be_current {
            w.be_used += be.used;
            w.be_request += be.request;
            w.be_limit += be.real_limit;
        }
    }

    /// The window as a report (its averages; memory as last measured),
    /// naming only the consumers allocated on the provider: the rest is
    /// the system's. The window starts again either way.
    fn take_report(&self, allocated: &HashMap<Uuid, Known>) -> Option<UsageReport> {
        let w = std::mem::take(&mut *lock(&self.window));
        let started = w.started?;
        let n = w.samples.max(1);
        let consumers: Vec<ConsumerUsed> = w
            .consumers
            .iter()
            .filter(|(u, _)| allocated.contains_key(u))
            .map(|(u, (cpu, memory, k))| ConsumerUsed {
                consumer_uuid: *u,
                cpu_milli_used: cpu / (*k).max(1),
                memory_mb_used: *memory,
            })
            .collect();
        let node = CpuMem::new(w.node_cpu / n, w.node_memory);
        let named = consumers.iter().fold(CpuMem::default(), |t, c| {
            t.plus(CpuMem::new(c.cpu_milli_used, c.memory_mb_used))
        });
        let now = crate::clock::now();
        Some(UsageReport {
            sampled_at: now,
            window_seconds: i32::try_from((now - started).num_seconds().clamp(1, 3600))
                .unwrap_or(1),
            node: used(node),
            system: used(CpuMem::new(
                (node.cpu - named.cpu).max(0),
                (node.memory - named.memory).max(0),
            )),
            consumers,
            be: Some(BeReport {
                cpu_milli_used: w.be_used / n,
                cpu_milli_request: w.be_request / n,
                cpu_milli_real_limit: w.be_limit / n,
            }),
        })
    }
}

fn used(c: CpuMem) -> Used {
    Used {
        cpu_milli_used: c.cpu,
        memory_mb_used: c.memory,
    }
}

/// `GET …/colocation_policy`.
#[derive(Deserialize)]
struct PolicyWire {
    policy: Policy,
    #[allow(dead_code)]
    overrides: serde::de::IgnoredAny,
}

/// `GET /resource_providers/{uuid}/allocations`.
#[derive(Deserialize)]
struct ProviderAllocations {
    allocations: BTreeMap<Uuid, ConsumerResources>,
}

#[derive(Deserialize)]
struct ConsumerResources {
    resources: BTreeMap<String, i64>,
}

/// What a consumer allocated, in the colocation units.
fn request(r: &BTreeMap<String, i64>) -> CpuMem {
    let get = |c: &str| r.get(c).copied().unwrap_or(0);
    CpuMem::new(
        get("VCPU").saturating_mul(1000) + get("BATCH_VCPU_MILLI"),
        get("MEMORY_MB") + get("BATCH_MEMORY_MB"),
    )
}

/// Refreshes the guidance: the policy in force on the provider, and the
/// consumers allocated there (a consumer's priority is read once, when it
/// first appears).
pub async fn refresh(
    service: &Service,
    shared: &Shared,
    provider: &str,
) -> Result<(), ServiceError> {
    let policy: PolicyWire = service
        .read(&format!("/resource_providers/{provider}/colocation_policy"))
        .await?;
    let held: ProviderAllocations = service
        .read(&format!("/resource_providers/{provider}/allocations"))
        .await?;
    let before = shared.guidance().consumers.clone();
    let mut consumers = HashMap::with_capacity(held.allocations.len());
    for (uuid, a) in held.allocations {
        let (class, priority) = match before.get(&uuid) {
            Some(k) => (k.class, k.priority),
            None => {
                let p: PriorityView = service.read(&format!("/consumers/{uuid}/priority")).await?;
                (p.priority_class, p.priority.map(i64::from))
            }
        };
        consumers.insert(
            uuid,
            Known {
                class,
                priority,
                request: request(&a.resources),
            },
        );
    }
    shared.state.save(POLICY_FILE, &policy.policy);
    *shared.guidance() = Guidance {
        policy: policy.policy,
        consumers,
    };
    Ok(())
}

/// Sends the window's report (none when nothing was sampled yet).
pub async fn report(
    service: &Service,
    shared: &Shared,
    provider: &str,
) -> Result<(), ServiceError> {
    let allocated = shared.guidance().consumers.clone();
    let Some(body) = shared.take_report(&allocated) else {
        return Ok(());
    };
    let path = format!("/resource_providers/{provider}/usage_reports");
    let answer: ReportAccepted = service.post(&path, &body, &[202]).await?;
    tracing::debug!(target: "placement::agent", batch_cpu = answer.batch_allocatable.cpu,
        batch_memory = answer.batch_allocatable.memory,
        updated = answer.batch_inventory_updated, "usage reported");
    Ok(())
}

/// Records the kept evictions with the service, by trigger; one the
/// service refuses for good (a 400: its allocations are gone, or it is
/// not batch work) is dropped with a log line, the rest kept for later.
pub async fn flush(service: &Service, shared: &Shared, provider: &str) -> Result<(), ServiceError> {
    let kept = lock(&shared.outbox).clone();
    let path = format!("/resource_providers/{provider}/evictions");
    for record in &kept {
        let body = EvictionsPost {
            consumer_uuids: vec![record.consumer],
            trigger: record.trigger.clone(),
        };
        match service
            .post::<_, EvictionsRecorded>(&path, &body, &[200])
            .await
        {
            Ok(_) => {}
            Err(ServiceError::Refused {
                status: 400,
                detail,
                ..
            }) => {
                tracing::warn!(target: "placement::agent", consumer = %record.consumer, detail,
                    "the service refused an eviction record; dropped");
            }
            Err(e) => return Err(e),
        }
        let mut outbox = lock(&shared.outbox);
        outbox.retain(|r| r != record);
        shared.state.save(OUTBOX_FILE, &*outbox);
    }
    Ok(())
}
