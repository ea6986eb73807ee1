//! `/allocations/{consumer}`, `POST /allocations` and provider allocations:
//! body forms per version, consumer generations, capacity conflicts versus
//! generation conflicts, moves and deletes.

use crate::common::{consumer_allocations as consumer, uuid, TestApp};
use serde_json::{json, Value};

const INCOMPLETE: &str = "00000000-0000-0000-0000-000000000000";

#[tokio::test]
async fn list_form_before_1_12() {
    let t = TestApp::new().await;
    let rp = t.create_rp("cn").await;
    t.set_inventories(
        &rp,
        json!({"VCPU": {"total": 8}, "MEMORY_MB": {"total": 1024}}),
    )
    .await;
    let c = uuid();
    let path = format!("/allocations/{c}");
    let list = |vcpu: i64| json!([{"resource_provider": {"uuid": rp}, "resources": {"VCPU": vcpu, "MEMORY_MB": 256}}]);

    t.put(&path, "1.0", json!({"allocations": list(2)}))
        .await
        .expect(204);
    assert_eq!(
        consumer(&t, &c, "1.0").await,
        json!({"allocations": {&rp: {"generation": 2, "resources": {"VCPU": 2, "MEMORY_MB": 256}}}})
    );
    // Written below 1.8: the incomplete-consumer project and user.
    let b = consumer(&t, &c, "1.12").await;
    assert_eq!(b["project_id"], json!(INCOMPLETE));
    assert_eq!(b["user_id"], json!(INCOMPLETE));
    assert!(b.get("consumer_generation").is_none(), "{b}");
    assert_eq!(
        consumer(&t, &c, "1.28").await["consumer_generation"],
        json!(1)
    );

    // project_id/user_id: not allowed before 1.8, required from 1.8.
    t.put(
        &path,
        "1.7",
        json!({"allocations": list(1), "project_id": "p", "user_id": "u"}),
    )
    .await
    .expect_error(400, None, "Additional properties are not allowed");
    t.put(&path, "1.8", json!({"allocations": list(1)}))
        .await
        .expect_error(400, None, "'project_id' is a required property");
    t.put(
        &path,
        "1.8",
        json!({"allocations": list(3), "project_id": "p", "user_id": "u"}),
    )
    .await
    .expect(204);
    let b = consumer(&t, &c, "1.28").await;
    assert_eq!(b["project_id"], json!("p"));
    assert_eq!(b["user_id"], json!("u"));
    assert_eq!(b["consumer_generation"], json!(2));
    assert_eq!(b["allocations"][&rp]["resources"]["VCPU"], json!(3));

    // Form by version.
    t.put(&path, "1.0", json!({"allocations": []}))
        .await
        .expect_error(400, None, "[] should be non-empty");
    t.put(
        &path,
        "1.12",
        json!({"allocations": list(1), "project_id": "p", "user_id": "u"}),
    )
    .await
    .expect_error(400, None, "is not of type 'object'");
    t.put(
        &path,
        "1.11",
        json!({"allocations": {&rp: {"resources": {"VCPU": 1}}}, "project_id": "p", "user_id": "u"}),
    )
    .await
    .expect_error(400, None, "is not of type 'array'");
    // Path must be uuid-like.
    t.put(
        "/allocations/not-a-uuid",
        "1.0",
        json!({"allocations": list(1)}),
    )
    .await
    .expect_error(400, None, "Malformed consumer_uuid: not-a-uuid");
}

