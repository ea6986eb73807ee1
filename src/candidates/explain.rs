//! Why a provider tree is not a candidate. Whether a tree fits is taken
//! from the solver's own answer (the trees anchoring its candidates), so
//! an explanation never disagrees with `GET /allocation_candidates`; for a
//! tree that does not fit, the first constraint that rules it out is
//! named with its numbers: root traits, `in_tree`, aggregate membership,
//! forbidden and required traits, inventory and capacity, and otherwise
//! the combination of groups (group policy, `same_subtree`, providers that
//! each fit one group but not all together). Where the search itself took
//! stock away for this query, the capacity shortfall is named for that
//! cause: another project's reservation, or the load filter's stale report,
//! load threshold or invalid policy override (see [`Adjustments`]).

use super::find::Adjustments;
use super::low_priority_filter::LoadRefusal;
use super::snapshot::{Snapshot, Stock};
use super::solve::{Candidate, Group, Request};
use crate::db::colocation::{BATCH_MEMORY_MB, BATCH_VCPU_MILLI};
use crate::sched::colocation::load_aware::Resource;
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashSet};

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
    /// `required_trait`, `stale_report`, `load_threshold`,
    /// `colocation_policy`, `reservation`, `sharing_aggregate`,
    /// `no_inventory`, `capacity` or `combination`.
    pub kind: &'static str,
    /// The request group (suffix; "" for the unnumbered one), if one.
    pub group: Option<String>,
    /// The numbers.
    pub detail: Value,
}

/// The trees that anchor a candidate ([`super::solve::anchor_of`]).
fn anchors(snap: &Snapshot, req: &Request, candidates: &[Candidate]) -> HashSet<usize> {
    candidates
        .iter()
        .filter_map(|c| super::solve::anchor_of(snap, req, c))
        .collect()
}

/// What explaining one query reads.
pub struct Query<'a> {
    /// The providers as the search saw them.
    pub snap: &'a Snapshot,
    /// The resolved request.
    pub request: &'a Request,
    /// What the search took away for this query.
    pub adjusted: &'a Adjustments,
}

/// Every root provider, in uuid order, with its verdict.
pub fn explain(q: &Query<'_>, candidates: &[Candidate]) -> Vec<Verdict> {
    let snap = q.snap;
    let fits = anchors(snap, q.request, candidates);
    let mut roots = snap.index.roots.clone();
    roots.sort_by_key(|&r| snap.nodes[r].uuid);
    roots
        .into_iter()
        .map(|root| Verdict {
            root,
            reason: (!fits.contains(&root)).then(|| why_not(q, root)),
        })
        .collect()
}

/// How many trees fit, and how many each reason ruled out.
pub fn summary(verdicts: &[Verdict]) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for v in verdicts {
        let key = v.reason.as_ref().map_or("fits", |r| r.kind);
        *out.entry(key.to_string()).or_insert(0) += 1;
    }
    out
}

