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
//! Needs `DATABASE_URL` (a server where the role may `CREATE DATABASE`).

#[path = "api/common.rs"]
mod common;

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

// ---------------------------------------------------------------------------
// Strategies (eru.md §3/§4, vectors `seed_*`)
// ---------------------------------------------------------------------------

/// eru.md §4 example (a), vector `seed_auto_even_need11`: existing A:3 B:1
/// C:5 D:4 with remaining capacities A:10 B:13 C:7 D:2; 11 more with AUTO
/// gives A+3 B+5 C+1 D+2, every node at 6.
#[tokio::test]
async fn auto_keeps_the_app_even() {
    let t = TestApp::new().await;
    let nodes = example_nodes(
        &t,
        "web",
        256,
        &[("A", 3, 10), ("B", 1, 13), ("C", 5, 7), ("D", 4, 2)],
    )
    .await;
    let all = refs(&nodes);
    assert_eq!(
        app_counts(&t, "web", &all).await,
        expect_map(&[("A", 3), ("B", 1), ("C", 5), ("D", 4)])
    );

    // Dry runs of the neighbouring vectors first (need 4 and 7), then 11.
    let r = deploy(
        &t,
        "web",
        4,
        256,
        json!({"strategy": "auto", "dry_run": true}),
    )
    .await
    .expect(200);
    assert_eq!(
        named(&r.json()["deploy_map"], &all),
        expect_map(&[("A", 1), ("B", 3)])
    );
    let r = deploy(
        &t,
        "web",
        7,
        256,
        json!({"strategy": "auto", "dry_run": true}),
    )
    .await
    .expect(200);
    assert_eq!(
        named(&r.json()["deploy_map"], &all),
        expect_map(&[("A", 2), ("B", 4), ("D", 1)])
    );

    let r = deploy(&t, "web", 11, 256, json!({"strategy": "auto"}))
        .await
        .expect(201);
    let v = r.json();
    assert_eq!(v["app"], json!("web"));
    assert_eq!(
        named(&v["capacity_map"], &all),
        expect_map(&[("A", 10), ("B", 13), ("C", 7), ("D", 2)])
    );
    assert_eq!(
        named(&v["deploy_map"], &all),
        expect_map(&[("A", 3), ("B", 5), ("C", 1), ("D", 2)])
    );
    // One instance per deployed unit, on the node the map names.
    let mut created = 0;
    for n in &nodes {
        let list = v["instances"][&n.uuid]
            .as_array()
            .cloned()
            .unwrap_or_default();
        for i in &list {
            assert_eq!(i["resource_provider_uuid"], json!(n.uuid));
            assert_eq!(i["cpu_map"], json!({}), "unbound");
            let c = i["consumer_uuid"].as_str().unwrap();
            let a = consumer_allocations(&t, c).await;
            assert_eq!(
                a["allocations"][&n.uuid]["resources"],
                json!({"MEMORY_MB": 256})
            );
        }
        created += list.len();
    }
    assert_eq!(created, 11);
    assert_eq!(
        app_counts(&t, "web", &all).await,
        expect_map(&[("A", 6), ("B", 6), ("C", 6), ("D", 6)])
    );
    assert_eq!(deployment(&t, "web").await["count"], json!(24));
    // D is full now: MEMORY_MB used == capacity.
    assert_eq!(
        usages(&t, &nodes[3].uuid).await["MEMORY_MB"],
        json!(6 * 256)
    );

    // Vector `seed_auto_even_need12` from the original state would put the
    // 12th on B; from here (all at 6, D full) one more goes to B (largest
    // remaining capacity: B 8 > A 7 > C 6).
    let r = deploy(
        &t,
        "web",
        1,
        256,
        json!({"strategy": "auto", "dry_run": true}),
    )
    .await
    .expect(200);
    assert_eq!(
        named(&r.json()["deploy_map"], &all),
        expect_map(&[("B", 1)])
    );
}

/// Vector `seed_auto_need_exceeds_total`: asking for more than the summed
/// capacity is a 409 naming the capacity map; nothing is written.
#[tokio::test]
async fn auto_beyond_total_capacity_is_refused() {
    let t = TestApp::new().await;
    let nodes = example_nodes(
        &t,
        "web",
        256,
        &[("A", 3, 10), ("B", 1, 13), ("C", 5, 7), ("D", 4, 2)],
    )
    .await;
    let before: Vec<Value> = {
        let mut v = Vec::new();
        for n in &nodes {
            v.push(usages(&t, &n.uuid).await);
        }
        v
    };
    let r = deploy(&t, "web", 33, 256, json!({"strategy": "auto"})).await;
    let r = r.expect(409);
    let detail = r.error()["detail"].as_str().unwrap().to_string();
    for (n, cap) in nodes.iter().zip([10, 13, 7, 2]) {
        assert!(
            detail.contains(&format!("\"{}\":{cap}", n.uuid)),
            "{}:{cap} missing from {detail}",
            n.name
        );
    }
    assert!(detail.contains("32"), "total missing: {detail}");
    for (n, b) in nodes.iter().zip(before) {
        assert_eq!(usages(&t, &n.uuid).await, b, "{} changed", n.name);
    }
    assert_eq!(deployment(&t, "web").await["count"], json!(13));
}

