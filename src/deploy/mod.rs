//! The deployment service (Eru's design over Placement data): a checked
//! [`Deployment`] goes to the candidate engine through its typed entry
//! point, then to the scheduler (capacity, strategy, CPU plans), then to
//! one transaction that writes the allocations, instances and core
//! bindings. Handlers only parse, call [`deploy`] or [`resize::resize`],
//! and render.

pub mod app_owners;
pub mod batch_deployments;
pub mod deployment_request;
pub mod node_cache;
pub mod nodes;
pub mod plan;
mod ranked;
pub mod ranking;
pub mod refresh;
pub mod refusal;
pub mod resize;
pub mod together;
pub mod topology;
pub mod write;

use crate::candidates::engine::{ProviderRead, SolvingStep};
use crate::candidates::find::{self, Engine};
use crate::candidates::search::{Scope, Search};
use crate::config::Settings;
use crate::db::deployments as db;
use crate::error::{codes, with_retries, Error, Result};
use crate::sched::{self, CapacityMap, NodeName, SchedError};
use crate::types::PriorityClass;
pub use deployment_request::Deployment;
use node_cache::NodeCache;
pub use nodes::{instance_resources, CpuModel, NodeState, CPU_SHARES, MIB};
use plan::NodeVerdict;
use ranking::Rankings;
use refusal::{engine_refusals, refusal};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
pub use together::Turns;
use write::{DeploymentWrite, InstanceWrite};

/// One new instance as planned.
#[derive(Debug, Clone, PartialEq)]
pub struct PlannedInstance {
    /// Its consumer.
    pub consumer_uuid: uuid::Uuid,
    /// Its node.
    pub node: uuid::Uuid,
    /// Core → shares (empty unless bound).
    pub cpu_map: Vec<(String, i64)>,
    /// The NUMA node it is pinned to.
    pub numa_node: Option<String>,
    /// Its volumes: binding → {disk: bytes}.
    pub volumes: sched::VolumePlan,
}

/// What a deployment did (or, for a dry run, would do).
#[derive(Debug, Clone)]
pub struct Deployed {
    /// Instances each node with room could take, by node uuid.
    pub capacity: BTreeMap<uuid::Uuid, i64>,
    /// Their sum.
    pub total_capacity: i64,
    /// New instances per node.
    pub deploy_map: BTreeMap<uuid::Uuid, i64>,
    /// The instances, in node order.
    pub instances: Vec<PlannedInstance>,
    /// Every candidate node's verdict (shown by dry runs).
    pub verdicts: Vec<NodeVerdict>,
}

impl Deployed {
    /// The answer of a plan: the capacity map and deploy map by node uuid
    /// (the scheduler names nodes by their uuid), and the instances.
    pub fn new(
        caps: &CapacityMap,
        deploy_map: &BTreeMap<NodeName, i64>,
        instances: Vec<PlannedInstance>,
        verdicts: Vec<NodeVerdict>,
    ) -> Deployed {
        let by_uuid = |name: &NodeName| name.uuid();
        Deployed {
            capacity: caps
                .nodes
                .iter()
                .map(|(n, c)| (by_uuid(n), c.capacity))
                .collect(),
            total_capacity: caps.total,
            deploy_map: deploy_map.iter().map(|(n, c)| (by_uuid(n), *c)).collect(),
            instances,
            verdicts,
        }
    }
}

/// Deployments as one process runs them, with what they need: the
/// candidate engine's parts, the nodes' states and rankings and the turns
/// this process keeps, and how often a lost race is retried
/// (`AppState::deployments`). Owned handles: a turn of single
/// deployments runs in a task of its own.
#[derive(Clone)]
pub struct Deployments {
    /// The database.
    pub pool: crate::db::Pool,
    /// Where names and provider data come from.
    pub read: Arc<dyn ProviderRead>,
    /// Where searches are solved.
    pub solving: Arc<dyn SolvingStep>,
    /// Limits and generation order.
    pub settings: Arc<Settings>,
    /// Node states by provider.
    pub states: Arc<NodeCache>,
    /// The rankings over them.
    pub rankings: Arc<Rankings>,
    /// Single deployments waiting to be placed together.
    pub turns: Arc<together::Turns>,
    /// Retries of a plan that lost a race.
    pub retries: u32,
}

