//! Malformed input on every write route: broken JSON, wrong types, unknown
//! fields, huge numbers, bad uuids, unknown classes. Every one must be a 400
//! in Placement's error shape, never a 5xx. Also odd paths and query strings
//! on read routes: never a 5xx.

use crate::common::{uuid, Resp, TestApp};
use serde_json::{json, Value};

/// A body to send: raw bytes (for broken JSON) or a JSON value.
enum Body {
    Raw(Vec<u8>),
    Json(Value),
}

impl Body {
    fn show(&self) -> String {
        let s = match self {
            Body::Raw(b) => String::from_utf8_lossy(b).into_owned(),
            Body::Json(v) => v
                .to_string()
                .replace(&format!("\"{HUGE}\""), "99999999999999999999"),
        };
        if s.len() > 120 {
            format!("{}... ({} bytes)", &s[..120], s.len())
        } else {
            s
        }
    }
}

fn raw(s: &str) -> Body {
    Body::Raw(s.as_bytes().to_vec())
}

/// Bodies no JSON route may accept.
fn generic_bodies() -> Vec<Body> {
    let mut v: Vec<Body> = [
        "",
        " ",
        "{",
        "}",
        "[1,",
        "nul",
        "{\"a\":}",
        "{'name': 'x'}",
        "{\"name\": \"x\",}",
        "{\"name\": \"x\"} trailing",
        "\u{0}",
        "1e400",
        "-1e400",
        "{\"name\": 1e400}",
        "{\"name\": \"x\", \"uuid\": 1e400}",
        "99999999999999999999",
        "[]",
        "[{}]",
        "\"string\"",
        "null",
        "true",
        "0",
        "{}",
        "{\"name\": \"\\ud800\"}",
    ]
    .iter()
    .map(|s| raw(s))
    .collect();
    v.push(Body::Raw(vec![0xff, 0xfe, b'{', b'}']));
    v.push(Body::Raw(b"{\"name\": \"\xc3\x28\"}".to_vec()));
    // Far deeper than any parser should recurse.
    v.push(Body::Raw("[".repeat(100_000).into_bytes()));
    v.push(Body::Raw(
        format!("{}{}", "{\"a\":".repeat(50_000), "1").into_bytes(),
    ));
    v
}

struct Target {
    method: &'static str,
    path: String,
    mv: &'static str,
    bodies: Vec<Body>,
}

fn js(v: Value) -> Body {
    Body::Json(v)
}

/// Stands for a number too big for 64 bits, which serde_json cannot hold.
const HUGE: &str = "__HUGE__";

async fn send(t: &TestApp, target: &Target, body: &Body) -> Resp {
    let req = t.req(target.method, &target.path).mv(target.mv);
    let bytes = match body {
        Body::Raw(b) => b.clone(),
        Body::Json(v) => v
            .to_string()
            .replace(&format!("\"{HUGE}\""), "99999999999999999999")
            .into_bytes(),
    };
    req.raw(Some("application/json"), bytes).send().await
}

/// Checks a 400 in the error shape; returns a description of what is wrong.
fn check_400(r: &Resp) -> Option<String> {
    if r.status != 400 {
        return Some(format!("status {}", r.status.as_u16()));
    }
    if let Some(p) = r.shape_problem() {
        return Some(format!("not the error shape: {p}"));
    }
    match r.json()["errors"][0].get("code") {
        None => None,
        Some(c) if c == "placement.undefined_code" => None,
        Some(c) => Some(format!("unexpected code {c}")),
    }
}

