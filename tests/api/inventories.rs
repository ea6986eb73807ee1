//! `/resource_providers/{uuid}/inventories[/{rc}]`: generation rules,
//! validation, and the in-use conflicts with their codes.

use crate::common::{uuid, TestApp};
use serde_json::json;

fn inv_path(rp: &str) -> String {
    format!("/resource_providers/{rp}/inventories")
}

#[tokio::test]
async fn replace_all_and_generations() {
    let t = TestApp::new().await;
    let rp = t.create_rp("cn").await;

    let b = t.get(&inv_path(&rp), "1.0").await.expect(200).json();
    assert_eq!(
        b,
        json!({"resource_provider_generation": 0, "inventories": {}})
    );

    // Wrong generation.
    t.put(
        &inv_path(&rp),
        "1.23",
        json!({"resource_provider_generation": 5, "inventories": {"VCPU": {"total": 8}}}),
    )
    .await
    .expect_error(
        409,
        Some("placement.concurrent_update"),
        "resource provider generation conflict",
    );

    // Defaults are filled in; the answer is the GET shape with the new generation.
    let b = t
        .put(
            &inv_path(&rp),
            "1.0",
            json!({"resource_provider_generation": 0,
                   "inventories": {"VCPU": {"total": 8},
                                   "MEMORY_MB": {"total": 1024, "reserved": 512, "min_unit": 64,
                                                 "max_unit": 512, "step_size": 64,
                                                 "allocation_ratio": 1.5}}}),
        )
        .await
        .expect(200)
        .json();
    assert_eq!(b["resource_provider_generation"], json!(1));
    assert_eq!(
        b["inventories"]["VCPU"],
        json!({"total": 8, "reserved": 0, "min_unit": 1, "max_unit": 2147483647,
               "step_size": 1, "allocation_ratio": 1.0})
    );
    assert_eq!(
        b["inventories"]["MEMORY_MB"],
        json!({"total": 1024, "reserved": 512, "min_unit": 64, "max_unit": 512,
               "step_size": 64, "allocation_ratio": 1.5})
    );
    assert_eq!(t.get(&inv_path(&rp), "1.0").await.expect(200).json(), b);

    // The same body again still bumps.
    let b2 = t
        .put(
            &inv_path(&rp),
            "1.0",
            json!({"resource_provider_generation": 1, "inventories": b["inventories"].clone()}),
        )
        .await
        .expect(200)
        .json();
    assert_eq!(b2["resource_provider_generation"], json!(2));

    // Replacing removes classes not named.
    let b3 = t
        .put(
            &inv_path(&rp),
            "1.0",
            json!({"resource_provider_generation": 2, "inventories": {"DISK_GB": {"total": 100}}}),
        )
        .await
        .expect(200)
        .json();
    assert_eq!(b3["resource_provider_generation"], json!(3));
    assert_eq!(
        b3["inventories"]
            .as_object()
            .unwrap()
            .keys()
            .collect::<Vec<_>>(),
        ["DISK_GB"]
    );
    // The provider shows the same generation.
    assert_eq!(t.generation(&rp).await, 3);

    // Empty map deletes everything (and bumps).
    let b4 = t
        .put(
            &inv_path(&rp),
            "1.0",
            json!({"resource_provider_generation": 3, "inventories": {}}),
        )
        .await
        .expect(200)
        .json();
    assert_eq!(
        b4,
        json!({"resource_provider_generation": 4, "inventories": {}})
    );

    // Unknown provider.
    t.get(&inv_path(&uuid()), "1.0").await.expect(404);
    t.put(
        &inv_path(&uuid()),
        "1.0",
        json!({"resource_provider_generation": 0, "inventories": {}}),
    )
    .await
    .expect(404);
}

