//! The engine's typed search: what it is asked, however the caller put
//! it. `GET /allocation_candidates` and explain build theirs from
//! Placement's query grammar at the API edge
//! (`api::allocation_candidates::query`), deployments from their body; the
//! engine (`find::run`) reads only this.

use super::query_grammar::{AggFilter, TraitFilter};
use super::snapshot::JournalMark;
use crate::microversions::Microversion;
use crate::types::PriorityClass;

/// One request group: the unnumbered one (suffix "") or a suffixed one.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GroupSpec {
    /// "" for the unnumbered group.
    pub suffix: String,
    /// (class name, amount), in request order.
    pub resources: Vec<(String, i64)>,
    /// Required / forbidden traits.
    pub traits: TraitFilter,
    /// Aggregate filters.
    pub member_of: AggFilter,
    /// Restrict to the tree of this provider.
    pub in_tree: Option<uuid::Uuid>,
}

/// `group_policy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupPolicy {
    /// Suffixed groups may share providers.
    None,
    /// Suffixed groups use distinct providers.
    Isolate,
}

/// A whole parsed candidates query.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CandidateQuery {
    /// Groups, the unnumbered one first when present, then by suffix.
    pub groups: Vec<GroupSpec>,
    /// `group_policy`.
    pub group_policy: Option<GroupPolicy>,
    /// `limit` (its first value, as Placement reads it).
    pub limit: Option<usize>,
    /// `root_required`.
    pub root_required: TraitFilter,
    /// `same_subtree` sets of suffixes.
    pub same_subtree: Vec<Vec<String>>,
}

/// A typed search: what the engine is asked, however the caller put it.
#[derive(Debug, Clone)]
pub struct Search {
    /// The groups and their filters.
    pub query: CandidateQuery,
    /// prod, or a low-priority class held to the batch classes.
    pub priority: PriorityClass,
    /// The project whose reservations it may use.
    pub project: Option<String>,
    /// The microversion whose semantics apply (nesting from 1.29).
    pub version: Microversion,
    /// A cap on the results, with the query's own `limit`.
    pub max_results: Option<usize>,
    /// Leave each tree at its first candidate (explain's question: which
    /// trees fit, not every way they do).
    pub one_per_anchor: bool,
    /// The trees to look at.
    pub scope: Scope,
}

/// Which trees a search looks at.
#[derive(Debug, Clone, Default)]
pub enum Scope {
    /// Every tree.
    #[default]
    EveryTree,
    /// The trees with a provider whose data changed since the mark (every
    /// tree when the snapshot can no longer say which did).
    ChangedSince(JournalMark),
}
