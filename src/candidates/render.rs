//! Rendering of candidates: `allocation_requests` (list form before 1.12,
//! dict form after, `mappings` from 1.34) and `provider_summaries`.

use super::snapshot::Snapshot;
use super::solve::Candidate;
use serde_json::{json, Map, Value};
use std::collections::{BTreeSet, HashSet};

/// What the microversion changes in the rendering.
#[derive(Debug, Clone, Copy, Default)]
pub struct Shape {
    /// 1.12+: allocations keyed by provider.
    pub dict_form: bool,
    /// 1.17+: traits in summaries.
    pub traits: bool,
    /// 1.27+: every inventory class in summaries.
    pub all_classes: bool,
    /// 1.29+: parent and root uuids in summaries; whole trees summarised.
    pub nested: bool,
    /// 1.34+: mappings.
    pub mappings: bool,
}

/// Renders the response body.
pub fn render(
    snap: &Snapshot,
    suffixes: &[String],
    requested: &BTreeSet<i32>,
    cands: &[Candidate],
    shape: Shape,
) -> Value {
    let class = |c: i32| snap.class_names.get(&c).cloned().unwrap_or_default();
    let mut requests = Vec::with_capacity(cands.len());
    for cand in cands {
        let mut by_provider: Vec<(usize, Map<String, Value>)> = Vec::new();
        for &(p, c, n) in &cand.allocations {
            match by_provider.iter_mut().find(|(q, _)| *q == p) {
                Some((_, m)) => {
                    m.insert(class(c), json!(n));
                }
                None => by_provider.push((p, Map::from_iter([(class(c), json!(n))]))),
            }
        }
        let allocations = if shape.dict_form {
            let m: Map<String, Value> = by_provider
                .into_iter()
                .map(|(p, r)| (snap.nodes[p].uuid.to_string(), json!({"resources": r})))
                .collect();
            json!(m)
        } else {
            json!(by_provider
                .into_iter()
                .map(|(p, r)| json!({"resource_provider": {"uuid": snap.nodes[p].uuid}, "resources": r}))
                .collect::<Vec<_>>())
        };
        let mut req = json!({"allocations": allocations});
        if shape.mappings {
            let m: Map<String, Value> = suffixes
                .iter()
                .zip(&cand.mappings)
                .map(|(s, ps)| {
                    (
                        s.clone(),
                        json!(ps.iter().map(|&p| snap.nodes[p].uuid).collect::<Vec<_>>()),
                    )
                })
                .collect();
            req["mappings"] = json!(m);
        }
        requests.push(req);
    }
    // Summaries: whole trees of contributing providers (1.29+), else only
    // the providers used when nested providers exist.
    let used: HashSet<usize> = cands
        .iter()
        .flat_map(|c| c.allocations.iter().map(|a| a.0))
        .collect();
    let roots: HashSet<usize> = used.iter().map(|&p| snap.nodes[p].root).collect();
    let only_used = !shape.nested && snap.any_nested;
    let mut summaries = Map::new();
    for (i, node) in snap.nodes.iter().enumerate() {
        let include = if only_used {
            used.contains(&i)
        } else {
            roots.contains(&node.root)
        };
        if !include {
            continue;
        }
        let mut resources = Map::new();
        for s in node
            .stock
            .iter()
            .filter(|s| shape.all_classes || requested.contains(&s.class))
        {
            resources.insert(
                class(s.class),
                json!({"capacity": s.capacity_int(), "used": s.used}),
            );
        }
        let mut summary = json!({"resources": resources});
        if shape.traits {
            // Trait id order (standard traits first), as Placement lists them.
            let names: Vec<String> = node
                .traits
                .iter()
                .filter_map(|t| snap.trait_names.get(t).cloned())
                .collect();
            summary["traits"] = json!(names);
        }
        if shape.nested {
            summary["parent_provider_uuid"] = json!(node.parent.map(|p| snap.nodes[p].uuid));
            summary["root_provider_uuid"] = json!(snap.nodes[node.root].uuid);
        }
        summaries.insert(node.uuid.to_string(), summary);
    }
    json!({"allocation_requests": requests, "provider_summaries": summaries})
}
