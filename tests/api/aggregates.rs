//! `/resource_providers/{uuid}/aggregates`: the bare-list form (1.1–1.18)
//! and the generation-checked form (1.19+).

use crate::common::{uuid, TestApp};
use serde_json::{json, Value};

fn sorted(v: &Value) -> Vec<String> {
    let mut a: Vec<String> = v["aggregates"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_str().unwrap().to_string())
        .collect();
    a.sort();
    a
}

#[tokio::test]
async fn bare_list_form_before_1_19() {
    let t = TestApp::new().await;
    let rp = t.create_rp("cn").await;
    let path = format!("/resource_providers/{rp}/aggregates");
    t.get(&path, "1.0").await.expect(404);
    assert_eq!(
        t.get(&path, "1.1").await.expect(200).json(),
        json!({"aggregates": []})
    );
    let (a, b) = (uuid(), uuid());
    let mut want = vec![a.clone(), b.clone()];
    want.sort();
    let r = t.put(&path, "1.1", json!([a, b])).await.expect(200);
    let body = r.json();
    assert!(body.get("resource_provider_generation").is_none(), "{body}");
    assert_eq!(sorted(&body), want);
    assert_eq!(sorted(&t.get(&path, "1.18").await.expect(200).json()), want);
    // No generation bump before 1.19.
    assert_eq!(t.generation(&rp).await, 0);
    // The 1.19 form is not accepted at 1.18 and vice versa.
    t.put(
        &path,
        "1.18",
        json!({"aggregates": [], "resource_provider_generation": 0}),
    )
    .await
    .expect_error(400, None, "is not of type 'array'");
    t.put(&path, "1.19", json!([a]))
        .await
        .expect_error(400, None, "is not of type 'object'");
    // Duplicates and non-uuids.
    t.put(&path, "1.1", json!([a, a]))
        .await
        .expect_error(400, None, "has non-unique elements");
    t.put(&path, "1.1", json!(["not-a-uuid"]))
        .await
        .expect_error(400, None, "is not a 'uuid'");
    // Replace with the empty set.
    t.put(&path, "1.1", json!([])).await.expect(200);
    assert_eq!(
        t.get(&path, "1.1").await.expect(200).json(),
        json!({"aggregates": []})
    );
    t.put(
        &format!("/resource_providers/{}/aggregates", uuid()),
        "1.1",
        json!([]),
    )
    .await
    .expect(404);
}

#[tokio::test]
async fn generation_form_from_1_19() {
    let t = TestApp::new().await;
    let rp = t.create_rp("cn").await;
    let path = format!("/resource_providers/{rp}/aggregates");
    assert_eq!(
        t.get(&path, "1.19").await.expect(200).json(),
        json!({"aggregates": [], "resource_provider_generation": 0})
    );
    let a = uuid();
    t.put(
        &path,
        "1.23",
        json!({"aggregates": [a], "resource_provider_generation": 7}),
    )
    .await
    .expect_error(
        409,
        Some("placement.concurrent_update"),
        "Resource provider's generation already changed. Please update the generation and try again.",
    );
    t.put(&path, "1.19", json!({"aggregates": [a]}))
        .await
        .expect_error(
            400,
            None,
            "'resource_provider_generation' is a required property",
        );
    let b = t
        .put(
            &path,
            "1.19",
            json!({"aggregates": [a], "resource_provider_generation": 0}),
        )
        .await
        .expect(200)
        .json();
    assert_eq!(
        b,
        json!({"aggregates": [a], "resource_provider_generation": 1})
    );
    // Always bumps, even without a change.
    let b = t
        .put(
            &path,
            "1.19",
            json!({"aggregates": [a], "resource_provider_generation": 1}),
        )
        .await
        .expect(200)
        .json();
    assert_eq!(b["resource_provider_generation"], json!(2));
    assert_eq!(t.generation(&rp).await, 2);
    // Uppercase uuids are accepted and returned lower case.
    let up = uuid().to_uppercase();
    let b = t
        .put(
            &path,
            "1.19",
            json!({"aggregates": [up], "resource_provider_generation": 2}),
        )
        .await
        .expect(200)
        .json();
    assert_eq!(b["aggregates"], json!([up.to_lowercase()]));
}

#[tokio::test]
async fn aggregates_are_shared_between_providers() {
    let t = TestApp::new().await;
    let r1 = t.create_rp("r1").await;
    let r2 = t.create_rp("r2").await;
    let agg = uuid();
    t.set_aggregates(&r1, &[&agg]).await;
    t.set_aggregates(&r2, &[&agg]).await;
    assert_eq!(
        t.rp_names(&format!("member_of={agg}"), "1.3").await,
        ["r1", "r2"]
    );
    // Removing it from one leaves the other.
    t.set_aggregates(&r1, &[]).await;
    assert_eq!(t.rp_names(&format!("member_of={agg}"), "1.3").await, ["r2"]);
    let b = t
        .get(&format!("/resource_providers/{r2}/aggregates"), "1.19")
        .await
        .expect(200)
        .json();
    assert_eq!(b["aggregates"], json!([agg]));
}