#[tokio::test]
async fn single_inventory_crud() {
    let t = TestApp::new().await;
    let rp = t.create_rp("cn").await;

    // POST: 201, Location, the single inventory; generation in the body is ignored.
    let r = t
        .post(
            &inv_path(&rp),
            "1.0",
            json!({"resource_class": "DISK_GB", "total": 100, "reserved": 10,
                   "resource_provider_generation": 99}),
        )
        .await
        .expect(201);
    assert!(r
        .header("location")
        .unwrap()
        .ends_with(&format!("/resource_providers/{rp}/inventories/DISK_GB")));
    let b = r.json();
    assert_eq!(b["resource_provider_generation"], json!(1));
    assert_eq!(b["total"], json!(100));
    assert_eq!(b["reserved"], json!(10));
    assert_eq!(b["max_unit"], json!(2147483647));
    assert!(b.get("resource_class").is_none(), "{b}");

    // POST of a class already present: 409 with concurrent_update (quirk).
    t.post(
        &inv_path(&rp),
        "1.23",
        json!({"resource_class": "DISK_GB", "total": 5}),
    )
    .await
    .expect_error(409, Some("placement.concurrent_update"), "Update conflict");
    t.post(
        &inv_path(&rp),
        "1.23",
        json!({"resource_class": "CUSTOM_NOPE", "total": 5}),
    )
    .await
    .expect_error(
        400,
        Some("placement.undefined_code"),
        &format!("Unable to create inventory for resource provider {rp}: No such resource class CUSTOM_NOPE."),
    );

    // GET one.
    let b = t
        .get(&format!("{}/DISK_GB", inv_path(&rp)), "1.0")
        .await
        .expect(200)
        .json();
    assert_eq!(
        b,
        json!({"resource_provider_generation": 1, "total": 100, "reserved": 10,
               "min_unit": 1, "max_unit": 2147483647, "step_size": 1,
               "allocation_ratio": 1.0})
    );
    t.get(&format!("{}/VCPU", inv_path(&rp)), "1.0")
        .await
        .expect_error(404, None, &format!("No inventory of class VCPU for {rp}"));
    t.get(&format!("{}/CUSTOM_NOPE", inv_path(&rp)), "1.0")
        .await
        .expect(404);

    // PUT one: generation required and checked, always bumps.
    t.put(
        &format!("{}/DISK_GB", inv_path(&rp)),
        "1.0",
        json!({"total": 200}),
    )
    .await
    .expect_error(
        400,
        None,
        "'resource_provider_generation' is a required property",
    );
    t.put(
        &format!("{}/DISK_GB", inv_path(&rp)),
        "1.23",
        json!({"total": 200, "resource_provider_generation": 0}),
    )
    .await
    .expect_error(409, Some("placement.concurrent_update"), "");
    let b = t
        .put(
            &format!("{}/DISK_GB", inv_path(&rp)),
            "1.0",
            json!({"total": 200, "resource_provider_generation": 1}),
        )
        .await
        .expect(200)
        .json();
    assert_eq!(b["resource_provider_generation"], json!(2));
    assert_eq!(b["total"], json!(200));
    // Fields not given fall back to defaults (the record is replaced).
    assert_eq!(b["reserved"], json!(0));
    // A class the provider has no inventory of.
    t.put(
        &format!("{}/VCPU", inv_path(&rp)),
        "1.0",
        json!({"total": 2, "resource_provider_generation": 2}),
    )
    .await
    .expect_error(
        400,
        None,
        &format!("No inventory record with resource class for resource provider {rp}"),
    );
    t.put(
        &format!("{}/CUSTOM_NOPE", inv_path(&rp)),
        "1.0",
        json!({"total": 2, "resource_provider_generation": 2}),
    )
    .await
    .expect(404);

    // DELETE one: 204 and a bump; again 404.
    t.delete(&format!("{}/DISK_GB", inv_path(&rp)), "1.0")
        .await
        .expect(204);
    assert_eq!(t.generation(&rp).await, 3);
    t.delete(&format!("{}/DISK_GB", inv_path(&rp)), "1.0")
        .await
        .expect_error(404, None, "No inventory of class DISK_GB found for delete");
}

#[tokio::test]
async fn delete_all_inventories() {
    let t = TestApp::new().await;
    let rp = t.create_rp("cn").await;
    t.set_inventories(&rp, json!({"VCPU": {"total": 2}, "DISK_GB": {"total": 10}}))
        .await;
    // Before 1.5: 405 without Allow.
    let r = t.delete(&inv_path(&rp), "1.4").await.expect(405);
    assert!(r.header("allow").is_none(), "{r:?}");
    r.error();
    t.delete(&inv_path(&rp), "1.5").await.expect(204);
    let b = t.get(&inv_path(&rp), "1.5").await.expect(200).json();
    assert_eq!(
        b,
        json!({"resource_provider_generation": 2, "inventories": {}})
    );
    // Deleting nothing still succeeds and bumps.
    t.delete(&inv_path(&rp), "1.5").await.expect(204);
    assert_eq!(t.generation(&rp).await, 3);
}