/// eru.md §4 example (b), vectors `seed_each_3`, `seed_each_5_no_limit`,
/// `seed_each_5_limit2`: capacities A5 B3 C7 D4.
#[tokio::test]
async fn each_deploys_n_per_node() {
    let t = TestApp::new().await;
    let nodes = example_nodes(
        &t,
        "api",
        100,
        &[("A", 0, 5), ("B", 0, 3), ("C", 0, 7), ("D", 0, 4)],
    )
    .await;
    let all = refs(&nodes);

    // N=3: every node can take 3.
    let r = deploy(
        &t,
        "api",
        3,
        100,
        json!({"strategy": "each", "dry_run": true}),
    )
    .await
    .expect(200);
    let v = r.json();
    assert_eq!(
        named(&v["capacity_map"], &all),
        expect_map(&[("A", 5), ("B", 3), ("C", 7), ("D", 4)])
    );
    assert_eq!(v["total_capacity"], json!(19));
    assert_eq!(
        named(&v["deploy_map"], &all),
        expect_map(&[("A", 3), ("B", 3), ("C", 3), ("D", 3)])
    );

    // N=5 without a limit: the code (unlike the seed doc) needs every node
    // to hold 5, so it is refused and nothing is written.
    let r = deploy(&t, "api", 5, 100, json!({"strategy": "each"})).await;
    r.expect(409);
    assert_eq!(deployment(&t, "api").await["count"], json!(0));
    for n in &nodes {
        assert_eq!(usages(&t, &n.uuid).await["MEMORY_MB"], json!(0));
    }

    // N=5 on 2 nodes: the two largest (C7, A5). "average" is an alias.
    let r = deploy(
        &t,
        "api",
        5,
        100,
        json!({"strategy": "average", "nodes_limit": 2}),
    )
    .await
    .expect(201);
    assert_eq!(
        named(&r.json()["deploy_map"], &all),
        expect_map(&[("A", 5), ("C", 5)])
    );
    assert_eq!(
        app_counts(&t, "api", &all).await,
        expect_map(&[("A", 5), ("C", 5)])
    );
    assert_eq!(usages(&t, &nodes[0].uuid).await["MEMORY_MB"], json!(500));
    assert_eq!(usages(&t, &nodes[2].uuid).await["MEMORY_MB"], json!(500));
    assert_eq!(usages(&t, &nodes[1].uuid).await["MEMORY_MB"], json!(0));
}

/// eru.md §4 example (c), vectors `seed_fill_to_10` and `seed_fill_to_5`:
/// counts A2 B3 C5 D7, capacity 10 each.
#[tokio::test]
async fn fill_tops_nodes_up() {
    let t = TestApp::new().await;
    let nodes = example_nodes(
        &t,
        "db",
        128,
        &[("A", 2, 10), ("B", 3, 10), ("C", 5, 10), ("D", 7, 10)],
    )
    .await;
    let all = refs(&nodes);

    let r = deploy(
        &t,
        "db",
        5,
        128,
        json!({"strategy": "fill", "dry_run": true}),
    )
    .await
    .expect(200);
    assert_eq!(
        named(&r.json()["deploy_map"], &all),
        expect_map(&[("A", 3), ("B", 2)])
    );

    let r = deploy(&t, "db", 10, 128, json!({"strategy": "fill"}))
        .await
        .expect(201);
    let v = r.json();
    assert_eq!(
        named(&v["deploy_map"], &all),
        expect_map(&[("A", 8), ("B", 7), ("C", 5), ("D", 3)])
    );
    let made: usize = v["instances"]
        .as_object()
        .unwrap()
        .values()
        .map(|l| l.as_array().unwrap().len())
        .sum();
    assert_eq!(made, 23);
    assert_eq!(
        app_counts(&t, "db", &all).await,
        expect_map(&[("A", 10), ("B", 10), ("C", 10), ("D", 10)])
    );
    // Everyone is at 10 now: filling to 10 again is ErrAlreadyFilled (409).
    deploy(&t, "db", 10, 128, json!({"strategy": "fill"}))
        .await
        .expect(409);
    assert_eq!(deployment(&t, "db").await["count"], json!(40));
}

/// Vectors `seed_fill_to_7_fails` and `seed_fill_to_7_limit1`: A can reach
/// 7 (count 5, capacity 3), B C D cannot (capacity 1): without a limit the
/// whole plan fails; with nodes_limit 1 only A is filled.
#[tokio::test]
async fn fill_fails_whole_unless_limited() {
    let t = TestApp::new().await;
    let nodes = example_nodes(
        &t,
        "db",
        128,
        &[("A", 5, 3), ("B", 5, 1), ("C", 5, 1), ("D", 5, 1)],
    )
    .await;
    let all = refs(&nodes);
    deploy(&t, "db", 7, 128, json!({"strategy": "fill"}))
        .await
        .expect(409);
    assert_eq!(
        app_counts(&t, "db", &all).await,
        expect_map(&[("A", 5), ("B", 5), ("C", 5), ("D", 5)])
    );
    for n in &nodes {
        assert_eq!(usages(&t, &n.uuid).await["MEMORY_MB"], json!(5 * 128));
    }
    let r = deploy(
        &t,
        "db",
        7,
        128,
        json!({"strategy": "fill", "nodes_limit": 1}),
    )
    .await
    .expect(201);
    assert_eq!(
        named(&r.json()["deploy_map"], &all),
        expect_map(&[("A", 2)])
    );
    assert_eq!(
        app_counts(&t, "db", &all).await,
        expect_map(&[("A", 7), ("B", 5), ("C", 5), ("D", 5)])
    );
}

