//! The candidate solver: request groups × provider trees × sharing
//! providers, merged per anchor tree under group_policy, same_subtree and
//! capacity. Pure and bounded: the cross-group product is enumerated lazily
//! with capacity pruning on every prefix and stops at the result cap, so
//! wide symmetric trees cost no more than the results they return.

use super::snapshot::Snapshot;
use rand::seq::SliceRandom;
use rand::SeedableRng;
use std::collections::{BTreeSet, HashMap, HashSet};

/// One request group, resolved to snapshot ids.
#[derive(Debug, Clone, Default)]
pub struct Group {
    /// "" for the unnumbered group (spans a tree and sharing providers).
    pub suffix: String,
    /// (class id, amount).
    pub resources: Vec<(i32, i64)>,
    /// Any-of sets of trait ids; each must be matched.
    pub required: Vec<Vec<i32>>,
    /// Forbidden trait ids.
    pub forbidden: Vec<i32>,
    /// Any-of sets of aggregate ids (an empty set matches nothing).
    pub member_of: Vec<Vec<i32>>,
    /// Forbidden aggregate ids.
    pub forbidden_aggs: Vec<i32>,
    /// Restrict to the tree of this node.
    pub in_tree: Option<usize>,
}

impl Group {
    fn single_provider(&self) -> bool {
        !self.suffix.is_empty()
    }
}

/// A resolved request.
#[derive(Debug, Clone, Default)]
pub struct Request {
    /// Groups.
    pub groups: Vec<Group>,
    /// group_policy=isolate.
    pub isolate: bool,
    /// same_subtree sets, as group indices.
    pub same_subtree: Vec<Vec<usize>>,
    /// Traits the anchor root must have.
    pub root_required: Vec<i32>,
    /// Traits the anchor root must not have.
    pub root_forbidden: Vec<i32>,
}

/// How much to produce and in which order.
#[derive(Debug, Clone, Default)]
pub struct Limits {
    /// Stop after this many results (limit and max_allocation_candidates).
    pub max_results: Option<usize>,
    /// Visit anchors round-robin instead of one after another.
    pub breadth_first: bool,
    /// 1.29+: one result may use several providers of a tree.
    pub nested_aware: bool,
    /// Shuffle anchors and group candidates with this seed (randomize).
    pub shuffle_seed: Option<u64>,
}

/// One allocation request: amounts per (node, class) and the providers of each group.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Candidate {
    /// (node index, class id, amount), summed over groups, sorted.
    pub allocations: Vec<(usize, i32, i64)>,
    /// Per group (same order as the request), the providers that satisfied it.
    pub mappings: Vec<Vec<usize>>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct GroupCandidate {
    alloc: Vec<(usize, i32, i64)>,
    providers: Vec<usize>,
}

fn traits_ok(snap: &Snapshot, nodes: &[usize], g: &Group) -> bool {
    let has = |t: i32| nodes.iter().any(|&n| snap.nodes[n].has_trait(t));
    g.forbidden.iter().all(|&t| !has(t)) && g.required.iter().all(|set| set.iter().any(|&t| has(t)))
}

fn root_ok(snap: &Snapshot, req: &Request, root: usize) -> bool {
    let n = &snap.nodes[root];
    req.root_required.iter().all(|&t| n.has_trait(t))
        && req.root_forbidden.iter().all(|&t| !n.has_trait(t))
}

/// Roots of every tree holding a provider that shares an aggregate with `i`.
fn sharing_anchors(
    snap: &Snapshot,
    members: &HashMap<i32, Vec<usize>>,
    i: usize,
) -> BTreeSet<usize> {
    let mut out = BTreeSet::from([snap.nodes[i].root]);
    for a in &snap.nodes[i].aggs {
        for &m in members.get(a).into_iter().flatten() {
            out.insert(snap.nodes[m].root);
        }
    }
    out
}

fn in_tree_ok(snap: &Snapshot, g: &Group, i: usize) -> bool {
    g.in_tree
        .is_none_or(|t| snap.nodes[t].root == snap.nodes[i].root)
}