#[tokio::test]
async fn inventory_validation() {
    let t = TestApp::new().await;
    let rp = t.create_rp("cn").await;
    let put = |inv: serde_json::Value, mv: &'static str| {
        let t = &t;
        let rp = rp.clone();
        async move {
            let g = t.generation(&rp).await;
            t.put(
                &inv_path(&rp),
                mv,
                json!({"resource_provider_generation": g, "inventories": inv}),
            )
            .await
        }
    };
    put(json!({"VCPU": {"total": 0}}), "1.0")
        .await
        .expect_error(400, None, "0 is less than the minimum of 1");
    put(json!({"VCPU": {"total": 2147483648u64}}), "1.0")
        .await
        .expect_error(
            400,
            None,
            "2147483648 is greater than the maximum of 2147483647",
        );
    put(json!({"VCPU": {"total": 4, "reserved": -1}}), "1.0")
        .await
        .expect_error(400, None, "-1 is less than the minimum of 0");
    put(json!({"VCPU": {"reserved": 1}}), "1.0")
        .await
        .expect_error(400, None, "'total' is a required property");
    put(json!({"VCPU": {"total": 4, "colour": "red"}}), "1.0")
        .await
        .expect_error(
            400,
            None,
            "Additional properties are not allowed ('colour' was unexpected)",
        );
    put(json!({"VCPU": {"total": "4"}}), "1.0")
        .await
        .expect_error(400, None, "'4' is not of type 'integer'");
    put(
        json!({"VCPU": {"total": 4, "allocation_ratio": 3.5e38}}),
        "1.0",
    )
    .await
    .expect_error(400, None, "is greater than the maximum of");
    put(json!({"CUSTOM_NOPE": {"total": 4}}), "1.0")
        .await
        .expect_error(
            400,
            None,
            &format!("Unknown resource class in inventory for resource provider {rp}: No such resource class CUSTOM_NOPE."),
        );
    // reserved == total: refused before 1.26, allowed from 1.26.
    put(json!({"VCPU": {"total": 4, "reserved": 4}}), "1.25")
        .await
        .expect_error(
            400,
            Some("placement.undefined_code"),
            &format!("Unable to update inventory for resource provider {rp}: Invalid inventory for 'VCPU' on resource provider '{rp}'. The reserved value is greater than or equal to total."),
        );
    put(json!({"VCPU": {"total": 4, "reserved": 5}}), "1.26")
        .await
        .expect_error(400, None, "The reserved value is greater than total.");
    // Nothing above changed the provider.
    assert_eq!(t.generation(&rp).await, 0);
    put(json!({"VCPU": {"total": 4, "reserved": 4}}), "1.26")
        .await
        .expect(200);
    // A tiny ratio that truncates capacity to 0 is refused before 1.26.
    put(
        json!({"VCPU": {"total": 4, "allocation_ratio": 0.1}}),
        "1.25",
    )
    .await
    .expect_error(400, None, "Invalid inventory for 'VCPU'");
    // POST validation.
    t.post(&inv_path(&rp), "1.0", json!({"total": 4}))
        .await
        .expect_error(400, None, "'resource_class' is a required property");
    t.post(
        &inv_path(&rp),
        "1.0",
        json!({"resource_class": "vcpu", "total": 4}),
    )
    .await
    .expect_error(400, None, "'vcpu' does not match");
    t.post(
        &inv_path(&rp),
        "1.0",
        json!({"resource_class": "DISK_GB", "total": 4, "reserved": 4}),
    )
    .await
    .expect_error(
        400,
        None,
        &format!("Unable to create inventory for resource provider {rp}"),
    );
}

#[tokio::test]
async fn in_use_conflicts() {
    let t = TestApp::new().await;
    let rp = t.create_rp("cn").await;
    t.set_inventories(
        &rp,
        json!({"VCPU": {"total": 8}, "DISK_GB": {"total": 100}}),
    )
    .await;
    t.allocate(&uuid(), "p", "u", json!({ &rp: {"VCPU": 6} }))
        .await;
    let g = t.generation(&rp).await;

    // PUT inventories without the used class.
    t.put(
        &inv_path(&rp),
        "1.23",
        json!({"resource_provider_generation": g, "inventories": {"DISK_GB": {"total": 100}}}),
    )
    .await
    .expect_error(
        409,
        Some("placement.inventory.inuse"),
        &format!("update conflict: Inventory for 'VCPU' on resource provider '{rp}' in use."),
    );
    // DELETE all: inventory.inuse.
    t.delete(&inv_path(&rp), "1.23")
        .await
        .expect_error(409, Some("placement.inventory.inuse"), "");
    // DELETE the single in-use class: concurrent_update (quirk).
    t.delete(&format!("{}/VCPU", inv_path(&rp)), "1.23")
        .await
        .expect_error(409, Some("placement.concurrent_update"), "");
    // An unused class can go.
    t.delete(&format!("{}/DISK_GB", inv_path(&rp)), "1.23")
        .await
        .expect(204);
    // Shrinking below usage is allowed.
    let g = t.generation(&rp).await;
    let b = t
        .put(
            &format!("{}/VCPU", inv_path(&rp)),
            "1.23",
            json!({"total": 2, "resource_provider_generation": g}),
        )
        .await
        .expect(200)
        .json();
    assert_eq!(b["total"], json!(2));
    let usages = t
        .get(&format!("/resource_providers/{rp}/usages"), "1.0")
        .await
        .expect(200)
        .json();
    assert_eq!(usages["usages"], json!({"VCPU": 6}));
}

#[tokio::test]
async fn cache_headers_from_1_15() {
    let t = TestApp::new().await;
    let rp = t.create_rp("cn").await;
    t.set_inventories(&rp, json!({"VCPU": {"total": 2}})).await;
    let r = t.get(&inv_path(&rp), "1.14").await.expect(200);
    assert!(r.header("last-modified").is_none());
    assert!(r.header("cache-control").is_none());
    let r = t.get(&inv_path(&rp), "1.15").await.expect(200);
    assert_eq!(r.header("cache-control").as_deref(), Some("no-cache"));
    let lm = r.header("last-modified").unwrap();
    assert!(lm.ends_with(" GMT") && lm.len() == 29, "{lm}");
    assert_eq!(
        r.header("content-type").as_deref(),
        Some("application/json")
    );
    // DELETE never has them.
    let r = t
        .delete(&format!("{}/VCPU", inv_path(&rp)), "1.15")
        .await
        .expect(204);
    assert!(r.header("last-modified").is_none());
    assert!(r.header("content-type").is_none());
}
