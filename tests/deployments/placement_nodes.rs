//! Nodes registered the Placement way (VCPU and MEMORY_MB inventory, no
//! CPU topology) take non-bound instances, whole VCPUs each; bound
//! requests are refused with every node's reason and a stable code; dry
//! runs show the same per-node verdicts.

use super::*;

/// A Nova-style compute node: VCPU and MEMORY_MB, no topology.
async fn nova_node(t: &TestApp, name: &str, vcpus: i64, memory_mb: i64) -> String {
    let rp = t.create_rp(name).await;
    t.set_inventories(
        &rp,
        json!({"VCPU": {"total": vcpus, "allocation_ratio": 1.0},
               "MEMORY_MB": {"total": memory_mb, "allocation_ratio": 1.0}}),
    )
    .await;
    rp
}

#[tokio::test]
async fn a_placement_node_takes_non_bound_instances_in_whole_vcpus() {
    let t = TestApp::new().await;
    let rp = nova_node(&t, "nova-1", 8, 8192).await;
    // 1.5 CPUs take 2 VCPUs each: 8 VCPUs hold 4, memory would hold 16.
    let v = deploy(&t, "web", 1, 512, json!({"cpu": 1.5, "dry_run": true}))
        .await
        .expect(200)
        .json();
    assert_eq!(v["capacity_map"], json!({&rp: 4}));
    assert_eq!(v["nodes"], json!([{"node": rp, "capacity": 4}]));
    let r = deploy(&t, "web", 3, 512, json!({"cpu": 1.5}))
        .await
        .expect(201);
    assert_eq!(r.json()["deploy_map"], json!({&rp: 3}));
    assert_eq!(usages(&t, &rp).await, json!({"VCPU": 6, "MEMORY_MB": 1536}));
    let one = r.json()["instances"][&rp][0]["consumer_uuid"]
        .as_str()
        .expect("consumer")
        .to_string();
    assert_eq!(
        consumer_allocations(&t, &one).await["allocations"][&rp]["resources"],
        json!({"VCPU": 2, "MEMORY_MB": 512})
    );
    // Two more do not fit (2 VCPUs left): refused with the node's numbers.
    let e = deploy(&t, "web", 2, 512, json!({"cpu": 1.5})).await;
    let e = e.expect_error(
        409,
        Some("placement.deploy.insufficient_resource"),
        "Capacity map",
    );
    assert_eq!(e.error()["nodes"], json!([{"node": rp, "capacity": 1}]));
    // Resize on such a node moves its VCPUs; deleting frees them.
    let path = format!("/deployments/web/instances/{one}/resize");
    t.post(&path, MV, json!({"cpu": 0.5, "memory_mb": 512}))
        .await
        .expect(200);
    assert_eq!(
        consumer_allocations(&t, &one).await["allocations"][&rp]["resources"],
        json!({"VCPU": 2, "MEMORY_MB": 1024})
    );
    t.post(&path, MV, json!({"cpu": 3.0})).await.expect_error(
        409,
        Some("placement.deploy.insufficient_resource"),
        "VCPU",
    );
    t.post(&path, MV, json!({"cpu_bind": true}))
        .await
        .expect_error(409, Some("placement.deploy.no_topology"), "topology");
    t.delete(&format!("/allocations/{one}"), "1.28")
        .await
        .expect(204);
    assert_eq!(usages(&t, &rp).await, json!({"VCPU": 4, "MEMORY_MB": 1024}));
    assert_eq!(deployment(&t, "web").await["count"], json!(2));
}

#[tokio::test]
async fn a_bound_request_is_refused_with_every_nodes_reason() {
    let t = TestApp::new().await;
    let nova = nova_node(&t, "nova-1", 8, 8192).await;
    let small = node(&t, "small", 256, 2).await;
    let busy = node(&t, "busy", 8192, 2).await;
    deploy(
        &t,
        "hog",
        1,
        64,
        json!({"cpu": 2.0, "cpu_bind": true, "member_of": busy.agg}),
    )
    .await
    .expect(201);
    let e = deploy(&t, "db", 1, 512, json!({"cpu": 1.5, "cpu_bind": true})).await;
    let e = e.expect_error(
        409,
        Some("placement.deploy.insufficient_resource"),
        "Nodes without room",
    );
    let nodes = e.error()["nodes"].as_array().expect("nodes").clone();
    let of = |rp: &str| {
        nodes
            .iter()
            .find(|n| n["node"] == rp)
            .cloned()
            .unwrap_or_else(|| panic!("no verdict for {rp}: {nodes:?}"))
    };
    assert_eq!(of(&nova)["reason"], "no_topology");
    assert_eq!(of(&busy.uuid)["reason"], "cpu_shares");
    assert_eq!(of(&busy.uuid)["detail"]["free_shares"], 0);
    assert_eq!(of(&busy.uuid)["detail"]["needed_shares"], 150);
    // The small node's 256 MB are ruled out by the candidate engine.
    assert_eq!(of(&small.uuid)["reason"], "capacity");
    assert_eq!(of(&small.uuid)["detail"]["resource_class"], "MEMORY_MB");
    // Only Placement nodes: the code says what is missing.
    let agg = common::uuid();
    t.set_aggregates(&nova, &[&agg]).await;
    let e = deploy(
        &t,
        "db",
        1,
        512,
        json!({"cpu": 1.0, "cpu_bind": true, "member_of": agg}),
    )
    .await;
    // (The nodes outside the aggregate are listed with the engine's reason.)
    let e = e.expect_error(
        409,
        Some("placement.deploy.no_topology"),
        "2 member_of, 1 no_topology",
    );
    assert_eq!(e.error()["nodes"][0]["node"], json!(nova));
    // A dry run that cannot place shows the same verdicts.
    let dry = deploy(
        &t,
        "db",
        1,
        512,
        json!({"cpu": 1.5, "cpu_bind": true, "dry_run": true}),
    )
    .await;
    assert_eq!(dry.expect(409).error()["nodes"].as_array(), Some(&nodes));
    assert_eq!(deployment(&t, "db").await["count"], json!(0));
}

/// A node deleted after deployments have ranked it is no longer offered:
/// the next deployments land on the others, and a deployment too large
/// for those is refused with their capacity alone.
#[tokio::test]
async fn a_deleted_node_leaves_the_rankings() {
    let t = TestApp::new().await;
    let big = nova_node(&t, "nova-big", 16, 16384).await;
    let small = nova_node(&t, "nova-small", 4, 4096).await;
    // Ranked with both; the first instance goes where the room is.
    let r = deploy(&t, "web", 1, 512, json!({"cpu": 1.0}))
        .await
        .expect(201);
    assert_eq!(r.json()["deploy_map"], json!({&big: 1}));
    let one = r.json()["instances"][&big][0]["consumer_uuid"]
        .as_str()
        .expect("consumer")
        .to_string();
    t.delete(&format!("/allocations/{one}"), "1.28")
        .await
        .expect(204);
    t.delete(&format!("/resource_providers/{big}"), "1.28")
        .await
        .expect(204);
    let r = deploy(&t, "web", 1, 512, json!({"cpu": 1.0}))
        .await
        .expect(201);
    assert_eq!(r.json()["deploy_map"], json!({&small: 1}));
    let e = deploy(&t, "web", 4, 512, json!({"cpu": 1.0})).await;
    let e = e.expect_error(
        409,
        Some("placement.deploy.insufficient_resource"),
        "Capacity map",
    );
    assert_eq!(e.error()["nodes"], json!([{"node": small, "capacity": 3}]));
}
