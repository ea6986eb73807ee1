//! Fair sharing through HTTP on a real database: DRF admission rounds,
//! weights, guarantees and headroom, limits on plain writes, reservations,
//! decline filters, shares, and bad input (`fairness_colocation.md` §C.2).

use crate::common::{uuid, TestApp};
use serde_json::{json, Value};

const MV: &str = "1.39";

/// One admission request body entry.
fn ask(id: &str, project: &str, resources: Value) -> Value {
    json!({"id": id, "consumer_uuid": uuid(), "project_id": project, "user_id": "u", "resources": resources})
}

async fn admit(t: &TestApp, requests: Vec<Value>, extra: Value) -> Value {
    let mut body = json!({"requests": requests, "seed": 7});
    for (k, v) in extra.as_object().unwrap() {
        body[k] = v.clone();
    }
    t.post("/admissions", MV, body).await.expect(200).json()
}

/// (request, decision) pairs in answer order.
fn decisions(answer: &Value) -> Vec<(String, String)> {
    answer["decisions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            let what = match d["decision"].as_str().unwrap() {
                "admitted" => "admitted".to_string(),
                _ => format!("deferred:{}", d["reason"].as_str().unwrap()),
            };
            (d["request"].as_str().unwrap().to_string(), what)
        })
        .collect()
}

fn admitted_count(answer: &Value, prefix: &str) -> usize {
    decisions(answer)
        .iter()
        .filter(|(r, d)| r.starts_with(prefix) && d == "admitted")
        .count()
}

async fn used(t: &TestApp, rp: &str, class: &str) -> i64 {
    let u = t
        .get(&format!("/resource_providers/{rp}/usages"), MV)
        .await
        .expect(200)
        .json();
    u["usages"][class].as_i64().unwrap_or(0)
}

#[tokio::test]
async fn drf_paper_example_admits_three_and_two() {
    let t = TestApp::new().await;
    let rp = t.create_rp("node").await;
    t.set_inventories(
        &rp,
        json!({"VCPU": {"total": 9}, "MEMORY_MB": {"total": 18432}}),
    )
    .await;
    let mut reqs = Vec::new();
    for i in 1..=5 {
        reqs.push(ask(
            &format!("A{i}"),
            "A",
            json!({"VCPU": 1, "MEMORY_MB": 4096}),
        ));
    }
    for i in 1..=5 {
        reqs.push(ask(
            &format!("B{i}"),
            "B",
            json!({"VCPU": 3, "MEMORY_MB": 1024}),
        ));
    }
    // A dry run decides the same and writes nothing.
    let dry = admit(&t, reqs.clone(), json!({"dry_run": true})).await;
    assert_eq!(dry["dry_run"], json!(true));
    assert_eq!(used(&t, &rp, "VCPU").await, 0);

    let answer = admit(&t, reqs.clone(), json!({})).await;
    assert_eq!(decisions(&answer), decisions(&dry));
    let order: Vec<String> = decisions(&answer).into_iter().map(|(r, _)| r).collect();
    assert_eq!(&order[..5], ["A1", "B1", "A2", "B2", "A3"]);
    assert_eq!(admitted_count(&answer, "A"), 3);
    assert_eq!(admitted_count(&answer, "B"), 2);
    assert_eq!(answer["seed"], json!(7));
    let first = &answer["decisions"][0];
    assert_eq!(first["stage"], json!("fair"));
    assert!((first["dominant_share_after"].as_f64().unwrap() - 4096.0 / 18432.0).abs() < 1e-9);
    // Written: 3 + 6 VCPU, and the consumers exist with the request's owner.
    assert_eq!(used(&t, &rp, "VCPU").await, 9);
    let a1 = reqs[0]["consumer_uuid"].as_str().unwrap();
    let alloc = t
        .get(&format!("/allocations/{a1}"), MV)
        .await
        .expect(200)
        .json();
    assert_eq!(alloc["project_id"], json!("A"));
    assert_eq!(
        alloc["allocations"][&rp]["resources"],
        json!({"VCPU": 1, "MEMORY_MB": 4096})
    );
    // The persisted allocation counts and the shares.
    let fa = t.get("/projects/A/fairness", MV).await.expect(200).json();
    assert_eq!(fa["allocation_count"], json!(3));
    let shares = t.get("/fairness/shares", MV).await.expect(200).json();
    let b = shares["projects"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["project_id"] == "B")
        .unwrap()
        .clone();
    assert_eq!(b["dominant_rc"], json!("VCPU"));
    assert!((b["dominant_share"].as_f64().unwrap() - 6.0 / 9.0).abs() < 1e-9);
    // The same consumers again: they exist now, so the round refuses.
    t.post("/admissions", MV, json!({"requests": [reqs[0].clone()]}))
        .await
        .expect_error(
            409,
            Some("placement.concurrent_update"),
            "consumer generation conflict",
        );
}

