//! The order in which a search visits anchors: every root in id order, or
//! shuffled as visited; and, when a `member_of` rules out most trees, only
//! the roots of trees with a member, in the same order.

use super::{Request, Snapshot};
use rand::Rng;

/// The anchors in visiting order: the snapshot's own list, the narrowed
/// list, or the roots shuffled as they are visited (one Fisher-Yates step
/// per anchor, each order as likely as with a whole shuffle): a search
/// that stops after ten trees draws ten numbers, not one per root.
pub(super) enum Order<'a> {
    AsListed(std::slice::Iter<'a, usize>),
    Narrowed(std::vec::IntoIter<usize>),
    Shuffled {
        roots: Vec<usize>,
        next: usize,
        rng: Box<rand::rngs::StdRng>,
    },
}

impl Iterator for Order<'_> {
    type Item = usize;

    fn next(&mut self) -> Option<usize> {
        match self {
            Order::AsListed(roots) => roots.next().copied(),
            Order::Narrowed(roots) => roots.next(),
            Order::Shuffled { roots, next, rng } => {
                let i = *next;
                if i >= roots.len() {
                    return None;
                }
                let j = rng.gen_range(i..roots.len());
                roots.swap(i, j);
                *next += 1;
                Some(roots[i])
            }
        }
    }
}

/// The roots of the trees with a member of the smallest any-of set of
/// aggregates a group with resources asks for, in id order; None when the
/// search visits every root.
///
/// Why this is exact: without sharing providers, each provider of a
/// candidate is in its anchor's tree, and a group's provider counts for
/// `member_of` only when it or its root is in one of the set's aggregates;
/// so a tree with no member of the set anchors nothing, and leaving it out
/// changes neither the answer nor its order. With sharing providers a
/// candidate may be anchored at a tree that holds none of its providers,
/// and every root is visited as before.
///
/// When: listing the members costs about their number, where the search
/// visits about `max_results × roots / members` roots without them (all of
/// them when unbounded). A scheduler's `limit=10` over a large aggregate
/// stops within a few trees and is not narrowed.
pub(super) fn narrowed(
    snap: &Snapshot,
    req: &Request,
    max_results: Option<usize>,
) -> Option<Vec<usize>> {
    if !snap.sharing_nodes.is_empty() {
        return None;
    }
    let members = |a: &i32| snap.agg_members.get(a).map_or(&[][..], Vec::as_slice);
    let (set, size) = req
        .groups
        .iter()
        .filter(|g| !g.resources.is_empty())
        .flat_map(|g| &g.member_of)
        .map(|set| (set, set.iter().map(|a| members(a).len()).sum::<usize>()))
        .min_by_key(|&(_, size)| size)?;
    let roots = snap.index.roots.len();
    let worth = match max_results {
        None => size < roots,
        Some(m) => size.saturating_mul(size) < m.saturating_mul(roots),
    };
    if !worth {
        return None;
    }
    // Node indices are in id order, and so are the roots' (see `Snapshot`).
    let mut out: Vec<usize> = set
        .iter()
        .flat_map(members)
        .map(|&m| snap.nodes[m].root)
        .collect();
    out.sort_unstable();
    out.dedup();
    Some(out)
}