/// Candidates of one single-provider group, by anchor root.
fn single_group(
    snap: &Snapshot,
    req: &Request,
    g: &Group,
    members: &HashMap<i32, Vec<usize>>,
) -> HashMap<usize, Vec<GroupCandidate>> {
    let mut out: HashMap<usize, Vec<GroupCandidate>> = HashMap::new();
    for (i, node) in snap.nodes.iter().enumerate() {
        if !in_tree_ok(snap, g, i)
            || !g
                .resources
                .iter()
                .all(|&(c, n)| node.stock(c).is_some_and(|s| s.fits(n)))
            || !traits_ok(snap, &[i], g)
            || !g
                .member_of
                .iter()
                .all(|set| set.iter().any(|&a| node.in_agg(a)))
            || g.forbidden_aggs.iter().any(|&a| node.in_agg(a))
        {
            continue;
        }
        let cand = GroupCandidate {
            alloc: g.resources.iter().map(|&(c, n)| (i, c, n)).collect(),
            providers: vec![i],
        };
        let anchors = if snap.is_sharing(i) {
            sharing_anchors(snap, members, i)
        } else {
            BTreeSet::from([node.root])
        };
        for a in anchors.into_iter().filter(|&a| root_ok(snap, req, a)) {
            out.entry(a).or_default().push(cand.clone());
        }
    }
    out
}

/// Providers able to serve each class of the unnumbered group (a tree plus
/// sharing providers), by anchor root; expanded per anchor by [`tree_candidates`].
fn tree_pairs(
    snap: &Snapshot,
    req: &Request,
    g: &Group,
    members: &HashMap<i32, Vec<usize>>,
) -> HashMap<usize, Vec<Vec<usize>>> {
    let agg_ok = |i: usize, a: usize| {
        let (p, r) = (&snap.nodes[i], &snap.nodes[a]);
        g.member_of
            .iter()
            .all(|set| set.iter().any(|&x| p.in_agg(x) || r.in_agg(x)))
            && g.forbidden_aggs
                .iter()
                .all(|&x| !p.in_agg(x) && !r.in_agg(x))
    };
    let k = g.resources.len();
    let mut out: HashMap<usize, Vec<Vec<usize>>> = HashMap::new();
    let mut root_ok_cache: HashMap<usize, bool> = HashMap::new();
    for (ci, &(c, n)) in g.resources.iter().enumerate() {
        for (i, node) in snap.nodes.iter().enumerate() {
            if !in_tree_ok(snap, g, i) || !node.stock(c).is_some_and(|s| s.fits(n)) {
                continue;
            }
            let mut add = |a: usize| {
                let ok = *root_ok_cache
                    .entry(a)
                    .or_insert_with(|| root_ok(snap, req, a));
                if ok && agg_ok(i, a) {
                    let lists = out.entry(a).or_insert_with(|| vec![Vec::new(); k]);
                    if lists[ci].last() != Some(&i) {
                        lists[ci].push(i);
                    }
                }
            };
            if g.in_tree.is_none() && snap.is_sharing(i) {
                for a in sharing_anchors(snap, members, i) {
                    add(a);
                }
            } else {
                add(node.root);
            }
        }
    }
    out.retain(|_, lists| lists.iter().all(|l| !l.is_empty()));
    out
}

/// The unnumbered group's candidates at one anchor: one provider per class,
/// the contributing providers together satisfying the trait filters.
fn tree_candidates(snap: &Snapshot, g: &Group, lists: &[Vec<usize>]) -> Vec<GroupCandidate> {
    let mut out = Vec::new();
    let mut seen = HashSet::new();
    let mut choice = vec![0usize; lists.len()];
    'product: loop {
        let chosen: Vec<usize> = choice.iter().zip(lists).map(|(&j, l)| l[j]).collect();
        let mut providers: Vec<usize> = Vec::new();
        for &p in &chosen {
            if !providers.contains(&p) {
                providers.push(p);
            }
        }
        if traits_ok(snap, &providers, g) {
            let alloc = g
                .resources
                .iter()
                .zip(&chosen)
                .map(|(&(c, n), &p)| (p, c, n))
                .collect();
            let cand = GroupCandidate { alloc, providers };
            if seen.insert(cand.clone()) {
                out.push(cand);
            }
        }
        // Odometer over the per-class provider lists.
        for d in (0..choice.len()).rev() {
            choice[d] += 1;
            if choice[d] < lists[d].len() {
                continue 'product;
            }
            choice[d] = 0;
        }
        break;
    }
    out
}