#[tokio::test]
async fn dict_form_and_provider_allocations() {
    let t = TestApp::new().await;
    let r1 = t.create_rp("r1").await;
    let r2 = t.create_rp("r2").await;
    t.set_inventories(&r1, json!({"VCPU": {"total": 8}})).await;
    t.set_inventories(&r2, json!({"DISK_GB": {"total": 100}}))
        .await;
    let c = uuid();
    let path = format!("/allocations/{c}");
    t.put(
        &path,
        "1.12",
        json!({"allocations": {&r1: {"resources": {"VCPU": 2}, "generation": 42},
                               &r2: {"resources": {"DISK_GB": 20}}},
               "project_id": "p", "user_id": "u"}),
    )
    .await
    .expect(204);
    assert_eq!(
        consumer(&t, &c, "1.12").await,
        json!({"allocations": {&r1: {"generation": 2, "resources": {"VCPU": 2}},
                               &r2: {"generation": 2, "resources": {"DISK_GB": 20}}},
               "project_id": "p", "user_id": "u"})
    );
    assert_eq!(
        t.get(&format!("/resource_providers/{r1}/allocations"), "1.0")
            .await
            .expect(200)
            .json(),
        json!({"allocations": {&c: {"resources": {"VCPU": 2}}}, "resource_provider_generation": 2})
    );
    assert_eq!(
        t.get(&format!("/resource_providers/{r1}/allocations"), "1.28")
            .await
            .expect(200)
            .json(),
        json!({"allocations": {&c: {"resources": {"VCPU": 2}, "consumer_generation": 1}},
               "resource_provider_generation": 2})
    );
    t.get(
        &format!("/resource_providers/{}/allocations", uuid()),
        "1.0",
    )
    .await
    .expect(404);

    // Replace with r2 only: r1 loses them and is not bumped; r2 is bumped.
    t.put(
        &path,
        "1.12",
        json!({"allocations": {&r2: {"resources": {"DISK_GB": 30}}},
               "project_id": "p", "user_id": "u"}),
    )
    .await
    .expect(204);
    assert_eq!(t.generation(&r1).await, 2);
    assert_eq!(t.generation(&r2).await, 3);
    assert_eq!(
        t.get(&format!("/resource_providers/{r1}/allocations"), "1.0")
            .await
            .expect(200)
            .json(),
        json!({"allocations": {}, "resource_provider_generation": 2})
    );
    // Before 1.28 an empty dict is refused.
    t.put(
        &path,
        "1.27",
        json!({"allocations": {}, "project_id": "p", "user_id": "u"}),
    )
    .await
    .expect_error(400, None, "{} should be non-empty");
    // Provider keys must look like uuids.
    t.put(
        &path,
        "1.12",
        json!({"allocations": {"r1": {"resources": {"VCPU": 1}}}, "project_id": "p", "user_id": "u"}),
    )
    .await
    .expect(400);
}

#[tokio::test]
async fn consumer_generations() {
    let t = TestApp::new().await;
    let rp = t.create_rp("cn").await;
    t.set_inventories(&rp, json!({"VCPU": {"total": 8}})).await;
    let c = uuid();
    let path = format!("/allocations/{c}");
    let body = |vcpu: i64, gen: Value| {
        json!({"allocations": {&rp: {"resources": {"VCPU": vcpu}}},
               "project_id": "p", "user_id": "u", "consumer_generation": gen})
    };

    t.put(
        &path,
        "1.28",
        json!({"allocations": {&rp: {"resources": {"VCPU": 1}}}, "project_id": "p", "user_id": "u"}),
    )
    .await
    .expect_error(400, None, "'consumer_generation' is a required property");
    // An integer for a consumer that does not exist.
    t.put(&path, "1.28", body(1, json!(5))).await.expect_error(
        409,
        Some("placement.concurrent_update"),
        "consumer generation conflict - expected null but got 5",
    );
    t.put(&path, "1.28", body(1, json!(null))).await.expect(204);
    assert_eq!(
        consumer(&t, &c, "1.28").await["consumer_generation"],
        json!(1)
    );
    // null for a consumer that exists.
    t.put(&path, "1.28", body(2, json!(null)))
        .await
        .expect_error(
            409,
            Some("placement.concurrent_update"),
            "consumer generation conflict - expected 1 but got None",
        );
    t.put(&path, "1.28", body(2, json!(1))).await.expect(204);
    t.put(&path, "1.28", body(3, json!(1))).await.expect_error(
        409,
        Some("placement.concurrent_update"),
        "consumer generation conflict - expected 2 but got 1",
    );
    let b = consumer(&t, &c, "1.28").await;
    assert_eq!(b["consumer_generation"], json!(2));
    assert_eq!(b["allocations"][&rp]["resources"]["VCPU"], json!(2));
    // Writes below 1.28 are not checked but still bump.
    t.put(
        &path,
        "1.27",
        json!({"allocations": {&rp: {"resources": {"VCPU": 4}}}, "project_id": "p", "user_id": "u"}),
    )
    .await
    .expect(204);
    assert_eq!(
        consumer(&t, &c, "1.28").await["consumer_generation"],
        json!(3)
    );
    // Empty allocations (1.28+) delete the consumer: next write sends null.
    t.put(
        &path,
        "1.28",
        json!({"allocations": {}, "project_id": "p", "user_id": "u", "consumer_generation": 3}),
    )
    .await
    .expect(204);
    assert_eq!(consumer(&t, &c, "1.28").await, json!({"allocations": {}}));
    t.put(&path, "1.28", body(1, json!(3))).await.expect_error(
        409,
        Some("placement.concurrent_update"),
        "expected null but got 3",
    );
    t.put(&path, "1.28", body(1, json!(null))).await.expect(204);
    assert_eq!(
        consumer(&t, &c, "1.28").await["consumer_generation"],
        json!(1)
    );
}