#[tokio::test]
async fn weights_one_to_two_give_two_and_four_providers() {
    let t = TestApp::new().await;
    for i in 0..6 {
        let rp = t.create_rp(&format!("n{i}")).await;
        t.set_inventories(
            &rp,
            json!({"VCPU": {"total": 4}, "MEMORY_MB": {"total": 4096}}),
        )
        .await;
    }
    t.put("/projects/B/fairness", MV, json!({"weight": 2.0}))
        .await
        .expect(200);
    let whole = json!({"VCPU": 4, "MEMORY_MB": 4096});
    let mut reqs = Vec::new();
    for i in 1..=6 {
        reqs.push(ask(&format!("A{i}"), "A", whole.clone()));
        reqs.push(ask(&format!("B{i}"), "B", whole.clone()));
    }
    let answer = admit(&t, reqs, json!({})).await;
    assert_eq!(admitted_count(&answer, "A"), 2, "{answer}");
    assert_eq!(admitted_count(&answer, "B"), 4, "{answer}");
}

#[tokio::test]
async fn a_guarantee_holds_headroom_for_an_idle_project() {
    let t = TestApp::new().await;
    let rp = t.create_rp("node").await;
    t.set_inventories(
        &rp,
        json!({"VCPU": {"total": 8}, "MEMORY_MB": {"total": 8192}}),
    )
    .await;
    let q = t
        .put(
            "/projects/G/quota",
            MV,
            json!({"guarantees": {"VCPU": 4, "MEMORY_MB": 4096}}),
        )
        .await
        .expect(200)
        .json();
    assert_eq!(
        q["unsatisfied_guarantee"],
        json!({"VCPU": 4, "MEMORY_MB": 4096})
    );
    let reqs = (1..=6)
        .map(|i| ask(&format!("P{i}"), "P", json!({"VCPU": 1, "MEMORY_MB": 1024})))
        .collect();
    let answer = admit(&t, reqs, json!({})).await;
    assert_eq!(admitted_count(&answer, "P"), 4);
    assert!(decisions(&answer).contains(&("P5".into(), "deferred:headroom".into())));
    assert_eq!(
        answer["held_back_for_headroom"],
        json!({"VCPU": 4, "MEMORY_MB": 4096})
    );
    // G itself may take its guarantee, in stage 1.
    let answer = admit(
        &t,
        vec![ask("G1", "G", json!({"VCPU": 4, "MEMORY_MB": 4096}))],
        json!({}),
    )
    .await;
    assert_eq!(answer["decisions"][0]["stage"], json!("guarantee"));
}

