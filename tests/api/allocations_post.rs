//! `POST /allocations` (several consumers at once), deletes, consumer
//! types and provider bumps of multi-consumer writes.

use crate::common::{consumer_allocations as consumer, uuid, TestApp};
use serde_json::json;

#[tokio::test]
async fn post_allocations_moves_and_empties() {
    let t = TestApp::new().await;
    let r1 = t.create_rp("r1").await;
    let r2 = t.create_rp("r2").await;
    let r3 = t.create_rp("r3").await;
    for rp in [&r1, &r2, &r3] {
        t.set_inventories(rp, json!({"VCPU": {"total": 4}})).await;
    }
    let (a, b) = (uuid(), uuid());
    t.allocate(&a, "p", "u", json!({ &r1: {"VCPU": 2} })).await;
    t.allocate(&b, "p", "u", json!({ &r3: {"VCPU": 1} })).await;
    let (g1, g2, g3) = (
        t.generation(&r1).await,
        t.generation(&r2).await,
        t.generation(&r3).await,
    );

    t.post("/allocations", "1.12", json!({})).await.expect(404);
    // Move a from r1 to r2 and empty b, atomically.
    t.post(
        "/allocations",
        "1.28",
        json!({
            &a: {"allocations": {&r2: {"resources": {"VCPU": 2}}},
                 "project_id": "p", "user_id": "u", "consumer_generation": 1},
            &b: {"allocations": {}, "project_id": "p", "user_id": "u", "consumer_generation": 1},
        }),
    )
    .await
    .expect(204);
    let ab = consumer(&t, &a, "1.28").await;
    assert_eq!(
        ab["allocations"],
        json!({&r2: {"generation": g2 + 1, "resources": {"VCPU": 2}}})
    );
    assert_eq!(ab["consumer_generation"], json!(2));
    assert_eq!(consumer(&t, &b, "1.28").await, json!({"allocations": {}}));
    // r2 named in the new set: bumped. r1 merely lost a moved consumer: not.
    assert_eq!(t.generation(&r1).await, g1);
    assert_eq!(t.generation(&r2).await, g2 + 1);
    // r3 was cleared through `{}`: named implicitly, bumped.
    assert_eq!(t.generation(&r3).await, g3 + 1);
    for (rp, used) in [(&r1, 0), (&r2, 2), (&r3, 0)] {
        let u = t
            .get(&format!("/resource_providers/{rp}/usages"), "1.0")
            .await
            .expect(200)
            .json();
        assert_eq!(u["usages"]["VCPU"], json!(used), "{rp}");
    }

    // All or nothing: one consumer over capacity fails the whole request.
    let c = uuid();
    t.post(
        "/allocations",
        "1.28",
        json!({
            &c: {"allocations": {&r1: {"resources": {"VCPU": 1}}},
                 "project_id": "p", "user_id": "u", "consumer_generation": null},
            &a: {"allocations": {&r2: {"resources": {"VCPU": 5}}},
                 "project_id": "p", "user_id": "u", "consumer_generation": 2},
        }),
    )
    .await
    .expect_error(409, Some("placement.undefined_code"), "exceed the capacity");
    assert_eq!(consumer(&t, &c, "1.28").await, json!({"allocations": {}}));
    assert_eq!(
        consumer(&t, &a, "1.28").await["allocations"][&r2]["resources"]["VCPU"],
        json!(2)
    );
    // A stale generation in one entry fails the whole request too.
    t.post(
        "/allocations",
        "1.28",
        json!({
            &c: {"allocations": {&r1: {"resources": {"VCPU": 1}}},
                 "project_id": "p", "user_id": "u", "consumer_generation": null},
            &a: {"allocations": {&r2: {"resources": {"VCPU": 1}}},
                 "project_id": "p", "user_id": "u", "consumer_generation": 1},
        }),
    )
    .await
    .expect_error(
        409,
        Some("placement.concurrent_update"),
        "consumer generation conflict",
    );
    assert_eq!(consumer(&t, &c, "1.28").await, json!({"allocations": {}}));
    // Unknown class in POST.
    t.post(
        "/allocations",
        "1.28",
        json!({&c: {"allocations": {&r1: {"resources": {"CUSTOM_NOPE": 1}}},
                    "project_id": "p", "user_id": "u", "consumer_generation": null}}),
    )
    .await
    .expect_error(400, None, "No such resource class CUSTOM_NOPE");
    // 1.13 form: no consumer generations.
    t.post(
        "/allocations",
        "1.13",
        json!({&c: {"allocations": {&r1: {"resources": {"VCPU": 1}}},
                    "project_id": "p2", "user_id": "u2"}}),
    )
    .await
    .expect(204);
    let cb = consumer(&t, &c, "1.28").await;
    assert_eq!(cb["project_id"], json!("p2"));
    assert_eq!(cb["consumer_generation"], json!(1));
}

