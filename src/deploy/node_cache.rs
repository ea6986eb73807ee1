//! Each process's copy of the deployment nodes' state (topology, bound
//! shares, instances, memory and VCPU stock), so that a deployment plans
//! without reading every candidate node from the database.
//!
//! An entry is current while the candidate snapshot's copy of its provider
//! is unchanged (the same [`Node::stamp`](crate::candidates::snapshot::Node)):
//! every write that changes a node's state (allocations, inventories, the
//! CPU topology) leaves a change-log row that makes the snapshot reload the
//! provider under a new stamp. Planning on an entry is therefore as exact as
//! the candidate search; the commit still checks each chosen node's
//! generation under its lock and re-reads the ones that moved.

use super::deployment_request::InstanceShape;
use super::nodes::{self, NodeState};
use super::plan::{self, Shortfall};
use crate::sched::NodeCapacity;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

/// Capacities kept per entry (one per instance shape asked for lately).
const SHAPES_PER_NODE: usize = 8;

/// Entries kept at most: beyond it, every entry but the nodes just read is
/// dropped (deleted providers among them); the rest are read again when
/// next asked for.
const MOST_ENTRIES: usize = 100_000;

/// The shape of an instance, as a key.
pub(super) type ShapeKey = (u64, bool, i64, Vec<String>);

pub(super) fn shape_key(shape: &InstanceShape) -> ShapeKey {
    let volumes = shape.volumes.iter().map(ToString::to_string).collect();
    (
        shape.cpu.get().to_bits(),
        shape.cpu_bind,
        shape.memory_mb,
        volumes,
    )
}

/// One node's state as of a snapshot stamp, with the capacities computed
/// on it.
#[derive(Debug)]
pub struct Cached {
    /// The stamp of the snapshot data it matches.
    stamp: u64,
    /// The state.
    pub node: NodeState,
    capacities: Mutex<Vec<(ShapeKey, Result<NodeCapacity, Shortfall>)>>,
}

impl Cached {
    /// `node` as of snapshot stamp `stamp`, no capacity computed yet.
    pub(super) fn new(node: NodeState, stamp: u64) -> Cached {
        Cached {
            stamp,
            node,
            capacities: Mutex::new(Vec::new()),
        }
    }

    /// The node's capacity for `shape`, computed once per shape.
    pub fn capacity(&self, shape: &InstanceShape) -> Result<NodeCapacity, Shortfall> {
        let k = shape_key(shape);
        let mut memo = self
            .capacities
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some((_, v)) = memo.iter().find(|(s, _)| *s == k) {
            return v.clone();
        }
        let v = plan::node_capacity(&self.node, shape);
        if memo.len() >= SHAPES_PER_NODE {
            let _oldest = memo.remove(0);
        }
        memo.push((k, v.clone()));
        v
    }
}

/// Node states by provider id.
#[derive(Debug, Default)]
pub struct NodeCache {
    entries: Mutex<HashMap<i64, Arc<Cached>>>,
    /// One loader at a time: requests that miss the same nodes at once
    /// (after a large deployment changed them all) wait for the first
    /// one's read instead of each reading every node again.
    loading: tokio::sync::Mutex<()>,
}

impl NodeCache {
    /// The states of `wanted` (provider id, snapshot stamp), in id order:
    /// those cached at that stamp or later as they are, the rest read from
    /// the database in one consistent read and kept. Providers that are
    /// not deployment nodes any more are left out.
    pub async fn current(
        &self,
        pool: &crate::db::Pool,
        wanted: &[(i64, u64)],
    ) -> Result<Vec<Arc<Cached>>, sqlx::Error> {
        let (mut have, missing) = self.lookup(wanted);
        if missing.is_empty() {
            return Ok(sorted(have));
        }
        let _loader = self.loading.lock().await;
        // Another request may have read them while this one waited.
        let (more, missing) = self.lookup(&missing);
        have.extend(more);
        if !missing.is_empty() {
            have.extend(self.load(pool, missing).await?);
        }
        Ok(sorted(have))
    }

    /// The providers it holds a state of.
    pub fn ids(&self) -> Vec<i64> {
        let entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        entries.keys().copied().collect()
    }

    /// The current entries among `wanted`, and the rest.
    fn lookup(&self, wanted: &[(i64, u64)]) -> (Vec<Arc<Cached>>, Vec<(i64, u64)>) {
        let entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        let mut have = Vec::with_capacity(wanted.len());
        let mut missing = Vec::new();
        for &(id, stamp) in wanted {
            match entries.get(&id).filter(|e| e.stamp >= stamp) {
                Some(e) => have.push(e.clone()),
                None => missing.push((id, stamp)),
            }
        }
        (have, missing)
    }

    /// Reads `missing` in one consistent read and keeps them.
    async fn load(
        &self,
        pool: &crate::db::Pool,
        missing: Vec<(i64, u64)>,
    ) -> Result<Vec<Arc<Cached>>, sqlx::Error> {
        let ids: Vec<i64> = missing.iter().map(|m| m.0).collect();
        let stamps: HashMap<i64, u64> = missing.into_iter().collect();
        let started = std::time::Instant::now();
        // The entries being replaced lend their topologies where unchanged.
        let held: Vec<Arc<Cached>> = {
            let entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
            ids.iter()
                .filter_map(|id| entries.get(id).cloned())
                .collect()
        };
        let known: nodes::Known = held.iter().map(|c| (c.node.rp_id, &c.node)).collect();
        let mut tx = crate::db::candidates::begin_snapshot(pool).await?;
        let loaded = nodes::load_nodes(&mut tx, &ids, &known).await?;
        tx.commit().await?;
        tracing::debug!(
            nodes = ids.len(),
            ms = started.elapsed().as_secs_f64() * 1e3,
            "deployment node states read"
        );
        let mut entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        if entries.len() + loaded.len() > MOST_ENTRIES {
            entries.retain(|id, _| stamps.contains_key(id));
        }
        let mut out = Vec::with_capacity(loaded.len());
        for node in loaded {
            let stamp = stamps.get(&node.rp_id).copied().unwrap_or(0);
            let fresh = Arc::new(Cached::new(node, stamp));
            let newer = entries
                .get(&fresh.node.rp_id)
                .is_none_or(|e| e.stamp <= stamp);
            if newer {
                entries.insert(fresh.node.rp_id, fresh.clone());
            }
            out.push(fresh);
        }
        Ok(out)
    }
}

fn sorted(mut nodes: Vec<Arc<Cached>>) -> Vec<Arc<Cached>> {
    nodes.sort_by_key(|c| c.node.rp_id);
    nodes
}