/// Vectors `seed_fill_to_4`, `seed_fill_to_4_limit2_already_filled`,
/// `seed_fill_to_4_limit3`: A c2 cap10, B c3 cap5, C c4 cap7, D c5 cap9.
#[tokio::test]
async fn fill_to_4_with_and_without_limits() {
    let t = TestApp::new().await;
    let nodes = example_nodes(
        &t,
        "db",
        64,
        &[("A", 2, 10), ("B", 3, 5), ("C", 4, 7), ("D", 5, 9)],
    )
    .await;
    let all = refs(&nodes);
    // The two highest-count nodes are already at 4 or more: already filled.
    deploy(
        &t,
        "db",
        4,
        64,
        json!({"strategy": "fill", "nodes_limit": 2, "dry_run": true}),
    )
    .await
    .expect(409);
    let r = deploy(
        &t,
        "db",
        4,
        64,
        json!({"strategy": "fill", "nodes_limit": 3, "dry_run": true}),
    )
    .await
    .expect(200);
    assert_eq!(
        named(&r.json()["deploy_map"], &all),
        expect_map(&[("B", 1)])
    );
    let r = deploy(&t, "db", 4, 64, json!({"strategy": "fill"}))
        .await
        .expect(201);
    assert_eq!(
        named(&r.json()["deploy_map"], &all),
        expect_map(&[("A", 2), ("B", 1)])
    );
    assert_eq!(
        app_counts(&t, "db", &all).await,
        expect_map(&[("A", 4), ("B", 4), ("C", 4), ("D", 5)])
    );
}

/// eru.md §4 example (d), vectors `seed_global_need3` and `seed_global_need5`:
/// usage/rate n1 0.01/0.004, n2 0.02/0.006, n3 0.03/0.01 (unbound requests:
/// memory used / capacity and request / capacity). The code gives all 3 to
/// n1 (keys 0.014, 0.018, 0.022 < n2's 0.026), not the seed doc's n1:2 n2:1.
#[tokio::test]
async fn global_evens_out_utilisation() {
    let t = TestApp::new().await;
    // 6 MiB per instance: n1 1500 MiB with 15 used, n2 1000/20, n3 600/18.
    let mut nodes = Vec::new();
    for (name, total, used) in [("n1", 1500, 15), ("n2", 1000, 20), ("n3", 600, 18)] {
        let n = node(&t, name, total, 2).await;
        t.allocate(
            &common::uuid(),
            "other",
            "other",
            json!({ &n.uuid: {"MEMORY_MB": used} }),
        )
        .await;
        nodes.push(n);
    }
    let all = refs(&nodes);
    let r = deploy(
        &t,
        "g",
        5,
        6,
        json!({"strategy": "global", "dry_run": true}),
    )
    .await
    .expect(200);
    let v = r.json();
    assert_eq!(
        named(&v["capacity_map"], &all),
        expect_map(&[("n1", 247), ("n2", 163), ("n3", 97)])
    );
    assert_eq!(
        named(&v["deploy_map"], &all),
        expect_map(&[("n1", 4), ("n2", 1)])
    );

    let r = deploy(&t, "g", 3, 6, json!({"strategy": "global"}))
        .await
        .expect(201);
    assert_eq!(
        named(&r.json()["deploy_map"], &all),
        expect_map(&[("n1", 3)])
    );
    assert_eq!(
        usages(&t, &nodes[0].uuid).await["MEMORY_MB"],
        json!(15 + 18)
    );
    assert_eq!(usages(&t, &nodes[1].uuid).await["MEMORY_MB"], json!(20));
    // Now n1 is at 33/1500 = 0.022 (+0.004 = 0.026, a tie with n2's 0.026);
    // the next two go one to each whatever the tie-break.
    let r = deploy(
        &t,
        "g",
        2,
        6,
        json!({"strategy": "global", "dry_run": true}),
    )
    .await
    .expect(200);
    assert_eq!(
        named(&r.json()["deploy_map"], &all),
        expect_map(&[("n1", 1), ("n2", 1)])
    );
}

// ---------------------------------------------------------------------------
// CPU binding (eru.md §7)
// ---------------------------------------------------------------------------

