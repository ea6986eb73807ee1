//! Each process's ranking of the nodes a deployment query finds, per
//! instance shape: the nodes in the orders the strategies read (most room
//! first; lowest utilisation after one more instance first; per app,
//! fewest of its instances first), brought forward by the providers that
//! changed since (the candidate snapshot's journal), so that a deployment
//! of a few instances reads the head of an order instead of judging every
//! node. What a deployment then costs depends on what changed since the
//! last one, not on the number of nodes.
//!
//! Speed machinery: it decides nothing. It hands the deployment a list of
//! nodes that begins the strategy's order (with a few spare), the true
//! capacity total, and the strategy itself (`sched::strategy`) runs on that
//! list as it would on every node: the first `k` picks of AUTO, GLOBAL and
//! EACH only ever come from the first `k` nodes of their order (a node's
//! key only grows once it takes an instance). Whatever it cannot serve (a
//! dry run, many instances, FILL and DRAINED, reservations or sharing
//! providers in play, a refusal) goes the whole way, as before.

use super::deployment_request::{Deployment, InstanceShape};
use super::node_cache::{shape_key, Cached, ShapeKey};
use crate::candidates::find::{Candidates, Visited};
use crate::candidates::snapshot::JournalMark;
use crate::sched::{NodeCapacity, Strategy};
use std::collections::{BTreeSet, HashMap};
use std::ops::Bound;
use std::sync::{Arc, Mutex, PoisonError};

/// The most instances a deployment may ask for and be served from a
/// ranking (EACH: its node count); larger ones plan over every node.
pub const MOST_INSTANCES: i64 = 32;

/// Nodes past the strategy's own needs handed out, so that a deployment
/// can plan around nodes that other deployments hold at that moment.
const SPARE: usize = 4;

/// Rankings held (one per query and shape); past it the least recently
/// used goes.
const MOST_RANKINGS: usize = 16;

/// Apps with an order of their own, per ranking; past it the least
/// recently used goes.
const APP_ORDERS: usize = 4;

/// Nodes holding the app that AUTO steps over in the room order before
/// the app gets an order of its own.
const MOST_SKIPS: usize = 64;

/// A deployment query and instance shape: what a ranking is of.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct RankingKey {
    /// The candidate query, as text.
    query: String,
    shape: ShapeKey,
}

/// This process's rankings.
#[derive(Default)]
pub struct Rankings {
    /// Most recently used last.
    recent: Mutex<Vec<(RankingKey, Arc<tokio::sync::Mutex<Ranking>>)>>,
}

impl Rankings {
    /// The ranking that serves `d`; None when `d` plans over every node.
    pub fn serving(&self, d: &Deployment) -> Option<Arc<tokio::sync::Mutex<Ranking>>> {
        head_size(d)?;
        let key = RankingKey {
            query: format!("{:?}", d.node_query()),
            shape: shape_key(&d.shape),
        };
        let mut recent = self.recent.lock().unwrap_or_else(PoisonError::into_inner);
        let found = recent.iter().position(|(k, _)| *k == key);
        let entry = match found {
            Some(i) => recent.remove(i),
            None => (key, Arc::default()),
        };
        let ranking = entry.1.clone();
        recent.push(entry);
        if recent.len() > MOST_RANKINGS {
            recent.remove(0);
        }
        Some(ranking)
    }
}

/// Whether a ranking serves `d` (a deployment of a few instances, not a
/// dry run, by a strategy whose order a ranking keeps).
pub fn serves(d: &Deployment) -> bool {
    head_size(d).is_some()
}

/// How many nodes of its order `d`'s strategy may use; None when it may
/// use every node (or reads an order no ranking keeps).
fn head_size(d: &Deployment) -> Option<usize> {
    if d.dry_run || d.count > MOST_INSTANCES {
        return None;
    }
    let count = usize::try_from(d.count).ok()?;
    match d.strategy {
        Strategy::Auto | Strategy::Global => Some(count),
        Strategy::Each if d.nodes_limit > 0 && i64::from(d.nodes_limit) <= MOST_INSTANCES => {
            usize::try_from(d.nodes_limit).ok()
        }
        Strategy::Each | Strategy::Fill | Strategy::Drained => None,
    }
}