#[tokio::test]
async fn a_limit_refuses_plain_writes_with_nothing_written() {
    let t = TestApp::new().await;
    let rp = t.create_rp("node").await;
    t.set_inventories(&rp, json!({"VCPU": {"total": 8}})).await;
    t.put("/projects/L/quota", MV, json!({"limits": {"VCPU": 2}}))
        .await
        .expect(200);
    t.allocate(&uuid(), "L", "u", json!({&rp: {"VCPU": 2}}))
        .await;
    let gen = t.generation(&rp).await;
    let over = uuid();
    t.try_allocate(&over, "L", "u", json!({&rp: {"VCPU": 1}}))
        .await
        .expect_error(409, Some("placement.quota.exceeded"), "over its limit of 2");
    let post = json!({&over: {"allocations": {&rp: {"resources": {"VCPU": 1}}},
        "project_id": "L", "user_id": "u", "consumer_generation": null}});
    t.post("/allocations", "1.28", post).await.expect_error(
        409,
        Some("placement.quota.exceeded"),
        "VCPU",
    );
    assert_eq!(used(&t, &rp, "VCPU").await, 2);
    assert_eq!(t.generation(&rp).await, gen);
    t.get(&format!("/allocations/{over}"), MV).await.expect(200);
    // Another project is not limited.
    t.allocate(&uuid(), "M", "u", json!({&rp: {"VCPU": 3}}))
        .await;
    // Lowering the limit below consumption needs force.
    t.put("/projects/L/quota", MV, json!({"limits": {"VCPU": 1}}))
        .await
        .expect_error(
            409,
            Some("placement.quota.below_consumption"),
            "consumes 2 VCPU",
        );
    let q = t
        .put(
            "/projects/L/quota",
            MV,
            json!({"limits": {"VCPU": 1}, "force": true}),
        )
        .await
        .expect(200)
        .json();
    assert_eq!(q["consumed"], json!({"VCPU": 2}));
    assert_eq!(q["allocated"], json!({"VCPU": 2}));
}

#[tokio::test]
async fn limits_count_reservations_once_and_sub_projects() {
    let t = TestApp::new().await;
    let (a, b) = (t.create_rp("a").await, t.create_rp("b").await);
    for rp in [&a, &b] {
        t.set_inventories(rp, json!({"VCPU": {"total": 8}})).await;
    }
    // Flat projects: R's reservation of 3 on a counts whether used or not,
    // and what R allocates inside it does not count twice.
    t.put("/projects/R/quota", MV, json!({"limits": {"VCPU": 4}}))
        .await
        .expect(200);
    let gen = t.generation(&a).await;
    t.put(
        &format!("/resource_providers/{a}/project_reservations/R"),
        MV,
        json!({"resource_provider_generation": gen, "resources": {"VCPU": 3}}),
    )
    .await
    .expect(200);
    t.allocate(&uuid(), "R", "u", json!({&a: {"VCPU": 2}}))
        .await;
    t.allocate(&uuid(), "R", "u", json!({&b: {"VCPU": 1}}))
        .await;
    t.allocate(&uuid(), "R", "u", json!({&a: {"VCPU": 1}}))
        .await;
    t.try_allocate(&uuid(), "R", "u", json!({&b: {"VCPU": 1}}))
        .await
        .expect_error(
            409,
            Some("placement.quota.exceeded"),
            "project R would consume 5 VCPU, over its limit of 4",
        );
    // A tree: the parent's limit caps its sub-projects together.
    t.put("/projects/P/quota", MV, json!({"limits": {"VCPU": 3}}))
        .await
        .expect(200);
    for child in ["C1", "C2"] {
        t.put(
            &format!("/projects/{child}/fairness"),
            MV,
            json!({"weight": 1, "parent_project_id": "P"}),
        )
        .await
        .expect(200);
    }
    t.allocate(&uuid(), "C1", "u", json!({&b: {"VCPU": 2}}))
        .await;
    t.allocate(&uuid(), "C2", "u", json!({&b: {"VCPU": 1}}))
        .await;
    t.try_allocate(&uuid(), "C2", "u", json!({&a: {"VCPU": 1}}))
        .await
        .expect_error(
            409,
            Some("placement.quota.exceeded"),
            "project P would consume 4 VCPU, over its limit of 3",
        );
    // R is still checked with the tree's statements.
    t.try_allocate(&uuid(), "R", "u", json!({&b: {"VCPU": 1}}))
        .await
        .expect_error(409, Some("placement.quota.exceeded"), "project R");
    assert_eq!(used(&t, &a, "VCPU").await, 3);
    assert_eq!(used(&t, &b, "VCPU").await, 4);
}