/// A bound 1.7-CPU request gets one whole core (100 shares) plus a 70-share
/// fragment; on 4 idle cores the plans are {2:100, 0:70} then {3:100, 1:70}
/// (vector `node_4cores_bind_1_7`), and then nothing fits (30 + 30 free).
#[tokio::test]
async fn bound_1_7_cpu_is_a_whole_core_plus_a_fragment() {
    let t = TestApp::new().await;
    let n = node(&t, "cn", 8192, 4).await;
    let req = json!({"cpu": 1.7, "cpu_bind": true, "strategy": "auto"});

    let r = deploy(&t, "b", 1, 512, req.clone()).await.expect(201);
    let v = r.json();
    assert_eq!(v["capacity_map"], json!({ &n.uuid: 2 }));
    let inst = &v["instances"][&n.uuid][0];
    assert_eq!(inst["cpu_map"], json!({"2": 100, "0": 70}));
    assert_eq!(inst["numa_node"], json!(null));
    let c1 = inst["consumer_uuid"].as_str().unwrap().to_string();
    let a = consumer_allocations(&t, &c1).await;
    assert_eq!(
        a["allocations"][&n.uuid]["resources"],
        json!({"MEMORY_MB": 512, "CUSTOM_CPU_SHARES": 170})
    );
    assert_eq!(
        used_shares(&t, &n.uuid).await,
        BTreeMap::from([
            ("0".into(), 70),
            ("1".into(), 0),
            ("2".into(), 100),
            ("3".into(), 0)
        ])
    );
    let top = topology(&t, &n.uuid).await;
    assert_eq!(top["cores"][0]["free_shares"], json!(30));
    assert_eq!(top["cores"][2]["free_shares"], json!(0));

    let r = deploy(&t, "b", 1, 512, req.clone()).await.expect(201);
    let v = r.json();
    assert_eq!(v["capacity_map"], json!({ &n.uuid: 1 }));
    assert_eq!(
        v["instances"][&n.uuid][0]["cpu_map"],
        json!({"3": 100, "1": 70})
    );
    assert_eq!(
        used_shares(&t, &n.uuid).await,
        BTreeMap::from([
            ("0".into(), 70),
            ("1".into(), 70),
            ("2".into(), 100),
            ("3".into(), 100)
        ])
    );
    assert_eq!(
        usages(&t, &n.uuid).await,
        json!({"MEMORY_MB": 1024, "CUSTOM_CPU_SHARES": 340})
    );

    // No whole core left: refused, nothing written.
    deploy(&t, "b", 1, 512, req.clone()).await.expect(409);
    // But a 0.3 fragment still fits on each of the two 30-share cores.
    let r = deploy(
        &t,
        "small",
        1,
        64,
        json!({"cpu": 0.3, "cpu_bind": true, "dry_run": true}),
    )
    .await
    .expect(200);
    assert_eq!(r.json()["capacity_map"], json!({ &n.uuid: 2 }));

    // GET /deployments shows both instances with their bindings.
    let d = deployment(&t, "b").await;
    assert_eq!(d["count"], json!(2));
    let list = d["nodes"][&n.uuid]["instances"].as_array().unwrap();
    assert_eq!(list.len(), 2);
    let mine = list
        .iter()
        .find(|i| i["consumer_uuid"] == json!(c1))
        .unwrap();
    assert_eq!(mine["cpu"], json!(1.7));
    assert_eq!(mine["cpu_bind"], json!(true));
    assert_eq!(mine["memory_mb"], json!(512));
    assert_eq!(mine["cpu_map"], json!({"0": 70, "2": 100}));
}

/// eru.md §4 example (e), vector `seed_numa_2x2_600M`: 2 NUMA nodes of 2
/// cores and 1 GiB each, 1 bound core + 600 MiB per instance: one plan per
/// NUMA node plus one cross-NUMA plan, capacity 3.
#[tokio::test]
async fn numa_two_by_two_gives_three() {
    let t = TestApp::new().await;
    let rp = t.create_rp("numa").await;
    t.set_inventories(&rp, json!({"MEMORY_MB": {"total": 2048}}))
        .await;
    let r = put_topology(
        &t,
        &rp,
        json!({
            "share_base": 100, "max_fragment_cores": -1,
            "cores": [{"id": "0", "numa_node": "0"}, {"id": "1", "numa_node": "0"},
                      {"id": "2", "numa_node": "1"}, {"id": "3", "numa_node": "1"}],
            "numa_memory_mb": {"0": 1024, "1": 1024}
        }),
    )
    .await
    .expect(200);
    let v = r.json();
    assert_eq!(v["numa_memory_mb"], json!({"0": 1024, "1": 1024}));
    assert_eq!(
        inventory_total(&t, &rp, "CUSTOM_CPU_SHARES").await,
        Some(400)
    );

    let req = json!({"cpu": 1, "cpu_bind": true});
    let mut dry = req.clone();
    dry["dry_run"] = json!(true);
    let r = deploy(&t, "n", 3, 600, dry).await.expect(200);
    let v = r.json();
    assert_eq!(v["capacity_map"], json!({ &rp: 3 }));
    assert_eq!(v["total_capacity"], json!(3));

    let r = deploy(&t, "n", 3, 600, req.clone()).await.expect(201);
    let v = r.json();
    let mut got: Vec<(String, Value)> = v["instances"][&rp]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| (i["cpu_map"].to_string(), i["numa_node"].clone()))
        .collect();
    got.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        got,
        vec![
            (json!({"0": 100}).to_string(), json!("0")),
            (json!({"1": 100}).to_string(), json!(null)),
            (json!({"2": 100}).to_string(), json!("1")),
        ]
    );
    assert_eq!(
        usages(&t, &rp).await,
        json!({"MEMORY_MB": 1800, "CUSTOM_CPU_SHARES": 300})
    );
    // 248 MiB left: a fourth does not fit.
    deploy(&t, "n", 1, 600, req).await.expect(409);
    let d = deployment(&t, "n").await;
    let mut numas: Vec<String> = d["nodes"][&rp]["instances"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["numa_node"].to_string())
        .collect();
    numas.sort();
    assert_eq!(numas, vec!["\"0\"", "\"1\"", "null"]);
}

// ---------------------------------------------------------------------------
// Nothing written on dry runs and refusals
// ---------------------------------------------------------------------------

