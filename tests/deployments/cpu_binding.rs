//! CPU binding (eru.md §7): whole cores plus a fragment, NUMA.

use super::*;

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

/// Eru's remap: non-bound instances share the cores no bound instance
/// holds, and the pool follows bound instances as they come and go.
#[tokio::test]
async fn non_bound_instances_share_the_cores_bound_ones_leave() {
    let t = TestApp::new().await;
    let n = node(&t, "cn", 8192, 4).await;
    let pool = |v: Value| v["shared_pool"].clone();
    let plain = deploy(&t, "plain", 2, 256, json!({"cpu": 1.0}))
        .await
        .expect(201);
    let mut plain_ids: Vec<String> = plain.json()["instances"][&n.uuid]
        .as_array()
        .expect("instances")
        .iter()
        .map(|i| i["consumer_uuid"].as_str().expect("uuid").to_string())
        .collect();
    plain_ids.sort();
    assert_eq!(
        pool(topology(&t, &n.uuid).await),
        json!({"cores": ["0", "1", "2", "3"], "instances": plain_ids})
    );
    // One 1.7-CPU bound instance: a whole core and a fragment of another.
    let bound = deploy(&t, "bound", 1, 256, json!({"cpu": 1.7, "cpu_bind": true}))
        .await
        .expect(201);
    let held = bound.json()["instances"][&n.uuid][0].clone();
    let touched: Vec<String> = held["cpu_map"]
        .as_object()
        .expect("cpu map")
        .keys()
        .cloned()
        .collect();
    let left: Vec<String> = ["0", "1", "2", "3"]
        .iter()
        .map(|c| c.to_string())
        .filter(|c| !touched.contains(c))
        .collect();
    assert_eq!(pool(topology(&t, &n.uuid).await)["cores"], json!(left));
    // The bound instance goes: the pool is every core again.
    let consumer = held["consumer_uuid"].as_str().expect("uuid");
    t.delete(&format!("/allocations/{consumer}"), "1.28")
        .await
        .expect(204);
    assert_eq!(
        pool(topology(&t, &n.uuid).await)["cores"],
        json!(["0", "1", "2", "3"])
    );
}

/// A replaced topology is what the next deployment plans on, though the
/// process held the node's state (the new version makes it re-read).
#[tokio::test]
async fn a_replaced_topology_is_planned_on_at_once() {
    let t = TestApp::new().await;
    let n = node(&t, "cn", 8192, 4).await;
    let one = json!({"cpu": 1.0, "cpu_bind": true});
    deploy(&t, "d", 1, 64, one.clone()).await.expect(201);
    let cores: Vec<Value> = (0..8).map(|i| json!({"id": i.to_string()})).collect();
    put_topology(&t, &n.uuid, json!({"share_base": 100, "cores": cores}))
        .await
        .expect(200);
    let mut dry = one;
    dry["dry_run"] = json!(true);
    let v = deploy(&t, "d", 1, 64, dry).await.expect(200).json();
    assert_eq!(v["capacity_map"], json!({&n.uuid: 7}), "{v}");
}
