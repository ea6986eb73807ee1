//! Low-priority placement (§C.3) over HTTP: `priority_class=batch`
//! candidates see only fresh providers that pass the LoadAware filter
//! (with estimates for recent placements), the class rules of the write
//! path, Nova's inventory writes beside the server-owned batch rows, and
//! production candidates untouched by batch work.

use crate::colocation::{at, candidate_providers};
use crate::common::{uuid, TestApp};
use serde_json::{json, Value};

const MV: &str = "1.39";

/// A provider of 10 VCPU and 10,000 MB that reported a quiet node
/// `secs_ago` (1,000 milli and 1,000 MB, all system).
pub(crate) async fn host(t: &TestApp, name: &str, secs_ago: i64) -> String {
    let rp = t.create_rp(name).await;
    t.set_inventories(
        &rp,
        json!({"VCPU": {"total": 10}, "MEMORY_MB": {"total": 10000}}),
    )
    .await;
    report(t, &rp, secs_ago, (1000, 1000), json!([])).await;
    rp
}

pub(crate) async fn report(
    t: &TestApp,
    rp: &str,
    secs_ago: i64,
    node: (i64, i64),
    consumers: Value,
) -> Value {
    let sys = json!({"cpu_milli_used": 1000, "memory_mb_used": 1000});
    t.post(
        &format!("/resource_providers/{rp}/usage_reports"),
        MV,
        json!({"sampled_at": at(secs_ago), "window_seconds": 10,
               "node": {"cpu_milli_used": node.0, "memory_mb_used": node.1},
               "system": sys, "consumers": consumers}),
    )
    .await
    .expect(202)
    .json()
}

/// A consumer of `class` holding `allocs` on `rp`.
async fn consumer(t: &TestApp, class: &str, rp: &str, allocs: Value) -> String {
    let u = uuid();
    if class != "prod" {
        t.put(
            &format!("/consumers/{u}/priority"),
            MV,
            json!({"priority_class": class}),
        )
        .await
        .expect(200);
    }
    t.allocate(&u, "p", "u", json!({ rp: allocs })).await;
    u
}

async fn batch_fits(t: &TestApp, rp: &str, cpu_milli: i64) -> bool {
    let q =
        format!("resources=BATCH_VCPU_MILLI:{cpu_milli},BATCH_MEMORY_MB:100&priority_class=batch");
    candidate_providers(t, &q).await.contains(&rp.to_string())
}

#[tokio::test]
async fn the_load_filter_refuses_busy_hosts_and_counts_recent_placements() {
    let t = TestApp::new().await;
    let rp = host(&t, "busy", 30).await;
    let be = consumer(
        &t,
        "batch",
        &rp,
        json!({"BATCH_VCPU_MILLI": 3000, "BATCH_MEMORY_MB": 1000}),
    )
    .await;
    let used = json!([{"consumer_uuid": be, "cpu_milli_used": 4000, "memory_mb_used": 1000}]);
    report(&t, &rp, 0, (6000, 2000), used).await;
    // 6,000 measured + 85 % of the request, rounded, against 65 %.
    assert!(batch_fits(&t, &rp, 100).await, "61 %");
    assert!(batch_fits(&t, &rp, 588).await, "6,500: exactly 65 % passes");
    assert!(batch_fits(&t, &rp, 600).await, "65.1 % rounds to 65");
    assert!(!batch_fits(&t, &rp, 650).await, "65.53 % rounds to 66");
    // Placed since the report, so estimated: 425 more passes (65 %)...
    let be2 = consumer(
        &t,
        "batch",
        &rp,
        json!({"BATCH_VCPU_MILLI": 500, "BATCH_MEMORY_MB": 100}),
    )
    .await;
    assert!(batch_fits(&t, &rp, 100).await, "6,000 + 425 + 85");
    // ...and production placed since counts too (1 VCPU: 850 more).
    let web = consumer(&t, "prod", &rp, json!({"VCPU": 1, "MEMORY_MB": 100})).await;
    assert!(!batch_fits(&t, &rp, 100).await, "6,000 + 425 + 850 + 85");
    assert!(
        !candidate_providers(&t, "resources=BATCH_VCPU_MILLI:100&priority_class=batch")
            .await
            .contains(&rp),
        "a query without memory is filtered too"
    );
    // Once a report includes them, the measurement replaces the estimates.
    let measured = json!([
        {"consumer_uuid": be, "cpu_milli_used": 4000, "memory_mb_used": 1000},
        {"consumer_uuid": be2, "cpu_milli_used": 0, "memory_mb_used": 0},
        {"consumer_uuid": web, "cpu_milli_used": 0, "memory_mb_used": 0}]);
    report(&t, &rp, 0, (6000, 2000), measured).await;
    assert!(batch_fits(&t, &rp, 100).await);
    // Without priority_class, a BATCH_* query is Placement's capacity check.
    let q = "resources=BATCH_VCPU_MILLI:650";
    assert!(candidate_providers(&t, q).await.contains(&rp));
}

