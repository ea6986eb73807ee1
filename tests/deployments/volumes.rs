//! Eru's volumes through the API: a node's disks declared with
//! `PUT .../volumes`, deployments asking for `AUTO:/data:rw:100`-style
//! bindings, capacity and plans from the volume scheduler, bindings written
//! with the instance and freed with it; bad specs are 400s.

use super::*;

async fn set_volumes(t: &TestApp, rp: &str, body: Value) -> Resp {
    t.put(&format!("/resource_providers/{rp}/volumes"), MV, body)
        .await
}

async fn volumes(t: &TestApp, rp: &str) -> Value {
    t.get(&format!("/resource_providers/{rp}/volumes"), MV)
        .await
        .expect(200)
        .json()["volumes"]
        .clone()
}

fn with_data(count_extra: Value) -> Value {
    let mut body = json!({"cpu": 0.1, "volumes": ["AUTO:/data:rw:100"]});
    if let (Some(b), Some(extra)) = (body.as_object_mut(), count_extra.as_object()) {
        b.extend(extra.clone());
    }
    body
}

#[tokio::test]
async fn the_seed_example_gives_twelve_and_bindings_come_and_go() {
    let t = TestApp::new().await;
    let n = node(&t, "cn", 65536, 4).await;
    set_volumes(
        &t,
        &n.uuid,
        json!({"volumes": {"/sda0": 1000, "/sda1": 200}}),
    )
    .await
    .expect(200);
    let v = deploy(&t, "v", 1, 16, with_data(json!({"dry_run": true})))
        .await
        .expect(200)
        .json();
    assert_eq!(v["capacity_map"], json!({&n.uuid: 12}), "{v}");
    let r = deploy(&t, "v", 12, 16, with_data(json!({})))
        .await
        .expect(201);
    let made = r.json()["instances"][&n.uuid]
        .as_array()
        .expect("instances")
        .clone();
    assert_eq!(made.len(), 12);
    let on = |disk: &str| {
        made.iter()
            .filter(|i| i["volume_plan"]["AUTO:/data:rw:100"][disk] == json!(100))
            .count()
    };
    assert_eq!((on("/sda0"), on("/sda1")), (10, 2));
    // GET /deployments/{app} shows each instance's plan as the answer did.
    let shown = deployment(&t, "v").await["nodes"][&n.uuid]["instances"].clone();
    for i in &made {
        let same = shown
            .as_array()
            .expect("instances")
            .iter()
            .find(|s| s["consumer_uuid"] == i["consumer_uuid"])
            .expect("listed");
        assert_eq!(same["volume_plan"], i["volume_plan"], "{shown}");
    }
    assert_eq!(
        volumes(&t, &n.uuid).await,
        json!({"/sda0": {"size": 1000, "used": 1000, "free": 0},
               "/sda1": {"size": 200, "used": 200, "free": 0}})
    );
    // Full: the refusal names the volumes.
    let e = deploy(&t, "v", 1, 16, with_data(json!({}))).await;
    let e = e.expect_error(
        409,
        Some("placement.deploy.insufficient_resource"),
        "1 volume",
    );
    assert_eq!(e.error()["nodes"][0]["reason"], "volume");
    // Deleting an instance frees its share of the disk.
    let gone = made[0]["consumer_uuid"].as_str().expect("consumer");
    t.delete(&format!("/allocations/{gone}"), "1.28")
        .await
        .expect(204);
    let disks = volumes(&t, &n.uuid).await;
    let used: i64 = ["/sda0", "/sda1"]
        .iter()
        .map(|d| disks[d]["used"].as_i64().unwrap_or(0))
        .sum();
    assert_eq!(used, 1100);
    deploy(&t, "v", 1, 16, with_data(json!({})))
        .await
        .expect(201);
    // Disks instances hold stay unless forced.
    set_volumes(&t, &n.uuid, json!({"volumes": {"/sda0": 1000}}))
        .await
        .expect_error(409, Some("placement.inventory.inuse"), "/sda1");
    set_volumes(
        &t,
        &n.uuid,
        json!({"volumes": {"/sda0": 1000}, "force": true}),
    )
    .await
    .expect(200);
}

#[tokio::test]
async fn fixed_paths_need_no_disk_and_bad_specs_are_400() {
    let t = TestApp::new().await;
    let n = node(&t, "cn", 4096, 4).await;
    // A fixed host path is not scheduled: any node takes it.
    let r = deploy(&t, "f", 2, 16, json!({"volumes": ["/etc/app:/etc/app:ro"]}))
        .await
        .expect(201);
    assert_eq!(r.json()["deploy_map"], json!({&n.uuid: 2}));
    let g = t.generation(&n.uuid).await;
    for bad in [
        json!(["nonsense"]),
        json!(["AUTO:/data:rw:0"]),
        json!(["AUTO:/data:rw:99999999999999999999"]),
        json!(["AUTO:/data:rw:9223372036854775807"]),
        json!(["AUTO:/data:rw:1Q"]),
        json!(["AUTO:/data:rwm"]),
        json!(["AUTO:/d:rw:1", "AUTO:/d:rw:2"]),
        json!([""]),
        json!("AUTO:/data:rw:1"),
    ] {
        let r = deploy(&t, "b", 1, 16, json!({"volumes": bad})).await;
        assert_eq!(r.status, 400, "{bad}: {r:?}");
        assert!(r.error()["detail"].is_string());
    }
    for bad in [
        json!({"volumes": {"/sda0": 0}}),
        json!({"volumes": {"/sda0": -5}}),
        json!({}),
    ] {
        set_volumes(&t, &n.uuid, bad.clone()).await.expect(400);
    }
    assert_eq!(t.generation(&n.uuid).await, g, "nothing written");
    assert_eq!(deployment(&t, "b").await["count"], json!(0));
}