#[tokio::test]
async fn dry_run_and_refusals_write_nothing() {
    let t = TestApp::new().await;
    let n = node(&t, "cn", 4096, 4).await;
    let g0 = t.generation(&n.uuid).await;
    let req = json!({"cpu": 1.7, "cpu_bind": true, "dry_run": true});

    let r = deploy(&t, "d", 2, 1024, req).await.expect(200);
    let v = r.json();
    assert_eq!(v["capacity_map"], json!({ &n.uuid: 2 }));
    assert_eq!(v["total_capacity"], json!(2));
    assert_eq!(v["deploy_map"], json!({ &n.uuid: 2 }));
    let plans = v["plans"][&n.uuid].as_array().unwrap();
    assert_eq!(plans.len(), 2);
    assert_eq!(plans[0]["cpu_map"], json!({"2": 100, "0": 70}));
    assert_eq!(plans[1]["cpu_map"], json!({"3": 100, "1": 70}));
    // The planned consumers do not exist.
    for p in plans {
        let a = consumer_allocations(&t, p["consumer_uuid"].as_str().unwrap()).await;
        assert_eq!(a["allocations"], json!({}), "{a}");
    }
    assert_eq!(
        usages(&t, &n.uuid).await,
        json!({"MEMORY_MB": 0, "CUSTOM_CPU_SHARES": 0})
    );
    assert!(used_shares(&t, &n.uuid).await.values().all(|s| *s == 0));
    assert_eq!(deployment(&t, "d").await["count"], json!(0));
    assert_eq!(t.generation(&n.uuid).await, g0);

    // Three do not fit (capacity 2): 409 with the capacity map, no change.
    let r = deploy(&t, "d", 3, 1024, json!({"cpu": 1.7, "cpu_bind": true})).await;
    let r = r.expect(409);
    let detail = r.error()["detail"].as_str().unwrap().to_string();
    assert!(
        detail.contains(&format!("\"{}\":2", n.uuid)),
        "no capacity map in {detail}"
    );
    assert_eq!(
        usages(&t, &n.uuid).await,
        json!({"MEMORY_MB": 0, "CUSTOM_CPU_SHARES": 0})
    );
    assert!(used_shares(&t, &n.uuid).await.values().all(|s| *s == 0));
    assert_eq!(deployment(&t, "d").await["count"], json!(0));
    assert_eq!(t.generation(&n.uuid).await, g0);

    // Memory-bound: 5 x 1024 MiB on 4096 MiB.
    deploy(&t, "d", 5, 1024, json!({"cpu": 0.1}))
        .await
        .expect(409);
    assert_eq!(usages(&t, &n.uuid).await["MEMORY_MB"], json!(0));

    // No node passes the filters (unknown aggregate): 409, nothing written.
    deploy(&t, "d", 1, 64, json!({"member_of": common::uuid()}))
        .await
        .expect(409);
    assert_eq!(deployment(&t, "d").await["count"], json!(0));
}