#[tokio::test]
async fn delete_allocations() {
    let t = TestApp::new().await;
    let rp = t.create_rp("cn").await;
    t.set_inventories(&rp, json!({"VCPU": {"total": 4}})).await;
    let c = uuid();
    t.allocate(&c, "p", "u", json!({ &rp: {"VCPU": 2} })).await;
    let g = t.generation(&rp).await;
    t.delete(&format!("/allocations/{c}"), "1.28")
        .await
        .expect(204);
    assert_eq!(consumer(&t, &c, "1.28").await, json!({"allocations": {}}));
    // Not generation-related: the provider is not bumped.
    assert_eq!(t.generation(&rp).await, g);
    t.delete(&format!("/allocations/{c}"), "1.28")
        .await
        .expect_error(
            404,
            Some("placement.undefined_code"),
            &format!("No allocations for consumer '{c}'"),
        );
    // The consumer is gone: a new write must send null.
    t.allocate(&c, "p", "u", json!({ &rp: {"VCPU": 1} })).await;
    // GET never validates the uuid and never 404s.
    assert_eq!(
        consumer(&t, "not-a-uuid", "1.28").await,
        json!({"allocations": {}})
    );
    // GET /allocations (no consumer) is 405.
    let r = t.get("/allocations", "1.28").await.expect(405);
    assert_eq!(r.header("allow").as_deref(), Some("POST"));
}

#[tokio::test]
async fn consumer_types_from_1_38() {
    let t = TestApp::new().await;
    let rp = t.create_rp("cn").await;
    t.set_inventories(&rp, json!({"VCPU": {"total": 4}})).await;
    let c = uuid();
    let path = format!("/allocations/{c}");
    let mut body = json!({"allocations": {&rp: {"resources": {"VCPU": 1}}},
                          "project_id": "p", "user_id": "u", "consumer_generation": null});
    t.put(&path, "1.38", body.clone()).await.expect_error(
        400,
        None,
        "'consumer_type' is a required property",
    );
    body["consumer_type"] = json!("instance");
    t.put(&path, "1.38", body.clone())
        .await
        .expect_error(400, None, "does not match");
    body["consumer_type"] = json!("INSTANCE");
    t.put(&path, "1.38", body.clone()).await.expect(204);
    let b = consumer(&t, &c, "1.38").await;
    assert_eq!(b["consumer_type"], json!("INSTANCE"));
    assert!(consumer(&t, &c, "1.37")
        .await
        .get("consumer_type")
        .is_none());
    // consumer_type is not accepted before 1.38.
    body["consumer_generation"] = json!(1);
    t.put(&path, "1.37", body.clone()).await.expect_error(
        400,
        None,
        "Additional properties are not allowed",
    );
    // A write below 1.38 leaves the type; untyped consumers show `unknown`.
    let c2 = uuid();
    t.allocate(&c2, "p", "u", json!({ &rp: {"VCPU": 1} })).await;
    assert_eq!(
        consumer(&t, &c2, "1.38").await["consumer_type"],
        json!("unknown")
    );
    // Changing the type does not need anything else.
    body["consumer_type"] = json!("MIGRATION");
    t.put(&path, "1.38", body).await.expect(204);
    let b = consumer(&t, &c, "1.38").await;
    assert_eq!(b["consumer_type"], json!("MIGRATION"));
    assert_eq!(b["consumer_generation"], json!(2));
}