/// A claim checks limits itself: the list of projects under a limit that
/// sends their claims down the detailed path is kept for two seconds, so a
/// limit set within them, on the project or on its parent, must still stop
/// the claim (the claim writes nothing and the detailed path refuses it).
#[tokio::test]
async fn a_limit_set_moments_ago_stops_a_claim() {
    let t = TestApp::new().await;
    let rp = t.create_rp("node").await;
    t.set_inventories(&rp, json!({"VCPU": {"total": 16}})).await;
    t.put(
        "/projects/child/fairness",
        MV,
        json!({"weight": 1, "parent_project_id": "parent"}),
    )
    .await
    .expect(200);
    // These claims read the list of limited projects: none yet.
    t.allocate(&uuid(), "child", "u", json!({&rp: {"VCPU": 1}}))
        .await;
    t.allocate(&uuid(), "own", "u", json!({&rp: {"VCPU": 1}}))
        .await;
    t.put("/projects/parent/quota", MV, json!({"limits": {"VCPU": 2}}))
        .await
        .expect(200);
    t.put("/projects/own/quota", MV, json!({"limits": {"VCPU": 2}}))
        .await
        .expect(200);
    t.try_allocate(&uuid(), "child", "u", json!({&rp: {"VCPU": 2}}))
        .await
        .expect_error(
            409,
            Some("placement.quota.exceeded"),
            "project parent would consume 3 VCPU, over its limit of 2",
        );
    t.try_allocate(&uuid(), "own", "u", json!({&rp: {"VCPU": 2}}))
        .await
        .expect_error(
            409,
            Some("placement.quota.exceeded"),
            "project own would consume 3 VCPU, over its limit of 2",
        );
    assert_eq!(used(&t, &rp, "VCPU").await, 2);
}

#[tokio::test]
async fn a_reservation_is_usable_only_by_its_project() {
    let t = TestApp::new().await;
    let rp = t.create_rp("node").await;
    t.set_inventories(&rp, json!({"VCPU": {"total": 4}})).await;
    let gen = t.generation(&rp).await;
    let path = format!("/resource_providers/{rp}/project_reservations/R");
    t.put(
        &path,
        MV,
        json!({"resource_provider_generation": gen + 5, "resources": {"VCPU": 3}}),
    )
    .await
    .expect_error(409, Some("placement.concurrent_update"), "generation");
    t.put(
        &path,
        MV,
        json!({"resource_provider_generation": gen, "resources": {"VCPU": 5}}),
    )
    .await
    .expect_error(400, None, "above its capacity");
    let r = t
        .put(
            &path,
            MV,
            json!({"resource_provider_generation": gen, "resources": {"VCPU": 3}}),
        )
        .await
        .expect(200)
        .json();
    assert_eq!(r["resource_provider_generation"], json!(gen + 1));
    assert_eq!(
        t.get(&path, MV).await.expect(200).json()["resources"],
        json!({"VCPU": 3})
    );
    // Candidates: others see 1 VCPU; R sees all 4.
    let count = |v: Value| v["allocation_requests"].as_array().unwrap().len();
    let q = "/allocation_candidates?resources=VCPU:2";
    assert_eq!(count(t.get(q, MV).await.expect(200).json()), 0);
    let mine = t
        .get(&format!("{q}&project_id=R"), MV)
        .await
        .expect(200)
        .json();
    assert_eq!(count(mine), 1);
    // Claims: S gets the unreserved 1, not 2; R gets its 3.
    t.try_allocate(&uuid(), "S", "u", json!({&rp: {"VCPU": 2}}))
        .await
        .expect_error(
            409,
            Some("placement.reservation.unavailable"),
            "reserved for other projects",
        );
    t.allocate(&uuid(), "S", "u", json!({&rp: {"VCPU": 1}}))
        .await;
    t.allocate(&uuid(), "R", "u", json!({&rp: {"VCPU": 3}}))
        .await;
    // The reservation counts as R's consumption.
    let q = t.get("/projects/R/quota", MV).await.expect(200).json();
    assert_eq!(q["reserved"], json!({"VCPU": 3}));
    assert_eq!(q["consumed"], json!({"VCPU": 3}));
    t.delete(&path, MV).await.expect(204);
    t.delete(&path, MV).await.expect(404);
}

