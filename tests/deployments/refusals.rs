//! Dry runs and refusals write nothing; extra resources never overcommit.

use super::*;

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
        json!({"count": -3}),
        json!({"nodes_limit": 2}),
        json!({"cpu": 4097}),
        json!({"cpu": 1e300}),
        // Over the size of every node (4 cores), bound or not.
        json!({"cpu": 4.5, "cpu_bind": true}),
        json!({"cpu": 5}),
        json!({"cpu": 5, "dry_run": true}),
        json!({"required": "CUSTOM_X,"}),
        json!({"member_of": "in:not-a-uuid"}),
        json!({"resources": {"DISK_GB": 0}}),
    ] {
        let r = deploy(&t, "v", 1, 64, extra.clone()).await;
        assert_eq!(r.status, 400, "{extra}: {r:?}");
        assert!(r.error()["detail"].is_string(), "Placement's error body");
    }
    let r = deploy(&t, "v", 1, 64, json!({"cpu": 5})).await;
    r.expect_error(
        400,
        Some("placement.deploy.invalid_request"),
        "the largest has 4 CPUs",
    );
    // The whole node is a valid size; while it is busy, a 409 says why.
    deploy(&t, "v", 1, 64, json!({"cpu": 4, "cpu_bind": true}))
        .await
        .expect(201);
    deploy(&t, "w", 1, 64, json!({"cpu": 4, "cpu_bind": true}))
        .await
        .expect(409);
    assert_eq!(deployment(&t, "v").await["count"], json!(1));
}

/// A project's quota limit holds for deployments too: the deploy that
/// would cross it is refused as a whole with placement.quota.exceeded.
#[tokio::test]
async fn a_quota_limit_refuses_a_deployment_with_nothing_written() {
    let t = TestApp::new().await;
    let n = node(&t, "cn", 4096, 4).await;
    t.put(
        "/projects/p/quota",
        MV,
        json!({"limits": {"MEMORY_MB": 2048}}),
    )
    .await
    .expect(200);
    deploy(&t, "d", 2, 1024, json!({"cpu": 0.5}))
        .await
        .expect(201);
    let g = t.generation(&n.uuid).await;
    deploy(&t, "d", 1, 1024, json!({"cpu": 0.5}))
        .await
        .expect_error(
            409,
            Some("placement.quota.exceeded"),
            "over its limit of 2048",
        );
    assert_eq!(usages(&t, &n.uuid).await["MEMORY_MB"], json!(2048));
    assert_eq!(deployment(&t, "d").await["count"], json!(2));
    assert_eq!(t.generation(&n.uuid).await, g);
}
