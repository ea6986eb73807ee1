//! Requests an attacker or an unlucky client sends: generations out of any
//! stored range, bodies too large or too slow, broken version headers,
//! candidate queries with no answer and a factorial search space; plus the
//! health check and two Placement rules that hostile testing turned up
//! (member_of on sharing providers, class order in in-use messages).

use crate::common::{uuid, TestApp};
use axum::body::Body;
use axum::http::Request;
use placement::config::Settings;
use serde_json::{json, Value};
use std::time::{Duration, Instant};
use tower::ServiceExt;

/// Generations no stored generation can equal when the real one is `g`:
/// 2^32+g (g after a 32-bit cast), 2^63 (past i64), -1.
fn bad_generations(g: i64) -> [String; 3] {
    [
        ((1i64 << 32) + g).to_string(),
        "9223372036854775808".into(),
        "-1".into(),
    ]
}

fn number(text: &str) -> Value {
    serde_json::from_str(text).unwrap()
}

/// A provider with VCPU and a consumer on it at consumer generation 5 (so
/// a truncated 2^32+5 would match it).
async fn at_generation_five(t: &TestApp) -> (String, String) {
    let rp = t.create_rp("cn").await;
    t.set_inventories(&rp, json!({"VCPU": {"total": 64}})).await;
    let consumer = uuid();
    t.allocate(&consumer, "p", "u", json!({ &rp: {"VCPU": 1} }))
        .await;
    for g in 1..5 {
        t.put(
            &format!("/allocations/{consumer}"),
            "1.28",
            json!({"allocations": {&rp: {"resources": {"VCPU": 1}}},
                   "project_id": "p", "user_id": "u", "consumer_generation": g}),
        )
        .await
        .expect(204);
    }
    (rp, consumer)
}

#[tokio::test]
async fn generations_out_of_range_never_match_on_any_write_route() {
    let t = TestApp::new().await;
    let (rp, consumer) = at_generation_five(&t).await;
    let rp_gen = t.generation(&rp).await;
    for (bad, bad_rp) in bad_generations(5).iter().zip(bad_generations(rp_gen)) {
        let g = number(bad);
        let g_rp = number(&bad_rp);
        let alloc = json!({"allocations": {&rp: {"resources": {"VCPU": 2}}},
                           "project_id": "p", "user_id": "u", "consumer_generation": g});
        let r = t
            .put(&format!("/allocations/{consumer}"), "1.38", {
                let mut a = alloc.clone();
                a["consumer_type"] = json!("INSTANCE");
                a
            })
            .await;
        r.expect_error(
            409,
            Some("placement.concurrent_update"),
            &format!("got {bad}"),
        );
        let mut many = alloc.clone();
        many["consumer_type"] = json!("INSTANCE");
        t.post("/allocations", "1.38", json!({ &consumer: many }))
            .await
            .expect_error(
                409,
                Some("placement.concurrent_update"),
                &format!("got {bad}"),
            );
        let prov = |extra: Value| {
            let mut b = json!({"resource_provider_generation": g_rp});
            for (k, v) in extra.as_object().unwrap() {
                b[k] = v.clone();
            }
            b
        };
        let inv = format!("/resource_providers/{rp}/inventories");
        t.put(
            &inv,
            "1.38",
            prov(json!({"inventories": {"VCPU": {"total": 32}}})),
        )
        .await
        .expect_error(409, Some("placement.concurrent_update"), "generation");
        t.put(&format!("{inv}/VCPU"), "1.38", prov(json!({"total": 32})))
            .await
            .expect_error(409, Some("placement.concurrent_update"), "generation");
        t.put(
            &format!("/resource_providers/{rp}/traits"),
            "1.38",
            prov(json!({"traits": ["CUSTOM_X"]})),
        )
        .await
        .expect(409);
        t.put(
            &format!("/resource_providers/{rp}/aggregates"),
            "1.38",
            prov(json!({"aggregates": [uuid()]})),
        )
        .await
        .expect_error(409, Some("placement.concurrent_update"), "generation");
        let reshape = json!({
            "inventories": {&rp: {"resource_provider_generation": g_rp,
                                  "inventories": {"VCPU": {"total": 64}}}},
            "allocations": {}
        });
        t.post("/reshaper", "1.38", reshape).await.expect_error(
            409,
            Some("placement.concurrent_update"),
            &format!("given: {bad_rp}"),
        );
        let reshape_consumer = json!({
            "inventories": {&rp: {"resource_provider_generation": rp_gen,
                                  "inventories": {"VCPU": {"total": 64}}}},
            "allocations": {&consumer: many}
        });
        t.post("/reshaper", "1.38", reshape_consumer)
            .await
            .expect_error(
                409,
                Some("placement.concurrent_update"),
                &format!("got {bad}"),
            );
    }
    // Nothing was written: generations and usage are as before.
    assert_eq!(t.generation(&rp).await, rp_gen);
    let a = t
        .get(&format!("/allocations/{consumer}"), "1.28")
        .await
        .expect(200)
        .json();
    assert_eq!(a["consumer_generation"], 5);
    assert_eq!(a["allocations"][&rp]["resources"]["VCPU"], 1);
}

