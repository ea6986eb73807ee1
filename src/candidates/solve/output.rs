//! The search's results so far (a child of `solve`): deduplicated,
//! capped, and before 1.29 limited to one provider per tree.

use super::{Candidate, Limits};
use crate::candidates::snapshot::{FastMap, Snapshot};
use hashbrown::{DefaultHashBuilder, HashTable};
use std::hash::BuildHasher;

/// The results so far: deduplicated, capped, and before 1.29 limited to
/// one provider per tree.
pub(super) struct Output<'a> {
    pub(super) snap: &'a Snapshot,
    single_tree_only: bool,
    pub(super) one_per_anchor: bool,
    max: usize,
    /// Indices into `found`, by the candidate's hash: duplicates are found
    /// without keeping a second copy of every candidate.
    seen: HashTable<usize>,
    hasher: DefaultHashBuilder,
    pub(super) found: Vec<Candidate>,
}

impl<'a> Output<'a> {
    pub(super) fn new(snap: &'a Snapshot, limits: &Limits) -> Self {
        Output {
            snap,
            single_tree_only: !limits.nested_aware && snap.any_nested,
            one_per_anchor: limits.one_per_anchor,
            max: limits.max_results.unwrap_or(usize::MAX),
            seen: HashTable::new(),
            hasher: DefaultHashBuilder::default(),
            found: Vec::new(),
        }
    }

    pub(super) fn full(&self) -> bool {
        self.found.len() >= self.max
    }

    /// Keeps `c` unless it is a duplicate or spans a tree before 1.29;
    /// whether it was kept.
    pub(super) fn push(&mut self, c: Candidate) -> bool {
        if self.single_tree_only && self.spans_a_tree(&c) {
            return false;
        }
        let found = &self.found;
        let hasher = &self.hasher;
        let hash = hasher.hash_one(&c);
        if self.seen.find(hash, |&i| found[i] == c).is_some() {
            return false;
        }
        self.seen
            .insert_unique(hash, found.len(), |&i| hasher.hash_one(&found[i]));
        self.found.push(c);
        true
    }

    /// Keeps `c`, which no other candidate of the search can equal: its
    /// one provider is in one tree only and shared with none.
    pub(super) fn push_distinct(&mut self, c: Candidate) {
        self.found.push(c);
    }

    /// True when two different providers of one tree contribute (not
    /// allowed before 1.29).
    fn spans_a_tree(&self, c: &Candidate) -> bool {
        let mut root_of_provider: FastMap<usize, usize> = FastMap::new();
        for &(p, _, _) in &c.allocations {
            let root = self.snap.nodes[p].root;
            if root_of_provider.insert(root, p).is_some_and(|q| q != p) {
                return true;
            }
        }
        false
    }
}