#[tokio::test]
async fn a_decline_hides_a_provider_until_revive() {
    let t = TestApp::new().await;
    let big = t.create_rp("big").await;
    let small = t.create_rp("small").await;
    t.set_inventories(&big, json!({"VCPU": {"total": 2}})).await;
    t.set_inventories(&small, json!({"VCPU": {"total": 1}}))
        .await;
    let d = t
        .post(
            "/declines",
            MV,
            json!({"project_id": "A", "resource_provider_uuid": big,
            "resources": {"VCPU": 1}, "refuse_seconds": 30}),
        )
        .await
        .expect(201)
        .json();
    assert_eq!(d["refuse_seconds"], json!(30.0));
    let one = json!({"VCPU": 1});
    let a = admit(&t, vec![ask("A1", "A", one.clone())], json!({})).await;
    assert_eq!(
        a["decisions"][0]["allocations"]
            .as_object()
            .unwrap()
            .keys()
            .next()
            .unwrap(),
        &small
    );
    let a = admit(&t, vec![ask("A2", "A", one.clone())], json!({})).await;
    assert_eq!(
        decisions(&a),
        [("A2".to_string(), "deferred:declined".to_string())]
    );
    // Every value of a single-valued parameter is validated, and the last
    // is used: an over-long first value is a 400, and a revive naming B
    // last revives B, not A.
    let long = "x".repeat(300);
    t.delete(&format!("/declines?project_id={long}&project_id=B"), MV)
        .await
        .expect_error(400, None, "Invalid query string parameters");
    t.delete("/declines?project_id=A&project_id=B", MV)
        .await
        .expect(204);
    let a = admit(&t, vec![ask("A2b", "A", one.clone())], json!({})).await;
    assert_eq!(
        decisions(&a),
        [("A2b".to_string(), "deferred:declined".to_string())]
    );
    // Another project is not affected; revive clears A's filter.
    t.delete("/declines?project_id=A", MV).await.expect(204);
    let a = admit(&t, vec![ask("A3", "A", one)], json!({})).await;
    assert_eq!(decisions(&a), [("A3".to_string(), "admitted".to_string())]);
    // refuse_seconds 0 installs nothing.
    let d = t
        .post(
            "/declines",
            MV,
            json!({"project_id": "A", "resource_provider_uuid": big,
            "resources": {"VCPU": 1}, "refuse_seconds": 0}),
        )
        .await
        .expect(201)
        .json();
    assert_eq!(d["filtered"], json!(false));
}

