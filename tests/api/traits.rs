//! `/traits` and `/resource_providers/{uuid}/traits`.

use crate::common::{uuid, TestApp};
use serde_json::{json, Value};

fn names(v: &Value) -> Vec<String> {
    let mut n: Vec<String> = v["traits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap().to_string())
        .collect();
    n.sort();
    n
}

#[tokio::test]
async fn trait_crud() {
    let t = TestApp::new().await;
    t.get("/traits", "1.5").await.expect(404);
    let all = names(&t.get("/traits", "1.6").await.expect(200).json());
    assert!(all.len() > 300, "{}", all.len());
    assert!(all.contains(&"HW_CPU_X86_AVX2".to_string()));
    assert!(all.contains(&"MISC_SHARES_VIA_AGGREGATE".to_string()));
    assert!(!all.iter().any(|n| n.starts_with("CUSTOM_")));

    // Create: 201 then 204, Location both times, no body.
    let r = t
        .req("PUT", "/traits/CUSTOM_GOLD")
        .mv("1.6")
        .send()
        .await
        .expect(201);
    assert!(r
        .header("location")
        .unwrap()
        .ends_with("/traits/CUSTOM_GOLD"));
    assert!(r.body.is_empty());
    let r = t
        .req("PUT", "/traits/CUSTOM_GOLD")
        .mv("1.6")
        .send()
        .await
        .expect(204);
    assert!(r
        .header("location")
        .unwrap()
        .ends_with("/traits/CUSTOM_GOLD"));
    t.get("/traits/CUSTOM_GOLD", "1.6").await.expect(204);
    t.get("/traits/HW_CPU_X86_AVX2", "1.6").await.expect(204);
    t.get("/traits/CUSTOM_NOPE", "1.6").await.expect_error(
        404,
        None,
        "No such trait(s): CUSTOM_NOPE.",
    );

    // Only CUSTOM_ names of the right shape.
    for bad in ["GOLD", "CUSTOM_gold", "CUSTOM_", "HW_CPU_X86_AVX2"] {
        t.req("PUT", &format!("/traits/{bad}"))
            .mv("1.6")
            .send()
            .await
            .expect_error(400, None, "The trait is invalid.");
    }
    let long = format!("CUSTOM_{}", "A".repeat(249));
    t.req("PUT", &format!("/traits/{long}"))
        .mv("1.6")
        .send()
        .await
        .expect_error(400, None, "The trait is invalid.");
    let ok = format!("CUSTOM_{}", "A".repeat(248));
    t.req("PUT", &format!("/traits/{ok}"))
        .mv("1.6")
        .send()
        .await
        .expect(201);

    // Delete.
    t.delete("/traits/HW_CPU_X86_AVX2", "1.6")
        .await
        .expect_error(400, None, "Cannot delete standard trait HW_CPU_X86_AVX2.");
    t.delete("/traits/CUSTOM_NOPE", "1.6").await.expect(404);
    t.delete("/traits/CUSTOM_GOLD", "1.6").await.expect(204);
    t.get("/traits/CUSTOM_GOLD", "1.6").await.expect(404);
}

#[tokio::test]
async fn trait_list_filters() {
    let t = TestApp::new().await;
    t.create_trait("CUSTOM_A1").await;
    t.create_trait("CUSTOM_A2").await;
    t.create_trait("CUSTOM_B1").await;
    let rp = t.create_rp("cn").await;
    t.set_traits(&rp, &["CUSTOM_A2", "HW_CPU_X86_AVX2"]).await;

    let q = |query: &'static str| {
        let t = &t;
        async move {
            names(
                &t.get(&format!("/traits?{query}"), "1.6")
                    .await
                    .expect(200)
                    .json(),
            )
        }
    };
    assert_eq!(
        q("name=in:CUSTOM_B1,HW_CPU_X86_AVX2,CUSTOM_NOPE").await,
        ["CUSTOM_B1", "HW_CPU_X86_AVX2"]
    );
    assert_eq!(
        q("name=startswith:CUSTOM_").await,
        ["CUSTOM_A1", "CUSTOM_A2", "CUSTOM_B1"]
    );
    assert_eq!(
        q("name=startswith:CUSTOM_A").await,
        ["CUSTOM_A1", "CUSTOM_A2"]
    );
    assert_eq!(q("associated=true").await, ["CUSTOM_A2", "HW_CPU_X86_AVX2"]);
    assert_eq!(
        q("associated=TRUE&name=startswith:CUSTOM").await,
        ["CUSTOM_A2"]
    );
    assert_eq!(
        q("associated=false&name=startswith:CUSTOM").await,
        ["CUSTOM_A1", "CUSTOM_B1"]
    );
    t.get("/traits?name=CUSTOM_A1", "1.6").await.expect_error(
        400,
        None,
        "Badly formatted name parameter.",
    );
    t.get("/traits?associated=maybe", "1.6").await.expect_error(
        400,
        None,
        "The query parameter \"associated\" only accepts \"true\" or \"false\"",
    );
    t.get("/traits?colour=red", "1.6").await.expect_error(
        400,
        None,
        "Invalid query string parameters",
    );
}

