//! Placement's answer to `GET /allocation_candidates`, written for the
//! microversion: `allocation_requests` (list form before 1.12, dict form
//! after, `mappings` from 1.34) and `provider_summaries`. The engine
//! returns candidates; this is the writer the handler hands it, run on
//! the solver's thread beside the solve.
//!
//! Written straight to JSON text: building a `serde_json::Value` tree for a
//! thousand candidates cost ten times more than solving them. Names are
//! quoted once per answer and uuids and integers written without the
//! formatting machinery: an answer of 1,000 candidates writes several
//! thousand of each.

use crate::candidates::answer::{AnswerWriter, Asked};
use crate::candidates::snapshot::{Node, Snapshot};
use crate::candidates::solve::Candidate;
use std::collections::BTreeSet;
use std::sync::Arc;

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

/// A JSON string of `s`.
fn quoted(s: &str) -> String {
    // Names are plain ASCII by validation; escape anything else anyway.
    if s.bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    {
        format!("\"{s}\"")
    } else {
        serde_json::Value::String(s.to_string()).to_string()
    }
}

/// Class and trait names as JSON strings, quoted the first time an answer
/// uses them (an answer uses a handful: a list beats a hash).
#[derive(Default)]
struct Quoted {
    classes: Vec<(i32, String)>,
    traits: Vec<(i32, Option<String>)>,
}

impl Quoted {
    fn class(&mut self, snap: &Snapshot, id: i32) -> &str {
        let k = match self.classes.iter().position(|c| c.0 == id) {
            Some(k) => k,
            None => {
                let name = snap.class_names.get(&id).map_or("", String::as_str);
                self.classes.push((id, quoted(name)));
                self.classes.len() - 1
            }
        };
        &self.classes[k].1
    }

    /// None for a trait the snapshot has no name for (left out).
    fn trait_(&mut self, snap: &Snapshot, id: i32) -> Option<&str> {
        let k = match self.traits.iter().position(|t| t.0 == id) {
            Some(k) => k,
            None => {
                let name = snap.trait_names.get(&id).map(|n| quoted(n));
                self.traits.push((id, name));
                self.traits.len() - 1
            }
        };
        self.traits[k].1.as_deref()
    }
}

/// The answer being written.
struct Writer<'a> {
    out: String,
    snap: &'a Snapshot,
    shape: Shape,
    quoted: Quoted,
}