impl Deployments {
    /// Places `d`: its nodes from the candidate engine, the plan from the
    /// scheduler over this process's node states, everything written in
    /// one transaction. A deployment of a few instances plans over the
    /// head of its strategy's order, kept by a [`Ranking`](ranking::Ranking),
    /// together with the others arriving at the same moment
    /// ([`together`]); the rest (and whatever a ranking cannot serve) over
    /// every candidate node. Batch and free work goes on the batch
    /// inventory (`batch_deployments`).
    pub async fn deploy(&self, d: &Deployment) -> Result<Deployed> {
        let engine = self.engine();
        if let Some(class) = d.priority_class.filter(|c| c.low()) {
            return batch_deployments::deploy(&engine, self.retries, d, class).await;
        }
        if together::goes_together(d) {
            if let Some(done) = self.turns.place(self, d).await? {
                return Ok(done);
            }
        }
        let views = NodeViews {
            states: &self.states,
            rankings: &self.rankings,
        };
        deploy(&engine, &views, self.retries, d).await
    }

    /// The candidate engine over these handles.
    fn engine(&self) -> Engine<'_> {
        Engine {
            pool: &self.pool,
            read: &*self.read,
            solving: &*self.solving,
            settings: &self.settings,
        }
    }
}

/// This process's node states and the rankings over them.
struct NodeViews<'a> {
    /// Node states by provider.
    states: &'a NodeCache,
    /// The rankings over them.
    rankings: &'a Rankings,
}

/// Places a production deployment (see the module's note).
async fn deploy(
    engine: &Engine<'_>,
    views: &NodeViews<'_>,
    retries: u32,
    d: &Deployment,
) -> Result<Deployed> {
    if let Some(ranking) = views.rankings.serving(d) {
        if let Some(done) = ranked::deploy(engine, views.states, &ranking, retries, d).await? {
            return Ok(done);
        }
    }
    deploy_everywhere(engine, views.states, retries, d).await
}

/// The search for `d`'s nodes.
fn node_search(d: &Deployment, scope: Scope) -> Search {
    Search {
        query: d.node_query(),
        priority: PriorityClass::Prod,
        project: Some(d.owner.project_id.clone()),
        version: crate::microversions::LATEST,
        max_results: None,
        one_per_anchor: false,
        scope,
    }
}

/// Places `d` over every candidate node. A node that filled up between
/// planning and locking makes the attempt start again, under the retry
/// policy every write shares ([`with_retries`]).
async fn deploy_everywhere(
    engine: &Engine<'_>,
    cache: &NodeCache,
    retries: u32,
    d: &Deployment,
) -> Result<Deployed> {
    let search = node_search(d, Scope::EveryTree);
    let searched = std::time::Instant::now();
    let found = find::run(engine, &search).await?;
    let node_ids = candidate_nodes(&found);
    tracing::debug!(
        search_ms = searched.elapsed().as_secs_f64() * 1e3,
        nodes = node_ids.len(),
        "deployment candidates"
    );
    let wanted = stamped(&found, &node_ids);
    let ctx = Context {
        pool: engine.pool,
        cache,
        d,
        wanted: &wanted,
    };
    let mut attempts = 0u64;
    let result = with_retries(retries, || {
        attempts += 1;
        attempt(&ctx)
    })
    .await;
    count_retries(attempts);
    match result? {
        Outcome::Done(done) => Ok(done),
        Outcome::Refused(e, verdicts) => {
            Err(refusal(&e, &verdicts, &engine_refusals(&found, &node_ids)))
        }
        Outcome::Unserved => Err(Error::internal(
            "a deployment over every node was not served",
        )),
    }
}

fn count_retries(attempts: u64) {
    crate::metrics::metrics()
        .write_retries
        .inc_by(attempts.saturating_sub(1));
}

/// The candidate nodes with the stamps of their snapshot data.
fn stamped(found: &find::Candidates, node_ids: &[i64]) -> Vec<(i64, u64)> {
    node_ids
        .iter()
        .map(|&id| (id, found.snap.stamp_of(id).unwrap_or(0)))
        .collect()
}

/// What one attempt works with.
struct Context<'a> {
    pool: &'a crate::db::Pool,
    cache: &'a NodeCache,
    d: &'a Deployment,
    /// Candidate nodes with their snapshot stamps.
    wanted: &'a [(i64, u64)],
}

