//! Single deployments arriving together, placed in one transaction: a
//! turn (`coalescing`) plans them one after another over their rankings'
//! heads, each on the node states the ones before it left, locks every
//! node they chose at once, plans their instances on those nodes' exact
//! states and writes them all with one allocation write and one commit.
//!
//! Why: a deployment's own work is small next to its round trips (begin,
//! lock, the allocation write's statements, the instance rows, commit),
//! each waking the server and PostgreSQL; on two cores those, not the
//! planning, bounded single deploys a second (docs/benchmarks.md).
//!
//! Speed machinery: it decides nothing. Each deployment is planned by the
//! strategy code over its ranking's head as if the ones before it in the
//! turn had committed, which is what deployments one after another see.
//! Whatever a turn cannot place runs alone on the ordinary path, which
//! answers it as before: a deployment its head refuses, one whose
//! instances no longer fit a node's exact state, all of them when a node
//! stays held by another writer through every round or the write fails
//! (a quota, a node filled since). A turn writes every deployment it
//! places in one commit, or none.

use super::deployment_request::Deployment;
use super::node_cache::Cached;
use super::nodes::NodeState;
use super::plan::NodeVerdict;
use super::ranking::{self, Head};
use super::{
    deployed, deployment_write, exact_states, judge, plan_instances, ranked, spread, Deployed,
    Deployments, Planned, SKIPS,
};
use crate::coalescing::Coalescer;
use crate::db::deployments as db;
use crate::error::{Error, Kind, Result};
use crate::sched::{CapacityMap, NodeName};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

/// At most this many deployments in one turn.
const MOST_AT_ONCE: usize = 32;

/// Turns running at once per process: one gathers the most deployments
/// per turn (as for claims, `allocation::claims`).
const TURNS_AT_ONCE: usize = 1;

/// What a turn did with one deployment.
#[derive(Debug, Clone)]
pub enum Placed {
    /// Written and committed.
    Done(Deployed),
    /// Not written: it runs alone on the ordinary path.
    Alone,
    /// The connection was lost while the commit was under way: it may
    /// have committed, so running it again could place it twice.
    Unknown,
    /// Not written: the database could not be reached (every deployment
    /// waiting behind is answered the same at once).
    Unavailable,
}

/// This process's single deployments waiting for a turn.
#[derive(Debug)]
pub struct Turns {
    waiting: Coalescer<Deployment, Placed>,
}

impl Default for Turns {
    fn default() -> Self {
        Turns {
            waiting: Coalescer::new(TURNS_AT_ONCE, MOST_AT_ONCE, |p| {
                matches!(p, Placed::Unavailable)
            }),
        }
    }
}

/// Whether `d` may be placed with others: a deployment its ranking serves
/// (a few instances, not a dry run).
pub fn goes_together(d: &Deployment) -> bool {
    ranking::serves(d)
}

impl Turns {
    /// Places `d` together with the deployments waiting beside it; None
    /// when it was not placed and runs alone.
    pub async fn place(&self, handles: &Deployments, d: &Deployment) -> Result<Option<Deployed>> {
        let handles = handles.clone();
        // Once handed over it is written whether or not this request
        // still waits for the outcome.
        crate::db::deadline::write_sent();
        let placed = self
            .waiting
            .submit(d.clone(), move |ds| async move { turn(&handles, ds).await })
            .await;
        match placed {
            Some(Placed::Done(done)) => Ok(Some(done)),
            Some(Placed::Unknown) => Err(Error::outcome_unknown()),
            Some(Placed::Unavailable) => Err(Error::database_unavailable(
                "a turn of deployments found the database unavailable",
            )),
            Some(Placed::Alone) | None => Ok(None),
        }
    }
}

/// One turn: what became of each deployment, in their order.
async fn turn(h: &Deployments, ds: Vec<Deployment>) -> Vec<Placed> {
    match place_all(h, &ds).await {
        Ok(placed) => {
            let together = placed.iter().filter(|p| p.is_some()).count();
            if together > 1 {
                let n = u64::try_from(together).unwrap_or(u64::MAX);
                crate::metrics::metrics().deployments_together.inc_by(n);
            }
            placed
                .into_iter()
                .map(|p| p.map_or(Placed::Alone, Placed::Done))
                .collect()
        }
        Err(e) => {
            tracing::debug!(error = %e, deployments = ds.len(), "a turn of deployments failed");
            let each = match e.kind {
                Kind::DatabaseUnavailable => Placed::Unavailable,
                Kind::OutcomeUnknown => Placed::Unknown,
                // Each runs again alone, which answers with this failure
                // if it persists.
                _ => Placed::Alone,
            };
            vec![each; ds.len()]
        }
    }
}

