//! The provider data candidates need, as plain data: every provider with its
//! tree links, inventories, usage, traits and aggregates. Loaded and kept
//! current by `candidates::speed::snapshot_cache`; read by the pure solver.

use crate::sched::colocation::CpuMem;
use crate::types::Inventory;
use std::collections::HashMap;
use std::sync::Arc;

pub mod node_chunks;

/// The maps the solver and the renderer read per anchor and per candidate:
/// keys are the engine's own ids, never request input, so a fast hash
/// (foldhash) serves instead of SipHash's flood resistance, which cost a
/// tenth of a 1,000-candidate answer.
pub type FastMap<K, V> = hashbrown::HashMap<K, V>;

/// One inventory record with its current usage.
#[derive(Debug, Clone, PartialEq)]
pub struct Stock {
    /// Resource class id.
    pub class: i32,
    /// The record: capacity and unit rules.
    pub inventory: Inventory,
    /// Units allocated now.
    pub used: i64,
}

impl Stock {
    /// Exact capacity, as the allocation check computes it.
    pub fn capacity(&self) -> f64 {
        self.inventory.capacity()
    }

    /// Truncated capacity, as summaries show it and merging re-checks it.
    pub fn capacity_int(&self) -> i64 {
        self.capacity() as i64
    }

    /// True when one allocation of `n` fits: capacity and unit constraints.
    pub fn fits(&self, n: i64) -> bool {
        (self.used + n) as f64 <= self.capacity() && self.inventory.units_ok(n)
    }
}

/// A provider's last usage report, for the load filter of batch placement.
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    /// When the agent sampled it.
    pub sampled_at: chrono::DateTime<chrono::Utc>,
    /// Measured node usage (milli-CPU, MB).
    pub node_used: CpuMem,
    /// Requests of the consumers allocated there since (not yet measured).
    pub pending: Vec<CpuMem>,
}

/// One provider.
#[derive(Debug, Clone)]
pub struct Node {
    /// Database id (orders results).
    pub id: i64,
    /// External uuid.
    pub uuid: uuid::Uuid,
    /// The uuid as an answer writes it (see [`JsonUuid`]).
    pub json_uuid: JsonUuid,
    /// Index of the parent in [`Snapshot::nodes`].
    pub parent: Option<usize>,
    /// Index of the root.
    pub root: usize,
    /// Trait ids, sorted.
    pub traits: Vec<i32>,
    /// Aggregate ids, sorted.
    pub aggs: Vec<i32>,
    /// Inventories, sorted by class.
    pub stock: Vec<Stock>,
    /// Its last usage report, if it ever reported.
    pub report: Option<Report>,
    /// A number this process gives the node's data each time it is
    /// (re)loaded: caches of other data about the provider (deployment
    /// node states) are current while it is unchanged.
    pub stamp: u64,
}

/// A uuid as the JSON string an answer writes, quotes included: encoded
/// once when the provider is loaded rather than at each of its mentions in
/// every answer (a thousand candidates mention four thousand uuids, and
/// encoding them was a twentieth of a search's CPU).
#[derive(Clone, PartialEq, Eq)]
pub struct JsonUuid(Box<str>);

impl JsonUuid {
    /// `u` quoted, in lower-case hyphenated form.
    pub fn of(u: uuid::Uuid) -> Self {
        let mut buf = [0u8; uuid::fmt::Hyphenated::LENGTH];
        let text = u.hyphenated().encode_lower(&mut buf);
        JsonUuid(format!("\"{text}\"").into_boxed_str())
    }