#[tokio::test]
async fn malformed_bodies_on_every_write_route_are_400() {
    let t = TestApp::new().await;
    let rp = t.create_rp("cn").await;
    t.set_inventories(&rp, json!({"VCPU": {"total": 8}})).await;
    let g = t.generation(&rp).await;
    let c = uuid();
    let ghost = uuid();
    // Sent as the integer literal 99999999999999999999 (see `send`).
    let huge = || json!(HUGE);
    let alloc = |resources: Value| json!({ &rp: {"resources": resources} });
    let put_alloc = |allocations: Value| {
        json!({"allocations": allocations, "project_id": "p", "user_id": "u",
               "consumer_generation": null})
    };

    let targets = vec![
        Target {
            method: "POST",
            path: "/resource_providers".into(),
            mv: "1.39",
            bodies: vec![
                js(json!({"name": 1})),
                js(json!({"name": null})),
                js(json!({"name": ["x"]})),
                js(json!({"name": {"x": 1}})),
                js(json!({"name": "x", "extra": 1})),
                js(json!({"name": "x", "generation": 0})),
                js(json!({"name": "a".repeat(201)})),
                js(json!({"name": "x", "uuid": "not-a-uuid"})),
                js(json!({"name": "x", "uuid": 12})),
                js(json!({"name": "x", "uuid": huge()})),
                js(json!({"name": "x", "uuid": ""})),
                js(json!({"name": "x", "parent_provider_uuid": "zzz"})),
                js(json!({"name": "x", "parent_provider_uuid": ghost})),
                js(json!({"name": "x", "parent_provider_uuid": 5})),
            ],
        },
        Target {
            method: "POST",
            path: "/resource_providers".into(),
            mv: "1.0",
            bodies: vec![
                js(json!({"name": "x", "parent_provider_uuid": null})),
                js(json!({"name": HUGE})),
            ],
        },
        Target {
            method: "PUT",
            path: format!("/resource_providers/{rp}"),
            mv: "1.39",
            bodies: vec![
                js(json!({"name": 5})),
                js(json!({"name": "x", "uuid": rp})),
                js(json!({"name": "x", "generation": 0})),
                js(json!({"name": "x", "root_provider_uuid": rp})),
                js(json!({"name": "x", "parent_provider_uuid": "nope"})),
                js(json!({"name": "x", "parent_provider_uuid": ghost})),
                js(json!({"parent_provider_uuid": null})),
            ],
        },
        Target {
            method: "PUT",
            path: format!("/resource_providers/{rp}/inventories"),
            mv: "1.39",
            bodies: vec![
                js(json!({"resource_provider_generation": "0", "inventories": {}})),
                js(json!({"resource_provider_generation": 1.5, "inventories": {}})),
                js(json!({"resource_provider_generation": null, "inventories": {}})),
                js(json!({"resource_provider_generation": g, "inventories": []})),
                js(json!({"resource_provider_generation": g, "inventories": {"VCPU": 4}})),
                js(json!({"resource_provider_generation": g, "inventories": {"VCPU": {"total": huge()}}})),
                js(json!({"resource_provider_generation": g, "inventories": {"VCPU": {"total": 2147483648u64}}})),
                js(json!({"resource_provider_generation": g, "inventories": {"VCPU": {"total": 18446744073709551615u64}}})),
                js(json!({"resource_provider_generation": g, "inventories": {"VCPU": {"total": -1}}})),
                js(json!({"resource_provider_generation": g, "inventories": {"VCPU": {"total": 1.5}}})),
                js(json!({"resource_provider_generation": g, "inventories": {"VCPU": {"total": "1"}}})),
                js(json!({"resource_provider_generation": g, "inventories": {"VCPU": {"total": true}}})),
                js(json!({"resource_provider_generation": g, "inventories": {"VCPU": {"total": 4, "reserved": 5}}})),
                js(json!({"resource_provider_generation": g, "inventories": {"VCPU": {"total": 4, "max_unit": 0}}})),
                js(json!({"resource_provider_generation": g, "inventories": {"VCPU": {"total": 4, "allocation_ratio": "x"}}})),
                js(json!({"resource_provider_generation": g, "inventories": {"VCPU": {"total": 4, "allocation_ratio": 1e39}}})),
                js(json!({"resource_provider_generation": g, "inventories": {"VCPU": {"total": 4, "allocation_ratio": -1.0}}})),
                js(json!({"resource_provider_generation": g, "inventories": {"VCPU": {"total": 4, "extra": 1}}})),
                js(json!({"resource_provider_generation": g, "inventories": {"vcpu": {"total": 4}}})),
                js(json!({"resource_provider_generation": g, "inventories": {"CUSTOM_NOPE": {"total": 4}}})),
                js(json!({"resource_provider_generation": g, "inventories": {}, "extra": 1})),
                js(json!({"inventories": {}})),
                raw(&format!("{{\"resource_provider_generation\": {g}, \"inventories\": {{\"VCPU\": {{\"total\": 1e400}}}}}}")),
            ],
        },
        Target {
            method: "POST",
            path: format!("/resource_providers/{rp}/inventories"),
            mv: "1.39",
            bodies: vec![
                js(json!({"resource_class": "DISK_GB"})),
                js(json!({"resource_class": 5, "total": 1})),
                js(json!({"resource_class": "disk_gb", "total": 1})),
                js(json!({"resource_class": "CUSTOM_NOPE", "total": 1})),
                js(json!({"resource_class": "DISK_GB", "total": huge()})),
                js(json!({"resource_class": "DISK_GB", "total": 1, "min_unit": 0})),
                js(json!({"resource_class": "DISK_GB", "total": 1, "step_size": "1"})),
                js(json!({"resource_class": "DISK_GB", "total": 1, "foo": 1})),
                js(json!({"resource_class": "DISK_GB", "total": 1, "resource_provider_generation": "x"})),
                js(json!({"resource_class": "", "total": 1})),
            ],
        },
        Target {
            method: "PUT",
            path: format!("/resource_providers/{rp}/inventories/VCPU"),
            mv: "1.39",
            bodies: vec![
                js(json!({"total": 1})),
                js(json!({"total": "1", "resource_provider_generation": g})),
                js(json!({"total": 1, "resource_provider_generation": "x"})),
                js(json!({"total": 1, "resource_provider_generation": g, "resource_class": "VCPU"})),
                js(json!({"total": huge(), "resource_provider_generation": g})),
                js(json!({"total": 0, "resource_provider_generation": g})),
                js(json!({"total": 2, "reserved": 3, "resource_provider_generation": g})),
            ],
        },
        Target {
            method: "PUT",
            path: format!("/resource_providers/{rp}/aggregates"),
            mv: "1.1",
            bodies: vec![
                js(json!({"aggregates": []})),
                js(json!(["nope"])),
                js(json!([1])),
                js(json!([null])),
                js(json!([ghost, ghost])),
            ],
        },
        Target {
            method: "PUT",
            path: format!("/resource_providers/{rp}/aggregates"),
            mv: "1.39",
            bodies: vec![
                js(json!([ghost])),
                js(json!({"aggregates": "x", "resource_provider_generation": g})),
                js(json!({"aggregates": [1], "resource_provider_generation": g})),
                js(json!({"aggregates": ["nope"], "resource_provider_generation": g})),
                js(json!({"aggregates": [], "resource_provider_generation": "0"})),
                js(json!({"aggregates": [], "resource_provider_generation": g, "extra": 1})),
                js(json!({"aggregates": []})),
            ],
        },
        Target {
            method: "PUT",
            path: format!("/resource_providers/{rp}/traits"),
            mv: "1.39",
            bodies: vec![
                js(json!({"traits": "CUSTOM_X", "resource_provider_generation": g})),
                js(json!({"traits": [1], "resource_provider_generation": g})),
                js(json!({"traits": ["A".repeat(256)], "resource_provider_generation": g})),
                js(json!({"traits": ["CUSTOM_NOPE"], "resource_provider_generation": g})),
                js(json!({"traits": [], "resource_provider_generation": null})),
                js(json!({"traits": [], "resource_provider_generation": g, "x": 1})),
                js(json!({"traits": []})),
            ],
        },
        Target {
            method: "POST",
            path: "/resource_classes".into(),
            mv: "1.39",
            bodies: vec![
                js(json!({"name": "lower"})),
                js(json!({"name": "CUSTOM_lower"})),
                js(json!({"name": 5})),
                js(json!({"name": null})),
                js(json!({"name": "VCPU"})),
                js(json!({"name": format!("CUSTOM_{}", "A".repeat(300))})),
                js(json!({"name": "CUSTOM_A", "x": 1})),
            ],
        },
        Target {
            method: "PUT",
            path: "/resource_classes/CUSTOM_BAD".into(),
            mv: "1.6",
            bodies: vec![
                js(json!({"name": "lower"})),
                js(json!({"name": 5})),
                js(json!({"name": "CUSTOM_A", "x": 1})),
            ],
        },
        Target {
            method: "PUT",
            path: format!("/allocations/{c}"),
            mv: "1.0",
            bodies: vec![
                js(json!({"allocations": [{"resource_provider": {"uuid": "nope"}, "resources": {"VCPU": 1}}]})),
                js(json!({"allocations": [{"resources": {"VCPU": 1}}]})),
                js(json!({"allocations": [{"resource_provider": {"uuid": rp}, "resources": {}}]})),
                js(json!({"allocations": [{"resource_provider": {"uuid": rp, "x": 1}, "resources": {"VCPU": 1}}]})),
                js(json!({"allocations": [{"resource_provider": {"uuid": ghost}, "resources": {"VCPU": 1}}]})),
                js(json!({"allocations": {}})),
            ],
        },
        Target {
            method: "PUT",
            path: format!("/allocations/{c}"),
            mv: "1.28",
            bodies: vec![
                js(put_alloc(json!({"not-a-uuid": {"resources": {"VCPU": 1}}}))),
                js(put_alloc(alloc(json!({"VCPU": 0})))),
                js(put_alloc(alloc(json!({"VCPU": -1})))),
                js(put_alloc(alloc(json!({"VCPU": 1.5})))),
                js(put_alloc(alloc(json!({"VCPU": "1"})))),
                js(put_alloc(alloc(json!({"VCPU": null})))),
                js(put_alloc(alloc(json!({})))),
                js(put_alloc(alloc(json!({"vcpu": 1})))),
                js(put_alloc(alloc(json!({"CUSTOM_NOPE": 1})))),
                js(put_alloc(json!({ &ghost: {"resources": {"VCPU": 1}} }))),
                js(put_alloc(json!({ &rp: {"resources": {"VCPU": 1}, "extra": 1} }))),
                js(put_alloc(json!({ &rp: {} }))),
                js(put_alloc(json!([]))),
                js(json!({"allocations": {}, "project_id": "p", "user_id": "u", "consumer_generation": "1"})),
                js(json!({"allocations": {}, "project_id": "p", "user_id": "u", "consumer_generation": 1.5})),
                js(json!({"allocations": {}, "project_id": "", "user_id": "u", "consumer_generation": null})),
                js(json!({"allocations": {}, "project_id": 5, "user_id": "u", "consumer_generation": null})),
                js(json!({"allocations": {}, "project_id": "p".repeat(256), "user_id": "u", "consumer_generation": null})),
                js(json!({"allocations": {}, "project_id": "p", "consumer_generation": null})),
                js(json!({"allocations": {}, "project_id": "p", "user_id": "u", "consumer_generation": null, "x": 1})),
                js(json!({"allocations": {}, "project_id": "p", "user_id": "u", "consumer_generation": null, "consumer_type": "INSTANCE"})),
            ],
        },
        Target {
            method: "PUT",
            path: format!("/allocations/{c}"),
            mv: "1.39",
            bodies: vec![
                js(put_alloc(alloc(json!({"VCPU": 1})))),
                js(json!({"allocations": alloc(json!({"VCPU": 1})), "project_id": "p", "user_id": "u",
                          "consumer_generation": null, "consumer_type": "lower"})),
                js(json!({"allocations": alloc(json!({"VCPU": 1})), "project_id": "p", "user_id": "u",
                          "consumer_generation": null, "consumer_type": ""})),
                js(json!({"allocations": alloc(json!({"VCPU": 1})), "project_id": "p", "user_id": "u",
                          "consumer_generation": null, "consumer_type": "I", "mappings": {}})),
                js(json!({"allocations": alloc(json!({"VCPU": 1})), "project_id": "p", "user_id": "u",
                          "consumer_generation": null, "consumer_type": "I", "mappings": {"a": []}})),
                js(json!({"allocations": alloc(json!({"VCPU": 1})), "project_id": "p", "user_id": "u",
                          "consumer_generation": null, "consumer_type": "I", "mappings": {"a": ["nope"]}})),
            ],
        },
        Target {
            method: "POST",
            path: "/allocations".into(),
            mv: "1.39",
            bodies: vec![
                js(json!({"not-a-uuid": {"allocations": {}, "project_id": "p", "user_id": "u",
                                         "consumer_generation": null, "consumer_type": "I"}})),
                js(json!({ &c: {"allocations": {}, "user_id": "u", "consumer_generation": null, "consumer_type": "I"} })),
                js(json!({ &c: [] })),
                js(json!({ &c: {"allocations": alloc(json!({"VCPU": 1})), "project_id": "p", "user_id": "u",
                                "consumer_type": "I"} })),
                js(json!({ &c: {"allocations": alloc(json!({"CUSTOM_NOPE": 1})), "project_id": "p",
                                "user_id": "u", "consumer_generation": null, "consumer_type": "I"} })),
            ],
        },
        Target {
            method: "POST",
            path: "/allocations".into(),
            mv: "1.13",
            bodies: vec![
                js(json!({ &c: {"allocations": alloc(json!({"VCPU": 1})), "project_id": "p", "user_id": "u",
                                "consumer_generation": null} })),
                js(json!({ &c: {"allocations": {"nope": {"resources": {"VCPU": 1}}}, "project_id": "p", "user_id": "u"} })),
            ],
        },
        Target {
            method: "POST",
            path: "/reshaper".into(),
            mv: "1.39",
            bodies: vec![
                js(json!({"inventories": {"nope": {"resource_provider_generation": g, "inventories": {}}}, "allocations": {}})),
                js(json!({"inventories": {&rp: {"inventories": {}}}, "allocations": {}})),
                js(json!({"inventories": {&rp: {"resource_provider_generation": g,
                                                 "inventories": {"VCPU": {"total": 0}}}}, "allocations": {}})),
                js(json!({"inventories": [], "allocations": {}})),
                js(json!({"inventories": {&rp: {"resource_provider_generation": g, "inventories": {"VCPU": {"total": 8}}}},
                          "allocations": []})),
                js(json!({"inventories": {&rp: {"resource_provider_generation": g, "inventories": {"VCPU": {"total": 8}}}},
                          "allocations": {}, "extra": 1})),
                js(json!({"inventories": {&rp: {"resource_provider_generation": g,
                                                 "inventories": {"VCPU": {"total": huge()}}}}, "allocations": {}})),
            ],
        },
    ];

    let mut failures = Vec::new();
    let mut sent = 0;
    for target in &targets {
        for body in generic_bodies().iter().chain(target.bodies.iter()) {
            // An empty list is a valid 1.1 aggregates body.
            let empty_list = matches!(body, Body::Raw(b) if b == b"[]");
            if empty_list && target.mv == "1.1" && target.path.ends_with("/aggregates") {
                continue;
            }
            let r = send(&t, target, body).await;
            sent += 1;
            if let Some(why) = check_400(&r) {
                failures.push(format!(
                    "{} {} @{} body {}: {why}: {}",
                    target.method,
                    target.path,
                    target.mv,
                    body.show(),
                    String::from_utf8_lossy(&r.body)
                        .chars()
                        .take(300)
                        .collect::<String>()
                ));
            }
        }
    }
    assert!(sent > 400, "{sent}");
    assert!(
        failures.is_empty(),
        "{} of {sent} malformed requests were not a clean 400:\n{}",
        failures.len(),
        failures.join("\n")
    );

    // None of it changed anything.
    assert_eq!(t.generation(&rp).await, g);
    assert_eq!(t.rp_names("", "1.0").await, ["cn"]);
    assert_eq!(
        t.get(&format!("/allocations/{c}"), "1.28")
            .await
            .expect(200)
            .json(),
        json!({"allocations": {}})
    );
    t.get("/resource_classes/CUSTOM_BAD", "1.2")
        .await
        .expect(404);
}