/// Extra resources are allocated with each instance; when they run out the
/// deploy is refused as a whole (never overcommitted, never a 500).
#[tokio::test]
async fn extra_resources_are_allocated_and_never_overcommitted() {
    let t = TestApp::new().await;
    let n = node(&t, "cn", 4096, 4).await;
    t.set_inventories(
        &n.uuid,
        json!({"MEMORY_MB": {"total": 4096}, "CUSTOM_CPU_SHARES": {"total": 400},
               "DISK_GB": {"total": 10}}),
    )
    .await;
    let r = deploy(&t, "x", 1, 256, json!({"resources": {"DISK_GB": 6}}))
        .await
        .expect(201);
    let c = r.json()["instances"][&n.uuid][0]["consumer_uuid"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(
        consumer_allocations(&t, &c).await["allocations"][&n.uuid]["resources"],
        json!({"MEMORY_MB": 256, "DISK_GB": 6})
    );
    // 4 GiB left is not enough DISK_GB for a second 6 GB instance.
    let r = deploy(&t, "x", 1, 256, json!({"resources": {"DISK_GB": 6}})).await;
    r.expect(409);
    // Two of 4 GB each pass the one-instance filter but not together.
    let r = deploy(&t, "x", 2, 256, json!({"resources": {"DISK_GB": 3}})).await;
    assert!(
        r.status == 409,
        "2 x 3 GB on 4 GB free must be refused: {r:?}"
    );
    assert_eq!(
        usages(&t, &n.uuid).await,
        json!({"MEMORY_MB": 256, "CUSTOM_CPU_SHARES": 0, "DISK_GB": 6})
    );
    assert_eq!(deployment(&t, "x").await["count"], json!(1));
}

#[tokio::test]
async fn invalid_deploy_requests_are_400() {
    let t = TestApp::new().await;
    node(&t, "cn", 4096, 4).await;
    for extra in [
        json!({"strategy": "bogus"}),
        json!({"count": 0}),
        json!({"cpu": -1}),
        json!({"cpu": 0, "cpu_bind": true}),
        json!({"unknown": 1}),
    ] {
        let r = deploy(&t, "v", 1, 64, extra.clone()).await;
        assert_eq!(r.status, 400, "{extra}: {r:?}");
    }
    assert_eq!(deployment(&t, "v").await["count"], json!(0));
}

// ---------------------------------------------------------------------------
// Resize
// ---------------------------------------------------------------------------

async fn resize(t: &TestApp, app: &str, consumer: &str, body: Value) -> Resp {
    t.post(
        &format!("/deployments/{app}/instances/{consumer}/resize"),
        MV,
        body,
    )
    .await
}

/// Up by 0.5 CPU and 256 MiB keeps the binding's cores (with eru.md §7.9's
/// role swap: the old whole core becomes the fragment core), down again
/// returns to one whole core; a resize that does not fit is a 409 that
/// leaves binding, allocations and consumer generation as they were.
#[tokio::test]
async fn resize_up_down_and_refused() {
    let t = TestApp::new().await;
    let n = node(&t, "cn", 2048, 4).await;
    let r = deploy(&t, "r", 1, 512, json!({"cpu": 1, "cpu_bind": true}))
        .await
        .expect(201);
    let inst = r.json()["instances"][&n.uuid][0].clone();
    assert_eq!(inst["cpu_map"], json!({"0": 100}));
    let c = inst["consumer_uuid"].as_str().unwrap().to_string();
    let gen1 = consumer_allocations(&t, &c).await["consumer_generation"].clone();

    // Up.
    let r = resize(&t, "r", &c, json!({"cpu": 0.5, "memory_mb": 256}))
        .await
        .expect(200);
    let v = r.json();
    assert_eq!(v["consumer_uuid"], json!(c));
    assert_eq!(v["resource_provider_uuid"], json!(n.uuid));
    assert_eq!(v["cpu"], json!(1.5));
    assert_eq!(v["cpu_bind"], json!(true));
    assert_eq!(v["memory_mb"], json!(768));
    assert_eq!(v["cpu_map"], json!({"1": 100, "0": 50}));
    let a = consumer_allocations(&t, &c).await;
    assert_eq!(
        a["allocations"][&n.uuid]["resources"],
        json!({"MEMORY_MB": 768, "CUSTOM_CPU_SHARES": 150})
    );
    assert_ne!(a["consumer_generation"], gen1);
    assert_eq!(
        used_shares(&t, &n.uuid).await,
        BTreeMap::from([
            ("0".into(), 50),
            ("1".into(), 100),
            ("2".into(), 0),
            ("3".into(), 0)
        ])
    );
    let d = deployment(&t, "r").await;
    let shown = &d["nodes"][&n.uuid]["instances"][0];
    assert_eq!(shown["cpu"], json!(1.5));
    assert_eq!(shown["memory_mb"], json!(768));
    assert_eq!(shown["cpu_map"], json!({"0": 50, "1": 100}));

    // Down: back to one whole core, the one that was whole before.
    let r = resize(&t, "r", &c, json!({"cpu": -0.5, "memory_mb": -256}))
        .await
        .expect(200);
    let v = r.json();
    assert_eq!(v["cpu"], json!(1.0));
    assert_eq!(v["memory_mb"], json!(512));
    assert_eq!(v["cpu_map"], json!({"1": 100}));
    assert_eq!(
        usages(&t, &n.uuid).await,
        json!({"MEMORY_MB": 512, "CUSTOM_CPU_SHARES": 100})
    );
    assert_eq!(
        used_shares(&t, &n.uuid).await,
        BTreeMap::from([
            ("0".into(), 0),
            ("1".into(), 100),
            ("2".into(), 0),
            ("3".into(), 0)
        ])
    );

    // Another instance takes cores 2 and 3 (and 512 MiB): only core 0 and
    // 1024 MiB are free besides the instance's own core 1 and 512 MiB.
    deploy(&t, "other", 1, 512, json!({"cpu": 2, "cpu_bind": true}))
        .await
        .expect(201);
    let before_alloc = consumer_allocations(&t, &c).await;
    let before_shares = used_shares(&t, &n.uuid).await;
    let before_usage = usages(&t, &n.uuid).await;
    let before_app = deployment(&t, "r").await;
    for body in [
        json!({"cpu": 2}),          // 3 whole cores, only 2 free
        json!({"cpu": 4}),          // more cores than the node has
        json!({"memory_mb": 1025}), // 1024 MiB free
        json!({"cpu": 0.5, "memory_mb": 4096}),
    ] {
        let r = resize(&t, "r", &c, body.clone()).await;
        assert_eq!(r.status, 409, "{body}: {r:?}");
        assert_eq!(consumer_allocations(&t, &c).await, before_alloc, "{body}");
        assert_eq!(used_shares(&t, &n.uuid).await, before_shares, "{body}");
        assert_eq!(usages(&t, &n.uuid).await, before_usage, "{body}");
        assert_eq!(deployment(&t, "r").await, before_app, "{body}");
    }
    // Below zero is invalid, also no change.
    let r = resize(&t, "r", &c, json!({"cpu": -2})).await;
    assert!(r.status == 400 || r.status == 409, "{r:?}");
    assert_eq!(consumer_allocations(&t, &c).await, before_alloc);

    // Its own core plus the last free one, and exactly the free memory: fits.
    let r = resize(&t, "r", &c, json!({"cpu": 1, "memory_mb": 1024}))
        .await
        .expect(200);
    let v = r.json();
    assert_eq!(v["cpu"], json!(2.0));
    assert_eq!(v["memory_mb"], json!(1536));
    assert_eq!(v["cpu_map"].as_object().unwrap().len(), 2);
    assert_eq!(v["cpu_map"]["1"], json!(100));
    assert_eq!(
        usages(&t, &n.uuid).await,
        json!({"MEMORY_MB": 2048, "CUSTOM_CPU_SHARES": 400})
    );
    assert!(used_shares(&t, &n.uuid).await.values().all(|s| *s == 100));

    // Unbinding drops the shares allocation and frees the cores.
    let r = resize(&t, "r", &c, json!({"cpu_bind": false}))
        .await
        .expect(200);
    let v = r.json();
    assert_eq!(v["cpu_bind"], json!(false));
    assert_eq!(v["cpu_map"], json!({}));
    assert_eq!(
        consumer_allocations(&t, &c).await["allocations"][&n.uuid]["resources"],
        json!({"MEMORY_MB": 1536})
    );
    assert_eq!(
        usages(&t, &n.uuid).await,
        json!({"MEMORY_MB": 2048, "CUSTOM_CPU_SHARES": 200})
    );

    // Unknown instance / wrong app: 404.
    resize(&t, "r", &common::uuid(), json!({"cpu": 0.1}))
        .await
        .expect(404);
    resize(&t, "nope", &c, json!({"cpu": 0.1}))
        .await
        .expect(404);
}

// ---------------------------------------------------------------------------
// Freeing cores; topology changes under bindings
// ---------------------------------------------------------------------------

#[tokio::test]
async fn deleting_allocations_frees_cores() {
    let t = TestApp::new().await;
    let n = node(&t, "cn", 4096, 4).await;
    let r = deploy(&t, "f", 2, 512, json!({"cpu": 1.7, "cpu_bind": true}))
        .await
        .expect(201);
    let consumers: Vec<String> = r.json()["instances"][&n.uuid]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["consumer_uuid"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(consumers.len(), 2);
    assert_eq!(used_shares(&t, &n.uuid).await.values().sum::<i64>(), 340);
    // The node is full for 1.7 now.
    deploy(
        &t,
        "f",
        1,
        512,
        json!({"cpu": 1.7, "cpu_bind": true, "dry_run": true}),
    )
    .await
    .expect(409);

    t.delete(&format!("/allocations/{}", consumers[0]), "1.28")
        .await
        .expect(204);
    assert_eq!(
        used_shares(&t, &n.uuid).await,
        BTreeMap::from([
            ("0".into(), 0),
            ("1".into(), 70),
            ("2".into(), 0),
            ("3".into(), 100)
        ])
    );
    let d = deployment(&t, "f").await;
    assert_eq!(d["count"], json!(1));
    assert_eq!(
        d["nodes"][&n.uuid]["instances"][0]["consumer_uuid"],
        json!(consumers[1])
    );
    assert_eq!(
        usages(&t, &n.uuid).await,
        json!({"MEMORY_MB": 512, "CUSTOM_CPU_SHARES": 170})
    );
    // The freed cores are schedulable again.
    let r = deploy(&t, "f", 1, 512, json!({"cpu": 1.7, "cpu_bind": true}))
        .await
        .expect(201);
    assert_eq!(
        r.json()["instances"][&n.uuid][0]["cpu_map"]
            .as_object()
            .unwrap()
            .values()
            .map(|v| v.as_i64().unwrap())
            .sum::<i64>(),
        170
    );

    for c in &consumers[1..] {
        t.delete(&format!("/allocations/{c}"), "1.28")
            .await
            .expect(204);
    }
    let d = deployment(&t, "f").await;
    assert_eq!(d["count"], json!(1));
    let last = d["nodes"][&n.uuid]["instances"][0]["consumer_uuid"]
        .as_str()
        .unwrap()
        .to_string();
    t.delete(&format!("/allocations/{last}"), "1.28")
        .await
        .expect(204);
    assert!(used_shares(&t, &n.uuid).await.values().all(|s| *s == 0));
    assert_eq!(deployment(&t, "f").await["count"], json!(0));
    assert_eq!(
        usages(&t, &n.uuid).await,
        json!({"MEMORY_MB": 0, "CUSTOM_CPU_SHARES": 0})
    );
}

#[tokio::test]
async fn topology_shrink_refused_while_bound_unless_forced() {
    let t = TestApp::new().await;
    let n = node(&t, "cn", 4096, 4).await;
    let r = deploy(&t, "s", 2, 256, json!({"cpu": 1, "cpu_bind": true}))
        .await
        .expect(201);
    let mut bound: Vec<String> = r.json()["instances"][&n.uuid]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|i| {
            i["cpu_map"]
                .as_object()
                .unwrap()
                .keys()
                .cloned()
                .collect::<Vec<_>>()
        })
        .collect();
    bound.sort();
    assert_eq!(bound, vec!["0", "1"]);
    let cores = |ids: &[&str]| -> Value {
        ids.iter()
            .map(|i| json!({"id": i, "numa_node": null}))
            .collect()
    };
    let before = topology(&t, &n.uuid).await;

    // Dropping the bound cores: 409 naming them, nothing changes.
    let r = put_topology(
        &t,
        &n.uuid,
        json!({"share_base": 100, "cores": cores(&["2", "3"])}),
    )
    .await;
    let r = r.expect(409);
    let detail = r.error()["detail"].as_str().unwrap().to_string();
    assert!(detail.contains("0, 1"), "{detail}");
    assert_eq!(topology(&t, &n.uuid).await, before);
    assert_eq!(
        inventory_total(&t, &n.uuid, "CUSTOM_CPU_SHARES").await,
        Some(400)
    );

    // Changing the share base under bindings: 409.
    put_topology(
        &t,
        &n.uuid,
        json!({"share_base": 1000, "cores": cores(&["0", "1", "2", "3"])}),
    )
    .await
    .expect(409);
    assert_eq!(topology(&t, &n.uuid).await, before);

    // Dropping an unbound core is fine.
    let r = put_topology(
        &t,
        &n.uuid,
        json!({"share_base": 100, "cores": cores(&["0", "1", "2"])}),
    )
    .await
    .expect(200);
    assert_eq!(r.json()["cores"].as_array().unwrap().len(), 3);
    assert_eq!(
        inventory_total(&t, &n.uuid, "CUSTOM_CPU_SHARES").await,
        Some(300)
    );

    // Forced: the bound cores go.
    let r = put_topology(
        &t,
        &n.uuid,
        json!({"share_base": 100, "cores": cores(&["1", "2"]), "force": true}),
    )
    .await
    .expect(200);
    let v = r.json();
    let ids: Vec<&str> = v["cores"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, vec!["1", "2"]);
    assert_eq!(
        inventory_total(&t, &n.uuid, "CUSTOM_CPU_SHARES").await,
        Some(200)
    );
    let top = topology(&t, &n.uuid).await;
    assert_eq!(top["cores"].as_array().unwrap().len(), 2);
    assert_eq!(top["cores"][0]["used_shares"], json!(100));
    assert_eq!(top["cores"][1]["used_shares"], json!(0));
}

#[tokio::test]
async fn topology_put_and_get_round_trip() {
    let t = TestApp::new().await;
    let rp = t.create_rp("cn").await;
    let g0 = t.generation(&rp).await;
    let r = put_topology(
        &t,
        &rp,
        json!({"share_base": 1000, "max_fragment_cores": 2,
               "cores": [{"id": "0", "numa_node": "0"}, {"id": "10", "numa_node": "1"}, {"id": "2", "numa_node": "0"}],
               "numa_memory_mb": {"0": 512, "1": 256}}),
    )
    .await
    .expect(200);
    let v = r.json();
    assert_eq!(v["share_base"], json!(1000));
    assert_eq!(v["max_fragment_cores"], json!(2));
    assert_eq!(v["numa_memory_mb"], json!({"0": 512, "1": 256}));
    assert_eq!(v["cores"].as_array().unwrap().len(), 3);
    for c in v["cores"].as_array().unwrap() {
        assert_eq!(c["used_shares"], json!(0));
        assert_eq!(c["free_shares"], json!(1000));
    }
    assert!(v["resource_provider_generation"].as_i64().unwrap() > g0);
    assert_eq!(topology(&t, &rp).await, v);
    assert_eq!(
        inventory_total(&t, &rp, "CUSTOM_CPU_SHARES").await,
        Some(3000)
    );
    // Duplicate core id: 400. Unknown provider: 404. No topology: 404.
    put_topology(&t, &rp, json!({"cores": [{"id": "0"}, {"id": "0"}]}))
        .await
        .expect(400);
    put_topology(&t, &common::uuid(), json!({"cores": [{"id": "0"}]}))
        .await
        .expect(404);
    let other = t.create_rp("bare").await;
    t.get(&format!("/resource_providers/{other}/cpu_topology"), MV)
        .await
        .expect(404);
}

/// Emptying an instance's allocations with PUT (1.28) or POST /allocations
/// deletes the consumer and frees its cores, like DELETE.
#[tokio::test]
async fn emptying_allocations_by_put_or_post_frees_cores() {
    let t = TestApp::new().await;
    let n = node(&t, "cn", 4096, 4).await;
    let r = deploy(&t, "f", 2, 512, json!({"cpu": 1.7, "cpu_bind": true}))
        .await
        .expect(201);
    let cs: Vec<String> = r.json()["instances"][&n.uuid]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["consumer_uuid"].as_str().unwrap().to_string())
        .collect();
    let g = consumer_allocations(&t, &cs[0]).await["consumer_generation"].clone();
    t.put(
        &format!("/allocations/{}", cs[0]),
        "1.28",
        json!({"allocations": {}, "project_id": "p", "user_id": "u", "consumer_generation": g}),
    )
    .await
    .expect(204);
    assert_eq!(
        used_shares(&t, &n.uuid).await,
        BTreeMap::from([
            ("0".into(), 0),
            ("1".into(), 70),
            ("2".into(), 0),
            ("3".into(), 100)
        ])
    );
    assert_eq!(deployment(&t, "f").await["count"], json!(1));
    let g = consumer_allocations(&t, &cs[1]).await["consumer_generation"].clone();
    t.post(
        "/allocations",
        "1.28",
        json!({ &cs[1]: {"allocations": {}, "project_id": "p", "user_id": "u", "consumer_generation": g}}),
    )
    .await
    .expect(204);
    assert!(used_shares(&t, &n.uuid).await.values().all(|s| *s == 0));
    assert_eq!(deployment(&t, "f").await["count"], json!(0));
    assert_eq!(
        usages(&t, &n.uuid).await,
        json!({"MEMORY_MB": 0, "CUSTOM_CPU_SHARES": 0})
    );
}