/// What the request asks for in all, by class name.
pub fn requested_by_class(snap: &Snapshot, req: &Request) -> BTreeMap<String, i64> {
    let mut out = BTreeMap::new();
    for &(class, amount) in req.groups.iter().flat_map(|g| &g.resources) {
        let n: &mut i64 = out.entry(class_name(snap, class)).or_default();
        *n = n.saturating_add(amount);
    }
    out
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

fn why_not(q: &Query<'_>, root: usize) -> Reason {
    let (snap, req) = (q.snap, q.request);
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
        .find_map(|g| group_reason(q, g, root))
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

fn group_reason(q: &Query<'_>, g: &Group, root: usize) -> Option<Reason> {
    let snap = q.snap;
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
        .find_map(|&(class, amount)| {
            let plain = capacity_reason(snap, &allowed, class, amount)?;
            let cause = match plain.0 {
                "no_inventory" => withheld_reason(q, &allowed, class, amount)
                    .or_else(|| sharing_reason(snap, root, class, amount)),
                _ => withheld_reason(q, &allowed, class, amount),
            };
            Some(cause.unwrap_or(plain))
        })
        .and_then(|(kind, detail)| reason(kind, detail))
}

/// When the search took `class` away from a usable provider for this
/// query and that is why the amount does not fit: the load filter's
/// refusal (for the batch classes), or stock withheld for other projects'
/// reservations that would otherwise have room.
fn withheld_reason(
    q: &Query<'_>,
    providers: &[usize],
    class: i32,
    amount: i64,
) -> Option<(&'static str, Value)> {
    let snap = q.snap;
    let batch = [BATCH_VCPU_MILLI.0, BATCH_MEMORY_MB.0].contains(&class);
    let refused = providers.iter().find_map(|&n| {
        let node = &snap.nodes[n];
        let why = q.adjusted.refused.get(&node.id).filter(|_| batch)?;
        Some(load_reason(node.uuid, why))
    });
    refused.or_else(|| {
        providers.iter().find_map(|&n| {
            let node = &snap.nodes[n];
            let stock = node.stock(class)?;
            let held = *q.adjusted.withheld.get(&(node.id, class))?;
            let unheld = Stock {
                used: stock.used - held,
                ..stock.clone()
            };
            unheld.fits(amount).then(|| {
                let mut detail = stock_detail(snap, node.uuid, stock, class, amount);
                detail["withheld_for_reservations"] = json!(held);
                ("reservation", detail)
            })
        })
    })
}

/// `sharing_aggregate` when the tree has none of `class` but sharing
/// providers offer it in aggregates the tree is not in.
fn sharing_reason(
    snap: &Snapshot,
    root: usize,
    class: i32,
    amount: i64,
) -> Option<(&'static str, Value)> {
    let tree_aggs: HashSet<i32> = snap
        .tree(root)
        .iter()
        .flat_map(|&n| snap.nodes[n].aggs.iter().copied())
        .collect();
    let elsewhere: Vec<uuid::Uuid> = snap
        .sharing_nodes
        .iter()
        .map(|&s| &snap.nodes[s])
        .filter(|s| s.stock(class).is_some() && !s.aggs.iter().any(|a| tree_aggs.contains(a)))
        .map(|s| s.uuid)
        .collect();
    (!elsewhere.is_empty()).then(|| {
        (
            "sharing_aggregate",
            json!({
                "resource_class": class_name(snap, class),
                "requested": amount,
                "sharing_providers": elsewhere.iter().take(10).collect::<Vec<_>>(),
                "sharing_provider_count": elsewhere.len(),
                "tree_aggregate_count": tree_aggs.len()
            }),
        )
    })
}

fn load_reason(provider: uuid::Uuid, why: &LoadRefusal) -> (&'static str, Value) {
    match why {
        LoadRefusal::InvalidPolicy => (
            "colocation_policy",
            json!({"provider": provider, "explanation": "its colocation policy override no longer fits the cluster's policy"}),
        ),
        LoadRefusal::Stale {
            age_seconds,
            expiration_seconds,
        } => (
            "stale_report",
            json!({"provider": provider, "report_age_seconds": age_seconds, "metric_expiration_seconds": expiration_seconds}),
        ),
        LoadRefusal::Overloaded {
            resource,
            percent,
            threshold,
        } => (
            "load_threshold",
            json!({
                "provider": provider,
                "resource": match resource { Resource::Cpu => "cpu", Resource::Memory => "memory" },
                "estimated_percent": {"cpu": percent.cpu, "memory": percent.memory},
                "threshold_percent": {"cpu": threshold.cpu, "memory": threshold.memory}
            }),
        ),
    }
}

fn stock_detail(
    snap: &Snapshot,
    provider: uuid::Uuid,
    s: &Stock,
    class: i32,
    amount: i64,
) -> Value {
    json!({
        "resource_class": class_name(snap, class),
        "provider": provider,
        "requested": amount,
        "total": s.inventory.total,
        "reserved": s.inventory.reserved,
        "allocation_ratio": s.inventory.allocation_ratio,
        "used": s.used,
        "free": s.capacity_int() - s.used,
        "min_unit": s.inventory.min_unit,
        "max_unit": s.inventory.max_unit,
        "step_size": s.inventory.step_size
    })
}

fn class_name(snap: &Snapshot, class: i32) -> String {
    snap.class_names
        .get(&class)
        .cloned()
        .unwrap_or_else(|| class.to_string())
}

/// `no_inventory` when no usable provider has the class, `capacity` with
/// the roomiest provider's numbers when none has room for the amount.
fn capacity_reason(
    snap: &Snapshot,
    providers: &[usize],
    class: i32,
    amount: i64,
) -> Option<(&'static str, Value)> {
    let stocked: Vec<(usize, &super::snapshot::Stock)> = providers
        .iter()
        .filter_map(|&n| snap.nodes[n].stock(class).map(|s| (n, s)))
        .collect();
    if stocked.is_empty() {
        return Some((
            "no_inventory",
            json!({"resource_class": class_name(snap, class), "requested": amount}),
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
        stock_detail(snap, snap.nodes[n].uuid, s, class, amount),
    ))
}
