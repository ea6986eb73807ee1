//! Freeing cores by deleting allocations; topology changes under bindings.

use super::*;

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
        t.get("/deployments", MV).await.expect(200).json(),
        json!({"deployments": [{"app": "f", "count": 1, "nodes": 1}]})
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
        t.get("/deployments", MV).await.expect(200).json(),
        json!({"deployments": []}),
        "an app without instances is not listed"
    );
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
