//! Provider usages and project usages (`GET /usages`, grouped by consumer
//! type from 1.38).

use crate::common::{uuid, TestApp};
use serde_json::json;

#[tokio::test]
async fn provider_usages() {
    let t = TestApp::new().await;
    let rp = t.create_rp("cn").await;
    let path = format!("/resource_providers/{rp}/usages");
    assert_eq!(
        t.get(&path, "1.0").await.expect(200).json(),
        json!({"resource_provider_generation": 0, "usages": {}})
    );
    t.set_inventories(
        &rp,
        json!({"VCPU": {"total": 8}, "MEMORY_MB": {"total": 4096}}),
    )
    .await;
    assert_eq!(
        t.get(&path, "1.0").await.expect(200).json(),
        json!({"resource_provider_generation": 1, "usages": {"VCPU": 0, "MEMORY_MB": 0}})
    );
    t.allocate(
        &uuid(),
        "p",
        "u",
        json!({ &rp: {"VCPU": 2, "MEMORY_MB": 512} }),
    )
    .await;
    t.allocate(&uuid(), "p", "u", json!({ &rp: {"VCPU": 3} }))
        .await;
    assert_eq!(
        t.get(&path, "1.0").await.expect(200).json(),
        json!({"resource_provider_generation": 3, "usages": {"VCPU": 5, "MEMORY_MB": 512}})
    );
    t.get(&format!("/resource_providers/{}/usages", uuid()), "1.0")
        .await
        .expect_error(404, None, "No resource provider with uuid");
}

#[tokio::test]
async fn project_usages() {
    let t = TestApp::new().await;
    let rp = t.create_rp("cn").await;
    t.set_inventories(
        &rp,
        json!({"VCPU": {"total": 64}, "MEMORY_MB": {"total": 65536}, "DISK_GB": {"total": 1000}}),
    )
    .await;
    t.allocate(
        &uuid(),
        "p1",
        "alice",
        json!({ &rp: {"VCPU": 2, "MEMORY_MB": 1024} }),
    )
    .await;
    t.allocate(&uuid(), "p1", "bob", json!({ &rp: {"VCPU": 4} }))
        .await;
    t.allocate(&uuid(), "p2", "alice", json!({ &rp: {"DISK_GB": 10} }))
        .await;

    t.get("/usages?project_id=p1", "1.8").await.expect(404);
    assert_eq!(
        t.get("/usages?project_id=p1", "1.9")
            .await
            .expect(200)
            .json(),
        json!({"usages": {"VCPU": 6, "MEMORY_MB": 1024}})
    );
    assert_eq!(
        t.get("/usages?project_id=p1&user_id=bob", "1.9")
            .await
            .expect(200)
            .json(),
        json!({"usages": {"VCPU": 4}})
    );
    assert_eq!(
        t.get("/usages?project_id=p2", "1.9")
            .await
            .expect(200)
            .json(),
        json!({"usages": {"DISK_GB": 10}})
    );
    assert_eq!(
        t.get("/usages?project_id=nobody", "1.9")
            .await
            .expect(200)
            .json(),
        json!({"usages": {}})
    );
    t.get("/usages", "1.9")
        .await
        .expect_error(400, None, "'project_id' is a required property");
    t.get("/usages?project_id=", "1.9").await.expect(400);
    t.get("/usages?project_id=p1&colour=red", "1.9")
        .await
        .expect_error(400, None, "Invalid query string parameters");
    // consumer_type is unknown before 1.38.
    t.get("/usages?project_id=p1&consumer_type=all", "1.37")
        .await
        .expect(400);
}