/// A node's place in an order: the order's key (smallest first), then a
/// number drawn when the node was ranked (ties), then the provider.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Rank {
    key: (i64, i64),
    tiebreak: u64,
    rp: i64,
}

/// One node a ranking holds: a candidate with room for one instance.
#[derive(Debug)]
struct Member {
    state: Arc<Cached>,
    capacity: NodeCapacity,
    tiebreak: u64,
}

impl Member {
    fn rank(&self, key: (i64, i64)) -> Rank {
        Rank {
            key,
            tiebreak: self.tiebreak,
            rp: self.state.node.rp_id,
        }
    }

    /// Most room first.
    fn by_room(&self) -> Rank {
        self.rank((self.capacity.capacity.saturating_neg(), 0))
    }

    /// Lowest utilisation after one more instance first (GLOBAL's key).
    fn by_load(&self) -> Rank {
        self.rank((ordered(self.capacity.usage + self.capacity.rate), 0))
    }

    /// Fewest instances of `app` first, then most room (AUTO's key).
    fn by_app(&self, app: &str) -> Rank {
        let count = self.state.node.count_of(app);
        self.rank((count, self.capacity.capacity.saturating_neg()))
    }
}

/// An integer that orders as `x` does under `f64::total_cmp` (the sign
/// bit first, then the rest reversed for negative numbers).
fn ordered(x: f64) -> i64 {
    let bits = i64::from_ne_bytes(x.to_bits().to_ne_bytes());
    match bits < 0 {
        true => bits ^ i64::MAX,
        false => bits,
    }
}

/// One app's order over every member.
#[derive(Debug)]
struct AppOrder {
    app: String,
    order: BTreeSet<Rank>,
}

/// The nodes a query finds with room for one instance of a shape, in the
/// strategies' orders.
#[derive(Debug, Default)]
pub struct Ranking {
    /// The journal point its members reflect (None: never filled).
    mark: Option<JournalMark>,
    /// The stamp each provider seen had when it was last judged.
    judged: HashMap<i64, u64>,
    members: HashMap<i64, Member>,
    by_room: BTreeSet<Rank>,
    by_load: BTreeSet<Rank>,
    /// Most recently used last.
    apps: Vec<AppOrder>,
    /// The members' capacities summed (an unlimited one is i64::MAX).
    total: i128,
}

/// What a ranking hands a deployment.
pub struct Head {
    /// Nodes that begin the strategy's order, in provider id order.
    pub nodes: Vec<Arc<Cached>>,
    /// The capacity of every member, saturating.
    pub total: i64,
}

impl Head {
    /// The capacity for `shape` of the members not in the head.
    pub fn outside(&self, shape: &InstanceShape) -> i64 {
        let in_head = self.nodes.iter().fold(0i64, |t, n| {
            t.saturating_add(n.capacity(shape).map_or(0, |c| c.capacity))
        });
        self.total.saturating_sub(in_head).max(0)
    }
}

impl Ranking {
    /// Where its members stand: a search changed since this point finds
    /// what it needs to bring them forward.
    pub fn mark(&self) -> Option<JournalMark> {
        self.mark.clone()
    }