#[tokio::test]
async fn allocation_amounts_past_64_bits_are_refused() {
    let t = TestApp::new().await;
    let rp = t.create_rp("cn").await;
    t.set_inventories(&rp, json!({"VCPU": {"total": 8}})).await;
    let r = t
        .put(
            &format!("/allocations/{}", uuid()),
            "1.28",
            json!({"allocations": {&rp: {"resources": {"VCPU": number("18446744073709551616")}}},
                   "project_id": "p", "user_id": "u", "consumer_generation": null}),
        )
        .await;
    assert_eq!(r.status.as_u16(), 400, "{r:?}");
    // In 64 bits but over capacity: Placement's 409, never a wrap-around.
    t.put(
        &format!("/allocations/{}", uuid()),
        "1.28",
        json!({"allocations": {&rp: {"resources": {"VCPU": number("4294967297")}}},
               "project_id": "p", "user_id": "u", "consumer_generation": null}),
    )
    .await
    .expect(409);
}

#[tokio::test]
async fn member_of_excludes_sharing_providers_outside_the_aggregates() {
    let t = TestApp::new().await;
    let (agg_a, agg_b) = (uuid(), uuid());
    let cn = t.create_rp("cn").await;
    t.set_inventories(&cn, json!({"VCPU": {"total": 8}})).await;
    t.set_aggregates(&cn, &[&agg_a, &agg_b]).await;
    let ss = t.create_rp("shared-disk").await;
    t.set_inventories(&ss, json!({"DISK_GB": {"total": 100}}))
        .await;
    t.set_traits(&ss, &["MISC_SHARES_VIA_AGGREGATE"]).await;
    t.set_aggregates(&ss, &[&agg_b]).await;
    let t = &t;
    let count = |q: String| async move {
        t.get(&format!("/allocation_candidates?{q}"), "1.39")
            .await
            .expect(200)
            .json()["allocation_requests"]
            .as_array()
            .unwrap()
            .len()
    };
    // Storage reached through aggregate B, without member_of: one candidate.
    assert_eq!(count("resources=VCPU:1,DISK_GB:10".into()).await, 1);
    // member_of the root's aggregate A: the disk is not in A, so no storage.
    assert_eq!(
        count(format!("resources=VCPU:1,DISK_GB:10&member_of={agg_a}")).await,
        0
    );
    // member_of B, which holds both: the candidate is back.
    assert_eq!(
        count(format!("resources=VCPU:1,DISK_GB:10&member_of={agg_b}")).await,
        1
    );
    // Disk alone in A: no sharing provider is in A, so nothing.
    assert_eq!(
        count(format!("resources=DISK_GB:10&member_of={agg_a}")).await,
        0
    );
}

#[tokio::test]
async fn in_use_messages_list_classes_in_class_id_order() {
    let t = TestApp::new().await;
    let rp = t.create_rp("cn").await;
    t.set_inventories(
        &rp,
        json!({"VCPU": {"total": 8}, "MEMORY_MB": {"total": 1024}, "DISK_GB": {"total": 100}}),
    )
    .await;
    t.allocate(
        &uuid(),
        "p",
        "u",
        json!({ &rp: {"DISK_GB": 1, "MEMORY_MB": 1, "VCPU": 1} }),
    )
    .await;
    let g = t.generation(&rp).await;
    t.put(
        &format!("/resource_providers/{rp}/inventories"),
        "1.26",
        json!({"resource_provider_generation": g, "inventories": {}}),
    )
    .await
    .expect_error(
        409,
        Some("placement.inventory.inuse"),
        "Inventory for 'VCPU, MEMORY_MB, DISK_GB'",
    );
    // Missing inventory lists the same way.
    let other = t.create_rp("empty").await;
    t.try_allocate(
        &uuid(),
        "p",
        "u",
        json!({ &other: {"DISK_GB": 1, "VCPU": 1} }),
    )
    .await
    .expect_error(409, None, "Inventory for 'VCPU, DISK_GB'");
}

#[tokio::test]
async fn a_search_without_answer_ends_within_the_step_budget() {
    let t = TestApp::new().await;
    // 11 children of 6 units, 12 groups that each need a whole child:
    // about 1.2e9 search steps unbounded (a day at 15 groups).
    t.req("PUT", "/resource_classes/CUSTOM_X")
        .mv("1.7")
        .send()
        .await
        .expect(201);
    let root = t.create_rp("root").await;
    for i in 0..11 {
        let child = uuid();
        t.create_rp_full(&format!("c{i}"), &child, Some(&root))
            .await;
        t.set_inventories(&child, json!({"CUSTOM_X": {"total": 6}}))
            .await;
    }
    let groups: Vec<String> = (1..=12)
        .map(|i| format!("resources{i}=CUSTOM_X:6"))
        .collect();
    let q = format!(
        "/allocation_candidates?{}&group_policy=none",
        groups.join("&")
    );
    let started = Instant::now();
    let r = t.get(&q, "1.39").await.expect(200);
    assert_eq!(r.json()["allocation_requests"], json!([]));
    // Generous for a debug build on a loaded machine; unbounded it is hours.
    assert!(started.elapsed() < Duration::from_secs(30));
}