#[tokio::test]
async fn project_usages_grouped_by_consumer_type() {
    let t = TestApp::new().await;
    let rp = t.create_rp("cn").await;
    t.set_inventories(
        &rp,
        json!({"VCPU": {"total": 64}, "MEMORY_MB": {"total": 65536}}),
    )
    .await;
    let put = |consumer: String, ctype: Option<&'static str>, vcpu: i64| {
        let t = &t;
        let rp = rp.clone();
        async move {
            let mut body = json!({
                "allocations": {&rp: {"resources": {"VCPU": vcpu, "MEMORY_MB": 128}}},
                "project_id": "p", "user_id": "u", "consumer_generation": null,
            });
            let mv = match ctype {
                Some(c) => {
                    body["consumer_type"] = json!(c);
                    "1.38"
                }
                None => "1.37",
            };
            t.put(&format!("/allocations/{consumer}"), mv, body)
                .await
                .expect(204);
        }
    };
    put(uuid(), Some("INSTANCE"), 1).await;
    put(uuid(), Some("INSTANCE"), 2).await;
    put(uuid(), Some("MIGRATION"), 4).await;
    put(uuid(), None, 8).await;

    assert_eq!(
        t.get("/usages?project_id=p", "1.38")
            .await
            .expect(200)
            .json(),
        json!({"usages": {
            "INSTANCE": {"VCPU": 3, "MEMORY_MB": 256, "consumer_count": 2},
            "MIGRATION": {"VCPU": 4, "MEMORY_MB": 128, "consumer_count": 1},
            "unknown": {"VCPU": 8, "MEMORY_MB": 128, "consumer_count": 1}
        }})
    );
    assert_eq!(
        t.get("/usages?project_id=p&consumer_type=all", "1.38")
            .await
            .expect(200)
            .json(),
        json!({"usages": {"all": {"VCPU": 15, "MEMORY_MB": 512, "consumer_count": 4}}})
    );
    assert_eq!(
        t.get("/usages?project_id=p&consumer_type=unknown", "1.38")
            .await
            .expect(200)
            .json(),
        json!({"usages": {"unknown": {"VCPU": 8, "MEMORY_MB": 128, "consumer_count": 1}}})
    );
    assert_eq!(
        t.get("/usages?project_id=p&consumer_type=MIGRATION", "1.38")
            .await
            .expect(200)
            .json(),
        json!({"usages": {"MIGRATION": {"VCPU": 4, "MEMORY_MB": 128, "consumer_count": 1}}})
    );
    assert_eq!(
        t.get("/usages?project_id=p&consumer_type=ALL", "1.38")
            .await
            .expect(200)
            .json(),
        json!({"usages": {}})
    );
    t.get("/usages?project_id=p&consumer_type=lower", "1.38")
        .await
        .expect(400);
    // Before 1.38: flat totals.
    assert_eq!(
        t.get("/usages?project_id=p", "1.37")
            .await
            .expect(200)
            .json(),
        json!({"usages": {"VCPU": 15, "MEMORY_MB": 512}})
    );
}

#[tokio::test]
async fn reader_of_the_project_may_read_its_usages() {
    let t = TestApp::new().await;
    let r = t
        .req("GET", "/usages?project_id=p1")
        .mv("1.9")
        .token(Some("someone:p1"))
        .header("x-roles", "reader")
        .send()
        .await
        .expect(200);
    assert_eq!(r.json(), json!({"usages": {}}));
    t.req("GET", "/usages?project_id=p2")
        .mv("1.9")
        .token(Some("someone:p1"))
        .header("x-roles", "reader")
        .send()
        .await
        .expect_error(403, None, "Policy does not allow placement:usages");
}

#[tokio::test]
async fn changing_a_consumers_owner_moves_its_usage() {
    let t = TestApp::new().await;
    let rp = t.create_rp("cn").await;
    t.set_inventories(&rp, json!({"VCPU": {"total": 8}})).await;
    let c = uuid();
    t.allocate(&c, "p1", "alice", json!({ &rp: {"VCPU": 3} }))
        .await;
    t.put(
        &format!("/allocations/{c}"),
        "1.28",
        json!({"allocations": {&rp: {"resources": {"VCPU": 3}}},
               "project_id": "p2", "user_id": "bob", "consumer_generation": 1}),
    )
    .await
    .expect(204);
    assert_eq!(
        t.get("/usages?project_id=p1", "1.9")
            .await
            .expect(200)
            .json(),
        json!({"usages": {}})
    );
    assert_eq!(
        t.get("/usages?project_id=p2&user_id=bob", "1.9")
            .await
            .expect(200)
            .json(),
        json!({"usages": {"VCPU": 3}})
    );
    let b = t
        .get(&format!("/allocations/{c}"), "1.28")
        .await
        .expect(200)
        .json();
    assert_eq!(b["project_id"], json!("p2"));
    assert_eq!(b["user_id"], json!("bob"));
    // One bump for the write, none for the owner change.
    assert_eq!(b["consumer_generation"], json!(2));
}

/// The policy target and the handler read the same `project_id`: its last
/// value, however the key is spelled. A reader of p1 asking for p2 behind
/// a first `project_id=p1` is refused, never answered with p2's usages.
#[tokio::test]
async fn a_reader_sees_only_its_own_project_whatever_the_query_repeats() {
    let t = TestApp::new().await;
    let rp = t.create_rp("cn").await;
    t.set_inventories(&rp, json!({"VCPU": {"total": 64}})).await;
    t.allocate(&uuid(), "p1", "u", json!({ &rp: {"VCPU": 1} }))
        .await;
    t.allocate(&uuid(), "p2", "u", json!({ &rp: {"VCPU": 7} }))
        .await;
    let as_reader_of_p1 = |query: &str| {
        t.req("GET", &format!("/usages?{query}"))
            .mv("1.9")
            .token(Some("u:p1"))
            .header("x-roles", "reader")
            .header("x-project-id", "p1")
    };
    for query in [
        "project_id=p2",
        "project_id=p1&project_id=p2",
        "project%5Fid=p1&project_id=p2",
        "project_id=p1&project%5fid=p2",
    ] {
        as_reader_of_p1(query).send().await.expect_error(
            403,
            None,
            "Policy does not allow placement:usages",
        );
    }
    for query in ["project_id=p1", "project_id=p2&project_id=p1"] {
        let r = as_reader_of_p1(query).send().await.expect(200);
        assert_eq!(r.json(), json!({"usages": {"VCPU": 1}}), "{query}");
    }
}