    /// Brings the members forward to what `found` saw: for each provider
    /// of the trees it visited whose stamp moved, its new state in
    /// `states` (the candidates' deployment nodes) or its removal.
    pub fn update(&mut self, found: &Candidates, states: &[Arc<Cached>], shape: &InstanceShape) {
        let snap = &found.snap;
        let here = snap.mark();
        let same_load = self
            .mark
            .as_ref()
            .is_some_and(|m| Arc::ptr_eq(&m.journal, &here.journal));
        match (&found.visited, same_load) {
            // A search that began before a whole load this ranking already
            // reflects: what it saw is older.
            // A search of changes on another whole load than the one this
            // ranking reflects: what it saw cannot be placed.
            (Visited::Trees(_), false) => return,
            (Visited::EveryTree, false) => self.clear(),
            (_, true) => {}
        }
        let states: HashMap<i64, &Arc<Cached>> = states.iter().map(|s| (s.node.rp_id, s)).collect();
        let providers: Vec<usize> = match &found.visited {
            Visited::EveryTree => (0..snap.nodes.len()).collect(),
            Visited::Trees(roots) => roots
                .iter()
                .filter_map(|id| snap.index.by_id.get(id))
                .flat_map(|&r| snap.tree(r).iter().copied())
                .collect(),
        };
        for i in providers {
            let (id, stamp) = (snap.nodes[i].id, snap.nodes[i].stamp);
            let judged = self.judged.entry(id).or_insert(0);
            if *judged >= stamp {
                continue;
            }
            *judged = stamp;
            self.remove(id);
            if let Some(state) = states.get(&id) {
                if let Ok(capacity) = state.capacity(shape) {
                    self.insert(Member {
                        state: Arc::clone(state),
                        capacity,
                        tiebreak: rand::random(),
                    });
                }
            }
        }
        let newer = self.mark.as_ref().is_none_or(|m| here.below > m.below) || !same_load;
        if newer {
            self.mark = Some(here);
        }
    }

    fn clear(&mut self) {
        *self = Ranking::default();
    }

    fn remove(&mut self, id: i64) {
        let Some(m) = self.members.remove(&id) else {
            return;
        };
        self.by_room.remove(&m.by_room());
        self.by_load.remove(&m.by_load());
        for a in &mut self.apps {
            a.order.remove(&m.by_app(&a.app));
        }
        self.total -= i128::from(m.capacity.capacity);
    }

    fn insert(&mut self, m: Member) {
        if m.capacity.capacity <= 0 {
            return;
        }
        self.by_room.insert(m.by_room());
        self.by_load.insert(m.by_load());
        for a in &mut self.apps {
            a.order.insert(m.by_app(&a.app));
        }
        self.total += i128::from(m.capacity.capacity);
        self.members.insert(m.state.node.rp_id, m);
    }

    /// The nodes that begin `d`'s strategy order, when `before` instances
    /// of other deployments (of a turn placed together) are placed first;
    /// None when this ranking cannot say (the strategy reads every node,
    /// or there are too few). A node's key only grows as it takes an
    /// instance, so `d`'s picks stay within the first `before + count`
    /// nodes of the order.
    pub fn head(&mut self, d: &Deployment, before: usize) -> Option<Head> {
        let wanted = head_size(d)?.saturating_add(before).saturating_add(SPARE);
        let start = rand::random();
        let ids = match d.strategy {
            Strategy::Global => first(&self.by_load, wanted, start),
            Strategy::Each => first(&self.by_room, wanted, start),
            Strategy::Auto => self.first_by_app(d.app.as_str(), wanted, start),
            Strategy::Fill | Strategy::Drained => return None,
        };
        if ids.len() < wanted.min(self.members.len()) {
            return None;
        }
        let mut nodes: Vec<Arc<Cached>> = ids
            .iter()
            .filter_map(|id| self.members.get(id))
            .map(|m| Arc::clone(&m.state))
            .collect();
        nodes.sort_by_key(|c| c.node.rp_id);
        let total = i64::try_from(self.total).unwrap_or(i64::MAX);
        Some(Head { nodes, total })
    }

