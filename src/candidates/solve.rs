//! The candidate solver: request groups × provider trees × sharing
//! providers, merged per anchor tree under group_policy, same_subtree and
//! capacity. Pure and bounded: the cross-group product is enumerated lazily
//! with capacity pruning on every prefix and stops at the result cap, and
//! every loop whose cost can grow faster than the providers it reads (the
//! cross-group product, the unnumbered group's per-class product) draws on
//! one step [`Budget`]. A request with no answer in a wide tree (n+1 groups
//! that each need a whole child of n) would otherwise search n! prefixes.

use super::snapshot::{FastMap, Snapshot};
use hashbrown::HashSet;
use rand::seq::SliceRandom;
use rand::SeedableRng;
use std::collections::BTreeSet;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

pub use super::budget::{Budget, Stopped};

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
    /// Steps the search may take (0: unbounded); see [`Budget`].
    pub max_steps: u64,
    /// Set by the caller to stop the search (the client went away).
    pub cancel: Option<Arc<AtomicBool>>,
    /// Leave a tree as soon as it anchors one candidate (see
    /// [`anchor_of`]): what explain needs, in memory bounded by the number
    /// of trees however many candidates each could anchor.
    pub one_per_anchor: bool,
    /// Visit only these roots (node indices in id order), when the caller
    /// asks about some trees only (those changed since it last asked).
    pub only_roots: Option<Arc<Vec<usize>>>,
}

/// The answer of [`solve`].
#[derive(Debug, Clone, Default)]
pub struct Solution {
    /// Candidates in generation order.
    pub candidates: Vec<Candidate>,
    /// Set when the search was cut short.
    pub stopped: Option<Stopped>,
    /// Steps taken.
    pub steps: u64,
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

fn in_tree_ok(snap: &Snapshot, g: &Group, i: usize) -> bool {
    g.in_tree
        .is_none_or(|t| snap.nodes[t].root == snap.nodes[i].root)
}

/// The sharing providers of each aggregate, built once per search: a
/// sharing provider serves every tree holding a member of one of its
/// aggregates, so an anchor's sharing providers are found from its own
/// tree's aggregates, at the cost of the trees generation reaches.
struct SharingIndex {
    by_agg: FastMap<i32, Vec<usize>>,
}

impl SharingIndex {
    fn new(snap: &Snapshot) -> Self {
        let mut by_agg: FastMap<i32, Vec<usize>> = FastMap::new();
        for &node in snap.sharing_nodes.iter() {
            for &a in &snap.nodes[node].aggs {
                by_agg.entry(a).or_default().push(node);
            }
        }
        SharingIndex { by_agg }
    }

    /// Sharing providers of other trees that serve `anchor`, in id order.
    fn serving(&self, snap: &Snapshot, anchor: usize, budget: &mut Budget) -> Vec<usize> {
        if self.by_agg.is_empty() {
            return Vec::new();
        }
        let mut out = BTreeSet::new();
        for &member in snap.tree(anchor) {
            for a in &snap.nodes[member].aggs {
                let sharing = self.by_agg.get(a).map_or(&[][..], Vec::as_slice);
                if !budget.take(1 + sharing.len() as u64) {
                    return Vec::new();
                }
                out.extend(sharing.iter().filter(|&&s| snap.nodes[s].root != anchor));
            }
        }
        out.into_iter().collect()
    }
}

/// The providers a group may use at `anchor`: the anchor's own tree plus
/// the sharing providers of other trees that serve it.
fn reachable<'a>(
    snap: &'a Snapshot,
    sharing: &'a [usize],
    anchor: usize,
) -> impl Iterator<Item = usize> + 'a {
    snap.tree(anchor)
        .iter()
        .copied()
        .chain(sharing.iter().copied())
}

/// Whether provider `i` alone satisfies group `g`: capacity and units of
/// every class, traits, aggregates, `in_tree`.
fn provider_fits(snap: &Snapshot, g: &Group, i: usize) -> bool {
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
}