/// A deployment's head in a turn, with the capacity of the members
/// outside it.
struct TurnHead {
    head: Head,
    outside: i64,
}

/// One deployment's plan in a turn: its capacity map and deploy map, and
/// the verdicts an answer shows.
struct TurnPlan {
    caps: CapacityMap,
    deploy_map: BTreeMap<NodeName, i64>,
    verdicts: Vec<NodeVerdict>,
}

/// Places what it can of `ds` in one transaction: Some answer for each
/// deployment written, None for each that runs alone.
async fn place_all(h: &Deployments, ds: &[Deployment]) -> Result<Vec<Option<Deployed>>> {
    let heads = heads(h, ds).await?;
    let mut busy: HashSet<i64> = HashSet::new();
    for round in 0..SKIPS {
        let plans = plan_all(ds, &heads, &busy);
        let chosen = chosen_states(&heads, &plans);
        if chosen.is_empty() {
            break;
        }
        let ids: Vec<i64> = chosen.iter().map(|n| n.rp_id).collect();
        let mut tx = h.pool.begin().await?;
        let generations = db::lock_free_providers(&mut tx, &ids).await?;
        if generations.len() < ids.len() {
            // The transaction ends here, holding nothing; the next round
            // plans around the nodes other writers hold.
            busy.extend(ids.iter().filter(|i| !generations.contains_key(i)));
            continue;
        }
        let mut exact = exact_states(&mut tx, &chosen, &generations).await?;
        let placed = instances_on(&mut exact, ds, plans);
        let writes: Vec<_> = ds
            .iter()
            .zip(&placed)
            .filter_map(|(d, p)| p.as_ref().map(|(planned, answer)| (d, planned, answer)))
            .map(|(d, planned, answer)| deployment_write(d, planned, &answer.instances))
            .collect();
        if !writes.is_empty() {
            super::write::write_instances(&mut tx, &writes, None).await?;
            tx.commit().await.map_err(Error::commit_failed)?;
        }
        tracing::debug!(
            round,
            deployments = ds.len(),
            written = writes.len(),
            "turn of deployments written"
        );
        return Ok(placed.into_iter().map(|p| p.map(|(_, a)| a)).collect());
    }
    Ok(ds.iter().map(|_| None).collect())
}

/// Each deployment's head: its ranking brought forward once per ranking
/// and project in the turn, and the head taken as if the instances of
/// the deployments before it were placed first. None where no ranking
/// serves it.
async fn heads(h: &Deployments, ds: &[Deployment]) -> Result<Vec<Option<TurnHead>>> {
    let engine = h.engine();
    let mut forward: Vec<(Arc<tokio::sync::Mutex<ranking::Ranking>>, &str, bool)> = Vec::new();
    let mut before = 0usize;
    let mut heads = Vec::with_capacity(ds.len());
    for d in ds {
        let Some(ranking) = h.rankings.serving(d) else {
            heads.push(None);
            continue;
        };
        let project = d.owner.project_id.as_str();
        let known = forward
            .iter()
            .find(|(r, p, _)| Arc::ptr_eq(r, &ranking) && *p == project)
            .map(|f| f.2);
        let served = match known {
            Some(served) => served,
            None => {
                let served = ranked::bring_forward(&engine, &h.states, &ranking, d).await?;
                forward.push((ranking.clone(), project, served));
                served
            }
        };
        let head = match served {
            true => ranking.lock().await.head(d, before),
            false => None,
        };
        if head.is_some() {
            before = before.saturating_add(usize::try_from(d.count).unwrap_or(0));
        }
        heads.push(head.map(|head| TurnHead {
            outside: head.outside(&d.shape),
            head,
        }));
    }
    Ok(heads)
}

