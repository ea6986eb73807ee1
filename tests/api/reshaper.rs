//! `POST /reshaper` (1.30+): inventory and allocations moved in one step.

use crate::common::{uuid, TestApp};
use serde_json::{json, Value};

struct World {
    cn: String,
    child: String,
    consumer: String,
}

/// A compute node with VCPU and VGPU, one consumer using both, and an empty child.
async fn world(t: &TestApp) -> World {
    let cn = t.create_rp("cn").await;
    let child = uuid();
    t.create_rp_full("gpu0", &child, Some(&cn)).await;
    t.set_inventories(&cn, json!({"VCPU": {"total": 8}, "VGPU": {"total": 4}}))
        .await;
    let consumer = uuid();
    t.allocate(&consumer, "p", "u", json!({ &cn: {"VCPU": 2, "VGPU": 1} }))
        .await;
    World {
        cn,
        child,
        consumer,
    }
}

fn reshape_body(w: &World, cn_gen: i64, child_gen: i64, consumer_gen: Value) -> Value {
    json!({
        "inventories": {
            &w.cn: {"resource_provider_generation": cn_gen,
                    "inventories": {"VCPU": {"total": 8}}},
            &w.child: {"resource_provider_generation": child_gen,
                       "inventories": {"VGPU": {"total": 4}}},
        },
        "allocations": {
            &w.consumer: {
                "allocations": {&w.cn: {"resources": {"VCPU": 2}},
                                &w.child: {"resources": {"VGPU": 1}}},
                "project_id": "p", "user_id": "u", "consumer_generation": consumer_gen,
            }
        }
    })
}

#[tokio::test]
async fn moves_inventory_and_allocations_to_a_child() {
    let t = TestApp::new().await;
    let w = world(&t).await;
    let (gc, gch) = (t.generation(&w.cn).await, t.generation(&w.child).await);

    t.post("/reshaper", "1.29", reshape_body(&w, gc, gch, json!(1)))
        .await
        .expect(404);
    t.post("/reshaper", "1.30", reshape_body(&w, gc, gch, json!(1)))
        .await
        .expect(204);

    let inv = |rp: String| {
        let t = &t;
        async move {
            t.get(&format!("/resource_providers/{rp}/inventories"), "1.30")
                .await
                .expect(200)
                .json()["inventories"]
                .clone()
        }
    };
    let cn_inv = inv(w.cn.clone()).await;
    assert_eq!(
        cn_inv.as_object().unwrap().keys().collect::<Vec<_>>(),
        ["VCPU"]
    );
    assert_eq!(inv(w.child.clone()).await["VGPU"]["total"], json!(4));
    let c = t
        .get(&format!("/allocations/{}", w.consumer), "1.30")
        .await
        .expect(200)
        .json();
    assert_eq!(c["allocations"][&w.cn]["resources"], json!({"VCPU": 2}));
    assert_eq!(c["allocations"][&w.child]["resources"], json!({"VGPU": 1}));
    assert_eq!(c["consumer_generation"], json!(2));
    let u = t
        .get(&format!("/resource_providers/{}/usages", w.child), "1.30")
        .await
        .expect(200)
        .json();
    assert_eq!(u["usages"], json!({"VGPU": 1}));
    // Generations moved on; clients re-read them.
    assert!(t.generation(&w.cn).await > gc);
    assert!(t.generation(&w.child).await > gch);
}

