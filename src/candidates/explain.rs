//! Why a provider tree is not a candidate. Whether a tree fits is taken
//! from the solver's own answer (the trees anchoring its candidates), so
//! an explanation never disagrees with `GET /allocation_candidates`; for a
//! tree that does not fit, the first constraint that rules it out is
//! named with its numbers: root traits, `in_tree`, aggregate membership,
//! forbidden and required traits, inventory and capacity, and otherwise
//! the combination of groups (group policy, `same_subtree`, providers that
//! each fit one group but not all together).

use super::snapshot::Snapshot;
use super::solve::{Candidate, Group, Request};
use serde_json::{json, Value};
use std::collections::HashSet;

/// One root provider's verdict.
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    /// The root's node index.
    pub root: usize,
    /// None: the tree anchors at least one candidate.
    pub reason: Option<Reason>,
}

/// The first constraint that rules a tree out.
#[derive(Debug, Clone, PartialEq)]
pub struct Reason {
    /// `root_required`, `in_tree`, `member_of`, `forbidden_trait`,
    /// `required_trait`, `no_inventory`, `capacity` or `combination`.
    pub kind: &'static str,
    /// The request group (suffix; "" for the unnumbered one), if one.
    pub group: Option<String>,
    /// The numbers.
    pub detail: Value,
}

/// The trees that anchor a candidate: the root of its first provider that
/// is not a sharing one (or of its first provider).
fn anchors(snap: &Snapshot, candidates: &[Candidate]) -> HashSet<usize> {
    candidates
        .iter()
        .filter_map(|c| {
            let first = c.allocations.first()?.0;
            let own = c
                .allocations
                .iter()
                .map(|a| a.0)
                .find(|&n| !snap.is_sharing(n))
                .unwrap_or(first);
            Some(snap.nodes[own].root)
        })
        .collect()
}

/// Every root provider, in uuid order, with its verdict.
pub fn explain(snap: &Snapshot, req: &Request, candidates: &[Candidate]) -> Vec<Verdict> {
    let fits = anchors(snap, candidates);
    let mut roots = snap.index.roots.clone();
    roots.sort_by_key(|&r| snap.nodes[r].uuid);
    roots
        .into_iter()
        .map(|root| Verdict {
            root,
            reason: (!fits.contains(&root)).then(|| why_not(snap, req, root)),
        })
        .collect()
}

fn names(snap: &Snapshot, traits: &[i32]) -> Vec<String> {
    traits
        .iter()
        .map(|t| {
            snap.trait_names
                .get(t)
                .cloned()
                .unwrap_or_else(|| t.to_string())
        })
        .collect()
}

fn why_not(snap: &Snapshot, req: &Request, root: usize) -> Reason {
    let node = &snap.nodes[root];
    let missing: Vec<i32> = req
        .root_required
        .iter()
        .copied()
        .filter(|t| !node.has_trait(*t))
        .collect();
    let forbidden: Vec<i32> = req
        .root_forbidden
        .iter()
        .copied()
        .filter(|t| node.has_trait(*t))
        .collect();
    if !missing.is_empty() || !forbidden.is_empty() {
        return Reason {
            kind: "root_required",
            group: None,
            detail: json!({"missing": names(snap, &missing), "forbidden": names(snap, &forbidden)}),
        };
    }
    req.groups
        .iter()
        .find_map(|g| group_reason(snap, g, root))
        .unwrap_or_else(|| Reason {
            kind: "combination",
            group: None,
            detail: json!({
                "explanation": "every group has providers here, but not together",
                "group_policy_isolate": req.isolate,
                "same_subtree": !req.same_subtree.is_empty(),
                "groups": req.groups.len()
            }),
        })
}

/// The providers a group may use for a tree: the tree's own, and the
/// sharing providers in an aggregate with one of them.
fn pool(snap: &Snapshot, root: usize) -> Vec<usize> {
    let tree = snap.tree(root).to_vec();
    let aggs: HashSet<i32> = tree
        .iter()
        .flat_map(|&n| snap.nodes[n].aggs.iter().copied())
        .collect();
    let sharing = snap.sharing_nodes.iter().copied().filter(|&s| {
        snap.nodes[s].root != root && snap.nodes[s].aggs.iter().any(|a| aggs.contains(a))
    });
    tree.iter().copied().chain(sharing).collect()
}

fn group_reason(snap: &Snapshot, g: &Group, root: usize) -> Option<Reason> {
    let reason = |kind, detail| {
        Some(Reason {
            kind,
            group: Some(g.suffix.clone()),
            detail,
        })
    };
    if let Some(n) = g.in_tree {
        if snap.nodes[n].root != root {
            return reason("in_tree", json!({"in_tree": snap.nodes[n].uuid}));
        }
    }
    let member = |n: usize| {
        let node = &snap.nodes[n];
        let tree_root = &snap.nodes[node.root];
        let in_agg = |a: &i32| node.in_agg(*a) || tree_root.in_agg(*a);
        g.member_of.iter().all(|set| set.iter().any(in_agg)) && !g.forbidden_aggs.iter().any(in_agg)
    };
    let usable: Vec<usize> = pool(snap, root)
        .into_iter()
        .filter(|&n| member(n))
        .collect();
    if usable.is_empty() {
        return reason(
            "member_of",
            json!({"member_of_sets": g.member_of.len(), "forbidden": g.forbidden_aggs.len()}),
        );
    }
    let allowed: Vec<usize> = usable
        .into_iter()
        .filter(|&n| !g.forbidden.iter().any(|t| snap.nodes[n].has_trait(*t)))
        .collect();
    if allowed.is_empty() {
        return reason(
            "forbidden_trait",
            json!({"forbidden": names(snap, &g.forbidden)}),
        );
    }
    if let Some(set) = g.required.iter().find(|set| {
        !allowed
            .iter()
            .any(|&n| set.iter().any(|t| snap.nodes[n].has_trait(*t)))
    }) {
        return reason("required_trait", json!({"any_of": names(snap, set)}));
    }
    g.resources
        .iter()
        .find_map(|&(class, amount)| capacity_reason(snap, &allowed, class, amount))
        .and_then(|(kind, detail)| reason(kind, detail))
}

/// `no_inventory` when no usable provider has the class, `capacity` with
/// the roomiest provider's numbers when none has room for the amount.
fn capacity_reason(
    snap: &Snapshot,
    providers: &[usize],
    class: i32,
    amount: i64,
) -> Option<(&'static str, Value)> {
    let class_name = snap
        .class_names
        .get(&class)
        .cloned()
        .unwrap_or_else(|| class.to_string());
    let stocked: Vec<(usize, &super::snapshot::Stock)> = providers
        .iter()
        .filter_map(|&n| snap.nodes[n].stock(class).map(|s| (n, s)))
        .collect();
    if stocked.is_empty() {
        return Some((
            "no_inventory",
            json!({"resource_class": class_name, "requested": amount}),
        ));
    }
    if stocked.iter().any(|(_, s)| s.fits(amount)) {
        return None;
    }
    let (n, s) = stocked
        .iter()
        .max_by_key(|(_, s)| s.capacity_int() - s.used)
        .copied()?;
    Some((
        "capacity",
        json!({
            "resource_class": class_name,
            "provider": snap.nodes[n].uuid,
            "requested": amount,
            "total": s.total,
            "reserved": s.reserved,
            "allocation_ratio": s.allocation_ratio,
            "used": s.used,
            "free": s.capacity_int() - s.used,
            "min_unit": s.min_unit,
            "max_unit": s.max_unit,
            "step_size": s.step_size
        }),
    ))
}