#[tokio::test]
async fn bad_fairness_input_is_400_and_stores_nothing() {
    let t = TestApp::new().await;
    let rp = t.create_rp("node").await;
    t.set_inventories(&rp, json!({"VCPU": {"total": 4}})).await;
    // Positive but past what a share can be divided by (5e-324 made a
    // dominant share of infinity, answered as null), or absurdly large.
    for weight in [
        json!(0),
        json!(-1.5),
        json!("x"),
        json!(null),
        json!(5e-324),
        json!(1e7),
    ] {
        t.put("/projects/A/fairness", MV, json!({"weight": weight}))
            .await
            .expect(400);
    }
    assert_eq!(
        t.get("/projects/A/fairness", MV).await.expect(200).json()["weight"],
        json!(1.0)
    );
    // A project id no body could name (over 255 characters) is not stored
    // from a path either.
    let long = "p".repeat(256);
    t.put(
        &format!("/projects/{long}/fairness"),
        MV,
        json!({"weight": 2.0}),
    )
    .await
    .expect_error(400, None, "Invalid project_id in path");
    t.put(
        &format!("/projects/{long}/quota"),
        MV,
        json!({"limits": {"VCPU": 1}}),
    )
    .await
    .expect_error(400, None, "Invalid project_id in path");
    // A body that does not validate names the field, with a stable code;
    // rules past the schema keep theirs.
    let body_invalid = Some("placement.body.invalid");
    let bad_quotas = [
        (
            json!({"limits": {"VCPU": -1}}),
            body_invalid,
            "minimum of 0 (at /limits/VCPU)",
        ),
        (
            json!({"limits": {"VCPU": 1.5}}),
            body_invalid,
            "is not of type 'integer'",
        ),
        (
            json!({"limits": {"VCPU": 1}, "guarantees": {"VCPU": 2}}),
            None,
            "above its limit",
        ),
        (
            json!({"limits": {"CUSTOM_NOPE": 1}}),
            None,
            "No such resource class CUSTOM_NOPE",
        ),
    ];
    for (body, code, detail) in bad_quotas {
        t.put("/projects/A/quota", MV, body)
            .await
            .expect_error(400, code, detail);
    }
    t.put(
        "/projects/C/fairness",
        MV,
        json!({"weight": 1, "parent_project_id": "A"}),
    )
    .await
    .expect(200);
    t.put("/projects/C/quota", MV, json!({"guarantees": {"VCPU": 1}}))
        .await
        .expect_error(400, None, "only allowed on top-level projects");
    t.put(
        "/projects/A/fairness",
        MV,
        json!({"weight": 1, "parent_project_id": "C"}),
    )
    .await
    .expect_error(400, None, "cycle");
    let q = t.get("/projects/A/quota", MV).await.expect(200).json();
    assert_eq!(
        (q["limits"].clone(), q["guarantees"].clone()),
        (json!({}), json!({}))
    );
    let gen = t.generation(&rp).await;
    t.put(
        &format!("/resource_providers/{rp}/project_reservations/A"),
        MV,
        json!({"resource_provider_generation": gen, "resources": {"DISK_GB": 1}}),
    )
    .await
    .expect_error(400, None, "no inventory of DISK_GB");
    assert_eq!(t.generation(&rp).await, gen);
    t.post(
        "/admissions",
        MV,
        json!({"requests": [ask("x", "A", json!({"VCPU": 0}))]}),
    )
    .await
    .expect(400);
    let dup = ask("x", "A", json!({"VCPU": 1}));
    t.post("/admissions", MV, json!({"requests": [dup.clone(), dup]}))
        .await
        .expect_error(400, None, "appears twice");
}

/// Each enum a project's settings store as text is declared once, in its
/// type (`named_enum!`): the column's check allows exactly those names,
/// so a new value (a queue policy) fails here until its migration lets
/// the database take it.
#[tokio::test]
async fn stored_settings_allow_exactly_their_types_names() {
    use placement::fairness::projects::{Preemption, Queueing, WithinProject};
    let t = TestApp::new().await;
    let columns: [(&str, Vec<&str>); 3] = [
        ("queueing", Queueing::names()),
        ("preemption", Preemption::names()),
        ("within_project_preemption", WithinProject::names()),
    ];
    for (column, names) in columns {
        let defs: Vec<String> = sqlx::query_scalar(
            "SELECT pg_get_constraintdef(c.oid) FROM pg_constraint c
              JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = ANY (c.conkey)
             WHERE c.conrelid = 'project_fairness'::regclass AND c.contype = 'c'
               AND a.attname = $1",
        )
        .bind(column)
        .fetch_all(&t.pool)
        .await
        .unwrap();
        assert_eq!(defs.len(), 1, "{column}: {defs:?}");
        let mut allowed: Vec<&str> = defs[0].split('\'').skip(1).step_by(2).collect();
        let mut declared = names.clone();
        allowed.sort_unstable();
        declared.sort_unstable();
        assert_eq!(allowed, declared, "{column}: {}", defs[0]);
    }
}