/// A single-provider group's candidates at one anchor.
fn single_at(
    snap: &Snapshot,
    g: &Group,
    sharing: &[usize],
    anchor: usize,
    budget: &mut Budget,
) -> Vec<GroupCandidate> {
    reachable(snap, sharing, anchor)
        .take_while(|_| budget.step())
        .filter(|&i| provider_fits(snap, g, i))
        .map(|i| GroupCandidate {
            alloc: g.resources.iter().map(|&(c, n)| (i, c, n)).collect(),
            providers: vec![i],
        })
        .collect()
}

/// The unnumbered group's candidates at one anchor: per class, the providers
/// of the tree (or sharing ones, unless `in_tree` pins the tree) that fit.
/// `member_of`: a provider of the anchor's tree counts when it or the anchor
/// root is in the aggregates; a sharing provider of another tree only when
/// it is itself (Placement filters sharing providers by `member_of` before
/// pairing them with anchors).
fn tree_at(
    snap: &Snapshot,
    g: &Group,
    sharing: &[usize],
    anchor: usize,
    budget: &mut Budget,
) -> Vec<GroupCandidate> {
    let agg_ok = |i: usize| {
        let p = &snap.nodes[i];
        let r = (p.root == anchor).then(|| &snap.nodes[anchor]);
        let in_agg = |x: i32| p.in_agg(x) || r.is_some_and(|r| r.in_agg(x));
        g.member_of.iter().all(|set| set.iter().any(|&x| in_agg(x)))
            && g.forbidden_aggs
                .iter()
                .all(|&x| !p.in_agg(x) && !snap.nodes[anchor].in_agg(x))
    };
    let pool = if g.in_tree.is_some() {
        &[][..]
    } else {
        sharing
    };
    let mut lists = Vec::with_capacity(g.resources.len());
    for &(c, n) in &g.resources {
        let list: Vec<usize> = reachable(snap, pool, anchor)
            .take_while(|_| budget.step())
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
    tree_candidates(snap, g, &lists, budget)
}

/// The unnumbered group's candidates at one anchor: one provider per class,
/// the contributing providers together satisfying the trait filters.
fn tree_candidates(
    snap: &Snapshot,
    g: &Group,
    lists: &[Vec<usize>],
    budget: &mut Budget,
) -> Vec<GroupCandidate> {
    let mut out = Vec::new();
    // Two choices give the same allocation only when a class repeats in
    // the group (parsed queries merge repeats; typed searches need not).
    let mut seen = (!classes_distinct(g)).then(HashSet::new);
    let mut choice = vec![0usize; lists.len()];
    'product: while budget.step() {
        let chosen: Vec<usize> = choice.iter().zip(lists).map(|(&j, l)| l[j]).collect();
        let mut providers: Vec<usize> = Vec::with_capacity(chosen.len());
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
            if seen.as_mut().is_none_or(|seen| seen.insert(cand.clone())) {
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

fn classes_distinct(g: &Group) -> bool {
    g.resources
        .iter()
        .enumerate()
        .all(|(i, (c, _))| g.resources[..i].iter().all(|(d, _)| d != c))
}

/// Solves a request over a snapshot, within `limits.max_steps`.
pub fn solve(snap: &Snapshot, req: &Request, limits: &Limits) -> Solution {
    let mut budget = Budget::new(limits.max_steps, limits.cancel.clone());
    let mut out = Output::new(snap, limits);
    if !req.groups.is_empty() {
        let mut anchors = Anchors::new(snap, req, limits);
        if limits.breadth_first {
            breadth_first(&mut anchors, &mut out, &mut budget);
        } else {
            depth_first(&mut anchors, &mut out, &mut budget);
        }
    }
    Solution {
        candidates: out.found,
        stopped: budget.stopped(),
        steps: budget.taken(),
    }
}

/// The anchors a search visits, in order, and the lazy product at each.
struct Anchors<'a> {
    snap: &'a Snapshot,
    req: &'a Request,
    sharing: SharingIndex,
    /// The seed of the roots' shuffle, when randomising; else the
    /// snapshot's own list is visited (a million roots are not copied per
    /// request).
    shuffle_seed: Option<u64>,
    /// Shuffles each group's candidates at an anchor, when randomising.
    rng: Option<rand::rngs::StdRng>,
    /// One group, no same_subtree, no class twice: a tree of one provider
    /// has at most one candidate (see [`Anchors::lone_provider`]).
    one_group: bool,
    /// The roots the caller asked about ([`Limits::only_roots`]).
    only_roots: Option<Vec<usize>>,
    /// The root lists that hold every tree that can anchor a candidate,
    /// when a filter narrows them (see [`order::narrowed`]); None: every root.
    narrowed: Option<Vec<&'a [u32]>>,
}

impl<'a> Anchors<'a> {
    /// Anchors in id order, shuffled when randomising.
    fn new(snap: &'a Snapshot, req: &'a Request, limits: &Limits) -> Self {
        Anchors {
            snap,
            req,
            sharing: SharingIndex::new(snap),
            shuffle_seed: limits.shuffle_seed,
            // Its own stream: the roots' order draws from another.
            rng: limits
                .shuffle_seed
                .map(|seed| rand::rngs::StdRng::seed_from_u64(seed.rotate_left(32))),
            one_group: match &req.groups[..] {
                [g] => req.same_subtree.is_empty() && classes_distinct(g),
                _ => false,
            },
            only_roots: limits.only_roots.as_ref().map(|r| r.to_vec()),
            narrowed: order::narrowed(snap, req),
        }
    }

    /// The one candidate at a tree of a single provider that no sharing
    /// provider serves, for a one-group request: what [`Self::product_at`]
    /// and its product would find (the provider, if it fits, with the
    /// group's amounts), without building them. Most clouds' compute
    /// nodes, and every W1 query, are such trees. None when it does not
    /// apply.
    fn lone_provider(&self, anchor: usize, budget: &mut Budget) -> Option<Option<Candidate>> {
        let (snap, req) = (self.snap, self.req);
        let g = req.groups.first().filter(|_| self.one_group)?;
        if snap.tree(anchor).len() != 1
            || (!self.sharing.by_agg.is_empty()
                && !self.sharing.serving(snap, anchor, budget).is_empty())
        {
            return None;
        }
        if !budget.step() || !root_ok(snap, req, anchor) || !provider_fits(snap, g, anchor) {
            return Some(None);
        }
        let mut allocations: Vec<(usize, i32, i64)> = g
            .resources
            .iter()
            .filter(|&&(_, n)| n > 0)
            .map(|&(c, n)| (anchor, c, n))
            .collect();
        allocations.sort_unstable();
        Some(Some(Candidate {
            allocations,
            mappings: vec![vec![anchor]],
        }))
    }

    /// The anchors in visiting order (taken once per search).
    fn take_order(&mut self) -> Order<'a> {
        let roots = &self.snap.index.roots;
        let listed = self.only_roots.take();
        let merged = self.narrowed.take().map(order::MergedRoots::new);
        match (self.shuffle_seed.take(), listed, merged) {
            (Some(seed), listed, merged) => Order::Shuffled {
                roots: listed
                    .or_else(|| merged.map(Iterator::collect))
                    .unwrap_or_else(|| roots.clone()),
                next: 0,
                rng: Box::new(rand::rngs::StdRng::seed_from_u64(seed)),
            },
            (None, Some(listed), _) => Order::Listed(listed.into_iter()),
            (None, None, Some(merged)) => Order::Merged(merged),
            (None, None, None) => Order::AsListed(roots.iter()),
        }
    }

    /// The product of every group's candidates at `anchor`; None when a
    /// group has none there (or the budget ran out building them).
    fn product_at(&mut self, anchor: usize, budget: &mut Budget) -> Option<AnchorProduct> {
        let (snap, req) = (self.snap, self.req);
        if !root_ok(snap, req, anchor) {
            return None;
        }
        let sharing = self.sharing.serving(snap, anchor, budget);
        let mut lists = Vec::with_capacity(req.groups.len());
        for g in &req.groups {
            let found = if g.single_provider() {
                single_at(snap, g, &sharing, anchor, budget)
            } else {
                tree_at(snap, g, &sharing, anchor, budget)
            };
            if found.is_empty() {
                return None;
            }
            lists.push(found);
        }
        if let Some(rng) = self.rng.as_mut() {
            for l in lists.iter_mut() {
                l.shuffle(rng);
            }
        }
        Some(AnchorProduct::new(lists))
    }
}

/// The tree a candidate is counted for: the root of its first provider
/// that is not a sharing one, the only tree that reaches that provider.
/// When all are sharing providers, the first tree (by index) whose search
/// reaches every one of them: the search of the tree a candidate is
/// counted for must be able to find it, or explain's search, which leaves
/// a tree at its first candidate, could miss a tree that fits.
pub fn anchor_of(snap: &Snapshot, req: &Request, c: &Candidate) -> Option<usize> {
    let first = c.allocations.first()?.0;
    if let Some(own) = c
        .allocations
        .iter()
        .map(|a| a.0)
        .find(|&n| !snap.is_sharing(n))
    {
        return Some(snap.nodes[own].root);
    }
    // Every tree that reaches the first provider: its own, and those with
    // a member in one of its aggregates.
    let mut roots: Vec<usize> = c
        .allocations
        .iter()
        .map(|a| snap.nodes[a.0].root)
        .chain(snap.nodes[first].aggs.iter().flat_map(|agg| {
            let members = snap.agg_members.get(agg).map_or(&[][..], Vec::as_slice);
            members.iter().map(|&m| snap.nodes[m].root)
        }))
        .collect();
    roots.sort_unstable();
    roots.dedup();
    let found = roots
        .into_iter()
        .find(|&r| root_ok(snap, req, r) && c.allocations.iter().all(|a| reaches(snap, r, a.0)));
    Some(found.unwrap_or(snap.nodes[first].root))
}

/// Whether the search at `anchor` may use provider `p`: its own tree's,
/// or a sharing provider in an aggregate with one of the tree's members.
fn reaches(snap: &Snapshot, anchor: usize, p: usize) -> bool {
    let node = &snap.nodes[p];
    node.root == anchor
        || (snap.is_sharing(p)
            && snap
                .tree(anchor)
                .iter()
                .any(|&m| snap.nodes[m].aggs.iter().any(|&a| node.in_agg(a))))
}

/// Whether the search is done with `anchor` once it keeps `c` (only with
/// [`Limits::one_per_anchor`]).
fn anchored_here(out: &Output, req: &Request, anchor: usize, c: &Candidate) -> bool {
    out.one_per_anchor && anchor_of(out.snap, req, c) == Some(anchor)
}

/// Every result of one tree before the next.
fn depth_first(anchors: &mut Anchors, out: &mut Output, budget: &mut Budget) {
    for a in anchors.take_order() {
        if out.full() || budget.stopped().is_some() {
            return;
        }
        if let Some(lone) = anchors.lone_provider(a, budget) {
            // At most one candidate: nothing to leave early. Only a
            // sharing provider's could also be found from another tree.
            match lone {
                Some(c) if anchors.snap.is_sharing(a) => {
                    out.push(c);
                }
                Some(c) => out.push_distinct(c),
                None => {}
            }
            continue;
        }
        let Some(mut p) = anchors.product_at(a, budget) else {
            continue;
        };
        while let Some(c) = p.next(anchors.snap, anchors.req, budget) {
            let anchors_here = anchored_here(out, anchors.req, a, &c);
            let kept = out.push(c);
            if out.full() {
                return;
            }
            if kept && anchors_here {
                break;
            }
        }
    }
}

/// One result of each tree in turn.
fn breadth_first(anchors: &mut Anchors, out: &mut Output, budget: &mut Budget) {
    let mut products: Vec<(usize, AnchorProduct)> = Vec::new();
    for a in anchors.take_order() {
        if budget.stopped().is_some() {
            break;
        }
        products.extend(anchors.product_at(a, budget).map(|p| (a, p)));
    }
    let (snap, req) = (anchors.snap, anchors.req);
    while !products.is_empty() && !out.full() && budget.stopped().is_none() {
        products.retain_mut(|(a, p)| match p.next(snap, req, budget) {
            Some(c) if !out.full() => {
                let anchors_here = anchored_here(out, req, *a, &c);
                let kept = out.push(c);
                !(kept && anchors_here)
            }
            Some(_) => true,
            None => false,
        });
    }
}

mod output;
use output::Output;

mod product;
use product::AnchorProduct;

mod order;
use order::Order;

#[cfg(test)]
mod tests;
