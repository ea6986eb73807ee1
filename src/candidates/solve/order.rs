//! The order in which a search visits anchors: every root in id order, or
//! shuffled as visited; and, when a `member_of`, a `required` trait or a
//! root trait rules out most trees, only the roots of trees with a member
//! (or a holder), drawn from the snapshot's per-aggregate and per-trait
//! root lists as they are visited, in the same order.

use super::{Request, Snapshot};
use rand::Rng;

/// The anchors in visiting order: the snapshot's own list, a list the
/// caller gave, the merged root lists, or the roots shuffled as they are
/// visited (one Fisher-Yates step per anchor, each order as likely as with
/// a whole shuffle): a search that stops after ten trees draws ten
/// numbers, not one per root.
pub(super) enum Order<'a> {
    AsListed(std::slice::Iter<'a, usize>),
    Listed(std::vec::IntoIter<usize>),
    Merged(MergedRoots<'a>),
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
            Order::Listed(roots) => roots.next(),
            Order::Merged(roots) => roots.next(),
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

/// The union of sorted root lists, in order, each root once, taken as
/// visited: a search that stops after a thousand trees reads about a
/// thousand entries, however long the lists.
pub(super) struct MergedRoots<'a> {
    lists: Vec<&'a [u32]>,
    last: Option<u32>,
}

impl<'a> MergedRoots<'a> {
    pub(super) fn new(lists: Vec<&'a [u32]>) -> Self {
        MergedRoots { lists, last: None }
    }
}

impl Iterator for MergedRoots<'_> {
    type Item = usize;

    fn next(&mut self) -> Option<usize> {
        loop {
            let (i, head) = self
                .lists
                .iter()
                .enumerate()
                .filter_map(|(i, l)| l.first().map(|&h| (i, h)))
                .min_by_key(|&(_, h)| h)?;
            self.lists[i] = &self.lists[i][1..];
            if self.last != Some(head) {
                self.last = Some(head);
                return usize::try_from(head).ok();
            }
        }
    }
}

/// The root lists whose union holds every tree that can anchor a
/// candidate, the shortest such choice: the roots of the members of one
/// any-of set of aggregates, of the holders of one any-of set of required
/// traits (of a group with resources), or of one root trait. None when the
/// search visits every root (no such filter, or none leaves out a tree).
///
/// Why this is exact: without sharing providers, each provider of a
/// candidate is in its anchor's tree; a group's provider counts for
/// `member_of` only when it or its root is in one of the set's aggregates,
/// and a group's required traits are held by the providers it uses; so a
/// tree with no member (no holder) anchors nothing, and leaving it out
/// changes neither the answer nor its order. With sharing providers a
/// candidate may be anchored at a tree that holds none of its providers,
/// and every root is visited as before.
pub(super) fn narrowed<'a>(snap: &'a Snapshot, req: &Request) -> Option<Vec<&'a [u32]>> {
    if !snap.sharing_nodes.is_empty() {
        return None;
    }
    let of = |map: &'a super::super::snapshot::FastMap<i32, Vec<u32>>, key: &i32| -> &'a [u32] {
        map.get(key).map_or(&[][..], Vec::as_slice)
    };
    let (aggs, traits) = (&*snap.agg_roots, &*snap.trait_roots);
    let with_resources = || req.groups.iter().filter(|g| !g.resources.is_empty());
    let by_aggs = with_resources()
        .flat_map(|g| &g.member_of)
        .map(|set| set.iter().map(|a| of(aggs, a)).collect::<Vec<_>>());
    let by_traits = with_resources()
        .flat_map(|g| &g.required)
        .map(|set| set.iter().map(|t| of(traits, t)).collect::<Vec<_>>());
    let by_root = req.root_required.iter().map(|t| vec![of(traits, t)]);
    let size = |lists: &Vec<&[u32]>| lists.iter().map(|l| l.len()).sum::<usize>();
    by_aggs
        .chain(by_traits)
        .chain(by_root)
        .min_by_key(size)
        .filter(|lists| size(lists) < snap.index.roots.len())
}

#[cfg(test)]
mod tests {
    use super::MergedRoots;

    #[test]
    fn merged_roots_come_in_order_each_once() {
        let (a, b, c) = ([1u32, 3, 5, 9], [2u32, 3, 6], [3u32, 9]);
        let merged: Vec<usize> = MergedRoots::new(vec![&a, &b, &c, &[]]).collect();
        assert_eq!(merged, [1, 2, 3, 5, 6, 9]);
        let mut lazy = MergedRoots::new(vec![&a, &b]);
        assert_eq!(lazy.next(), Some(1));
        assert_eq!(lazy.lists.iter().map(|l| l.len()).sum::<usize>(), 6);
    }
}
