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

/// A sharing provider and the anchor roots it serves.
struct Sharing {
    node: usize,
    anchors: BTreeSet<usize>,
}

/// The providers a group may use at `anchor`: the anchor's own tree plus
/// the sharing providers of other trees that serve it.
fn reachable<'a>(
    snap: &'a Snapshot,
    sharing: &'a [Sharing],
    anchor: usize,
) -> impl Iterator<Item = usize> + 'a {
    snap.tree(anchor).iter().copied().chain(
        sharing
            .iter()
            .filter(move |s| snap.nodes[s.node].root != anchor && s.anchors.contains(&anchor))
            .map(|s| s.node),
    )
}

/// A single-provider group's candidates at one anchor.
fn single_at(
    snap: &Snapshot,
    g: &Group,
    sharing: &[Sharing],
    anchor: usize,
) -> Vec<GroupCandidate> {
    reachable(snap, sharing, anchor)
        .filter(|&i| {
            let node = &snap.nodes[i];
            in_tree_ok(snap, g, i)
                && g.resources
                    .iter()
                    .all(|&(c, n)| node.stock(c).is_some_and(|s| s.fits(n)))
                && traits_ok(snap, &[i], g)
                && g.member_of
                    .iter()
                    .all(|set| set.iter().any(|&a| node.in_agg(a)))
                && !g.forbidden_aggs.iter().any(|&a| node.in_agg(a))
        })
        .map(|i| GroupCandidate {
            alloc: g.resources.iter().map(|&(c, n)| (i, c, n)).collect(),
            providers: vec![i],
        })
        .collect()
}

/// The unnumbered group's candidates at one anchor: per class, the providers
/// of the tree (or sharing ones, unless `in_tree` pins the tree) that fit,
/// in the aggregates by themselves or through the anchor.
fn tree_at(snap: &Snapshot, g: &Group, sharing: &[Sharing], anchor: usize) -> Vec<GroupCandidate> {
    let agg_ok = |i: usize| {
        let (p, r) = (&snap.nodes[i], &snap.nodes[anchor]);
        g.member_of
            .iter()
            .all(|set| set.iter().any(|&x| p.in_agg(x) || r.in_agg(x)))
            && g.forbidden_aggs
                .iter()
                .all(|&x| !p.in_agg(x) && !r.in_agg(x))
    };
    let no_sharing: &[Sharing] = &[];
    let pool = if g.in_tree.is_some() {
        no_sharing
    } else {
        sharing
    };
    let mut lists = Vec::with_capacity(g.resources.len());
    for &(c, n) in &g.resources {
        let list: Vec<usize> = reachable(snap, pool, anchor)
            .filter(|&i| {
                in_tree_ok(snap, g, i)
                    && snap.nodes[i].stock(c).is_some_and(|s| s.fits(n))
                    && agg_ok(i)
            })
            .collect();
        if list.is_empty() {
            return Vec::new();
        }
        lists.push(list);
    }
    tree_candidates(snap, g, &lists)
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
    let sharing: Vec<Sharing> = snap
        .sharing_nodes
        .iter()
        .map(|&node| Sharing {
            node,
            anchors: sharing_anchors(snap, &snap.agg_members, node),
        })
        .collect();
    // Anchors are visited in id order (shuffled when randomising); each
    // group's candidates are built only for the anchors generation reaches.
    let mut anchors: Vec<usize> = snap.index.roots.clone();
    let mut rng = limits.shuffle_seed.map(rand::rngs::StdRng::seed_from_u64);
    if let Some(rng) = rng.as_mut() {
        anchors.shuffle(rng);
    }
    let mut product_at = |a: usize| -> Option<AnchorProduct> {
        if !root_ok(snap, req, a) {
            return None;
        }
        let mut lists = Vec::with_capacity(req.groups.len());
        for g in &req.groups {
            let found = if g.single_provider() {
                single_at(snap, g, &sharing, a)
            } else {
                tree_at(snap, g, &sharing, a)
            };
            if found.is_empty() {
                return None;
            }
            lists.push(found);
        }
        if let Some(rng) = rng.as_mut() {
            for l in lists.iter_mut() {
                l.shuffle(rng);
            }
        }
        Some(AnchorProduct::new(lists))
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
        let mut products: Vec<AnchorProduct> =
            anchors.iter().filter_map(|&a| product_at(a)).collect();
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
            let Some(mut p) = product_at(a) else { continue };
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