/// Rewriting a bound instance's allocations through the plain Placement API
/// must not let Placement's CUSTOM_CPU_SHARES usage and the core bindings
/// drift apart (either the write is refused or both change together).
#[tokio::test]
async fn placement_writes_keep_shares_and_bindings_in_step() {
    let t = TestApp::new().await;
    let n = node(&t, "cn", 4096, 4).await;
    let r = deploy(&t, "f", 1, 512, json!({"cpu": 1.7, "cpu_bind": true}))
        .await
        .expect(201);
    let c = r.json()["instances"][&n.uuid][0]["consumer_uuid"]
        .as_str()
        .unwrap()
        .to_string();
    let g = consumer_allocations(&t, &c).await["consumer_generation"].clone();
    let r = t
        .put(
            &format!("/allocations/{c}"),
            "1.28",
            json!({"allocations": {&n.uuid: {"resources": {"MEMORY_MB": 512}}},
                   "project_id": "p", "user_id": "u", "consumer_generation": g}),
        )
        .await;
    assert!(r.status == 204 || r.status == 409, "{r:?}");
    let bound: i64 = used_shares(&t, &n.uuid).await.values().sum();
    assert_eq!(
        usages(&t, &n.uuid).await["CUSTOM_CPU_SHARES"],
        json!(bound),
        "Placement usage differs from the bound shares"
    );
    // And the bound cores cannot be sold twice through Placement.
    let r = t
        .try_allocate(
            &common::uuid(),
            "p",
            "u",
            json!({ &n.uuid: {"CUSTOM_CPU_SHARES": 400} }),
        )
        .await;
    assert_eq!(r.status, 409, "{r:?}");
}
