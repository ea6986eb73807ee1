//! Where a random differential run against the real Placement 16.0.0
//! found this service answering differently: each item's status, code and
//! (where clients read it) text, as Placement gives them, or, where
//! Placement fails with a 500, the 400 it should have given.

use crate::common::{uuid, TestApp};
use serde_json::json;

/// H: a repeated `limit` is validated in every value (Placement answers
/// `limit=x&limit=1` with a 500), and the first is used, as Placement's
/// own gabbits pin it.
#[tokio::test]
async fn a_repeated_limit_is_validated_and_the_first_one_applies() {
    let t = TestApp::new().await;
    for name in ["a", "b", "c"] {
        let rp = t.create_rp(name).await;
        t.set_inventories(&rp, json!({"VCPU": {"total": 4}})).await;
    }
    t.get(
        "/allocation_candidates?resources=VCPU:1&limit=x&limit=1",
        "1.29",
    )
    .await
    .expect_error(400, None, "Invalid query string parameters");
    let one = t
        .get(
            "/allocation_candidates?resources=VCPU:1&limit=1&limit=5",
            "1.29",
        )
        .await
        .expect(200)
        .json();
    assert_eq!(one["allocation_requests"].as_array().map(Vec::len), Some(1));
    // Likewise group_policy: an invalid value anywhere is a 400.
    t.get(
        "/allocation_candidates?resources1=VCPU:1&resources2=VCPU:1&group_policy=bogus&group_policy=none",
        "1.29",
    )
    .await
    .expect_error(400, None, "Invalid query string parameters");
}

/// The full detail of an error, as Placement composes it (webob's
/// explanation, then the message with its newlines flattened).
fn detail_of(r: &crate::common::Resp) -> String {
    r.error()["detail"].as_str().unwrap_or_default().to_string()
}

const BAD_REQUEST: &str =
    "The server could not comply with the request since it is either malformed or otherwise incorrect.\n\n ";

/// A: an empty name is refused on create (Placement's object refuses it),
/// accepted on rename (both accept it).
#[tokio::test]
async fn an_empty_provider_name_is_refused_on_create_only() {
    let t = TestApp::new().await;
    for mv in ["1.0", "1.20", "1.39"] {
        let p = uuid();
        let r = t
            .post("/resource_providers", mv, json!({"name": "", "uuid": p}))
            .await
            .expect_error(400, None, "name is required");
        assert_eq!(
            detail_of(&r),
            format!("{BAD_REQUEST}Unable to create resource provider \"\", {p}: Object action create failed because: name is required  ")
        );
    }
    let rp = t.create_rp("named").await;
    t.put(
        &format!("/resource_providers/{rp}"),
        "1.39",
        json!({"name": ""}),
    )
    .await
    .expect(200);
}

/// B: the candidate snapshot follows a class rename: summaries and
/// requests name the class by its new name, and the old name is unknown.
#[tokio::test]
async fn candidates_follow_a_class_rename() {
    let t = TestApp::new().await;
    t.put("/resource_classes/CUSTOM_OLD", "1.7", json!(null))
        .await
        .expect(201);
    let rp = t.create_rp("p").await;
    t.set_inventories(
        &rp,
        json!({"CUSTOM_OLD": {"total": 5}, "VCPU": {"total": 4}}),
    )
    .await;
    let before = t
        .get("/allocation_candidates?resources=VCPU:1", "1.29")
        .await
        .expect(200)
        .json();
    assert!(before["provider_summaries"][&rp]["resources"]["CUSTOM_OLD"].is_object());
    t.put(
        "/resource_classes/CUSTOM_OLD",
        "1.6",
        json!({"name": "CUSTOM_NEW"}),
    )
    .await
    .expect(200);
    let after = t
        .get("/allocation_candidates?resources=VCPU:1", "1.29")
        .await
        .expect(200)
        .json();
    let resources = &after["provider_summaries"][&rp]["resources"];
    assert!(
        resources["CUSTOM_NEW"].is_object() && resources["CUSTOM_OLD"].is_null(),
        "{after}"
    );
    let asked = t
        .get("/allocation_candidates?resources=CUSTOM_NEW:1", "1.29")
        .await
        .expect(200)
        .json();
    let request = &asked["allocation_requests"][0]["allocations"][&rp]["resources"];
    assert_eq!(request, &json!({"CUSTOM_NEW": 1}), "{asked}");
    // The request can be put back as it came.
    t.put(
        &format!("/allocations/{}", uuid()),
        "1.29",
        json!({"allocations": asked["allocation_requests"][0]["allocations"],
               "project_id": "p", "user_id": "u", "consumer_generation": null}),
    )
    .await
    .expect(204);
}