impl Writer<'_> {
    fn push(&mut self, s: &str) {
        self.out.push_str(s);
    }

    fn comma_after_first(&mut self, k: usize) {
        if k > 0 {
            self.out.push(',');
        }
    }

    /// A node's uuid in quotes.
    fn uuid(&mut self, node: usize) {
        self.out.push_str(self.snap.nodes[node].json_uuid.as_str());
    }

    fn int(&mut self, n: i64) {
        self.out.push_str(itoa::Buffer::new().format(n));
    }

    fn class(&mut self, id: i32) {
        let name = self.quoted.class(self.snap, id);
        self.out.push_str(name);
    }

    /// `{"CLASS":n,...}` of one provider's part of a candidate.
    fn resources(&mut self, entries: &[(usize, i32, i64)]) {
        self.out.push('{');
        for (k, &(_, c, n)) in entries.iter().enumerate() {
            self.comma_after_first(k);
            self.class(c);
            self.out.push(':');
            self.int(n);
        }
        self.out.push('}');
    }

    /// One allocation request: its allocations by provider (a dict from
    /// 1.12, a list before), and its mappings from 1.34 (suffixes quoted).
    fn allocation_request(&mut self, suffixes: &[String], cand: &Candidate) {
        let dict_form = self.shape.dict_form;
        self.push(if dict_form {
            "{\"allocations\":{"
        } else {
            "{\"allocations\":["
        });
        // Allocations are sorted by node, so each provider's classes are contiguous.
        for (j, list) in cand.allocations.chunk_by(|a, b| a.0 == b.0).enumerate() {
            self.comma_after_first(j);
            if dict_form {
                self.uuid(list[0].0);
                self.push(":{\"resources\":");
            } else {
                self.push("{\"resource_provider\":{\"uuid\":");
                self.uuid(list[0].0);
                self.push("},\"resources\":");
            }
            self.resources(list);
            self.out.push('}');
        }
        self.out.push(if dict_form { '}' } else { ']' });
        if self.shape.mappings {
            self.mappings(suffixes, cand);
        }
        self.out.push('}');
    }

    /// `"mappings": {suffix: [provider uuids]}` (suffixes quoted).
    fn mappings(&mut self, suffixes: &[String], cand: &Candidate) {
        self.push(",\"mappings\":{");
        for (j, (suffix, providers)) in suffixes.iter().zip(&cand.mappings).enumerate() {
            self.comma_after_first(j);
            self.push(suffix);
            self.push(":[");
            for (i, &p) in providers.iter().enumerate() {
                self.comma_after_first(i);
                self.uuid(p);
            }
            self.out.push(']');
        }
        self.out.push('}');
    }

    /// The summaries: whole trees of contributing providers (1.29+), else
    /// only the providers used when nested providers exist.
    fn provider_summaries(&mut self, requested: &BTreeSet<i32>, cands: &[Candidate]) {
        let snap = self.snap;
        let mut listed: Vec<usize> = cands
            .iter()
            .flat_map(|c| c.allocations.iter().map(|a| a.0))
            .collect();
        listed.sort_unstable();
        listed.dedup();
        // Whole trees from 1.29, found from the candidates' own trees
        // rather than by walking every provider of the snapshot. (While no
        // provider is nested, every tree is its root alone: the providers
        // used are the trees.)
        if self.shape.nested && snap.any_nested {
            let mut roots: Vec<usize> = listed.iter().map(|&p| snap.nodes[p].root).collect();
            roots.sort_unstable();
            roots.dedup();
            listed = roots
                .iter()
                .flat_map(|&r| snap.tree(r).iter().copied())
                .collect();
            // In provider order, as before.
            listed.sort_unstable();
        }
        for (k, &i) in listed.iter().enumerate() {
            self.comma_after_first(k);
            self.provider_summary(i, &snap.nodes[i], requested);
        }
    }

    /// One provider's summary: capacity and usage per class (all classes
    /// from 1.27, the requested ones before), traits from 1.17, tree from
    /// 1.29.
    fn provider_summary(&mut self, i: usize, node: &Node, requested: &BTreeSet<i32>) {
        self.uuid(i);
        self.push(":{\"resources\":{");
        let all_classes = self.shape.all_classes;
        let listed = node
            .stock
            .iter()
            .filter(|s| all_classes || requested.contains(&s.class));
        for (k, s) in listed.enumerate() {
            self.comma_after_first(k);
            self.class(s.class);
            self.push(":{\"capacity\":");
            self.int(s.capacity_int());
            self.push(",\"used\":");
            self.int(s.used);
            self.out.push('}');
        }
        self.out.push('}');
        if self.shape.traits {
            // Trait id order (standard traits first), as Placement lists them.
            self.push(",\"traits\":[");
            let mut k = 0;
            for &t in &node.traits {
                if let Some(name) = self.quoted.trait_(self.snap, t) {
                    if k > 0 {
                        self.out.push(',');
                    }
                    self.out.push_str(name);
                    k += 1;
                }
            }
            self.out.push(']');
        }
        if self.shape.nested {
            self.push(",\"parent_provider_uuid\":");
            match node.parent {
                Some(p) => self.uuid(p),
                None => self.push("null"),
            }
            self.push(",\"root_provider_uuid\":");
            self.uuid(node.root);
        }
        self.out.push('}');
    }
}

/// The writer of the answer in `shape`, for the engine to run beside the
/// solve.
pub fn writer(shape: Shape) -> AnswerWriter {
    AnswerWriter {
        write: Arc::new(move |snap: &Snapshot, cands: &[Candidate], asked: &Asked| {
            render(snap, &asked.suffixes, &asked.requested, cands, shape)
        }),
        whole_trees: shape.nested,
    }
}

/// Renders the response body as JSON text.
pub fn render(
    snap: &Snapshot,
    suffixes: &[String],
    requested: &BTreeSet<i32>,
    cands: &[Candidate],
    shape: Shape,
) -> String {
    let mut w = Writer {
        // About 450 bytes a candidate with its summary: one allocation, no copy.
        out: String::with_capacity(256 + cands.len() * 512),
        snap,
        shape,
        quoted: Quoted::default(),
    };
    let suffixes: Vec<String> = suffixes.iter().map(|s| quoted(s)).collect();
    w.push("{\"allocation_requests\":[");
    for (k, cand) in cands.iter().enumerate() {
        w.comma_after_first(k);
        w.allocation_request(&suffixes, cand);
    }
    w.push("],\"provider_summaries\":{");
    w.provider_summaries(requested, cands);
    w.push("}}");
    w.out
}