#[tokio::test]
async fn provider_traits_and_generations() {
    let t = TestApp::new().await;
    let rp = t.create_rp("cn").await;
    let path = format!("/resource_providers/{rp}/traits");
    t.create_trait("CUSTOM_GOLD").await;

    t.get(&path, "1.5").await.expect(404);
    assert_eq!(
        t.get(&path, "1.6").await.expect(200).json(),
        json!({"traits": [], "resource_provider_generation": 0})
    );
    t.put(
        &path,
        "1.23",
        json!({"traits": ["CUSTOM_GOLD"], "resource_provider_generation": 3}),
    )
    .await
    .expect_error(
        409,
        Some("placement.concurrent_update"),
        "Resource provider's generation already changed. Please update the generation and try again.",
    );
    t.put(
        &path,
        "1.6",
        json!({"traits": ["CUSTOM_GOLD", "CUSTOM_NOPE"], "resource_provider_generation": 0}),
    )
    .await
    .expect_error(400, None, "No such trait");
    t.put(&path, "1.6", json!({"traits": ["CUSTOM_GOLD"]}))
        .await
        .expect_error(
            400,
            None,
            "'resource_provider_generation' is a required property",
        );

    let b = t
        .put(
            &path,
            "1.6",
            json!({"traits": ["CUSTOM_GOLD", "HW_CPU_X86_AVX2"], "resource_provider_generation": 0}),
        )
        .await
        .expect(200)
        .json();
    assert_eq!(b["resource_provider_generation"], json!(1));
    assert_eq!(names(&b), ["CUSTOM_GOLD", "HW_CPU_X86_AVX2"]);
    // The same set again: no bump.
    let b = t
        .put(
            &path,
            "1.6",
            json!({"traits": ["HW_CPU_X86_AVX2", "CUSTOM_GOLD"], "resource_provider_generation": 1}),
        )
        .await
        .expect(200)
        .json();
    assert_eq!(b["resource_provider_generation"], json!(1));
    assert_eq!(t.generation(&rp).await, 1);

    // A trait in use cannot be deleted.
    t.delete("/traits/CUSTOM_GOLD", "1.6").await.expect_error(
        409,
        None,
        "The trait CUSTOM_GOLD is in use by a resource provider.",
    );

    // DELETE provider traits: bumps only when something was removed.
    t.delete(&path, "1.6").await.expect(204);
    assert_eq!(
        t.get(&path, "1.6").await.expect(200).json(),
        json!({"traits": [], "resource_provider_generation": 2})
    );
    t.delete(&path, "1.6").await.expect(204);
    assert_eq!(t.generation(&rp).await, 2);
    t.delete("/traits/CUSTOM_GOLD", "1.6").await.expect(204);

    // Unknown provider.
    t.get(&format!("/resource_providers/{}/traits", uuid()), "1.6")
        .await
        .expect(404);
}

#[tokio::test]
async fn trait_cache_headers() {
    let t = TestApp::new().await;
    let r = t
        .req("PUT", "/traits/CUSTOM_X")
        .mv("1.15")
        .send()
        .await
        .expect(201);
    assert_eq!(r.header("cache-control").as_deref(), Some("no-cache"));
    assert!(r.header("last-modified").is_some());
    let r = t.get("/traits/CUSTOM_X", "1.15").await.expect(204);
    assert!(r.header("last-modified").is_some());
    let r = t.get("/traits/CUSTOM_X", "1.14").await.expect(204);
    assert!(r.header("last-modified").is_none());
    assert!(r.header("cache-control").is_none());
}

#[tokio::test]
async fn duplicate_trait_names_in_one_request() {
    let t = TestApp::new().await;
    let rp = t.create_rp("cn").await;
    t.create_trait("CUSTOM_DUP").await;
    let r = t
        .put(
            &format!("/resource_providers/{rp}/traits"),
            "1.6",
            json!({"traits": ["CUSTOM_DUP", "CUSTOM_DUP"], "resource_provider_generation": 0}),
        )
        .await;
    assert!(r.status == 200, "{r:?}");
    if r.status == 200 {
        assert_eq!(r.json()["traits"], json!(["CUSTOM_DUP"]));
    }
}