/// How an attempt ended, short of an error.
enum Outcome {
    /// Placed (or planned, for a dry run).
    Done(Deployed),
    /// The scheduler cannot place it: its reason and every node's verdict.
    Refused(SchedError, Vec<NodeVerdict>),
    /// A ranking cannot serve it: plan over every node.
    Unserved,
}

/// Plans around nodes other writers hold at most this many times before
/// waiting for them.
const SKIPS: usize = 4;

/// Nodes that fit one instance's memory, extra resources and filters, by
/// provider id: the providers of MEMORY_MB in the candidates.
fn candidate_nodes(found: &find::Candidates) -> Vec<i64> {
    let memory = found
        .snap
        .class_names
        .iter()
        .find(|(_, n)| *n == "MEMORY_MB")
        .map(|(id, _)| *id);
    let mut ids: Vec<i64> = found
        .candidates
        .iter()
        .flat_map(|c| c.allocations.iter().filter(|a| Some(a.1) == memory))
        .map(|a| found.snap.nodes[a.0].id)
        .collect::<HashSet<i64>>()
        .into_iter()
        .collect();
    ids.sort_unstable();
    ids
}

/// One attempt over every candidate node: their states, then [`place_on`].
async fn attempt(c: &Context<'_>) -> Result<Outcome> {
    let cached = c.cache.current(c.pool, c.wanted).await?;
    if beyond_every_candidate(&cached, &c.d.shape) {
        refuse_beyond_every_node(c).await?;
    }
    place_on(c.pool, c.d, &cached, 0).await
}

/// Capacity and deploy map over `cached` (this process's node states;
/// `outside` is the capacity of candidate nodes not among them), then the
/// chosen nodes locked (skipping, and planning around, nodes other
/// writers hold: nobody waits on a hot node while holding a connection),
/// re-read where their generation moved, their instances planned on that
/// exact state, and everything committed at once.
async fn place_on(
    pool: &crate::db::Pool,
    d: &Deployment,
    cached: &[std::sync::Arc<node_cache::Cached>],
    outside: i64,
) -> Result<Outcome> {
    let started = std::time::Instant::now();
    let (judged, verdicts) = judge(cached, &d.shape);
    let name = |n: &NodeState| NodeName::of(n.uuid);
    let mut busy: HashSet<i64> = HashSet::new();
    let mut waiting = d.dry_run;
    for round in 1.. {
        let (caps, spread) = spread(d, cached, &judged, &busy, outside);
        let deploy_map = match spread {
            Ok(m) => m,
            Err(e) if busy.is_empty() => return Ok(Outcome::Refused(e, verdicts)),
            Err(_) => {
                // Only with the busy nodes does it fit: wait for them.
                (busy, waiting) = (HashSet::new(), true);
                continue;
            }
        };
        let chosen: Vec<&NodeState> = cached
            .iter()
            .map(|n| &n.node)
            .filter(|n| deploy_map.contains_key(&name(n)))
            .collect();
        let ids: Vec<i64> = chosen.iter().map(|n| n.rp_id).collect();
        let mut tx = pool.begin().await?;
        let generations = lock(&mut tx, d.dry_run, waiting, &chosen).await?;
        if generations.len() < ids.len() {
            if waiting {
                return Err(Error::conflict("A chosen node was deleted.").lost_race());
            }
            // The transaction ends here, holding nothing.
            busy.extend(ids.iter().filter(|i| !generations.contains_key(i)));
            waiting = round >= SKIPS;
            continue;
        }
        let mut fresh = exact_states(&mut tx, &chosen, &generations).await?;
        let planned = match plan_instances(&mut fresh, &deploy_map, &d.shape) {
            Ok(p) => p,
            Err(e) => return Err(refusal(&e, &verdicts, &[]).lost_race()),
        };
        let answer = deployed(&caps, &deploy_map, &planned, verdicts);
        let planned_in = started.elapsed();
        if !d.dry_run {
            write(&mut tx, d, &planned, &answer.instances).await?;
            tx.commit().await.map_err(Error::commit_failed)?;
        }
        let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3;
        let (plan_ms, write_ms) = (ms(planned_in), ms(started.elapsed() - planned_in));
        let instances = planned.len();
        tracing::debug!(instances, round, plan_ms, write_ms, "deployment placed");
        return Ok(Outcome::Done(answer));
    }
    Err(Error::internal("the planning loop ended"))
}

