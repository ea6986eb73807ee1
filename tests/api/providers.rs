//! `/resource_providers`: create, show, update, delete, trees and
//! re-parenting, and the list filters.

use crate::common::{uuid, TestApp};
use serde_json::json;

#[tokio::test]
async fn create_show_update_delete() {
    let t = TestApp::new().await;

    // 1.0: 201, empty body, Location.
    let r = t
        .post("/resource_providers", "1.0", json!({"name": "cn1"}))
        .await
        .expect(201);
    assert!(r.body.is_empty(), "{r:?}");
    let loc = r.header("location").expect("Location");
    let u1 = loc.rsplit('/').next().unwrap().to_string();
    assert!(loc.ends_with(&format!("/resource_providers/{u1}")), "{loc}");
    assert_eq!(u1.len(), 36);

    // 1.20: 200 with the body; a given uuid is kept (dashed, lower case).
    let u2 = uuid();
    let r = t
        .post(
            "/resource_providers",
            "1.20",
            json!({"name": "cn2", "uuid": u2.to_uppercase()}),
        )
        .await
        .expect(200);
    let b = r.json();
    assert_eq!(b["uuid"], json!(u2));
    assert_eq!(b["name"], json!("cn2"));
    assert_eq!(b["generation"], json!(0));
    assert_eq!(b["parent_provider_uuid"], json!(null));
    assert_eq!(b["root_provider_uuid"], json!(u2));
    let rels: Vec<&str> = b["links"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["rel"].as_str().unwrap())
        .collect();
    assert_eq!(
        rels,
        [
            "self",
            "inventories",
            "usages",
            "aggregates",
            "traits",
            "allocations"
        ]
    );
    assert_eq!(
        b["links"][0]["href"],
        json!(format!("/resource_providers/{u2}"))
    );
    assert!(r
        .header("location")
        .unwrap()
        .ends_with(&format!("/resource_providers/{u2}")));

    // 1.0 representation: no tree fields, three links.
    let b = t
        .get(&format!("/resource_providers/{u1}"), "1.0")
        .await
        .expect(200)
        .json();
    assert_eq!(b["name"], json!("cn1"));
    assert!(b.get("parent_provider_uuid").is_none(), "{b}");
    assert!(b.get("root_provider_uuid").is_none(), "{b}");
    assert_eq!(b["links"].as_array().unwrap().len(), 3);

    // Rename: 200, generation unchanged.
    let b = t
        .put(
            &format!("/resource_providers/{u1}"),
            "1.14",
            json!({"name": "renamed"}),
        )
        .await
        .expect(200)
        .json();
    assert_eq!(b["name"], json!("renamed"));
    assert_eq!(b["generation"], json!(0));
    assert_eq!(t.rp_names("", "1.0").await, ["cn2", "renamed"]);

    // Duplicates.
    t.post("/resource_providers", "1.23", json!({"name": "cn2"}))
        .await
        .expect_error(
            409,
            Some("placement.duplicate_name"),
            "Conflicting resource provider name: cn2 already exists.",
        );
    t.post(
        "/resource_providers",
        "1.23",
        json!({"name": "other", "uuid": u2}),
    )
    .await
    .expect_error(
        409,
        Some("placement.duplicate_name"),
        &format!("Conflicting resource provider uuid: {u2} already exists."),
    );
    t.put(
        &format!("/resource_providers/{u1}"),
        "1.23",
        json!({"name": "cn2"}),
    )
    .await
    .expect_error(
        409,
        Some("placement.duplicate_name"),
        "Conflicting resource provider cn2 already exists.",
    );

    // Delete, then it is gone.
    t.delete(&format!("/resource_providers/{u1}"), "1.0")
        .await
        .expect(204);
    t.get(&format!("/resource_providers/{u1}"), "1.23")
        .await
        .expect_error(
            404,
            Some("placement.undefined_code"),
            &format!("No resource provider with uuid {u1} found"),
        );
    t.delete(&format!("/resource_providers/{u1}"), "1.0")
        .await
        .expect_error(
            404,
            None,
            &format!("No resource provider with uuid {u1} found for delete"),
        );
    t.put(
        &format!("/resource_providers/{u1}"),
        "1.0",
        json!({"name": "x"}),
    )
    .await
    .expect(404);
    assert_eq!(t.rp_names("", "1.0").await, ["cn2"]);
}

#[tokio::test]
async fn name_rules() {
    let t = TestApp::new().await;
    // Up to 200 characters; unicode names are fine.
    let long = "a".repeat(200);
    t.post("/resource_providers", "1.20", json!({"name": long}))
        .await
        .expect(200);
    t.post(
        "/resource_providers",
        "1.20",
        json!({"name": "a".repeat(201)}),
    )
    .await
    .expect_error(400, None, "is too long");
    let r = t
        .post("/resource_providers", "1.20", json!({"name": "ünïcode ✓"}))
        .await
        .expect(200);
    assert_eq!(r.json()["name"], json!("ünïcode ✓"));
    t.post("/resource_providers", "1.20", json!({}))
        .await
        .expect_error(400, None, "'name' is a required property");
    // parent_provider_uuid only from 1.14.
    t.post(
        "/resource_providers",
        "1.13",
        json!({"name": "p", "parent_provider_uuid": null}),
    )
    .await
    .expect_error(400, None, "Additional properties are not allowed");
}

