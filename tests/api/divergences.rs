//! Where a random differential run against the real Placement 16.0.0
//! found this service answering differently: each item's status, code and
//! (where clients read it) text, as Placement gives them, or, where
//! Placement fails with a 500, the 400 it should have given.

use crate::common::TestApp;
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