/// C: the consumer generation is checked before the body's providers and
/// classes, on PUT, POST and the reshaper.
#[tokio::test]
async fn a_stale_consumer_generation_wins_over_unknown_providers() {
    let t = TestApp::new().await;
    let rp = t.create_rp("p").await;
    let (c, ghost) = (uuid(), uuid());
    let conflict = "consumer generation conflict - expected null but got 3";
    for allocations in [
        json!({ &ghost: {"resources": {"VCPU": 1}} }),
        json!({ &rp: {"resources": {"CUSTOM_NOPE": 1}} }),
    ] {
        let one = json!({"allocations": allocations, "project_id": "p", "user_id": "u", "consumer_generation": 3});
        t.put(&format!("/allocations/{c}"), "1.28", one.clone())
            .await
            .expect_error(409, Some("placement.concurrent_update"), conflict);
        t.post("/allocations", "1.28", json!({ &c: one.clone() }))
            .await
            .expect_error(409, Some("placement.concurrent_update"), conflict);
        t.post("/reshaper", "1.30", json!({"inventories": {&rp: {"resource_provider_generation": 0, "inventories": {}}}, "allocations": { &c: one }}))
            .await
            .expect_error(409, Some("placement.concurrent_update"), conflict);
    }
}

/// D: one inventory's body and generation are checked before its class.
#[tokio::test]
async fn an_inventory_update_checks_its_body_before_its_class() {
    let t = TestApp::new().await;
    let rp = t.create_rp("p").await;
    let path = format!("/resource_providers/{rp}/inventories/CUSTOM_NOPE");
    t.put(
        &path,
        "1.39",
        json!({"resource_provider_generation": 7, "total": 1}),
    )
    .await
    .expect_error(
        409,
        Some("placement.concurrent_update"),
        "resource provider generation conflict",
    );
    t.put(
        &path,
        "1.39",
        json!({"resource_provider_generation": 0, "total": 1, "reserved": 2}),
    )
    .await
    .expect_error(400, None, "The reserved value is greater than total");
    t.put(
        &path,
        "1.39",
        json!({"resource_provider_generation": 0, "total": 1}),
    )
    .await
    .expect_error(404, None, "No such resource class CUSTOM_NOPE");
}

/// E: a provider's traits body is validated before the provider is looked up.
#[tokio::test]
async fn a_traits_body_is_validated_before_the_provider() {
    let t = TestApp::new().await;
    t.put(
        &format!("/resource_providers/{}/traits", uuid()),
        "1.6",
        json!({"traits": []}),
    )
    .await
    .expect_error(
        400,
        None,
        "'resource_provider_generation' is a required property",
    );
}

/// F: with only resourceless groups, `same_subtree` names are not looked at.
#[tokio::test]
async fn resourceless_requests_miss_their_resources_first() {
    let t = TestApp::new().await;
    let r = t
        .get(
            "/allocation_candidates?required1=HW_CPU_X86_AVX2&same_subtree=1,_X",
            "1.36",
        )
        .await
        .expect_error(
            400,
            Some("placement.query.missing_value"),
            "There must be at least one resources or resources[$S] parameter.",
        );
    assert_eq!(
        detail_of(&r),
        format!("{BAD_REQUEST}There must be at least one resources or resources[$S] parameter.  ")
    );
}

/// G: an empty `name=` filters nothing.
#[tokio::test]
async fn an_empty_name_filter_lists_every_provider() {
    let t = TestApp::new().await;
    t.create_rp("one").await;
    t.create_rp("two").await;
    assert_eq!(t.rp_names("name=", "1.0").await.len(), 2);
    assert!(t.rp_names("name=one", "1.0").await.len() == 1);
}

