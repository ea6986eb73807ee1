//! `GET /resource_providers` filters: name, uuid, member_of, resources,
//! required traits; and deleting a provider that has allocations.

use crate::common::{uuid, TestApp};
use serde_json::json;

#[tokio::test]
async fn list_filters_name_uuid_member_of() {
    let t = TestApp::new().await;
    let r1 = t.create_rp("r1").await;
    let r2 = t.create_rp("r2").await;
    let r3 = t.create_rp("r3").await;
    let (agg1, agg2) = (uuid(), uuid());
    t.set_aggregates(&r1, &[&agg1]).await;
    t.set_aggregates(&r2, &[&agg1, &agg2]).await;

    assert_eq!(t.rp_names("name=r2", "1.0").await, ["r2"]);
    assert!(t.rp_names("name=nope", "1.0").await.is_empty());
    assert_eq!(t.rp_names(&format!("uuid={r3}"), "1.0").await, ["r3"]);
    assert_eq!(
        t.rp_names(&format!("uuid={r3}&name=r1"), "1.0").await,
        Vec::<String>::new()
    );
    t.get("/resource_providers?uuid=not-a-uuid", "1.0")
        .await
        .expect_error(400, None, "Invalid query string parameters");
    t.get("/resource_providers?color=blue", "1.23")
        .await
        .expect_error(
            400,
            Some("placement.undefined_code"),
            "Additional properties are not allowed ('color' was unexpected)",
        );
    // member_of is unknown before 1.3.
    t.get(&format!("/resource_providers?member_of={agg1}"), "1.2")
        .await
        .expect(400);

    assert_eq!(
        t.rp_names(&format!("member_of={agg1}"), "1.3").await,
        ["r1", "r2"]
    );
    assert_eq!(
        t.rp_names(&format!("member_of={agg2}"), "1.3").await,
        ["r2"]
    );
    assert_eq!(
        t.rp_names(&format!("member_of=in:{agg2},{agg1}"), "1.3")
            .await,
        ["r1", "r2"]
    );
    assert!(t
        .rp_names(&format!("member_of={}", uuid()), "1.3")
        .await
        .is_empty());
    t.get(
        &format!("/resource_providers?member_of={agg1},{agg2}"),
        "1.3",
    )
    .await
    .expect_error(
        400,
        None,
        "Multiple values for 'member_of' must be prefixed with the 'in:' or '!in:' keyword using the valid microversion.",
    );
    t.get("/resource_providers?member_of=in:foo", "1.3")
        .await
        .expect_error(
            400,
            None,
            "Expected 'member_of' parameter to contain valid UUID(s).",
        );
    // Repeated member_of: 400 before 1.24, ANDed from 1.24.
    let both = format!("member_of={agg1}&member_of={agg2}");
    t.get(&format!("/resource_providers?{both}"), "1.23")
        .await
        .expect_error(
            400,
            Some("placement.undefined_code"),
            "Multiple member_of parameters are not supported",
        );
    assert_eq!(t.rp_names(&both, "1.24").await, ["r2"]);
    // Forbidden aggregates from 1.32.
    t.get(&format!("/resource_providers?member_of=!{agg2}"), "1.31")
        .await
        .expect_error(
            400,
            None,
            "Forbidden member_of parameters are not supported in the specified microversion",
        );
    assert_eq!(
        t.rp_names(&format!("member_of=!{agg2}"), "1.32").await,
        ["r1", "r3"]
    );
    assert_eq!(
        t.rp_names(&format!("member_of=!in:{agg1},{agg2}"), "1.32")
            .await,
        ["r3"]
    );
    assert_eq!(
        t.rp_names(&format!("member_of={agg1}&member_of=!{agg2}"), "1.32")
            .await,
        ["r1"]
    );
}

#[tokio::test]
async fn member_of_does_not_inherit_from_root_on_provider_lists() {
    let t = TestApp::new().await;
    let root = t.create_rp("root").await;
    let child = uuid();
    t.create_rp_full("child", &child, Some(&root)).await;
    let agg = uuid();
    t.set_aggregates(&root, &[&agg]).await;
    assert_eq!(
        t.rp_names(&format!("member_of={agg}"), "1.14").await,
        ["root"]
    );
}

#[tokio::test]
async fn list_filter_resources() {
    let t = TestApp::new().await;
    let big = t.create_rp("big").await;
    let small = t.create_rp("small").await;
    let _empty = t.create_rp("empty").await;
    t.set_inventories(
        &big,
        json!({"VCPU": {"total": 16, "reserved": 2, "allocation_ratio": 2.0},
               "MEMORY_MB": {"total": 4096, "step_size": 256, "max_unit": 2048}}),
    )
    .await;
    t.set_inventories(&small, json!({"VCPU": {"total": 4}}))
        .await;
    // (16-2)*2 = 28 VCPU on big.
    assert_eq!(
        t.rp_names("resources=VCPU:4", "1.4").await,
        ["big", "small"]
    );
    assert_eq!(t.rp_names("resources=VCPU:28", "1.4").await, ["big"]);
    assert!(t.rp_names("resources=VCPU:29", "1.4").await.is_empty());
    assert_eq!(
        t.rp_names("resources=VCPU:2,MEMORY_MB:512", "1.4").await,
        ["big"]
    );
    // step_size and max_unit apply.
    assert!(t
        .rp_names("resources=MEMORY_MB:500", "1.4")
        .await
        .is_empty());
    assert!(t
        .rp_names("resources=MEMORY_MB:2304", "1.4")
        .await
        .is_empty());
    // Usage counts against capacity.
    t.allocate(&uuid(), "p", "u", json!({ &small: {"VCPU": 3} }))
        .await;
    assert_eq!(t.rp_names("resources=VCPU:2", "1.4").await, ["big"]);
    assert_eq!(
        t.rp_names("resources=VCPU:1", "1.4").await,
        ["big", "small"]
    );

    // Not before 1.4.
    t.get("/resource_providers?resources=VCPU:1", "1.3")
        .await
        .expect(400);
    t.get("/resource_providers?resources=", "1.4")
        .await
        .expect_error(
            400,
            None,
            "Badly formed resources parameter. Expected resources query string parameter in form: ?resources=VCPU:2,MEMORY_MB:1024. Got: empty string.",
        );
    t.get("/resource_providers?resources=VCPU", "1.4")
        .await
        .expect_error(400, None, "Badly formed resources parameter");
    t.get("/resource_providers?resources=VCPU:x", "1.4")
        .await
        .expect_error(
            400,
            None,
            "Requested resource VCPU expected positive integer amount. Got: x.",
        );
    t.get("/resource_providers?resources=VCPU:0", "1.4")
        .await
        .expect_error(
            400,
            None,
            "Requested resource VCPU requires amount >= 1. Got: 0.",
        );
    t.get("/resource_providers?resources=CUSTOM_NOPE:1", "1.4")
        .await
        .expect_error(
            400,
            None,
            "Invalid resource class in resources parameter: No such resource class CUSTOM_NOPE.",
        );
}