/// A group's candidates: computed for every anchor, or (unnumbered group)
/// expanded only for the anchors generation reaches.
enum GroupCands {
    Ready(HashMap<usize, Vec<GroupCandidate>>),
    Tree(HashMap<usize, Vec<Vec<usize>>>),
}

impl GroupCands {
    fn has(&self, a: usize) -> bool {
        match self {
            GroupCands::Ready(m) => m.contains_key(&a),
            GroupCands::Tree(m) => m.contains_key(&a),
        }
    }

    fn anchors(&self) -> Vec<usize> {
        match self {
            GroupCands::Ready(m) => m.keys().copied().collect(),
            GroupCands::Tree(m) => m.keys().copied().collect(),
        }
    }

    fn at(&self, snap: &Snapshot, g: &Group, a: usize) -> Vec<GroupCandidate> {
        match self {
            GroupCands::Ready(m) => m.get(&a).cloned().unwrap_or_default(),
            GroupCands::Tree(m) => m
                .get(&a)
                .map(|lists| tree_candidates(snap, g, lists))
                .unwrap_or_default(),
        }
    }
}

/// Lazy, capacity-pruned product of one anchor's group candidates.
struct AnchorProduct {
    lists: Vec<Vec<GroupCandidate>>,
    choice: Vec<usize>,
    depth: usize,
    usage: HashMap<(usize, i32), i64>,
    done: bool,
}

impl AnchorProduct {
    fn new(lists: Vec<Vec<GroupCandidate>>) -> Self {
        let n = lists.len();
        AnchorProduct {
            lists,
            choice: vec![0; n],
            depth: 0,
            usage: HashMap::new(),
            done: false,
        }
    }

    fn apply(&mut self, d: usize, sign: i64) {
        let cand = &self.lists[d][self.choice[d]];
        for &(node, class, n) in &cand.alloc {
            *self.usage.entry((node, class)).or_default() += sign * n;
        }
    }

    fn fits(&self, snap: &Snapshot, req: &Request, d: usize) -> bool {
        let cand = &self.lists[d][self.choice[d]];
        let ok_capacity = cand.alloc.iter().all(|&(node, class, n)| {
            let sum = self.usage.get(&(node, class)).copied().unwrap_or(0) + n;
            snap.nodes[node]
                .stock(class)
                .is_some_and(|s| s.used + sum <= s.capacity_int() && sum <= s.max_unit)
        });
        let isolated = !req.isolate || req.groups[d].suffix.is_empty() || {
            let p = cand.providers[0];
            (0..d).all(|e| {
                req.groups[e].suffix.is_empty() || self.lists[e][self.choice[e]].providers[0] != p
            })
        };
        ok_capacity && isolated
    }

    fn subtree_ok(&self, snap: &Snapshot, req: &Request) -> bool {
        req.same_subtree.iter().all(|set| {
            let provs: Vec<usize> = set
                .iter()
                .flat_map(|&g| self.lists[g][self.choice[g]].providers.iter().copied())
                .collect();
            provs
                .iter()
                .any(|&a| provs.iter().all(|&b| snap.is_ancestor_or_self(a, b)))
        })
    }

    fn backtrack(&mut self) {
        if self.depth == 0 {
            self.done = true;
            return;
        }
        self.depth -= 1;
        self.apply(self.depth, -1);
        self.choice[self.depth] += 1;
    }

    fn next(&mut self, snap: &Snapshot, req: &Request) -> Option<Candidate> {
        let k = self.lists.len();
        while !self.done {
            if self.depth == k {
                let result = self.subtree_ok(snap, req).then(|| self.candidate());
                self.backtrack();
                if result.is_some() {
                    return result;
                }
                continue;
            }
            let d = self.depth;
            if self.choice[d] >= self.lists[d].len() {
                self.choice[d] = 0;
                self.backtrack();
                continue;
            }
            if self.fits(snap, req, d) {
                self.apply(d, 1);
                self.depth += 1;
            } else {
                self.choice[d] += 1;
            }
        }
        None
    }