/// What an admission round admits, the allocation write accepts: the round
/// checks units, capacity, reservations and limits over its own copy of
/// the data, and its admissions are then written like any client's. Over
/// random worlds (units, reserved, ratios, limits on a project and on a
/// parent, another project's reservation), a committed round answers 200
/// and every admitted request holds exactly what it asked, within
/// capacity. A rule the round judged more loosely than the write fails
/// here.
#[tokio::test]
async fn what_a_round_admits_the_write_accepts() {
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};
    let mut admitted_total = 0;
    for seed in 0..10u64 {
        let mut rng = StdRng::seed_from_u64(seed);
        let t = TestApp::new().await;
        let mut rps = Vec::new();
        for n in 0..rng.gen_range(1..=3) {
            let rp = t.create_rp(&format!("node{n}")).await;
            let total = rng.gen_range(4..=12);
            let ratio = [1.0, 1.5, 2.0][rng.gen_range(0..3)];
            t.set_inventories(
                &rp,
                json!({
                    "VCPU": {"total": total, "reserved": rng.gen_range(0..=2),
                             "min_unit": rng.gen_range(1..=2), "max_unit": rng.gen_range(4..=8),
                             "step_size": rng.gen_range(1..=2), "allocation_ratio": ratio},
                    "MEMORY_MB": {"total": 8192, "reserved": 512, "step_size": 256}
                }),
            )
            .await;
            rps.push(rp);
        }
        let gen = t.generation(&rps[0]).await;
        let settings = [
            (
                "/projects/child/fairness".to_string(),
                json!({"weight": 1, "parent_project_id": "parent"}),
            ),
            (
                "/projects/parent/quota".to_string(),
                json!({"limits": {"VCPU": rng.gen_range(2..=10)}}),
            ),
            (
                "/projects/capped/quota".to_string(),
                json!({"limits": {"VCPU": rng.gen_range(1..=6)}}),
            ),
            (
                format!("/resource_providers/{}/project_reservations/owner", rps[0]),
                json!({"resource_provider_generation": gen, "resources": {"VCPU": rng.gen_range(1..=3)}}),
            ),
        ];
        for (path, body) in settings {
            t.put(&path, MV, body).await.expect(200);
        }
        let projects = ["child", "parent", "capped", "owner", "free"];
        let asked: Vec<(String, String, i64, i64)> = (0..rng.gen_range(6..=16))
            .map(|i| {
                let project = projects[rng.gen_range(0..projects.len())];
                let memory = [256, 512, 1000, 1024][rng.gen_range(0..4)];
                (
                    format!("r{i}"),
                    project.to_string(),
                    rng.gen_range(1..=5),
                    memory,
                )
            })
            .collect();
        let requests: Vec<Value> = asked
            .iter()
            .map(|(id, p, vcpu, mem)| ask(id, p, json!({"VCPU": vcpu, "MEMORY_MB": mem})))
            .collect();
        let answer = admit(&t, requests.clone(), json!({})).await;
        for (request, decision) in decisions(&answer) {
            if decision != "admitted" {
                continue;
            }
            admitted_total += 1;
            let r = requests
                .iter()
                .find(|r| r["id"] == request.as_str())
                .unwrap();
            let (_, _, vcpu, mem) = asked.iter().find(|a| a.0 == request).unwrap();
            let held = t
                .get(
                    &format!("/allocations/{}", r["consumer_uuid"].as_str().unwrap()),
                    MV,
                )
                .await
                .expect(200)
                .json();
            let sum = |class: &str| -> i64 {
                held["allocations"]
                    .as_object()
                    .unwrap()
                    .values()
                    .filter_map(|a| a["resources"][class].as_i64())
                    .sum()
            };
            assert_eq!(
                (sum("VCPU"), sum("MEMORY_MB")),
                (*vcpu, *mem),
                "seed {seed}: {request}"
            );
        }
        for rp in &rps {
            let inv = t
                .get(&format!("/resource_providers/{rp}/inventories/VCPU"), MV)
                .await
                .expect(200)
                .json();
            let capacity = (inv["total"].as_f64().unwrap() - inv["reserved"].as_f64().unwrap())
                * inv["allocation_ratio"].as_f64().unwrap();
            assert!(
                used(&t, rp, "VCPU").await as f64 <= capacity,
                "seed {seed}: {rp} over capacity"
            );
        }
    }
    assert!(
        admitted_total > 10,
        "too few admissions to judge: {admitted_total}"
    );
}