#[tokio::test]
async fn huge_generations_are_client_errors() {
    // A generation beyond 64 bits can never match: 400 or 409, never 5xx.
    let t = TestApp::new().await;
    let rp = t.create_rp("cn").await;
    let huge = "99999999999999999999";
    let cases = [
        ("PUT", format!("/resource_providers/{rp}/inventories"), "1.39",
         format!("{{\"resource_provider_generation\": {huge}, \"inventories\": {{}}}}")),
        ("PUT", format!("/resource_providers/{rp}/traits"), "1.39",
         format!("{{\"resource_provider_generation\": {huge}, \"traits\": []}}")),
        ("PUT", format!("/resource_providers/{rp}/aggregates"), "1.39",
         format!("{{\"resource_provider_generation\": {huge}, \"aggregates\": []}}")),
        ("PUT", format!("/allocations/{}", uuid()), "1.39",
         format!("{{\"allocations\": {{}}, \"project_id\": \"p\", \"user_id\": \"u\", \"consumer_type\": \"I\", \"consumer_generation\": {huge}}}")),
        ("PUT", format!("/allocations/{}", uuid()), "1.39",
         "{\"allocations\": {}, \"project_id\": \"p\", \"user_id\": \"u\", \"consumer_type\": \"I\", \"consumer_generation\": 9223372036854775807}".to_string()),
        ("PUT", format!("/resource_providers/{rp}/traits"), "1.39",
         "{\"resource_provider_generation\": -9223372036854775808, \"traits\": []}".to_string()),
    ];
    for (method, path, mv, body) in cases {
        let r = t
            .req(method, &path)
            .mv(mv)
            .raw(Some("application/json"), body.clone())
            .send()
            .await;
        assert!(r.status == 400 || r.status == 409, "{body}: {r:?}");
        r.error();
    }
    assert_eq!(t.generation(&rp).await, 0);
}