/// The capacity map of `cached` without the `busy` nodes (plus `outside`,
/// the capacity of candidates not among them), and the strategy's deploy
/// map over it.
fn spread(
    d: &Deployment,
    cached: &[Arc<node_cache::Cached>],
    judged: &[Result<sched::NodeCapacity, plan::Shortfall>],
    busy: &HashSet<i64>,
    outside: i64,
) -> (CapacityMap, Result<BTreeMap<NodeName, i64>, SchedError>) {
    let existing: BTreeMap<NodeName, i64> = cached
        .iter()
        .map(|n| (NodeName::of(n.node.uuid), n.node.count_of(d.app.as_str())))
        .collect();
    let mut caps = CapacityMap::from_nodes(cached.iter().zip(judged).filter_map(|(n, j)| {
        let cap = *j.as_ref().ok()?;
        (!busy.contains(&n.node.rp_id)).then(|| (NodeName::of(n.node.uuid), cap))
    }));
    caps.total = caps.total.saturating_add(outside);
    let seed = rand::random();
    let deploy_map =
        sched::plan_deploy_spread(d.strategy, d.count, d.nodes_limit, &caps, &existing, seed);
    (caps, deploy_map)
}

/// Whether one instance's CPUs exceed the size of every candidate node
/// (cores of a topology; a node without one counts for non-bound requests
/// only, by its VCPUs).
fn beyond_every_candidate(
    cached: &[std::sync::Arc<node_cache::Cached>],
    shape: &deployment_request::InstanceShape,
) -> bool {
    let cpu = shape.cpu.get();
    cached.iter().all(|n| {
        let fits = n.node.has_topology() || !shape.cpu_bind;
        !fits || cpu > n.node.info.capacity.cpu
    })
}

/// A 400 when the instance's CPUs exceed the size of every deployment node,
/// candidate or not (no node could ever hold it: the request is wrong, not
/// the moment). A node that is merely busy or excluded now leaves the
/// ordinary refusal to say why.
async fn refuse_beyond_every_node(c: &Context<'_>) -> Result<()> {
    let shape = &c.d.shape;
    let mut conn = c.pool.acquire().await?;
    let Some(largest) = db::largest_node_cpus(&mut conn, shape.cpu_bind).await? else {
        return Ok(());
    };
    let cpu = shape.cpu.get();
    if cpu > f64::from(i32::try_from(largest).unwrap_or(i32::MAX)) {
        let what = if shape.cpu_bind {
            "cores of a CPU topology"
        } else {
            "CPUs"
        };
        return Err(Error::invalid(format!(
            "cpu {cpu} is more than any deployment node has: the largest has {largest} {what}."
        ))
        .code(codes::DEPLOY_INVALID_REQUEST));
    }
    Ok(())
}

/// Every node's capacity for `shape` (or why it has none), and the
/// verdicts an answer shows.
fn judge(
    cached: &[std::sync::Arc<node_cache::Cached>],
    shape: &deployment_request::InstanceShape,
) -> (
    Vec<Result<sched::NodeCapacity, plan::Shortfall>>,
    Vec<NodeVerdict>,
) {
    let judged: Vec<_> = cached.iter().map(|n| n.capacity(shape)).collect();
    let verdicts = cached
        .iter()
        .zip(&judged)
        .map(|(n, j)| NodeVerdict {
            uuid: n.node.uuid,
            capacity: j.as_ref().map_or(0, |c| c.capacity),
            short: j.as_ref().err().cloned(),
        })
        .collect();
    (judged, verdicts)
}

/// The chosen nodes' generations: as cached for a dry run (nothing is
/// locked), else under their locks, waiting for other writers or skipping
/// the nodes they hold.
async fn lock(
    tx: &mut sqlx::PgConnection,
    dry_run: bool,
    waiting: bool,
    chosen: &[&NodeState],
) -> Result<HashMap<i64, i32>> {
    let ids: Vec<i64> = chosen.iter().map(|n| n.rp_id).collect();
    Ok(match (dry_run, waiting) {
        (true, _) => chosen.iter().map(|n| (n.rp_id, n.generation)).collect(),
        (false, true) => db::lock_providers_waiting(tx, &ids).await?,
        (false, false) => db::lock_free_providers(tx, &ids).await?,
    })
}