/// Each deployment's plan over its head without the `busy` nodes, on the
/// node states the deployments before it left (their instances planned on
/// copies of the nodes they chose). None where it does not fit there.
fn plan_all(
    ds: &[Deployment],
    heads: &[Option<TurnHead>],
    busy: &HashSet<i64>,
) -> Vec<Option<TurnPlan>> {
    let mut after: HashMap<i64, Arc<Cached>> = HashMap::new();
    ds.iter()
        .zip(heads)
        .map(|(d, head)| plan_one(d, head.as_ref()?, busy, &mut after))
        .collect()
}

/// `d`'s plan over `head` as `after` leaves its nodes; `after` then holds
/// the nodes `d` takes as they are with its instances.
fn plan_one(
    d: &Deployment,
    head: &TurnHead,
    busy: &HashSet<i64>,
    after: &mut HashMap<i64, Arc<Cached>>,
) -> Option<TurnPlan> {
    let nodes: Vec<Arc<Cached>> = head
        .head
        .nodes
        .iter()
        .map(|n| after.get(&n.node.rp_id).unwrap_or(n).clone())
        .collect();
    let (judged, verdicts) = judge(&nodes, &d.shape);
    let (caps, deploy_map) = spread(d, &nodes, &judged, busy, head.outside);
    let deploy_map = deploy_map.ok()?;
    let (taken, _) = planned_on_copies(nodes.iter().map(|n| &n.node), &deploy_map, d)?;
    for mut node in taken {
        let count = deploy_map
            .get(&NodeName::of(node.uuid))
            .copied()
            .unwrap_or(0);
        *node.apps.entry(d.app.as_str().to_string()).or_default() += count;
        // Its stamp is never looked up: the entry lives for this turn.
        after.insert(node.rp_id, Arc::new(Cached::new(node, 0)));
    }
    Some(TurnPlan {
        caps,
        deploy_map,
        verdicts,
    })
}

/// Copies of the nodes `deploy_map` takes among `nodes`, with `d`'s
/// instances planned on them; None when they no longer fit.
fn planned_on_copies<'a>(
    nodes: impl Iterator<Item = &'a NodeState>,
    deploy_map: &BTreeMap<NodeName, i64>,
    d: &Deployment,
) -> Option<(Vec<NodeState>, Vec<Planned>)> {
    let mut taken: Vec<NodeState> = nodes
        .filter(|n| deploy_map.contains_key(&NodeName::of(n.uuid)))
        .cloned()
        .collect();
    let planned = plan_instances(&mut taken, deploy_map, &d.shape).ok()?;
    Some((taken, planned))
}

/// The nodes the plans chose, as their heads had them (the newest
/// generation where heads differ), in provider id order.
fn chosen_states<'a>(
    heads: &'a [Option<TurnHead>],
    plans: &[Option<TurnPlan>],
) -> Vec<&'a NodeState> {
    let mut chosen: BTreeMap<i64, &NodeState> = BTreeMap::new();
    for (head, plan) in heads.iter().zip(plans) {
        let (Some(head), Some(plan)) = (head, plan) else {
            continue;
        };
        let nodes = head.head.nodes.iter().map(|n| &n.node);
        for node in nodes.filter(|n| plan.deploy_map.contains_key(&NodeName::of(n.uuid))) {
            let newer = chosen
                .get(&node.rp_id)
                .is_none_or(|c| c.generation < node.generation);
            if newer {
                chosen.insert(node.rp_id, node);
            }
        }
    }
    chosen.into_values().collect()
}

/// Each deployment's instances planned on the chosen nodes' exact states,
/// one after another (each leaves its instances on them), with its
/// answer; None where they no longer fit (it runs alone, and plans again).
fn instances_on(
    exact: &mut [NodeState],
    ds: &[Deployment],
    plans: Vec<Option<TurnPlan>>,
) -> Vec<Option<(Vec<Planned>, Deployed)>> {
    ds.iter()
        .zip(plans)
        .map(|(d, plan)| {
            let plan = plan?;
            let (taken, planned) = planned_on_copies(exact.iter(), &plan.deploy_map, d)?;
            for node in taken {
                if let Ok(i) = exact.binary_search_by_key(&node.rp_id, |n| n.rp_id) {
                    exact[i] = node;
                }
            }
            let answer = deployed(&plan.caps, &plan.deploy_map, &planned, plan.verdicts);
            Some((planned, answer))
        })
        .collect()
}