#[tokio::test]
async fn large_body_is_refused_cleanly() {
    let t = TestApp::new().await;
    let name = "x".repeat(4 * 1024 * 1024);
    let r = t
        .post("/resource_providers", "1.20", json!({ "name": name }))
        .await;
    assert!(r.status == 400 || r.status == 413, "{}", r.status);
    r.error();
}

#[tokio::test]
async fn odd_paths_and_queries_never_fail_the_server() {
    let t = TestApp::new().await;
    let rp = t.create_rp("cn").await;
    let long = "a".repeat(10_000);
    let paths = vec![
        "/resource_providers/%FF".to_string(),
        "/resource_providers/%00".to_string(),
        format!("/resource_providers/{long}"),
        format!("/resource_providers/{long}/inventories"),
        "/resource_providers/{00000000-0000-0000-0000-000000000000}".to_string(),
        format!("/resource_providers/{rp}/inventories/%FF"),
        format!("/resource_providers/{rp}/inventories/lower"),
        format!("/resource_providers/{rp}/inventories/{long}"),
        "/traits/%FF".to_string(),
        format!("/traits/{long}"),
        format!("/allocations/{long}"),
        "/allocations/%FF".to_string(),
        "/resource_providers?resources=VCPU:99999999999999999999".to_string(),
        "/resource_providers?resources=VCPU:-1".to_string(),
        "/resource_providers?resources=VCPU:1e400".to_string(),
        "/resource_providers?resources=VCPU:1,VCPU:2".to_string(),
        "/resource_providers?resources=,,,".to_string(),
        "/resource_providers?resources=:".to_string(),
        "/resource_providers?member_of=in:".to_string(),
        "/resource_providers?member_of=!".to_string(),
        "/resource_providers?member_of=!in:".to_string(),
        "/resource_providers?in_tree=zzz".to_string(),
        "/resource_providers?uuid=".to_string(),
        "/resource_providers?required=".to_string(),
        "/resource_providers?required=!!".to_string(),
        "/resource_providers?required=in:".to_string(),
        "/resource_providers?required=%FF".to_string(),
        "/resource_providers?name=%FF%FE".to_string(),
        format!("/resource_providers?name={long}"),
        "/resource_providers?%FF=1".to_string(),
        "/resource_providers?&&&=&".to_string(),
        "/traits?name=in:".to_string(),
        "/traits?name=startswith:".to_string(),
        "/traits?name=startswith:%25".to_string(),
        "/traits?name=startswith:_".to_string(),
        format!("/usages?project_id={long}"),
        "/usages?project_id=p&consumer_type=%00".to_string(),
    ];
    let mut failures = Vec::new();
    for p in &paths {
        for mv in ["1.0", "1.39"] {
            let r = t.get(p, mv).await;
            if r.status.is_server_error() {
                failures.push(format!("GET {p} @{mv}: {r:?}"));
            } else if r.status.is_client_error() {
                if let Some(why) = r.shape_problem() {
                    failures.push(format!("GET {p} @{mv}: not the error shape ({why}): {r:?}"));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// PostgreSQL refuses NUL in text; the reference (MySQL/SQLite) stores or
/// looks such values up like any other. Either way it is not a server error.
#[tokio::test]
async fn nul_characters_are_not_server_errors() {
    let t = TestApp::new().await;
    let rp = t.create_rp("cn").await;
    t.set_inventories(&rp, json!({"VCPU": {"total": 8}})).await;
    let mut failures = Vec::new();
    for path in [
        "/resource_classes/%00",
        "/resource_providers?name=%00",
        "/resource_providers?name=a%00b",
        "/usages?project_id=%00",
        "/usages?project_id=p&user_id=%00",
    ] {
        let r = t.get(path, "1.39").await;
        if r.status.is_server_error() {
            failures.push(format!("{r:?}"));
        }
    }
    let writes = [
        (
            "POST",
            "/resource_providers".to_string(),
            json!({"name": "a\u{0}b"}),
        ),
        (
            "PUT",
            format!("/resource_providers/{rp}"),
            json!({"name": "a\u{0}b"}),
        ),
        (
            "PUT",
            format!("/allocations/{}", uuid()),
            json!({"allocations": {&rp: {"resources": {"VCPU": 1}}},
                   "project_id": "p\u{0}", "user_id": "u\u{0}", "consumer_generation": null}),
        ),
    ];
    for (method, path, body) in writes {
        let r = t.req(method, &path).mv("1.37").json(&body).send().await;
        if r.status.is_server_error() {
            failures.push(format!("{r:?}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