    fn candidate(&self) -> Candidate {
        let mut sums: Vec<(usize, i32, i64)> = self
            .usage
            .iter()
            .filter(|(_, &n)| n > 0)
            .map(|(&(p, c), &n)| (p, c, n))
            .collect();
        sums.sort_unstable();
        Candidate {
            allocations: sums,
            mappings: (0..self.lists.len())
                .map(|g| self.lists[g][self.choice[g]].providers.clone())
                .collect(),
        }
    }
}

/// Solves a request over a snapshot.
pub fn solve(snap: &Snapshot, req: &Request, limits: &Limits) -> Vec<Candidate> {
    if req.groups.is_empty() {
        return Vec::new();
    }
    let mut members: HashMap<i32, Vec<usize>> = HashMap::new();
    for (i, n) in snap.nodes.iter().enumerate() {
        for &a in &n.aggs {
            members.entry(a).or_default().push(i);
        }
    }
    let mut per_group: Vec<GroupCands> = Vec::new();
    for g in &req.groups {
        let found = if g.single_provider() {
            GroupCands::Ready(single_group(snap, req, g, &members))
        } else {
            GroupCands::Tree(tree_pairs(snap, req, g, &members))
        };
        if found.anchors().is_empty() {
            return Vec::new();
        }
        per_group.push(found);
    }
    let mut anchors: Vec<usize> = per_group[0]
        .anchors()
        .into_iter()
        .filter(|&a| per_group.iter().all(|m| m.has(a)))
        .collect();
    anchors.sort_unstable_by_key(|&a| snap.nodes[a].id);
    let mut rng = limits.shuffle_seed.map(rand::rngs::StdRng::seed_from_u64);
    if let Some(rng) = rng.as_mut() {
        anchors.shuffle(rng);
    }
    // Group candidates are built per anchor, only for anchors generation reaches.
    let mut product_at = |a: usize| {
        let mut lists: Vec<Vec<GroupCandidate>> = per_group
            .iter()
            .zip(&req.groups)
            .map(|(m, g)| m.at(snap, g, a))
            .collect();
        if let Some(rng) = rng.as_mut() {
            for l in lists.iter_mut() {
                l.shuffle(rng);
            }
        }
        AnchorProduct::new(lists)
    };
    let max = limits.max_results.unwrap_or(usize::MAX);
    let mut seen: HashSet<Candidate> = HashSet::new();
    let mut out = Vec::new();
    let single_tree_only = !limits.nested_aware && snap.any_nested;
    let mut push = |c: Candidate, out: &mut Vec<Candidate>| {
        if single_tree_only {
            let mut roots: Vec<usize> = Vec::new();
            for &(p, _, _) in &c.allocations {
                if roots.contains(&snap.nodes[p].root)
                    && !c.allocations.iter().all(|&(q, _, _)| q == p)
                {
                    // Two different providers of one tree: not allowed before 1.29.
                    let same: BTreeSet<usize> = c
                        .allocations
                        .iter()
                        .filter(|&&(q, _, _)| snap.nodes[q].root == snap.nodes[p].root)
                        .map(|&(q, _, _)| q)
                        .collect();
                    if same.len() > 1 {
                        return;
                    }
                }
                roots.push(snap.nodes[p].root);
            }
        }
        if seen.insert(c.clone()) {
            out.push(c);
        }
    };
    if limits.breadth_first {
        let mut products: Vec<AnchorProduct> = anchors.iter().map(|&a| product_at(a)).collect();
        let mut live: Vec<usize> = (0..products.len()).collect();
        while !live.is_empty() && out.len() < max {
            live.retain(|&i| match products[i].next(snap, req) {
                Some(c) => {
                    if out.len() < max {
                        push(c, &mut out);
                    }
                    true
                }
                None => false,
            });
        }
    } else {
        'anchors: for &a in &anchors {
            let mut p = product_at(a);
            while let Some(c) = p.next(snap, req) {
                push(c, &mut out);
                if out.len() >= max {
                    break 'anchors;
                }
            }
        }
    }
    out
}

#[cfg(test)]
#[path = "solve_tests.rs"]
mod tests;
