//! A refused deployment as its answer tells it: the capacity map, a count
//! per reason, each node's verdict (or the candidate engine's reason for
//! a node it ruled out) and the stable error code of the scheduler's
//! refusal.

use super::plan::NodeVerdict;
use crate::candidates::find;
use crate::error::{codes, Error, NodeReport, Refusal};
use crate::sched::{self, SchedError};
use serde_json::{json, Value};
use std::collections::BTreeMap;

/// The candidate engine's reason for each node it ruled out (those not
/// among `chosen`).
pub(crate) fn engine_refusals(found: &find::Candidates, chosen: &[i64]) -> Vec<NodeReport> {
    let Some(request) = &found.request else {
        return Vec::new();
    };
    let query = crate::candidates::explain::Query {
        snap: &found.snap,
        request,
        adjusted: &found.adjusted,
    };
    crate::candidates::explain::explain(&query, &found.candidates)
        .into_iter()
        .filter(|v| !chosen.contains(&found.snap.nodes[v.root].id))
        .filter_map(|v| {
            let r = v.reason?;
            Some(NodeReport {
                node: found.snap.nodes[v.root].uuid,
                capacity: None,
                reason: Some(r.kind.to_string()),
                detail: Some(r.detail),
            })
        })
        .collect()
}

/// A refusal with every node's reason, under a stable code: the message
/// gives the capacity map and a count per reason, the refusal each node.
pub(crate) fn refusal(e: &SchedError, verdicts: &[NodeVerdict], ruled_out: &[NodeReport]) -> Error {
    let mut nodes: Vec<NodeReport> = verdicts.iter().map(report).collect();
    nodes.extend(ruled_out.iter().cloned());
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for reason in nodes.iter().filter_map(|n| n.reason.as_deref()) {
        *counts.entry(reason).or_default() += 1;
    }
    let capacity: serde_json::Map<String, Value> = verdicts
        .iter()
        .filter(|v| v.capacity > 0)
        .map(|v| (v.uuid.to_string(), json!(v.capacity)))
        .collect();
    let total = verdicts
        .iter()
        .fold(0i64, |t, v| t.saturating_add(v.capacity));
    let short: Vec<String> = counts.iter().map(|(r, n)| format!("{n} {r}")).collect();
    let without_room = match short.is_empty() {
        true => String::new(),
        false => format!(" Nodes without room: {}.", short.join(", ")),
    };
    let no_topology = !verdicts.is_empty()
        && verdicts
            .iter()
            .all(|v| v.short.as_ref().is_some_and(|s| s.reason == "no_topology"));
    let code = match no_topology {
        true => codes::DEPLOY_NO_TOPOLOGY,
        false => deploy_code(e),
    };
    Error::refused(
        format!(
            "Unable to schedule: {e}. Capacity map: {} (total {total}).{without_room}",
            Value::Object(capacity)
        ),
        Refusal { nodes },
    )
    .code(code)
}

/// A node's verdict as reported: its capacity, or its reason and numbers.
pub fn report(v: &NodeVerdict) -> NodeReport {
    match &v.short {
        None => NodeReport {
            node: v.uuid,
            capacity: Some(v.capacity),
            reason: None,
            detail: None,
        },
        Some(s) => NodeReport {
            node: v.uuid,
            capacity: Some(0),
            reason: Some(s.reason.to_string()),
            detail: Some(s.detail.clone()),
        },
    }
}

/// The stable error code of a scheduling refusal.
pub fn deploy_code(e: &SchedError) -> &'static str {
    use sched::ErrorKind as K;
    match e.kind() {
        K::InsufficientCapacity => codes::DEPLOY_INSUFFICIENT_CAPACITY,
        K::InsufficientResource => codes::DEPLOY_INSUFFICIENT_RESOURCE,
        K::AlreadyFilled => codes::DEPLOY_ALREADY_FILLED,
        K::InvalidStrategy
        | K::InvalidCount
        | K::InvalidCpu
        | K::InvalidMemory
        | K::InvalidVolume => codes::DEPLOY_INVALID_REQUEST,
    }
}
