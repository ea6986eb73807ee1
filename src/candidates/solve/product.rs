//! The lazy, capacity-pruned product of one anchor's group candidates (a
//! child of `solve`): one candidate per group, checked on every prefix.

use super::{Budget, Candidate, GroupCandidate, Request};
use crate::candidates::snapshot::Snapshot;

/// Lazy, capacity-pruned product of one anchor's group candidates.
pub(super) struct AnchorProduct {
    lists: Vec<Vec<GroupCandidate>>,
    choice: Vec<usize>,
    depth: usize,
    /// (node, class, units) the chosen prefix takes: a handful of entries,
    /// searched in place (a hash map per anchor cost more than the search).
    usage: Vec<(usize, i32, i64)>,
    done: bool,
}

impl AnchorProduct {
    pub(super) fn new(lists: Vec<Vec<GroupCandidate>>) -> Self {
        let n = lists.len();
        AnchorProduct {
            lists,
            choice: vec![0; n],
            depth: 0,
            usage: Vec::new(),
            done: false,
        }
    }

    fn apply(&mut self, d: usize, sign: i64) {
        let cand = &self.lists[d][self.choice[d]];
        for &(node, class, n) in &cand.alloc {
            match self.usage.iter_mut().find(|u| u.0 == node && u.1 == class) {
                Some(u) => u.2 += sign * n,
                None => self.usage.push((node, class, sign * n)),
            }
        }
    }

    fn used(&self, node: usize, class: i32) -> i64 {
        self.usage
            .iter()
            .find(|u| u.0 == node && u.1 == class)
            .map_or(0, |u| u.2)
    }

    fn fits(&self, snap: &Snapshot, req: &Request, d: usize) -> bool {
        let cand = &self.lists[d][self.choice[d]];
        let ok_capacity = cand.alloc.iter().all(|&(node, class, n)| {
            let sum = self.used(node, class) + n;
            snap.nodes[node].stock(class).is_some_and(|s| {
                s.used + sum <= s.capacity_int() && sum <= i64::from(s.inventory.max_unit)
            })
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

    pub(super) fn next(
        &mut self,
        snap: &Snapshot,
        req: &Request,
        budget: &mut Budget,
    ) -> Option<Candidate> {
        let k = self.lists.len();
        while !self.done && budget.step() {
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
        let mut sums: Vec<(usize, i32, i64)> =
            self.usage.iter().copied().filter(|u| u.2 > 0).collect();
        sums.sort_unstable();
        Candidate {
            allocations: sums,
            mappings: (0..self.lists.len())
                .map(|g| self.lists[g][self.choice[g]].providers.clone())
                .collect(),
        }
    }
}
