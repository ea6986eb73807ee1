//! Live resize: up, down, and refused.

use super::*;

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
