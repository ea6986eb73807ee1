//! `GET /allocation_candidates/explain` for what fair sharing and
//! colocation take away: another project's reservation, the load filter's
//! stale reports and thresholds for batch queries, and the quota limits a
//! claim would go over.

use crate::batch_placement::{host, report};
use crate::common::{uuid, TestApp};
use serde_json::{json, Value};

const MV: &str = "1.39";

async fn explain(t: &TestApp, query: &str) -> Value {
    t.get(&format!("/allocation_candidates/explain?{query}"), MV)
        .await
        .expect(200)
        .json()
}

/// The only root's verdict.
fn only(v: &Value) -> &Value {
    let providers = v["providers"].as_array().expect("providers");
    assert_eq!(providers.len(), 1, "{v}");
    &providers[0]
}

#[tokio::test]
async fn room_held_for_another_projects_reservation() {
    let t = TestApp::new().await;
    let rp = t.create_rp("node").await;
    t.set_inventories(&rp, json!({"VCPU": {"total": 4, "allocation_ratio": 1.0}}))
        .await;
    let gen = t.generation(&rp).await;
    t.put(
        &format!("/resource_providers/{rp}/project_reservations/R"),
        MV,
        json!({"resource_provider_generation": gen, "resources": {"VCPU": 3}}),
    )
    .await
    .expect(200);
    let v = explain(&t, "resources=VCPU:2&project_id=S").await;
    let r = only(&v);
    assert_eq!(r["fits"], false);
    assert_eq!(r["reason"], "reservation", "{v}");
    assert_eq!(r["detail"]["withheld_for_reservations"], 3);
    assert_eq!(r["detail"]["free"], 1);
    assert_eq!(r["detail"]["requested"], 2);
    assert_eq!(v["summary"], json!({"reservation": 1}));
    // The reserving project itself may use the room; and more than the
    // provider has at all is plain capacity, not the reservation's doing.
    assert_eq!(
        only(&explain(&t, "resources=VCPU:2&project_id=R").await)["fits"],
        true
    );
    let v = explain(&t, "resources=VCPU:5&project_id=S").await;
    assert_eq!(only(&v)["reason"], "capacity", "{v}");
}

#[tokio::test]
async fn the_load_filter_names_stale_reports_and_thresholds() {
    let t = TestApp::new().await;
    let stale = host(&t, "stale", 200).await;
    let busy = host(&t, "busy", 0).await;
    report(&t, &busy, 0, (9000, 2000), json!([])).await;
    let fresh = host(&t, "fresh", 0).await;
    let v = explain(
        &t,
        "resources=BATCH_VCPU_MILLI:100,BATCH_MEMORY_MB:100&priority_class=batch",
    )
    .await;
    let of = |rp: &str| {
        v["providers"]
            .as_array()
            .and_then(|p| p.iter().find(|x| x["root_provider_uuid"] == rp))
            .cloned()
            .unwrap_or_else(|| panic!("no verdict for {rp}: {v}"))
    };
    let s = of(&stale);
    assert_eq!(s["reason"], "stale_report", "{v}");
    assert!(s["detail"]["report_age_seconds"].as_i64() >= Some(200));
    assert_eq!(s["detail"]["metric_expiration_seconds"], 180);
    let b = of(&busy);
    assert_eq!(b["reason"], "load_threshold", "{v}");
    assert_eq!(b["detail"]["resource"], "cpu");
    assert_eq!(b["detail"]["threshold_percent"]["cpu"], 65);
    assert!(b["detail"]["estimated_percent"]["cpu"].as_i64() > Some(65));
    assert_eq!(of(&fresh)["fits"], true);
    assert_eq!(
        v["summary"],
        json!({"fits": 1, "load_threshold": 1, "stale_report": 1})
    );
    // A production query is not judged by the load filter.
    let v = explain(&t, "resources=VCPU:1").await;
    assert_eq!(v["summary"], json!({"fits": 3}));
}

#[tokio::test]
async fn limits_a_claim_would_go_over() {
    let t = TestApp::new().await;
    let rp = t.create_rp("node").await;
    t.set_inventories(
        &rp,
        json!({"VCPU": {"total": 16}, "MEMORY_MB": {"total": 4096}}),
    )
    .await;
    t.put("/projects/parent/fairness", MV, json!({"weight": 1.0}))
        .await
        .expect(200);
    t.put(
        "/projects/child/fairness",
        MV,
        json!({"weight": 1.0, "parent_project_id": "parent"}),
    )
    .await
    .expect(200);
    t.put("/projects/parent/quota", MV, json!({"limits": {"VCPU": 4}}))
        .await
        .expect(200);
    t.allocate(&uuid(), "child", "u", json!({&rp: {"VCPU": 3}}))
        .await;
    let v = explain(&t, "resources=VCPU:2,MEMORY_MB:10&project_id=child").await;
    assert_eq!(only(&v)["fits"], true, "candidates are still listed");
    assert_eq!(
        v["quota"],
        json!([{"project_id": "parent", "resource_class": "VCPU", "limit": 4,
                "consumed": 3, "requested": 2}])
    );
    let v = explain(&t, "resources=VCPU:1&project_id=child").await;
    assert_eq!(v["quota"], json!([]), "3 + 1 is within 4");
    let v = explain(&t, "resources=VCPU:2").await;
    assert_eq!(v["quota"], json!([]), "no project, no quota");
    // What explain foresaw is what the write does.
    let consumer = uuid();
    let body = json!({"allocations": {&rp: {"resources": {"VCPU": 2}}},
        "project_id": "child", "user_id": "u", "consumer_generation": null,
        "consumer_type": "INSTANCE"});
    t.put(&format!("/allocations/{consumer}"), MV, body)
        .await
        .expect_error(409, Some("placement.quota.exceeded"), "");
}