/// The chosen nodes as they are under their locks: this process's copy
/// where the generation has not moved, the database's otherwise.
async fn exact_states(
    tx: &mut sqlx::PgConnection,
    chosen: &[&NodeState],
    generations: &HashMap<i64, i32>,
) -> Result<Vec<NodeState>> {
    let current = |n: &&&NodeState| generations.get(&n.rp_id) == Some(&n.generation);
    let mut fresh: Vec<NodeState> = chosen
        .iter()
        .filter(current)
        .map(|n| (*n).clone())
        .collect();
    let moved: Vec<i64> = chosen
        .iter()
        .filter(|n| !current(n))
        .map(|n| n.rp_id)
        .collect();
    if !moved.is_empty() {
        let known: nodes::Known = chosen.iter().map(|n| (n.rp_id, *n)).collect();
        fresh.extend(nodes::load_nodes(tx, &moved, &known).await?);
    }
    fresh.sort_by_key(|n| n.rp_id);
    Ok(fresh)
}

/// The instances of a deploy map on each node, each node's usage updated
/// as they are placed.
fn plan_instances(
    fresh: &mut [NodeState],
    deploy_map: &BTreeMap<NodeName, i64>,
    shape: &deployment_request::InstanceShape,
) -> Result<Vec<Planned>, SchedError> {
    let mut planned = Vec::new();
    for node in fresh.iter_mut() {
        let Some(&count) = deploy_map.get(&NodeName::of(node.uuid)) else {
            continue;
        };
        let n = usize::try_from(count).unwrap_or(0);
        let allocations = plan::instances(node, n, shape)?;
        planned.extend(
            allocations
                .into_iter()
                .map(|(allocation, volumes)| Planned {
                    node: node.uuid,
                    cpu: node.cpu,
                    rp_id: node.rp_id,
                    allocation,
                    volumes,
                }),
        );
    }
    Ok(planned)
}

/// One instance as planned on a node.
struct Planned {
    /// The node's provider uuid.
    node: uuid::Uuid,
    /// How the node counts CPUs.
    cpu: CpuModel,
    /// The node's provider id.
    rp_id: i64,
    /// The scheduler's allocation (cores, NUMA node, memory).
    allocation: sched::Allocation,
    /// Its volumes.
    volumes: sched::VolumePlan,
}

fn deployed(
    caps: &CapacityMap,
    deploy_map: &BTreeMap<NodeName, i64>,
    planned: &[Planned],
    verdicts: Vec<NodeVerdict>,
) -> Deployed {
    let instances = planned
        .iter()
        .map(|p| PlannedInstance {
            consumer_uuid: uuid::Uuid::new_v4(),
            volumes: p.volumes.clone(),
            node: p.node,
            cpu_map: p
                .allocation
                .workload
                .cpu_map
                .iter()
                .map(|(c, s)| (c.0.clone(), *s))
                .collect(),
            numa_node: p
                .allocation
                .workload
                .numa_node
                .as_ref()
                .map(|n| n.0.clone()),
        })
        .collect();
    Deployed::new(caps, deploy_map, instances, verdicts)
}

/// The allocations, instances and bindings of the planned instances.
async fn write(
    tx: &mut sqlx::PgConnection,
    d: &Deployment,
    planned: &[Planned],
    instances: &[PlannedInstance],
) -> Result<()> {
    write::write_instances(tx, &[deployment_write(d, planned, instances)], None).await
}

/// What writing `d`'s planned instances takes: each instance's amounts by
/// class on its node.
fn deployment_write<'a>(
    d: &'a Deployment,
    planned: &[Planned],
    instances: &'a [PlannedInstance],
) -> DeploymentWrite<'a> {
    let items: Vec<InstanceWrite> = planned
        .iter()
        .zip(instances)
        .map(|(p, instance)| {
            let mut resources = instance_resources(
                d.shape.memory_mb,
                &p.allocation.workload.cpu_map,
                &d.shape.resources,
            );
            if let (CpuModel::Vcpu(..), w @ 1..) = (p.cpu, d.shape.cpu.whole_vcpus()) {
                resources.insert("VCPU".into(), w);
            }
            InstanceWrite {
                instance,
                rp_id: p.rp_id,
                resources,
            }
        })
        .collect();
    DeploymentWrite {
        d,
        items,
        cpu_bind: d.shape.cpu_bind,
    }
}
