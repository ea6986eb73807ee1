//! Deployments end to end over HTTP against a real PostgreSQL (a fresh
//! database per test): the Eru design examples of `shared/docs/eru.md`
//! (strategies AUTO, EACH, FILL, GLOBAL; CPU binding with fragments; NUMA),
//! dry runs and refusals that write nothing, live resize, freeing cores by
//! deleting allocations, and topology changes under bindings.
//!
//! Nodes are built through the API: a root provider with a MEMORY_MB
//! inventory and a CPU topology, and (where a test must aim at one node) an
//! aggregate of its own, so `member_of=<aggregate>` deploys the existing
//! instances of an example node by node.
//!
//! Without `DATABASE_URL` the harness starts its own PostgreSQL.

use placement_testkit::common;

use common::{Resp, TestApp};
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;

const MV: &str = "1.39";

/// A schedulable node of the test, with a short name for assertions.
struct Node {
    name: &'static str,
    uuid: String,
    agg: String,
}

/// Creates a node: provider, MEMORY_MB inventory of `memory_mb`, `cores`
/// plain cores (share base 100, no NUMA), and an aggregate of its own.
async fn node(t: &TestApp, name: &'static str, memory_mb: i64, cores: usize) -> Node {
    let uuid = t.create_rp(name).await;
    t.set_inventories(&uuid, json!({"MEMORY_MB": {"total": memory_mb}}))
        .await;
    let cores: Vec<Value> = (0..cores)
        .map(|i| json!({"id": i.to_string(), "numa_node": null}))
        .collect();
    put_topology(
        t,
        &uuid,
        json!({"share_base": 100, "max_fragment_cores": -1, "cores": cores}),
    )
    .await
    .expect(200);
    let agg = common::uuid();
    t.set_aggregates(&uuid, &[&agg]).await;
    Node { name, uuid, agg }
}

async fn put_topology(t: &TestApp, rp: &str, body: Value) -> Resp {
    t.put(&format!("/resource_providers/{rp}/cpu_topology"), MV, body)
        .await
}

async fn topology(t: &TestApp, rp: &str) -> Value {
    t.get(&format!("/resource_providers/{rp}/cpu_topology"), MV)
        .await
        .expect(200)
        .json()
}

/// used_shares per core id.
async fn used_shares(t: &TestApp, rp: &str) -> BTreeMap<String, i64> {
    topology(t, rp).await["cores"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["id"].as_str().unwrap().to_string(),
                c["used_shares"].as_i64().unwrap(),
            )
        })
        .collect()
}

async fn usages(t: &TestApp, rp: &str) -> Value {
    t.get(&format!("/resource_providers/{rp}/usages"), MV)
        .await
        .expect(200)
        .json()["usages"]
        .clone()
}

async fn inventory_total(t: &TestApp, rp: &str, rc: &str) -> Option<i64> {
    let r = t
        .get(&format!("/resource_providers/{rp}/inventories"), MV)
        .await
        .expect(200);
    r.json()["inventories"][rc]["total"].as_i64()
}

async fn consumer_allocations(t: &TestApp, consumer: &str) -> Value {
    t.get(&format!("/allocations/{consumer}"), "1.28")
        .await
        .expect(200)
        .json()
}

/// `POST /deployments` with the usual owner fields; `extra` overrides/adds.
async fn deploy(t: &TestApp, app: &str, count: i64, memory_mb: i64, extra: Value) -> Resp {
    let mut body = json!({
        "app": app, "count": count, "memory_mb": memory_mb,
        "project_id": "p", "user_id": "u",
    });
    for (k, v) in extra.as_object().unwrap() {
        body[k] = v.clone();
    }
    t.post("/deployments", MV, body).await
}

async fn deployment(t: &TestApp, app: &str) -> Value {
    t.get(&format!("/deployments/{app}"), MV)
        .await
        .expect(200)
        .json()
}

/// A `{node_uuid: n}` map in node names, zero entries dropped.
fn named(map: &Value, nodes: &[&Node]) -> BTreeMap<&'static str, i64> {
    let obj = map
        .as_object()
        .unwrap_or_else(|| panic!("not a map: {map}"));
    obj.iter()
        .filter(|(_, v)| v.as_i64() != Some(0))
        .map(|(uuid, v)| {
            let n = nodes
                .iter()
                .find(|n| n.uuid == *uuid)
                .unwrap_or_else(|| panic!("unknown node {uuid}"));
            (n.name, v.as_i64().unwrap())
        })
        .collect()
}

fn expect_map(pairs: &[(&'static str, i64)]) -> BTreeMap<&'static str, i64> {
    pairs.iter().copied().collect()
}

/// Per-node instance counts of an app, from `GET /deployments/{app}`.
async fn app_counts(t: &TestApp, app: &str, nodes: &[&Node]) -> BTreeMap<&'static str, i64> {
    let d = deployment(t, app).await;
    let counts: Map<String, Value> = d["nodes"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.clone(), v["count"].clone()))
        .collect();
    named(&Value::Object(counts), nodes)
}

/// Puts `count` instances of `app` on one node (auto within its aggregate).
async fn seed(t: &TestApp, app: &str, n: &Node, count: i64, memory_mb: i64) {
    if count == 0 {
        return;
    }
    let r = deploy(
        t,
        app,
        count,
        memory_mb,
        json!({"strategy": "auto", "member_of": n.agg}),
    )
    .await
    .expect(201);
    assert_eq!(
        r.json()["deploy_map"],
        json!({ &n.uuid: count }),
        "seeding {}",
        n.name
    );
}

/// Nodes whose remaining capacity for `memory_mb` instances is `cap` after
/// `count` existing instances of `app`: MEMORY_MB total = (count+cap)*memory_mb.
async fn example_nodes(
    t: &TestApp,
    app: &str,
    memory_mb: i64,
    spec: &[(&'static str, i64, i64)],
) -> Vec<Node> {
    let mut out = Vec::new();
    for &(name, count, cap) in spec {
        let n = node(t, name, (count + cap) * memory_mb, 2).await;
        seed(t, app, &n, count, memory_mb).await;
        out.push(n);
    }
    out
}

fn refs(nodes: &[Node]) -> Vec<&Node> {
    nodes.iter().collect()
}

mod batch;
mod cpu_binding;
mod freeing;
mod placement_nodes;
mod refusals;
mod resize;
mod strategies;
mod volumes;