#[tokio::test]
async fn a_body_over_the_limit_is_413() {
    let t = TestApp::with_settings(Settings {
        http_max_body_bytes: 1024,
        ..Settings::default()
    })
    .await;
    let big = json!({"name": "x".repeat(2000)});
    let r = t.post("/resource_providers", "1.20", big).await;
    assert_eq!(r.status.as_u16(), 413, "{r:?}");
    r.error();
    // Without Content-Length (chunked), the limit still holds.
    let stream = futures_chunks(vec![vec![b' '; 800], vec![b' '; 800]], Duration::ZERO);
    let req = Request::post("/resource_providers")
        .header("x-auth-token", "admin")
        .header("content-type", "application/json")
        .body(Body::from_stream(stream))
        .unwrap();
    let resp = t.app.clone().oneshot(req).await.unwrap();
    assert_eq!(resp.status().as_u16(), 413);
}

#[tokio::test]
async fn a_slow_body_is_cut_at_the_timeout() {
    let t = TestApp::with_settings(Settings {
        http_body_timeout_secs: 1,
        ..Settings::default()
    })
    .await;
    let stream = futures_chunks(
        vec![b"{\"na".to_vec(), b"me\": \"x\"}".to_vec()],
        Duration::from_secs(5),
    );
    let req = Request::post("/resource_providers")
        .header("x-auth-token", "admin")
        .header("content-type", "application/json")
        .body(Body::from_stream(stream))
        .unwrap();
    let started = Instant::now();
    let resp = t.app.clone().oneshot(req).await.unwrap();
    assert_eq!(resp.status().as_u16(), 408);
    assert_eq!(resp.headers()["connection"], "close");
    assert!(started.elapsed() < Duration::from_secs(4));
    // Nothing was created.
    let list = t
        .get("/resource_providers", "1.20")
        .await
        .expect(200)
        .json();
    assert_eq!(list["resource_providers"], json!([]));
}

/// A body stream: the chunks, each after `pause`.
fn futures_chunks(
    chunks: Vec<Vec<u8>>,
    pause: Duration,
) -> impl futures_util::Stream<Item = Result<Vec<u8>, std::io::Error>> + Send {
    let (tx, rx) = tokio::sync::mpsc::channel(1);
    tokio::spawn(async move {
        for c in chunks {
            tokio::time::sleep(pause).await;
            if tx.send(Ok(c)).await.is_err() {
                return;
            }
        }
    });
    tokio_stream_from(rx)
}

fn tokio_stream_from(
    mut rx: tokio::sync::mpsc::Receiver<Result<Vec<u8>, std::io::Error>>,
) -> impl futures_util::Stream<Item = Result<Vec<u8>, std::io::Error>> + Send {
    futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx))
}

#[tokio::test]
async fn a_version_header_that_is_not_text_is_400() {
    let t = TestApp::new().await;
    let req = Request::get("/resource_providers")
        .header("x-auth-token", "admin")
        .header(
            "openstack-api-version",
            axum::http::HeaderValue::from_bytes(b"placement 1.\xff").unwrap(),
        )
        .body(Body::empty())
        .unwrap();
    let resp = t.app.clone().oneshot(req).await.unwrap();
    assert_eq!(resp.status().as_u16(), 400);
}

#[tokio::test]
async fn healthcheck_needs_no_token_and_reports_the_database() {
    let t = TestApp::new().await;
    let r = t.req("GET", "/healthcheck").token(None).send().await;
    assert_eq!(r.status.as_u16(), 200);
    assert_eq!(r.text(), "OK");
    let r = t
        .req("GET", "/healthcheck")
        .token(None)
        .header("accept", "application/json")
        .send()
        .await
        .expect(200);
    assert_eq!(r.json(), json!({"detailed": false, "reasons": ["OK"]}));
    // Every Accept gets an answer, as from oslo.middleware (load balancers
    // send text/plain, text/html or nothing JSON at all).
    for accept in ["text/plain", "text/html", "application/xml", "*/*"] {
        let r = t
            .req("GET", "/healthcheck")
            .token(None)
            .header("accept", accept)
            .send()
            .await;
        assert_eq!(r.status.as_u16(), 200, "{accept}");
        assert_eq!(r.text(), "OK", "{accept}");
    }
    let r = t.req("HEAD", "/healthcheck").token(None).send().await;
    assert_eq!(r.status.as_u16(), 204);
    // With the database gone it says so: 503 and the reason.
    t.pool.close().await;
    let r = t.req("GET", "/healthcheck").token(None).send().await;
    assert_eq!(r.status.as_u16(), 503);
    assert!(r.text().starts_with("database unavailable"), "{r:?}");
    // And the API answers 503 with Placement's body and Retry-After.
    let r = t.get("/resource_providers", "1.39").await;
    assert_eq!(r.header("retry-after").as_deref(), Some("1"));
    r.expect_error(503, Some("placement.database.unavailable"), "unavailable");
}
