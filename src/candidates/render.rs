//! Rendering of candidates: `allocation_requests` (list form before 1.12,
//! dict form after, `mappings` from 1.34) and `provider_summaries`.
//!
//! Written straight to JSON text: building a `serde_json::Value` tree for a
//! thousand candidates cost ten times more than solving them.

use super::snapshot::{Node, Snapshot};
use super::solve::Candidate;
use std::collections::BTreeSet;
use std::fmt::Write;

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

fn string(out: &mut String, s: &str) {
    // Names are plain ASCII by validation; escape anything else anyway.
    if s.bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    {
        out.push('"');
        out.push_str(s);
        out.push('"');
    } else {
        out.push_str(&serde_json::Value::String(s.to_string()).to_string());
    }
}

fn resources(out: &mut String, snap: &Snapshot, entries: &[(i32, i64)]) {
    out.push('{');
    for (k, &(c, n)) in entries.iter().enumerate() {
        if k > 0 {
            out.push(',');
        }
        string(
            out,
            snap.class_names.get(&c).map(String::as_str).unwrap_or(""),
        );
        let _ = write!(out, ":{n}");
    }
    out.push('}');
}

/// Renders the response body as JSON text.
pub fn render(
    snap: &Snapshot,
    suffixes: &[String],
    requested: &BTreeSet<i32>,
    cands: &[Candidate],
    shape: Shape,
) -> String {
    let mut out = String::with_capacity(256 + cands.len() * 256);
    out.push_str("{\"allocation_requests\":[");
    for (k, cand) in cands.iter().enumerate() {
        if k > 0 {
            out.push(',');
        }
        allocation_request(&mut out, snap, suffixes, cand, shape);
    }
    out.push_str("],\"provider_summaries\":{");
    provider_summaries(&mut out, snap, requested, cands, shape);
    out.push_str("}}");
    out
}

/// One allocation request: its allocations by provider (a dict from 1.12,
/// a list before), and its mappings from 1.34.
fn allocation_request(
    out: &mut String,
    snap: &Snapshot,
    suffixes: &[String],
    cand: &Candidate,
    shape: Shape,
) {
    // Allocations are sorted by node, so each provider's classes are contiguous.
    let mut by_provider: Vec<(usize, Vec<(i32, i64)>)> = Vec::new();
    for &(p, c, n) in &cand.allocations {
        match by_provider.last_mut() {
            Some((q, list)) if *q == p => list.push((c, n)),
            _ => by_provider.push((p, vec![(c, n)])),
        }
    }
    out.push_str(if shape.dict_form {
        "{\"allocations\":{"
    } else {
        "{\"allocations\":["
    });
    for (j, (p, list)) in by_provider.iter().enumerate() {
        if j > 0 {
            out.push(',');
        }
        let uuid = snap.nodes[*p].uuid;
        if shape.dict_form {
            let _ = write!(out, "\"{uuid}\":{{\"resources\":");
        } else {
            let _ = write!(
                out,
                "{{\"resource_provider\":{{\"uuid\":\"{uuid}\"}},\"resources\":"
            );
        }
        resources(out, snap, list);
        out.push('}');
    }
    out.push(if shape.dict_form { '}' } else { ']' });
    if shape.mappings {
        mappings(out, snap, suffixes, cand);
    }
    out.push('}');
}

/// `"mappings": {suffix: [provider uuids]}`.
fn mappings(out: &mut String, snap: &Snapshot, suffixes: &[String], cand: &Candidate) {
    out.push_str(",\"mappings\":{");
    for (j, (suffix, providers)) in suffixes.iter().zip(&cand.mappings).enumerate() {
        if j > 0 {
            out.push(',');
        }
        string(out, suffix);
        out.push_str(":[");
        for (i, &p) in providers.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            let _ = write!(out, "\"{}\"", snap.nodes[p].uuid);
        }
        out.push(']');
    }
    out.push('}');
}

/// The summaries: whole trees of contributing providers (1.29+), else only
/// the providers used when nested providers exist.
fn provider_summaries(
    out: &mut String,
    snap: &Snapshot,
    requested: &BTreeSet<i32>,
    cands: &[Candidate],
    shape: Shape,
) {
    let used: BTreeSet<usize> = cands
        .iter()
        .flat_map(|c| c.allocations.iter().map(|a| a.0))
        .collect();
    let only_used = !shape.nested && snap.any_nested;
    // In provider order, as before; found from the candidates' own trees
    // rather than by walking every provider of the snapshot.
    let listed: BTreeSet<usize> = if only_used {
        used
    } else {
        let roots: BTreeSet<usize> = used.iter().map(|&p| snap.nodes[p].root).collect();
        roots
            .iter()
            .flat_map(|&r| snap.tree(r).iter().copied())
            .collect()
    };
    for (k, &i) in listed.iter().enumerate() {
        if k > 0 {
            out.push(',');
        }
        provider_summary(out, snap, &snap.nodes[i], requested, shape);
    }
}

/// One provider's summary: capacity and usage per class (all classes from
/// 1.27, the requested ones before), traits from 1.17, tree from 1.29.
fn provider_summary(
    out: &mut String,
    snap: &Snapshot,
    node: &Node,
    requested: &BTreeSet<i32>,
    shape: Shape,
) {
    let _ = write!(out, "\"{}\":{{\"resources\":{{", node.uuid);
    let listed = node
        .stock
        .iter()
        .filter(|s| shape.all_classes || requested.contains(&s.class));
    for (k, s) in listed.enumerate() {
        if k > 0 {
            out.push(',');
        }
        string(
            out,
            snap.class_names
                .get(&s.class)
                .map(String::as_str)
                .unwrap_or(""),
        );
        let _ = write!(
            out,
            ":{{\"capacity\":{},\"used\":{}}}",
            s.capacity_int(),
            s.used
        );
    }
    out.push('}');
    if shape.traits {
        // Trait id order (standard traits first), as Placement lists them.
        out.push_str(",\"traits\":[");
        for (j, t) in node
            .traits
            .iter()
            .filter_map(|t| snap.trait_names.get(t))
            .enumerate()
        {
            if j > 0 {
                out.push(',');
            }
            string(out, t);
        }
        out.push(']');
    }
    if shape.nested {
        match node.parent {
            Some(p) => {
                let _ = write!(out, ",\"parent_provider_uuid\":\"{}\"", snap.nodes[p].uuid);
            }
            None => out.push_str(",\"parent_provider_uuid\":null"),
        }
        let _ = write!(
            out,
            ",\"root_provider_uuid\":\"{}\"",
            snap.nodes[node.root].uuid
        );
    }
    out.push('}');
}