    /// The first `wanted` members by (instances of `app`, room): the room
    /// order's members without the app while few hold it, else the app's
    /// own order (made once, then kept with the others).
    fn first_by_app(&mut self, app: &str, wanted: usize, start: u64) -> Vec<i64> {
        if let Some(i) = self.apps.iter().position(|a| a.app == app) {
            let recent = self.apps.remove(i);
            let ids = first(&recent.order, wanted, start);
            self.apps.push(recent);
            return ids;
        }
        let members = &self.members;
        let without_app = |r: &Rank| {
            members
                .get(&r.rp)
                .is_some_and(|m| m.state.node.count_of(app) == 0)
        };
        let ids: Vec<i64> = rotated(&self.by_room, start)
            .take(wanted + MOST_SKIPS)
            .filter(without_app)
            .take(wanted)
            .map(|r| r.rp)
            .collect();
        if ids.len() == wanted {
            return ids;
        }
        let order = members.values().map(|m| m.by_app(app)).collect();
        self.apps.push(AppOrder {
            app: app.to_string(),
            order,
        });
        if self.apps.len() > APP_ORDERS {
            self.apps.remove(0);
        }
        self.apps
            .last()
            .map(|a| first(&a.order, wanted, start))
            .unwrap_or_default()
    }
}

/// The first `wanted` providers of `order`, ties for the first place
/// taken from a random point among them (so that deployments at the same
/// moment spread over equal nodes).
fn first(order: &BTreeSet<Rank>, wanted: usize, start: u64) -> Vec<i64> {
    rotated(order, start).take(wanted).map(|r| r.rp).collect()
}

/// `order`, its leading ties rotated to begin at `start`.
fn rotated(order: &BTreeSet<Rank>, start: u64) -> impl Iterator<Item = Rank> + '_ {
    let lead = order.first().map(|r| r.key);
    let tie = |tiebreak, rp| lead.map(|key| Rank { key, tiebreak, rp });
    let (pivot, tie_end) = (tie(start, i64::MIN), tie(u64::MAX, i64::MAX));
    let (tie_start, after) = (tie(0, i64::MIN), tie_end);
    let within = |from: Option<Rank>, to: Option<Rank>| match (from, to) {
        (Some(f), Some(t)) => Some(order.range(f..=t)),
        _ => None,
    };
    let head = within(pivot, tie_end).into_iter().flatten();
    let wrapped = match (tie_start, pivot) {
        (Some(f), Some(p)) => Some(order.range(f..p)),
        _ => None,
    };
    let rest = after.map(|a| order.range((Bound::Excluded(a), Bound::Unbounded)));
    head.chain(wrapped.into_iter().flatten())
        .chain(rest.into_iter().flatten())
        .copied()
}

#[cfg(test)]
mod tests {
    //! The head of a ranking and every node give the same plan, up to
    //! nodes that are equal in the strategy's eyes.
    use super::*;
    use crate::deploy::nodes::{CpuModel, NodeState, MIB};
    use crate::sched::{
        plan_deploy, CapacityMap, NodeName, NodeResource, NodeResourceInfo, SchedConfig, Strategy,
    };
    use proptest::prelude::*;

    /// A node of `vcpus` VCPUs with `used` taken, 64 GiB with `mem_used`
    /// MiB taken, and `count` instances of app `web`.
    fn node(rp: i64, vcpus: i64, used: i64, mem_used: i64, count: i64) -> Arc<Cached> {
        let state = NodeState {
            rp_id: rp,
            uuid: uuid::Uuid::from_u128(u128::from(rp.unsigned_abs())),
            generation: 1,
            cfg: SchedConfig::default(),
            topology_version: None,
            cpu: CpuModel::Vcpu(vcpus, used),
            info: NodeResourceInfo {
                capacity: NodeResource {
                    memory: 65_536 * MIB,
                    ..Default::default()
                },
                usage: NodeResource {
                    memory: mem_used * MIB,
                    ..Default::default()
                },
            },
            volumes: Default::default(),
            apps: match count {
                0 => HashMap::new(),
                n => HashMap::from([("web".to_string(), n)]),
            },
        };
        Arc::new(Cached::new(state, 1))
    }