    /// The quoted text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for JsonUuid {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The last stamp given (see [`next_stamp`]).
static NEXT_STAMP: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

/// A fresh [`Node::stamp`], never given before in this process.
pub fn next_stamp() -> u64 {
    NEXT_STAMP.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// Every stamp given so far is below this one.
pub fn stamps_below() -> u64 {
    NEXT_STAMP.load(std::sync::atomic::Ordering::Relaxed)
}

/// Changes kept in a [`ChangeJournal`]: a reader further behind than
/// this starts again from the whole snapshot.
const JOURNAL_CHANGES: usize = 200_000;

/// Which providers were given a new stamp since the snapshot was loaded
/// whole, in stamp order: what lets a caller that keeps something derived
/// from the snapshot (the deployments' node rankings) bring it forward by
/// the providers that changed instead of by every provider. Shared by
/// every patched copy of one load; a whole load starts a new journal.
#[derive(Debug, Default)]
pub struct ChangeJournal {
    changes: std::sync::Mutex<JournalChanges>,
}

#[derive(Debug, Default)]
struct JournalChanges {
    /// (stamp, provider id), stamps increasing.
    recent: std::collections::VecDeque<(u64, i64)>,
    /// Changes with stamps below this are no longer listed.
    listed_from: u64,
}

/// A point in a journal: the snapshot copy a reader's data reflects.
#[derive(Debug, Clone)]
pub struct JournalMark {
    /// The journal (a whole load starts another).
    pub journal: Arc<ChangeJournal>,
    /// Every change below this stamp is reflected.
    pub below: u64,
}

impl ChangeJournal {
    /// A journal for a snapshot loaded whole, whose stamps are all below
    /// `below`.
    pub fn starting_at(below: u64) -> ChangeJournal {
        ChangeJournal {
            changes: std::sync::Mutex::new(JournalChanges {
                recent: Default::default(),
                listed_from: below,
            }),
        }
    }

    /// Records that provider `id` was given `stamp`.
    pub fn record(&self, stamp: u64, id: i64) {
        let mut c = self
            .changes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        c.recent.push_back((stamp, id));
        while c.recent.len() > JOURNAL_CHANGES {
            if let Some((dropped, _)) = c.recent.pop_front() {
                c.listed_from = dropped.saturating_add(1);
            }
        }
    }

    /// The providers given a stamp in `from..below`, each once; None when
    /// the journal no longer lists that far back.
    pub fn between(&self, from: u64, below: u64) -> Option<Vec<i64>> {
        let c = self
            .changes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if from < c.listed_from {
            return None;
        }
        let start = c.recent.partition_point(|&(s, _)| s < from);
        let mut ids: Vec<i64> = c
            .recent
            .range(start..)
            .take_while(|&&(s, _)| s < below)
            .map(|&(_, id)| id)
            .collect();
        ids.sort_unstable();
        ids.dedup();
        Some(ids)
    }
}

impl Node {
    /// The inventory of `class`, if any.
    pub fn stock(&self, class: i32) -> Option<&Stock> {
        self.stock.iter().find(|s| s.class == class)
    }

    /// True when the provider has the trait.
    pub fn has_trait(&self, t: i32) -> bool {
        self.traits.binary_search(&t).is_ok()
    }

    /// True when the provider is in the aggregate.
    pub fn in_agg(&self, a: i32) -> bool {
        self.aggs.binary_search(&a).is_ok()
    }
}

/// Lookups that depend only on the tree structure, rebuilt on a full load.
#[derive(Debug, Clone, Default)]
pub struct TreeIndex {
    /// Node index by provider uuid.
    pub by_uuid: FastMap<uuid::Uuid, usize>,
    /// Node index by database id.
    pub by_id: FastMap<i64, usize>,
    /// Root nodes, ordered by id.
    pub roots: Vec<usize>,
    /// Every node of each tree, keyed by its root, ordered by id.
    pub trees: FastMap<usize, Vec<usize>>,
}

/// Every provider the candidate engine knows, cheap to clone and patch:
/// nodes are shared (`Arc`) so a patch copies only the providers it changes.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// Providers ordered by id (parents before children).
    pub nodes: node_chunks::Nodes,
    /// Structure lookups.
    pub index: Arc<TreeIndex>,
    /// Nodes of each aggregate.
    pub agg_members: Arc<FastMap<i32, Vec<usize>>>,
    /// The roots of the trees with a member of each aggregate, in id
    /// order (what a `member_of` search visits).
    pub agg_roots: Arc<FastMap<i32, Vec<u32>>>,
    /// The roots of the trees with a provider holding each trait, in id
    /// order (what a `required` search visits).
    pub trait_roots: Arc<FastMap<i32, Vec<u32>>>,
    /// Nodes with MISC_SHARES_VIA_AGGREGATE.
    pub sharing_nodes: Arc<Vec<usize>>,
    /// Id of the MISC_SHARES_VIA_AGGREGATE trait.
    pub sharing_trait: Option<i32>,
    /// Whether any provider anywhere has a parent (changes pre-1.29 answers).
    pub any_nested: bool,
    /// Resource class names by id.
    pub class_names: FastMap<i32, String>,
    /// Trait names by id (those present in the snapshot).
    pub trait_names: FastMap<i32, String>,
    /// The providers restamped since the whole load, and how far this
    /// copy reflects them.
    pub journal: Arc<ChangeJournal>,
    /// Every stamp in this copy is below this one.
    pub stamps_below: u64,
}

impl Snapshot {
    /// Builds every index after `nodes` is filled.
    pub fn index(&mut self) {
        let mut index = TreeIndex::default();
        for (i, n) in self.nodes.iter().enumerate() {
            index.by_uuid.insert(n.uuid, i);
            index.by_id.insert(n.id, i);
            if n.root == i {
                index.roots.push(i);
            }
            index.trees.entry(n.root).or_default().push(i);
        }
        self.index = Arc::new(index);
        self.index_aggregates();
    }

