//! `/resource_classes`: standard and custom classes, the 1.2–1.6 rename
//! form and the 1.7 create-or-verify form.

use crate::common::TestApp;
use serde_json::json;

#[tokio::test]
async fn list_and_show() {
    let t = TestApp::new().await;
    t.get("/resource_classes", "1.1").await.expect(404);
    let b = t.get("/resource_classes", "1.2").await.expect(200).json();
    let list = b["resource_classes"].as_array().unwrap();
    let names: Vec<&str> = list.iter().map(|c| c["name"].as_str().unwrap()).collect();
    // Standard classes in their canonical order.
    assert_eq!(&names[..3], ["VCPU", "MEMORY_MB", "DISK_GB"]);
    assert!(names.contains(&"PCPU"));
    assert!(names.len() >= 21, "{}", names.len());
    assert_eq!(
        list[0],
        json!({"name": "VCPU", "links": [{"rel": "self", "href": "/resource_classes/VCPU"}]})
    );
    assert_eq!(
        t.get("/resource_classes/MEMORY_MB", "1.2")
            .await
            .expect(200)
            .json(),
        json!({"name": "MEMORY_MB", "links": [{"rel": "self", "href": "/resource_classes/MEMORY_MB"}]})
    );
    t.get("/resource_classes/CUSTOM_NOPE", "1.2")
        .await
        .expect_error(404, None, "No such resource class CUSTOM_NOPE.");
}

#[tokio::test]
async fn create_rename_delete() {
    let t = TestApp::new().await;
    let r = t
        .post("/resource_classes", "1.2", json!({"name": "CUSTOM_GPU"}))
        .await
        .expect(201);
    assert!(r.body.is_empty());
    assert!(r
        .header("location")
        .unwrap()
        .ends_with("/resource_classes/CUSTOM_GPU"));
    t.post("/resource_classes", "1.2", json!({"name": "CUSTOM_GPU"}))
        .await
        .expect_error(
            409,
            None,
            "Conflicting resource class already exists: CUSTOM_GPU",
        );
    t.post("/resource_classes", "1.2", json!({"name": "GPU"}))
        .await
        .expect_error(400, None, "'GPU' does not match");
    t.post(
        "/resource_classes",
        "1.2",
        json!({"name": format!("CUSTOM_{}", "A".repeat(249))}),
    )
    .await
    .expect_error(400, None, "is too long");
    let b = t.get("/resource_classes", "1.2").await.expect(200).json();
    let last = b["resource_classes"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(last["name"], json!("CUSTOM_GPU"));

    // 1.2–1.6: PUT with a body renames.
    let b = t
        .put(
            "/resource_classes/CUSTOM_GPU",
            "1.6",
            json!({"name": "CUSTOM_GPU2"}),
        )
        .await
        .expect(200)
        .json();
    assert_eq!(
        b,
        json!({"name": "CUSTOM_GPU2", "links": [{"rel": "self", "href": "/resource_classes/CUSTOM_GPU2"}]})
    );
    t.get("/resource_classes/CUSTOM_GPU", "1.2")
        .await
        .expect(404);
    t.put(
        "/resource_classes/VCPU",
        "1.6",
        json!({"name": "CUSTOM_CPU"}),
    )
    .await
    .expect_error(400, None, "Cannot update standard resource class VCPU");
    t.post("/resource_classes", "1.2", json!({"name": "CUSTOM_OTHER"}))
        .await
        .expect(201);
    t.put(
        "/resource_classes/CUSTOM_OTHER",
        "1.6",
        json!({"name": "CUSTOM_GPU2"}),
    )
    .await
    .expect(409);
    t.put(
        "/resource_classes/CUSTOM_NOPE",
        "1.6",
        json!({"name": "CUSTOM_NEW"}),
    )
    .await
    .expect(404);

    // 1.7+: bodiless create-or-verify.
    let r = t
        .req("PUT", "/resource_classes/CUSTOM_FPGA_X")
        .mv("1.7")
        .send()
        .await
        .expect(201);
    assert!(r
        .header("location")
        .unwrap()
        .ends_with("/resource_classes/CUSTOM_FPGA_X"));
    assert!(r.body.is_empty());
    t.req("PUT", "/resource_classes/CUSTOM_FPGA_X")
        .mv("1.7")
        .send()
        .await
        .expect(204);
    t.req("PUT", "/resource_classes/VCPU")
        .mv("1.7")
        .send()
        .await
        .expect_error(400, None, "does not match");
    t.req("PUT", "/resource_classes/CUSTOM_lower")
        .mv("1.7")
        .send()
        .await
        .expect(400);

    // Delete rules.
    t.delete("/resource_classes/VCPU", "1.2")
        .await
        .expect_error(
            400,
            None,
            "Error in delete resource class: Cannot delete standard resource class VCPU.",
        );
    t.delete("/resource_classes/CUSTOM_NOPE", "1.2")
        .await
        .expect(404);
    let rp = t.create_rp("cn").await;
    t.set_inventories(&rp, json!({"CUSTOM_GPU2": {"total": 2}}))
        .await;
    t.delete("/resource_classes/CUSTOM_GPU2", "1.2")
        .await
        .expect_error(
            409,
            None,
            "Error in delete resource class: Cannot delete resource class CUSTOM_GPU2. Class is in use in inventory.",
        );
    t.delete("/resource_classes/CUSTOM_OTHER", "1.2")
        .await
        .expect(204);
    t.get("/resource_classes/CUSTOM_OTHER", "1.2")
        .await
        .expect(404);
    // Renaming a class in use keeps the inventory attached to it.
    t.put(
        "/resource_classes/CUSTOM_GPU2",
        "1.6",
        json!({"name": "CUSTOM_GPU3"}),
    )
    .await
    .expect(200);
    let inv = t
        .get(&format!("/resource_providers/{rp}/inventories"), "1.2")
        .await
        .expect(200)
        .json();
    assert_eq!(inv["inventories"]["CUSTOM_GPU3"]["total"], json!(2));
}

#[tokio::test]
async fn resource_class_cache_headers() {
    let t = TestApp::new().await;
    let r = t.get("/resource_classes/VCPU", "1.15").await.expect(200);
    assert!(r.header("last-modified").is_some());
    // PUT and POST of classes never carry them.
    let r = t
        .req("PUT", "/resource_classes/CUSTOM_Y")
        .mv("1.15")
        .send()
        .await
        .expect(201);
    assert!(r.header("last-modified").is_none());
    assert!(r.header("cache-control").is_none());
    let r = t
        .post("/resource_classes", "1.15", json!({"name": "CUSTOM_Z"}))
        .await
        .expect(201);
    assert!(r.header("last-modified").is_none());
}