#[tokio::test]
async fn stale_reports_get_no_new_batch_work_and_degrade_to_zero() {
    let t = TestApp::new().await;
    let stale = host(&t, "stale", 200).await;
    let fresh = host(&t, "fresh", 0).await;
    let inv = |rp: &str| format!("/resource_providers/{rp}/inventories");
    let total = t.get(&inv(&stale), MV).await.expect(200).json()["inventories"]["BATCH_VCPU_MILLI"]
        ["total"]
        .as_i64()
        .unwrap();
    assert!(total > 0, "200 s is under degradeTimeMinutes");
    let q = "resources=BATCH_VCPU_MILLI:100,BATCH_MEMORY_MB:100&priority_class=batch";
    assert_eq!(
        candidate_providers(&t, q).await,
        vec![fresh.clone()],
        "older than metricExpirationSeconds (180)"
    );
    // A provider's own expiry applies to it alone.
    t.put(
        &format!("/resource_providers/{stale}/colocation_policy"),
        MV,
        json!({"metricExpirationSeconds": 300}),
    )
    .await
    .expect(200);
    assert_eq!(candidate_providers(&t, q).await.len(), 2);
    // Measurements older than degradeTimeMinutes leave no batch capacity.
    let old = host(&t, "old", 16 * 60).await;
    let inv = t.get(&inv(&old), MV).await.expect(200).json();
    assert_eq!(inv["inventories"]["BATCH_VCPU_MILLI"]["total"], json!(0));
    assert_eq!(inv["inventories"]["BATCH_MEMORY_MB"]["total"], json!(0));
    assert!(!candidate_providers(&t, q).await.contains(&old));
}

#[tokio::test]
async fn priority_classes_keep_to_their_resource_classes() {
    let t = TestApp::new().await;
    let rp = host(&t, "n", 0).await;
    let code = Some("placement.colocation.class_not_allowed");
    let body = |allocs: Value| {
        json!({"allocations": { &rp: {"resources": allocs}}, "project_id": "p", "user_id": "u",
               "consumer_generation": null, "consumer_type": "INSTANCE"})
    };
    let prod = uuid();
    t.put(
        &format!("/allocations/{prod}"),
        MV,
        body(json!({"BATCH_VCPU_MILLI": 100})),
    )
    .await
    .expect_error(400, code, "may not allocate BATCH_VCPU_MILLI");
    let batch = uuid();
    t.put(
        &format!("/consumers/{batch}/priority"),
        MV,
        json!({"priority_class": "free"}),
    )
    .await
    .expect(200);
    t.put(
        &format!("/allocations/{batch}"),
        MV,
        body(json!({"VCPU": 1})),
    )
    .await
    .expect_error(400, code, "may not allocate VCPU");
    for c in [&prod, &batch] {
        let held = t
            .get(&format!("/allocations/{c}"), MV)
            .await
            .expect(200)
            .json();
        assert_eq!(held["allocations"], json!({}), "nothing stored");
    }
    let web = consumer(&t, "prod", &rp, json!({"VCPU": 1})).await;
    t.put(
        &format!("/consumers/{web}/priority"),
        MV,
        json!({"priority_class": "batch"}),
    )
    .await
    .expect_error(400, code, "holds VCPU");
    let shown = t
        .get(&format!("/consumers/{web}/priority"), MV)
        .await
        .expect(200)
        .json();
    assert_eq!(shown["priority_class"], "prod");
    t.get(
        "/allocation_candidates?resources=VCPU:1&priority_class=batch",
        MV,
    )
    .await
    .expect_error(400, code, "not VCPU");
    t.get(
        "/allocation_candidates?resources=VCPU:1&priority_class=urgent",
        MV,
    )
    .await
    .expect_error(400, None, "priority_class");
}