#[tokio::test]
async fn post_allocations_bumps_only_named_providers() {
    let t = TestApp::new().await;
    let r1 = t.create_rp("r1").await;
    let r2 = t.create_rp("r2").await;
    let r3 = t.create_rp("r3").await;
    for rp in [&r1, &r2, &r3] {
        t.set_inventories(rp, json!({"VCPU": {"total": 4}})).await;
    }
    let (a, b) = (uuid(), uuid());
    t.allocate(&a, "p", "u", json!({ &r1: {"VCPU": 2} })).await;
    t.allocate(&b, "p", "u", json!({ &r3: {"VCPU": 1} })).await;
    let (g1, g2, g3) = (
        t.generation(&r1).await,
        t.generation(&r2).await,
        t.generation(&r3).await,
    );
    // Move a from r1 to r2 alone: r1 is not bumped.
    t.post(
        "/allocations",
        "1.28",
        json!({&a: {"allocations": {&r2: {"resources": {"VCPU": 2}}},
                    "project_id": "p", "user_id": "u", "consumer_generation": 1}}),
    )
    .await
    .expect(204);
    assert_eq!(t.generation(&r1).await, g1);
    assert_eq!(t.generation(&r2).await, g2 + 1);
    // Move a from r2 back to r1 while emptying b (on r3).
    // Named: r1 (new set) and r3 (b's, cleared by `{}`); r2 is merely left.
    t.post(
        "/allocations",
        "1.28",
        json!({
            &a: {"allocations": {&r1: {"resources": {"VCPU": 2}}},
                 "project_id": "p", "user_id": "u", "consumer_generation": 2},
            &b: {"allocations": {}, "project_id": "p", "user_id": "u", "consumer_generation": 1},
        }),
    )
    .await
    .expect(204);
    assert_eq!(t.generation(&r1).await, g1 + 1);
    assert_eq!(t.generation(&r3).await, g3 + 1);
    assert_eq!(t.generation(&r2).await, g2 + 1, "r2 was only left by a");
}

#[tokio::test]
async fn one_provider_named_twice_in_one_request() {
    let t = TestApp::new().await;
    let rp = t.create_rp("cn").await;
    t.set_inventories(&rp, json!({"VCPU": {"total": 8}})).await;
    // List form: the same provider twice with the same class. Placement
    // writes both records; the usage is their sum.
    let c = uuid();
    let r = t
        .put(
            &format!("/allocations/{c}"),
            "1.0",
            json!({"allocations": [
                {"resource_provider": {"uuid": rp}, "resources": {"VCPU": 1}},
                {"resource_provider": {"uuid": rp}, "resources": {"VCPU": 2}},
            ]}),
        )
        .await;
    assert!(r.status == 204, "{r:?}");
    let path = format!("/resource_providers/{rp}/usages");
    assert_eq!(
        t.get(&path, "1.0").await.expect(200).json()["usages"]["VCPU"],
        json!(3)
    );
    assert_eq!(
        consumer(&t, &c, "1.0").await["allocations"][&rp]["resources"]["VCPU"],
        json!(3)
    );
    // Dict form: the same provider spelt in upper and lower case.
    let c2 = uuid();
    let r2 = t
        .put(
            &format!("/allocations/{c2}"),
            "1.12",
            json!({"allocations": {
                rp.to_uppercase(): {"resources": {"VCPU": 1}},
                &rp: {"resources": {"VCPU": 2}},
            }, "project_id": "p", "user_id": "u"}),
        )
        .await;
    assert!(r2.status == 204, "{r2:?}");
    // Whatever was kept, the consumer's view and the usage agree.
    let held = consumer(&t, &c2, "1.12").await["allocations"][&rp]["resources"]["VCPU"]
        .as_i64()
        .unwrap();
    assert!(held == 2 || held == 3, "{held}");
    assert_eq!(
        t.get(&path, "1.0").await.expect(200).json()["usages"]["VCPU"],
        json!(3 + held)
    );
}
