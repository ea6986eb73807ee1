//! The search's results so far (a child of `solve`): deduplicated,
//! capped, and before 1.29 limited to one provider per tree.

use super::{Candidate, Limits};
use crate::candidates::snapshot::Snapshot;
use std::collections::{HashMap, HashSet};

/// The results so far: deduplicated, capped, and before 1.29 limited to
/// one provider per tree.
pub(super) struct Output<'a> {
    pub(super) snap: &'a Snapshot,
    single_tree_only: bool,
    pub(super) one_per_anchor: bool,
    max: usize,
    seen: HashSet<Candidate>,
    pub(super) found: Vec<Candidate>,
}

impl<'a> Output<'a> {
    pub(super) fn new(snap: &'a Snapshot, limits: &Limits) -> Self {
        Output {
            snap,
            single_tree_only: !limits.nested_aware && snap.any_nested,
            one_per_anchor: limits.one_per_anchor,
            max: limits.max_results.unwrap_or(usize::MAX),
            seen: HashSet::new(),
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
        if self.seen.insert(c.clone()) {
            self.found.push(c);
            return true;
        }
        false
    }

    /// True when two different providers of one tree contribute (not
    /// allowed before 1.29).
    fn spans_a_tree(&self, c: &Candidate) -> bool {
        let mut root_of_provider: HashMap<usize, usize> = HashMap::new();
        for &(p, _, _) in &c.allocations {
            let root = self.snap.nodes[p].root;
            if root_of_provider.insert(root, p).is_some_and(|q| q != p) {
                return true;
            }
        }
        false
    }
}