#[tokio::test]
async fn reshaper_conflicts_and_errors() {
    let t = TestApp::new().await;
    let w = world(&t).await;
    let (gc, gch) = (t.generation(&w.cn).await, t.generation(&w.child).await);

    // Stale provider generation.
    t.post("/reshaper", "1.30", reshape_body(&w, gc + 1, gch, json!(1)))
        .await
        .expect_error(
            409,
            Some("placement.concurrent_update"),
            &format!(
                "resource provider generation conflict for provider {}",
                w.cn
            ),
        );
    // Stale consumer generation.
    t.post("/reshaper", "1.30", reshape_body(&w, gc, gch, json!(7)))
        .await
        .expect_error(
            409,
            Some("placement.concurrent_update"),
            "consumer generation conflict",
        );
    // Unknown provider in inventories.
    let ghost = uuid();
    let mut body = reshape_body(&w, gc, gch, json!(1));
    body["inventories"][&ghost] = json!({"resource_provider_generation": 0, "inventories": {}});
    t.post("/reshaper", "1.30", body).await.expect_error(
        400,
        Some("placement.resource_provider.not_found"),
        &format!("Resource provider {ghost} in inventories not found"),
    );
    // Removing a class that is still allocated (allocations not moved).
    let body = json!({
        "inventories": {&w.cn: {"resource_provider_generation": gc,
                                "inventories": {"VCPU": {"total": 8}}}},
        "allocations": {}
    });
    t.post("/reshaper", "1.30", body).await.expect_error(
        409,
        Some("placement.inventory.inuse"),
        "",
    );
    // Unknown resource class.
    let body = json!({
        "inventories": {&w.child: {"resource_provider_generation": gch,
                                   "inventories": {"CUSTOM_NOPE": {"total": 1}}}},
        "allocations": {}
    });
    t.post("/reshaper", "1.30", body)
        .await
        .expect_error(400, None, "malformed reshaper data");
    // An unknown class beside a stale consumer generation: Placement
    // checks the consumers first (409), then the classes.
    let mut body = reshape_body(&w, gc, gch, json!(7));
    body["inventories"][&w.child]["inventories"]["CUSTOM_NOPE"] = json!({"total": 1});
    t.post("/reshaper", "1.30", body).await.expect_error(
        409,
        Some("placement.concurrent_update"),
        "consumer generation conflict",
    );
    // Capacity problems in the new allocations.
    let mut body = reshape_body(&w, gc, gch, json!(1));
    body["allocations"][&w.consumer]["allocations"][&w.child]["resources"]["VGPU"] = json!(5);
    t.post("/reshaper", "1.30", body).await.expect_error(
        409,
        Some("placement.undefined_code"),
        "Unable to allocate inventory",
    );
    // Schema: both keys required, at least one provider.
    t.post(
        "/reshaper",
        "1.30",
        json!({"inventories": {}, "allocations": {}}),
    )
    .await
    .expect_error(400, None, "{} should be non-empty");
    t.post("/reshaper", "1.30", json!({"allocations": {}}))
        .await
        .expect_error(400, None, "'inventories' is a required property");

    // Nothing above changed anything.
    assert_eq!(t.generation(&w.cn).await, gc);
    assert_eq!(t.generation(&w.child).await, gch);
    let c = t
        .get(&format!("/allocations/{}", w.consumer), "1.30")
        .await
        .expect(200)
        .json();
    assert_eq!(
        c["allocations"][&w.cn]["resources"],
        json!({"VCPU": 2, "VGPU": 1})
    );
    assert_eq!(c["consumer_generation"], json!(1));
}

#[tokio::test]
async fn reshaper_interim_inventory_allows_the_move() {
    // The consumer's VGPU moves from cn to child while cn's VGPU inventory is
    // removed in the same request: only possible because the allocation move
    // happens between the interim and the final inventories.
    let t = TestApp::new().await;
    let w = world(&t).await;
    let (gc, gch) = (t.generation(&w.cn).await, t.generation(&w.child).await);
    // Fill the child's future VGPU exactly.
    let mut body = reshape_body(&w, gc, gch, json!(1));
    body["inventories"][&w.child]["inventories"]["VGPU"]["total"] = json!(1);
    t.post("/reshaper", "1.30", body).await.expect(204);
    let u = t
        .get(&format!("/resource_providers/{}/usages", w.cn), "1.30")
        .await
        .expect(200)
        .json();
    assert_eq!(u["usages"], json!({"VCPU": 2}));
}