#[tokio::test]
async fn nova_inventory_writes_leave_the_batch_rows_alone() {
    let t = TestApp::new().await;
    let rp = host(&t, "n", 0).await;
    consumer(
        &t,
        "batch",
        &rp,
        json!({"BATCH_VCPU_MILLI": 1000, "BATCH_MEMORY_MB": 100}),
    )
    .await;
    let path = format!("/resource_providers/{rp}/inventories");
    let before = t.get(&path, MV).await.expect(200).json()["inventories"].clone();
    // Nova sends its own classes only; a client may send back what it read.
    t.set_inventories(
        &rp,
        json!({"VCPU": {"total": 12}, "MEMORY_MB": {"total": 10000},
               "BATCH_VCPU_MILLI": {"total": 1}}),
    )
    .await;
    let after = t.get(&path, MV).await.expect(200).json()["inventories"].clone();
    assert_eq!(after["VCPU"]["total"], json!(12));
    for class in ["BATCH_VCPU_MILLI", "BATCH_MEMORY_MB"] {
        assert_eq!(after[class], before[class], "{class} kept as computed");
    }
    let gen = t.generation(&rp).await;
    t.put(
        &format!("{path}/BATCH_VCPU_MILLI"),
        MV,
        json!({"resource_provider_generation": gen, "total": 5}),
    )
    .await
    .expect_error(400, None, "computed by the server");
    t.delete(&format!("{path}/BATCH_MEMORY_MB"), MV)
        .await
        .expect_error(400, None, "computed by the server");
    t.delete(&path, MV).await.expect(204);
    let left = t.get(&path, MV).await.expect(200).json()["inventories"].clone();
    let mut classes: Vec<&String> = left.as_object().unwrap().keys().collect();
    classes.sort();
    assert_eq!(classes, ["BATCH_MEMORY_MB", "BATCH_VCPU_MILLI"]);
}

#[tokio::test]
async fn batch_allocations_never_make_production_candidates_disappear() {
    let t = TestApp::new().await;
    let a = host(&t, "a", 0).await;
    let b = host(&t, "b", 0).await;
    let prod_query = "resources=VCPU:4,MEMORY_MB:4096";
    let before = candidate_providers(&t, prod_query).await;
    assert_eq!(before.len(), 2);
    // Fill a's batch inventory to the last unit, then measure it busy.
    let inv = t
        .get(&format!("/resource_providers/{a}/inventories"), MV)
        .await
        .expect(200)
        .json();
    let total = |c: &str| inv["inventories"][c]["total"].clone();
    let be = consumer(
        &t,
        "batch",
        &a,
        json!({"BATCH_VCPU_MILLI": total("BATCH_VCPU_MILLI"), "BATCH_MEMORY_MB": total("BATCH_MEMORY_MB")}),
    )
    .await;
    let busy = json!([{"consumer_uuid": be, "cpu_milli_used": 8000, "memory_mb_used": 5000}]);
    report(&t, &a, 0, (9000, 6000), busy).await;
    assert!(!batch_fits(&t, &a, 1).await, "no batch room left on a");
    assert_eq!(
        candidate_providers(&t, prod_query).await,
        before,
        "production still sees both providers"
    );
    let _ = b;
}