#[tokio::test]
async fn capacity_conflicts_are_not_concurrent_updates() {
    let t = TestApp::new().await;
    let rp = t.create_rp("cn").await;
    t.set_inventories(
        &rp,
        json!({"VCPU": {"total": 4},
               "MEMORY_MB": {"total": 2048, "min_unit": 256, "max_unit": 1024, "step_size": 256}}),
    )
    .await;
    let put = |c: String, resources: Value, gen: Value| {
        let t = &t;
        let rp = rp.clone();
        async move {
            t.put(
                &format!("/allocations/{c}"),
                "1.28",
                json!({"allocations": {&rp: {"resources": resources}},
                       "project_id": "p", "user_id": "u", "consumer_generation": gen}),
            )
            .await
        }
    };
    let c1 = uuid();
    put(c1.clone(), json!({"VCPU": 3}), json!(null))
        .await
        .expect(204);
    let gen_before = t.generation(&rp).await;

    // Capacity: 3 + 2 > 4.
    put(uuid(), json!({"VCPU": 2}), json!(null))
        .await
        .expect_error(
            409,
            Some("placement.undefined_code"),
            "Unable to allocate inventory",
        );
    let r = put(uuid(), json!({"VCPU": 2}), json!(null)).await;
    assert!(r.text().contains("exceed the capacity"), "{r:?}");
    // Consumer generation: also 409, but concurrent_update.
    put(c1.clone(), json!({"VCPU": 1}), json!(0))
        .await
        .expect_error(
            409,
            Some("placement.concurrent_update"),
            "consumer generation conflict",
        );
    // Class without inventory on the provider.
    put(uuid(), json!({"DISK_GB": 1}), json!(null))
        .await
        .expect_error(
            409,
            Some("placement.undefined_code"),
            &format!("Inventory for 'DISK_GB' on resource provider '{rp}' invalid."),
        );
    // min_unit, max_unit, step_size.
    for bad in [128, 2048, 300] {
        put(uuid(), json!({"MEMORY_MB": bad}), json!(null))
            .await
            .expect_error(
                409,
                Some("placement.undefined_code"),
                "The requested amount would violate inventory constraints.",
            );
    }
    put(uuid(), json!({"MEMORY_MB": 512}), json!(null))
        .await
        .expect(204);
    // Unknown class and unknown provider are 400s.
    put(uuid(), json!({"CUSTOM_NOPE": 1}), json!(null))
        .await
        .expect_error(
            400,
            Some("placement.undefined_code"),
            "No such resource class CUSTOM_NOPE",
        );
    let ghost = uuid();
    t.put(
        &format!("/allocations/{}", uuid()),
        "1.28",
        json!({"allocations": {&ghost: {"resources": {"VCPU": 1}}},
               "project_id": "p", "user_id": "u", "consumer_generation": null}),
    )
    .await
    .expect_error(
        400,
        None,
        &format!("Allocation for resource provider '{ghost}' that does not exist."),
    );
    // A key the schema's pattern takes that is no uuid names no provider
    // either, spelled as given; a stale consumer generation is still the
    // 409 it answers first.
    let dashes = "-".repeat(36);
    let unparsed = json!({"allocations": {&dashes: {"resources": {"VCPU": 1}}, &rp: {"resources": {"VCPU": 1}}},
                          "project_id": "p", "user_id": "u", "consumer_generation": null});
    t.put(
        &format!("/allocations/{}", uuid()),
        "1.28",
        unparsed.clone(),
    )
    .await
    .expect_error(
        400,
        None,
        &format!("Allocation for resource provider '{dashes}' that does not exist."),
    );
    let mut stale = unparsed;
    stale["consumer_generation"] = json!(7);
    t.put(&format!("/allocations/{}", uuid()), "1.28", stale)
        .await
        .expect_error(
            409,
            Some("placement.concurrent_update"),
            "consumer generation conflict",
        );
    // Failed writes changed nothing (the successful MEMORY_MB write bumped once).
    assert_eq!(t.generation(&rp).await, gen_before + 1);
    let u = t
        .get(&format!("/resource_providers/{rp}/usages"), "1.0")
        .await
        .expect(200)
        .json();
    assert_eq!(u["usages"], json!({"VCPU": 3, "MEMORY_MB": 512}));
    // Shrinking the existing consumer within capacity is fine.
    put(c1.clone(), json!({"VCPU": 4}), json!(1))
        .await
        .expect(204);
}

