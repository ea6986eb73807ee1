//! Batch and free deployments (§C.3): instances on the batch inventory of
//! providers the load filter accepts, as many on each as the inventory and
//! the filter take (each placed instance estimated for the next).

use super::*;

/// A provider of 10 VCPU and 10,000 MB that reported a quiet node
/// `secs_ago` (1,000 milli and 1,000 MB used, all system).
async fn reporting_node(t: &TestApp, name: &str, secs_ago: i64) -> String {
    let rp = t.create_rp(name).await;
    t.set_inventories(
        &rp,
        json!({"VCPU": {"total": 10}, "MEMORY_MB": {"total": 10000}}),
    )
    .await;
    let used = json!({"cpu_milli_used": 1000, "memory_mb_used": 1000});
    let at = chrono::Utc::now() - chrono::Duration::seconds(secs_ago);
    t.post(
        &format!("/resource_providers/{rp}/usage_reports"),
        MV,
        json!({"sampled_at": at.to_rfc3339(), "window_seconds": 10,
               "node": used, "system": used, "consumers": []}),
    )
    .await
    .expect(202);
    rp
}

fn batch(extra: Value) -> Value {
    let mut body = json!({"cpu": 1.0, "priority_class": "batch", "priority": 5500});
    for (k, v) in extra.as_object().unwrap() {
        body[k] = v.clone();
    }
    body
}

#[tokio::test]
async fn batch_instances_go_where_the_inventory_and_the_load_filter_allow() {
    let t = TestApp::new().await;
    let fresh = reporting_node(&t, "fresh", 0).await;
    reporting_node(&t, "stale", 200).await;
    let batch_cpu = inventory_total(&t, &fresh, "BATCH_VCPU_MILLI").await;
    assert_eq!(batch_cpu, Some(5000), "60 % of 10,000 less 1,000 system");
    // Capacity: 5 by inventory; the filter would take 6 (1,000 + 6 × 850).
    let r = deploy(&t, "jobs", 3, 500, batch(json!({})))
        .await
        .expect(201)
        .json();
    assert_eq!(
        r["deploy_map"],
        json!({ &fresh: 3 }),
        "the stale node gets none"
    );
    assert_eq!(r["capacity_map"], json!({ &fresh: 5 }));
    let used = usages(&t, &fresh).await;
    assert_eq!(used["BATCH_VCPU_MILLI"], json!(3000));
    assert_eq!(used["BATCH_MEMORY_MB"], json!(1500));
    assert!(
        used.get("VCPU").is_none_or(|v| v == 0),
        "no production class"
    );
    let shown = deployment(&t, "jobs").await;
    let consumer = shown["nodes"][&fresh]["instances"][0]["consumer_uuid"]
        .as_str()
        .expect("an instance")
        .to_string();
    let p = t
        .get(&format!("/consumers/{consumer}/priority"), MV)
        .await
        .expect(200)
        .json();
    assert_eq!(p["priority_class"], "batch");
    assert_eq!(p["priority"], 5500);
    // The three placed since the report count, estimated: 1,000 + 3 × 850
    // leaves room for 3 more under 65 % (a fourth makes 70 %), and the
    // inventory has 2,000 left: 2.
    let r = deploy(&t, "jobs", 2, 500, batch(json!({"dry_run": true})))
        .await
        .expect(200)
        .json();
    assert_eq!(r["total_capacity"], json!(2));
    let refused = deploy(&t, "jobs", 3, 500, batch(json!({})))
        .await
        .expect_error(
            409,
            Some("placement.deploy.insufficient_resource"),
            "capacity for 2",
        );
    // The refusal names every node, as production refusals do.
    let nodes = refused.error()["nodes"].clone();
    assert_eq!(nodes[0], json!({"node": fresh, "capacity": 2}), "{nodes}");
    assert_eq!(nodes[1]["reason"], "stale_report", "{nodes}");
}

#[tokio::test]
async fn batch_deployments_refuse_what_batch_work_cannot_have() {
    let t = TestApp::new().await;
    reporting_node(&t, "n", 0).await;
    deploy(&t, "a", 1, 500, batch(json!({"cpu_bind": true})))
        .await
        .expect_error(400, Some("placement.deploy.invalid_request"), "cpu_bind");
    deploy(&t, "a", 1, 500, batch(json!({"resources": {"VCPU": 1}})))
        .await
        .expect_error(400, Some("placement.colocation.class_not_allowed"), "VCPU");
    deploy(&t, "a", 1, 500, batch(json!({"priority": 9500})))
        .await
        .expect_error(400, None, "outside the batch class's range");
    deploy(&t, "a", 1, 500, batch(json!({"cpu": 0})))
        .await
        .expect_error(400, Some("placement.deploy.invalid_request"), "at least");
    let shown = t.get("/deployments/a", MV).await.json();
    assert_eq!(shown["count"].as_i64().unwrap_or(0), 0, "nothing stored");
}