/// The wording Placement's handlers give, word for word.
#[tokio::test]
async fn handler_wording_is_placements() {
    let t = TestApp::new().await;
    let ghost = uuid();
    let r = t
        .get(&format!("/resource_providers/{ghost}/allocations"), "1.0")
        .await;
    assert_eq!(
        detail_of(&r.expect_error(404, None, "not found")),
        format!("The resource could not be found.\n\n Resource provider '{ghost}' not found: No resource provider with uuid {ghost} found  ")
    );
    t.get(&format!("/resource_providers/{ghost}/inventories"), "1.0")
        .await
        .expect_error(404, None, &format!("No resource provider with uuid {ghost} found : No resource provider with uuid {ghost} found"));
    t.get(&format!("/resource_providers/{ghost}/traits"), "1.6")
        .await
        .expect_error(404, None, &format!("No resource provider with uuid {ghost} found: No resource provider with uuid {ghost} found"));
    let rp = t.create_rp("p").await;
    t.set_inventories(&rp, json!({"VCPU": {"total": 4}})).await;
    t.put(
        &format!("/resource_providers/{rp}/traits"),
        "1.6",
        json!({"traits": ["CUSTOM_NOPE"], "resource_provider_generation": 1}),
    )
    .await
    .expect_error(400, None, "No such trait CUSTOM_NOPE");
    t.put(&format!("/resource_providers/{rp}/inventories/MEMORY_MB"), "1.0", json!({"resource_provider_generation": 1, "total": 4}))
        .await
        .expect_error(400, None, &format!("No inventory record with resource class for resource provider {rp}: No inventory of class MEMORY_MB found."));
    t.delete(&format!("/resource_providers/{rp}/inventories/MEMORY_MB"), "1.0")
        .await
        .expect_error(404, None, "No inventory of class MEMORY_MB found for delete: No inventory of class MEMORY_MB found for delete");
    t.delete(
        &format!("/resource_providers/{rp}/inventories/CUSTOM_NOPE"),
        "1.0",
    )
    .await
    .expect_error(
        404,
        None,
        "No inventory of class CUSTOM_NOPE found for delete: No such resource class CUSTOM_NOPE.",
    );
    let r = t
        .req("PATCH", &format!("/resource_providers/{rp}"))
        .send()
        .await;
    assert_eq!(
        detail_of(&r.expect_error(405, None, "PATCH")),
        "The method PATCH is not allowed for this resource. \n\n The method specified is not allowed for this resource."
    );
}

/// jsonschema 4.26's texts, as Python printed them for these bodies.
#[tokio::test]
async fn schema_messages_are_jsonschemas() {
    let t = TestApp::new().await;
    let r = t
        .post(
            "/reshaper",
            "1.30",
            json!({"inventories": {}, "allocations": {}}),
        )
        .await
        .expect_error(400, None, "JSON does not validate: {} should be non-empty");
    assert!(detail_of(&r).contains("Failed validating 'minProperties' in schema['properties']['inventories']:     {'type': 'object',      'patternProperties': {'^[0-9a-fA-F-]{36}$': {'type': 'object',"));
    let r = t
        .post("/resource_classes", "1.2", json!({"name": "CUSTOM_BOGU$$"}))
        .await
        .expect(400);
    assert_eq!(
        detail_of(&r),
        format!("{BAD_REQUEST}JSON does not validate: 'CUSTOM_BOGU$$' does not match '^CUSTOM_[A-Z0-9_]+$'  Failed validating 'pattern' in schema['properties']['name']:     {{'type': 'string', 'pattern': '^CUSTOM_[A-Z0-9_]+$', 'maxLength': 255}}  On instance['name']:     'CUSTOM_BOGU$$'  ")
    );
    let rp = t.create_rp("p").await;
    let r = t
        .put(
            &format!("/resource_providers/{rp}/aggregates"),
            "1.19",
            json!({"aggregates": ["a", "b", "c"], "resource_provider_generation": 0}),
        )
        .await
        .expect(400);
    assert_eq!(
        detail_of(&r),
        format!("{BAD_REQUEST}JSON does not validate: 'c' is not a 'uuid'  Failed validating 'format' in schema['properties']['aggregates']['items']:     {{'type': 'string', 'format': 'uuid'}}  On instance['aggregates'][2]:     'c'  ")
    );
    // Draft 2020-12: a whole number is an integer, stored as one.
    t.put(
        &format!("/resource_providers/{rp}/inventories"),
        "1.0",
        json!({"resource_provider_generation": 0, "inventories": {"VCPU": {"total": 4.0}}}),
    )
    .await
    .expect(200);
}