    /// Rebuilds the aggregate membership lists, the roots of each
    /// aggregate's and each trait's trees, and the sharing providers
    /// (after aggregates or traits changed).
    pub fn index_aggregates(&mut self) {
        let mut members: FastMap<i32, Vec<usize>> = FastMap::new();
        let mut agg_roots: FastMap<i32, Vec<u32>> = FastMap::new();
        let mut trait_roots: FastMap<i32, Vec<u32>> = FastMap::new();
        let mut sharing = Vec::new();
        for (i, n) in self.nodes.iter().enumerate() {
            let root = u32::try_from(n.root).unwrap_or(u32::MAX);
            for &a in &n.aggs {
                members.entry(a).or_default().push(i);
                agg_roots.entry(a).or_default().push(root);
            }
            for &t in &n.traits {
                trait_roots.entry(t).or_default().push(root);
            }
            if self.is_sharing(i) {
                sharing.push(i);
            }
        }
        // Already in order where every tree is one provider (most clouds).
        for roots in agg_roots.values_mut().chain(trait_roots.values_mut()) {
            roots.sort_unstable();
            roots.dedup();
        }
        self.agg_members = Arc::new(members);
        self.agg_roots = Arc::new(agg_roots);
        self.trait_roots = Arc::new(trait_roots);
        self.sharing_nodes = Arc::new(sharing);
    }

    /// A copy in which capacity reserved for other projects counts as
    /// used: (provider id, class id) → units (only changed nodes are copied).
    pub fn withholding(&self, reserved: &HashMap<(i64, i32), i64>) -> Snapshot {
        let mut out = self.clone();
        for (&(rp, class), &n) in reserved {
            let Some(&i) = self.index.by_id.get(&rp) else {
                continue;
            };
            let node = Arc::make_mut(&mut out.nodes[i]);
            if let Some(s) = node.stock.iter_mut().find(|s| s.class == class) {
                s.used += n;
            }
        }
        out
    }

    /// A copy in which these providers offer none of these classes (only
    /// changed nodes are copied).
    pub fn without_stock(&self, providers: &[i64], classes: &[i32]) -> Snapshot {
        let mut out = self.clone();
        for rp in providers {
            let Some(&i) = self.index.by_id.get(rp) else {
                continue;
            };
            Arc::make_mut(&mut out.nodes[i])
                .stock
                .retain(|s| !classes.contains(&s.class));
        }
        out
    }

    /// Where this copy stands in its journal.
    pub fn mark(&self) -> JournalMark {
        JournalMark {
            journal: self.journal.clone(),
            below: self.stamps_below,
        }
    }

    /// The providers whose data changed between `mark` and this copy;
    /// None when `mark` is of another whole load, or further back than
    /// the journal lists.
    pub fn changed_since(&self, mark: &JournalMark) -> Option<Vec<i64>> {
        if !Arc::ptr_eq(&mark.journal, &self.journal) {
            return None;
        }
        self.journal.between(mark.below, self.stamps_below)
    }

    /// Gives node `i` a new stamp and records it in the journal (this copy
    /// then reflects it).
    pub fn restamp(&mut self, i: usize) {
        let stamp = next_stamp();
        let node = Arc::make_mut(&mut self.nodes[i]);
        node.stamp = stamp;
        self.journal.record(stamp, node.id);
        self.stamps_below = self.stamps_below.max(stamp + 1);
    }

    /// The stamp of a provider's data, by database id.
    pub fn stamp_of(&self, id: i64) -> Option<u64> {
        self.index.by_id.get(&id).map(|&i| self.nodes[i].stamp)
    }

    /// The node of a provider uuid.
    pub fn by_uuid(&self, u: &uuid::Uuid) -> Option<usize> {
        self.index.by_uuid.get(u).copied()
    }

    /// Every node of the tree rooted at `root`.
    pub fn tree(&self, root: usize) -> &[usize] {
        self.index
            .trees
            .get(&root)
            .map(Vec::as_slice)
            .unwrap_or(&[])
    }

    /// True when `a` is `b` or an ancestor of `b`.
    pub fn is_ancestor_or_self(&self, a: usize, mut b: usize) -> bool {
        loop {
            if a == b {
                return true;
            }
            match self.nodes[b].parent {
                Some(p) => b = p,
                None => return false,
            }
        }
    }

    /// True when the provider shares its inventory through aggregates.
    pub fn is_sharing(&self, i: usize) -> bool {
        self.sharing_trait
            .is_some_and(|t| self.nodes[i].has_trait(t))
    }
}

#[cfg(test)]
mod tests {
    use super::JsonUuid;

    #[test]
    fn a_json_uuid_is_the_quoted_lower_case_hyphenated_form() {
        let u = uuid::Uuid::from_u128(0xABCDEF01_2345_6789_ABCD_EF0123456789);
        assert_eq!(JsonUuid::of(u).as_str(), format!("\"{u}\""));
        assert_eq!(
            JsonUuid::of(u).as_str(),
            "\"abcdef01-2345-6789-abcd-ef0123456789\""
        );
    }
}