#[tokio::test]
async fn list_filter_required_traits() {
    let t = TestApp::new().await;
    let a = t.create_rp("a").await;
    let b = t.create_rp("b").await;
    let _c = t.create_rp("c").await;
    t.create_trait("CUSTOM_GOLD").await;
    t.set_traits(&a, &["HW_CPU_X86_AVX2", "CUSTOM_GOLD"]).await;
    t.set_traits(&b, &["HW_CPU_X86_AVX2"]).await;

    assert_eq!(
        t.rp_names("required=HW_CPU_X86_AVX2", "1.18").await,
        ["a", "b"]
    );
    assert_eq!(
        t.rp_names("required=HW_CPU_X86_AVX2,CUSTOM_GOLD", "1.18")
            .await,
        ["a"]
    );
    // Unknown before 1.18.
    t.get("/resource_providers?required=CUSTOM_GOLD", "1.17")
        .await
        .expect(400);
    t.get("/resource_providers?required=CUSTOM_NOPE", "1.18")
        .await
        .expect_error(
            400,
            None,
            "Invalid trait(s) in \"required\" parameter: No such trait(s): CUSTOM_NOPE.",
        );
    // Forbidden traits from 1.22.
    t.get("/resource_providers?required=!CUSTOM_GOLD", "1.21")
        .await
        .expect_error(
            400,
            None,
            "Expected 'required' parameter value of the form: HW_CPU_X86_VMX,CUSTOM_MAGIC. Got: !CUSTOM_GOLD",
        );
    assert_eq!(
        t.rp_names("required=!CUSTOM_GOLD", "1.22").await,
        ["b", "c"]
    );
    assert_eq!(
        t.rp_names("required=HW_CPU_X86_AVX2,!CUSTOM_GOLD", "1.22")
            .await,
        ["b"]
    );
    t.get("/resource_providers?required=CUSTOM_GOLD,", "1.22")
        .await
        .expect_error(400, None, "Got an empty trait in: CUSTOM_GOLD,");
    // Before 1.39 the last `required` wins; from 1.39 they are ANDed and
    // `in:` means any of.
    assert_eq!(
        t.rp_names("required=CUSTOM_GOLD&required=HW_CPU_X86_AVX2", "1.38")
            .await,
        ["a", "b"]
    );
    assert_eq!(
        t.rp_names("required=CUSTOM_GOLD&required=HW_CPU_X86_AVX2", "1.39")
            .await,
        ["a"]
    );
    t.get(
        "/resource_providers?required=in:CUSTOM_GOLD,HW_CPU_X86_AVX2",
        "1.38",
    )
    .await
    .expect(400);
    assert_eq!(
        t.rp_names("required=in:CUSTOM_GOLD,HW_CPU_X86_AVX2", "1.39")
            .await,
        ["a", "b"]
    );
    assert_eq!(
        t.rp_names(
            "required=in:CUSTOM_GOLD,HW_CPU_X86_AVX2&required=!CUSTOM_GOLD",
            "1.39"
        )
        .await,
        ["b"]
    );
    t.get(
        "/resource_providers?required=in:CUSTOM_GOLD,!HW_CPU_X86_AVX2",
        "1.39",
    )
    .await
    .expect(400);
}

#[tokio::test]
async fn provider_with_allocations_cannot_be_deleted() {
    let t = TestApp::new().await;
    let rp = t.create_rp("busy").await;
    t.set_inventories(&rp, json!({"VCPU": {"total": 4}})).await;
    let c = uuid();
    t.allocate(&c, "p", "u", json!({ &rp: {"VCPU": 1} })).await;
    t.delete(&format!("/resource_providers/{rp}"), "1.23")
        .await
        .expect_error(
            409,
            Some("placement.resource_provider.inuse"),
            &format!("Unable to delete resource provider {rp}: Resource provider has allocations."),
        );
    t.delete(&format!("/allocations/{c}"), "1.0")
        .await
        .expect(204);
    // With inventory, traits and aggregates but no allocations: deletable.
    t.set_traits(&rp, &["HW_CPU_X86_AVX2"]).await;
    t.set_aggregates(&rp, &[&uuid()]).await;
    t.delete(&format!("/resource_providers/{rp}"), "1.23")
        .await
        .expect(204);
    t.get(&format!("/resource_providers/{rp}/inventories"), "1.0")
        .await
        .expect(404);
}