#[tokio::test]
async fn overcommitted_provider_may_shrink() {
    let t = TestApp::new().await;
    let rp = t.create_rp("cn").await;
    t.set_inventories(&rp, json!({"VCPU": {"total": 8}})).await;
    let c = uuid();
    t.allocate(&c, "p", "u", json!({ &rp: {"VCPU": 6} })).await;
    // Shrink the inventory below usage.
    let g = t.generation(&rp).await;
    t.put(
        &format!("/resource_providers/{rp}/inventories/VCPU"),
        "1.28",
        json!({"total": 2, "resource_provider_generation": g}),
    )
    .await
    .expect(200);
    // Still over capacity after the change, but no higher than before: allowed.
    t.put(
        &format!("/allocations/{c}"),
        "1.28",
        json!({"allocations": {&rp: {"resources": {"VCPU": 5}}},
               "project_id": "p", "user_id": "u", "consumer_generation": 1}),
    )
    .await
    .expect(204);
    // Growing is not.
    t.put(
        &format!("/allocations/{c}"),
        "1.28",
        json!({"allocations": {&rp: {"resources": {"VCPU": 6}}},
               "project_id": "p", "user_id": "u", "consumer_generation": 2}),
    )
    .await
    .expect_error(409, Some("placement.undefined_code"), "exceed the capacity");
}

#[tokio::test]
async fn huge_amounts_are_client_errors() {
    let t = TestApp::new().await;
    let rp = t.create_rp("cn").await;
    t.set_inventories(
        &rp,
        json!({"VCPU": {"total": 2147483647, "allocation_ratio": 4.0}}),
    )
    .await;
    // Two allocations of the maximum: usage beyond 32 bits.
    t.allocate(&uuid(), "p", "u", json!({ &rp: {"VCPU": 2147483647} }))
        .await;
    t.allocate(&uuid(), "p", "u", json!({ &rp: {"VCPU": 2147483647} }))
        .await;
    let u = t
        .get(&format!("/resource_providers/{rp}/usages"), "1.0")
        .await
        .expect(200)
        .json();
    assert_eq!(u["usages"]["VCPU"], json!(4294967294u64));
    assert_eq!(
        t.get("/usages?project_id=p", "1.9")
            .await
            .expect(200)
            .json(),
        json!({"usages": {"VCPU": 4294967294u64}})
    );
    assert_eq!(t.rp_names("resources=VCPU:2147483647", "1.4").await, ["cn"]);
    // Amounts beyond max_unit (and beyond 32 or 64 bits) are refused, never 500.
    for amount in [
        json!(2147483648u64),
        json!(9223372036854775807u64),
        json!(18446744073709551615u64),
    ] {
        let r = t
            .try_allocate(&uuid(), "p", "u", json!({ &rp: {"VCPU": amount} }))
            .await;
        assert!(r.status == 409 || r.status == 400, "amount {amount}: {r:?}");
        r.error();
    }
    let r = t
        .req("PUT", &format!("/allocations/{}", uuid()))
        .mv("1.28")
        .raw(
            Some("application/json"),
            format!(
                "{{\"allocations\": {{\"{rp}\": {{\"resources\": {{\"VCPU\": 99999999999999999999}}}}}}, \
                 \"project_id\": \"p\", \"user_id\": \"u\", \"consumer_generation\": null}}"
            ),
        )
        .send()
        .await;
    assert!(r.status == 409 || r.status == 400, "{r:?}");
    r.error();
}