    fn deployment(strategy: &str, count: i64, nodes_limit: u32) -> Deployment {
        let body: crate::deploy::deployment_request::DeploymentBody =
            serde_json::from_value(serde_json::json!({
                "app": "web", "count": count, "strategy": strategy, "nodes_limit": nodes_limit,
                "cpu": 2, "memory_mb": 4096, "project_id": "p", "user_id": "u"
            }))
            .expect("a body");
        Deployment::try_from(body).expect("valid")
    }

    /// The plan over `nodes` (capacity total `total` when given), as the
    /// keys its strategy placed each instance at, sorted: two plans that
    /// differ only in how ties fell have the same keys. AUTO places at
    /// (instances of the app, -room) as they were then; GLOBAL at the
    /// utilisation after the instance; EACH at the node's room.
    fn plan(d: &Deployment, nodes: &[Arc<Cached>], total: Option<i64>) -> Option<Vec<(i64, i64)>> {
        let capacity = |n: &Arc<Cached>| n.capacity(&d.shape).ok();
        let by_name: HashMap<NodeName, &Arc<Cached>> = nodes
            .iter()
            .map(|n| (NodeName::of(n.node.uuid), n))
            .collect();
        let mut caps = CapacityMap::from_nodes(
            nodes
                .iter()
                .filter_map(|n| Some((NodeName::of(n.node.uuid), capacity(n)?))),
        );
        if let Some(t) = total {
            caps.total = t;
        }
        let existing = nodes
            .iter()
            .map(|n| (NodeName::of(n.node.uuid), n.node.count_of("web")))
            .collect();
        let map = plan_deploy(d.strategy, d.count, d.nodes_limit, &caps, &existing).ok()?;
        let mut keys = Vec::new();
        for (name, &placed) in &map {
            let n = by_name[name];
            let c = capacity(n)?;
            let mut usage = c.usage;
            for j in 0..placed {
                usage += c.rate;
                keys.push(match d.strategy {
                    Strategy::Auto => (n.node.count_of("web") + j, j - c.capacity),
                    Strategy::Global => (ordered(usage), 0),
                    _ => (c.capacity, 0),
                });
            }
        }
        keys.sort_unstable();
        Some(keys)
    }

    proptest! {
        #[test]
        fn the_head_plans_as_every_node_does(
            shapes in proptest::collection::vec((1i64..5, 0i64..8, 0i64..4, 0i64..3), 1..40),
            count in 1i64..6,
            strategy in prop_oneof![Just("auto"), Just("global"), Just("each")],
            limit in 0u32..4,
        ) {
            let nodes: Vec<Arc<Cached>> = shapes
                .iter()
                .enumerate()
                .map(|(i, &(size, used, mem, apps))| {
                    let rp = i64::try_from(i).unwrap_or(0) + 1;
                    node(rp, size * 4, used.min(size * 4), mem * 16_384, apps)
                })
                .collect();
            // A deployment's node limit is at most its count; EACH needs one.
            let most = u32::try_from(count).unwrap_or(1);
            let limit = match strategy {
                "each" => limit.clamp(1, most),
                _ => limit.min(most),
            };
            let d = deployment(strategy, count, limit);
            let mut ranking = Ranking::default();
            for n in &nodes {
                if let Ok(capacity) = n.capacity(&d.shape) {
                    ranking.insert(Member { state: n.clone(), capacity, tiebreak: rand::random() });
                }
            }
            let every = plan(&d, &nodes, None);
            match ranking.head(&d, 0) {
                Some(head) => {
                    let ranked = plan(&d, &head.nodes, Some(head.total));
                    // A plan the head refuses goes the whole way.
                    if ranked.is_some() {
                        prop_assert_eq!(ranked, every);
                    }
                }
                None => {
                    let wanted = usize::try_from(count.max(i64::from(limit))).unwrap_or(0);
                    prop_assert!(ranking.members.len() < wanted + SPARE);
                }
            }
        }
    }
}