#[tokio::test]
async fn trees_and_reparenting() {
    let t = TestApp::new().await;
    let (a, b, c, d) = (uuid(), uuid(), uuid(), uuid());
    t.create_rp_full("a", &a, None).await;
    t.create_rp_full("b", &b, Some(&a)).await;
    t.create_rp_full("c", &c, Some(&b)).await;
    t.create_rp_full("d", &d, None).await;

    let show = |u: String| {
        let t = &t;
        async move {
            t.get(&format!("/resource_providers/{u}"), "1.37")
                .await
                .expect(200)
                .json()
        }
    };
    let cj = show(c.clone()).await;
    assert_eq!(cj["parent_provider_uuid"], json!(b));
    assert_eq!(cj["root_provider_uuid"], json!(a));

    // Creation errors.
    let x = uuid();
    t.post(
        "/resource_providers",
        "1.20",
        json!({"name": "x", "uuid": x, "parent_provider_uuid": uuid()}),
    )
    .await
    .expect_error(400, None, "parent provider UUID does not exist.");
    t.post(
        "/resource_providers",
        "1.20",
        json!({"name": "x", "uuid": x, "parent_provider_uuid": x}),
    )
    .await
    .expect_error(400, None, "parent provider UUID cannot be same as UUID");

    // Parents cannot be deleted.
    t.delete(&format!("/resource_providers/{a}"), "1.23")
        .await
        .expect_error(
            409,
            Some("placement.resource_provider.cannot_delete_parent"),
            &format!(
                "Unable to delete parent resource provider {a}: It has child resource providers."
            ),
        );

    // in_tree lists the whole tree from any member.
    assert_eq!(
        t.rp_names(&format!("in_tree={c}"), "1.14").await,
        ["a", "b", "c"]
    );
    assert_eq!(t.rp_names(&format!("in_tree={d}"), "1.14").await, ["d"]);
    assert!(t
        .rp_names(&format!("in_tree={}", uuid()), "1.14")
        .await
        .is_empty());

    // Before 1.37: changing or removing a parent is refused.
    t.put(
        &format!("/resource_providers/{b}"),
        "1.36",
        json!({"name": "b", "parent_provider_uuid": null}),
    )
    .await
    .expect_error(
        400,
        Some("placement.undefined_code"),
        "un-parenting a provider is not currently allowed.",
    );
    t.put(
        &format!("/resource_providers/{b}"),
        "1.36",
        json!({"name": "b", "parent_provider_uuid": d}),
    )
    .await
    .expect_error(
        400,
        None,
        "re-parenting a provider is not currently allowed.",
    );
    // Same parent again, or no parent key at all: fine.
    t.put(
        &format!("/resource_providers/{b}"),
        "1.36",
        json!({"name": "b", "parent_provider_uuid": a}),
    )
    .await
    .expect(200);
    let bj = t
        .put(
            &format!("/resource_providers/{b}"),
            "1.36",
            json!({"name": "b2"}),
        )
        .await
        .expect(200)
        .json();
    assert_eq!(bj["parent_provider_uuid"], json!(a));

    // Giving a root a parent is allowed from 1.14: d joins a's tree.
    let dj = t
        .put(
            &format!("/resource_providers/{d}"),
            "1.14",
            json!({"name": "d", "parent_provider_uuid": c}),
        )
        .await
        .expect(200)
        .json();
    assert_eq!(dj["root_provider_uuid"], json!(a));
    assert_eq!(dj["generation"], json!(0));

    // Loops are refused.
    t.put(
        &format!("/resource_providers/{a}"),
        "1.37",
        json!({"name": "a", "parent_provider_uuid": d}),
    )
    .await
    .expect_error(
        400,
        None,
        "creating loop in the provider tree is not allowed.",
    );
    t.put(
        &format!("/resource_providers/{b}"),
        "1.37",
        json!({"name": "b", "parent_provider_uuid": b}),
    )
    .await
    .expect_error(
        400,
        None,
        "creating loop in the provider tree is not allowed.",
    );

    // 1.37: un-parent b; its whole subtree (c, d) gets b as root.
    let bj = t
        .put(
            &format!("/resource_providers/{b}"),
            "1.37",
            json!({"name": "b", "parent_provider_uuid": null}),
        )
        .await
        .expect(200)
        .json();
    assert_eq!(bj["parent_provider_uuid"], json!(null));
    assert_eq!(bj["root_provider_uuid"], json!(b));
    assert_eq!(bj["generation"], json!(0));
    assert_eq!(show(c.clone()).await["root_provider_uuid"], json!(b));
    assert_eq!(show(d.clone()).await["root_provider_uuid"], json!(b));
    assert_eq!(t.rp_names(&format!("in_tree={a}"), "1.14").await, ["a"]);
    assert_eq!(
        t.rp_names(&format!("in_tree={d}"), "1.14").await,
        ["b", "c", "d"]
    );

    // 1.37: move c (with d) under a.
    t.put(
        &format!("/resource_providers/{c}"),
        "1.37",
        json!({"name": "c", "parent_provider_uuid": a}),
    )
    .await
    .expect(200);
    assert_eq!(show(d.clone()).await["root_provider_uuid"], json!(a));
    assert_eq!(
        t.rp_names(&format!("in_tree={a}"), "1.14").await,
        ["a", "c", "d"]
    );

    // Leaves first, then parents can go.
    for u in [&d, &c, &b, &a] {
        t.delete(&format!("/resource_providers/{u}"), "1.0")
            .await
            .expect(204);
    }
    assert!(t.rp_names("", "1.14").await.is_empty());
}
