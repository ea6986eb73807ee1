//! Colocation end to end (§C.3): the three `colocation_provider_scenario`
//! vectors through usage reports, the batch inventory and the advice
//! endpoints, plus the refusals.

use crate::common::{uuid, TestApp};
use serde_json::{json, Value};

const MV: &str = "1.39";

fn scenarios() -> Vec<Value> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/vectors/fairness.json");
    let doc: Value =
        serde_json::from_str(&std::fs::read_to_string(path).expect("fairness.json")).expect("json");
    doc["vectors"]
        .as_array()
        .expect("vectors")
        .iter()
        .filter(|v| v["kind"] == "colocation_provider_scenario")
        .cloned()
        .collect()
}

/// The scenario's watermarks as a policy body.
fn policy_body(w: &Value) -> Value {
    let mut out = serde_json::Map::new();
    for (k, v) in w.as_object().expect("watermarks") {
        if !v.is_null() {
            let key = if k == "forbid_usageThresholds" {
                "forbidUsageThresholds"
            } else {
                k.as_str()
            };
            out.insert(key.to_string(), v.clone());
        }
    }
    Value::Object(out)
}

/// The providers of `GET /allocation_candidates?<query>`, sorted.
pub(crate) async fn candidate_providers(t: &TestApp, query: &str) -> Vec<String> {
    let r = t
        .get(&format!("/allocation_candidates?{query}"), MV)
        .await
        .expect(200)
        .json();
    let mut rps: Vec<String> = r["provider_summaries"]
        .as_object()
        .unwrap()
        .keys()
        .cloned()
        .collect();
    rps.sort();
    rps
}

pub(crate) fn at(secs_ago: i64) -> String {
    (chrono::Utc::now() - chrono::Duration::seconds(secs_ago)).to_rfc3339()
}

struct Node {
    rp: String,
    names: Vec<(String, String)>,
}

impl Node {
    fn name_of(&self, uuid: &Value) -> String {
        self.names
            .iter()
            .find(|(_, u)| uuid == u.as_str())
            .map(|(n, _)| n.clone())
            .unwrap_or_default()
    }
    fn uuid_of(&self, name: &str) -> String {
        self.names
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, u)| u.clone())
            .unwrap_or_default()
    }
}

/// A provider with the scenario's capacity and consumers: production
/// allocated first, a quiet report, then the batch consumers on the batch
/// inventory that report created.
async fn node(t: &TestApp, i: &Value) -> Node {
    let rp = t.create_rp("colo").await;
    let cap = &i["provider"]["capacity"];
    t.set_inventories(
        &rp,
        json!({"VCPU": {"total": cap["cpu_milli"].as_i64().unwrap() / 1000},
        "MEMORY_MB": {"total": cap["memory_mb"]}}),
    )
    .await;
    t.put("/colocation_policy", MV, policy_body(&i["watermarks"]))
        .await
        .expect(200);
    let mut names = Vec::new();
    let consumers = i["consumers"].as_array().unwrap();
    for low in [false, true] {
        for c in consumers
            .iter()
            .filter(|c| (c["priority_class"] == "batch") == low)
        {
            let u = uuid();
            t.put(
                &format!("/consumers/{u}/priority"),
                MV,
                json!({"priority_class": c["priority_class"], "priority": c["priority"]}),
            )
            .await
            .expect(200);
            let r = &c["request"];
            let alloc = if low {
                json!({&rp: {"BATCH_VCPU_MILLI": r["cpu_milli"], "BATCH_MEMORY_MB": r["memory_mb"]}})
            } else {
                json!({&rp: {"VCPU": r["cpu_milli"].as_i64().unwrap() / 1000, "MEMORY_MB": r["memory_mb"]}})
            };
            t.allocate(&u, "p", "u", alloc).await;
            names.push((c["name"].as_str().unwrap().to_string(), u));
        }
        if !low {
            // Production measured idle: the batch inventory opens wide.
            let idle: Vec<Value> = names
                .iter()
                .map(|(_, u)| json!({"consumer_uuid": u, "cpu_milli_used": 0, "memory_mb_used": 0}))
                .collect();
            let sys = json!({"cpu_milli_used": i["system_used"]["cpu_milli"], "memory_mb_used": i["system_used"]["memory_mb"]});
            let quiet = json!({"sampled_at": at(20), "window_seconds": 10, "node": sys, "system": sys, "consumers": idle});
            t.post(
                &format!("/resource_providers/{rp}/usage_reports"),
                MV,
                quiet,
            )
            .await
            .expect(202);
        }
    }
    Node { rp, names }
}

/// The scenario's measurements as one report.
fn report(i: &Value, n: &Node) -> Value {
    let sys = &i["system_used"];
    let (mut cpu, mut mem) = (
        sys["cpu_milli"].as_i64().unwrap(),
        sys["memory_mb"].as_i64().unwrap(),
    );
    let mut consumers = Vec::new();
    for c in i["consumers"].as_array().unwrap() {
        cpu += c["used"]["cpu_milli"].as_i64().unwrap();
        mem += c["used"]["memory_mb"].as_i64().unwrap();
        consumers.push(
            json!({"consumer_uuid": n.uuid_of(c["name"].as_str().unwrap()),
            "cpu_milli_used": c["used"]["cpu_milli"], "memory_mb_used": c["used"]["memory_mb"]}),
        );
    }
    let be = &i["be_window_avg_milli"];
    json!({"sampled_at": at(0), "window_seconds": 60,
        "node": {"cpu_milli_used": cpu, "memory_mb_used": mem},
        "system": {"cpu_milli_used": sys["cpu_milli"], "memory_mb_used": sys["memory_mb"]},
        "consumers": consumers,
        "be": {"cpu_milli_used": be["used"], "cpu_milli_request": be["request"], "cpu_milli_real_limit": be["real_limit"]}})
}

#[tokio::test]
async fn the_provider_scenarios_end_to_end() {
    for v in scenarios() {
        let t = TestApp::new().await;
        let (i, e) = (&v["input"], &v["expected"]);
        let n = node(&t, i).await;
        let gen = t.generation(&n.rp).await;
        let answer = t
            .post(
                &format!("/resource_providers/{}/usage_reports", n.rp),
                MV,
                report(i, &n),
            )
            .await
            .expect(202)
            .json();
        let want = &e["batch_allocatable"];
        assert_eq!(
            answer["batch_allocatable"],
            json!({"BATCH_VCPU_MILLI": want["cpu_milli"], "BATCH_MEMORY_MB": want["memory_mb"]}),
            "{}",
            v["id"]
        );
        assert_eq!(
            t.generation(&n.rp).await,
            gen,
            "a report never bumps the generation"
        );
        let inv = t
            .get(&format!("/resource_providers/{}/inventories", n.rp), MV)
            .await
            .expect(200)
            .json();
        assert_eq!(
            inv["inventories"]["BATCH_VCPU_MILLI"]["total"], want["cpu_milli"],
            "{}",
            v["id"]
        );
        let probe = &i["probe_low_priority_request"]["request"];
        let found = candidate_providers(
            &t,
            &format!(
                "resources=BATCH_VCPU_MILLI:{},BATCH_MEMORY_MB:{}&priority_class=batch",
                probe["cpu_milli"], probe["memory_mb"]
            ),
        )
        .await;
        assert_eq!(
            !found.is_empty(),
            e["probe_allowed"].as_bool().unwrap(),
            "{}: batch candidates {found:?}",
            v["id"]
        );
        let s = t
            .get(&format!("/resource_providers/{}/suppression", n.rp), MV)
            .await
            .expect(200)
            .json();
        assert_eq!(
            s["be_cpu_limit_milli"], e["suppress"]["be_cpu_limit_milli"],
            "{}",
            v["id"]
        );
        let advice = t
            .get(
                &format!("/resource_providers/{}/eviction_candidates", n.rp),
                MV,
            )
            .await
            .expect(200)
            .json();
        let mut want_victims: Vec<String> = Vec::new();
        for k in ["cpu_eviction", "memory_eviction"] {
            for name in e[k]["evict_in_order"].as_array().unwrap() {
                let name = name.as_str().unwrap().to_string();
                if !want_victims.contains(&name) {
                    want_victims.push(name);
                }
            }
        }
        let got: Vec<String> = advice["victims"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| n.name_of(&v["consumer_uuid"]))
            .collect();
        assert_eq!(got, want_victims, "{}", v["id"]);
        assert!(
            got.iter().all(|g| g.starts_with("be-")),
            "production is never listed"
        );
    }
}

#[tokio::test]
async fn evictions_are_recorded_pending_and_cooled_down() {
    let v = scenarios()
        .into_iter()
        .find(|v| v["id"] == "colo-memory-pressure")
        .expect("scenario");
    let t = TestApp::new().await;
    let i = &v["input"];
    let n = node(&t, i).await;
    t.post(
        &format!("/resource_providers/{}/usage_reports", n.rp),
        MV,
        report(i, &n),
    )
    .await
    .expect(202);
    let path = format!("/resource_providers/{}/evictions", n.rp);
    t.post(
        &path,
        MV,
        json!({"consumer_uuids": [n.uuid_of("web-1")], "trigger": "memory_usage"}),
    )
    .await
    .expect_error(400, None, "never evicted");
    t.post(
        &path,
        MV,
        json!({"consumer_uuids": [uuid()], "trigger": "memory_usage"}),
    )
    .await
    .expect_error(400, None, "no allocations on this provider");
    let r = t
        .post(
            &path,
            MV,
            json!({"consumer_uuids": [n.uuid_of("be-2")], "trigger": "memory_usage"}),
        )
        .await
        .expect(200)
        .json();
    assert_eq!(r["recorded"], json!(1));
    let advice = t
        .get(
            &format!("/resource_providers/{}/eviction_candidates", n.rp),
            MV,
        )
        .await
        .expect(200)
        .json();
    assert_eq!(advice["pending_release"], json!([n.uuid_of("be-2")]));
    assert!(advice["cooldown_until"].is_string());
    assert_eq!(
        advice["victims"],
        json!([]),
        "the memory evictor is cooling down"
    );
}

#[tokio::test]
async fn bad_colocation_input_is_400_and_stores_nothing() {
    let t = TestApp::new().await;
    let rp = t.create_rp("n").await;
    t.set_inventories(
        &rp,
        json!({"VCPU": {"total": 8}, "MEMORY_MB": {"total": 8192}}),
    )
    .await;
    for bad in [
        json!({"cpuSuppressThresholdPercent": 101}),
        json!({"forbidUsageThresholds": {"cpu": -1, "memory": 95}}),
        json!({"cpuEvictBESatisfactionLowerPercent": 70, "cpuEvictBESatisfactionUpperPercent": 80}),
        json!({"degradeTimeMinutes": 0}),
        json!({"noSuchKnob": 1}),
        json!({"cpuCalculatePolicy": "request"}),
    ] {
        t.put("/colocation_policy", MV, bad).await.expect(400);
    }
    assert_eq!(
        t.get("/colocation_policy", MV).await.expect(200).json()["overrides"],
        json!({})
    );
    let report = |sampled: String, cpu: i64| {
        json!({"sampled_at": sampled, "window_seconds": 60,
        "node": {"cpu_milli_used": cpu, "memory_mb_used": 10}, "system": {"cpu_milli_used": 0, "memory_mb_used": 0}})
    };
    let path = format!("/resource_providers/{rp}/usage_reports");
    t.post(&path, MV, report(at(0), -1)).await.expect_error(
        400,
        Some("placement.body.invalid"),
        "less than the minimum of 0 (at /node/cpu_milli_used)",
    );
    t.post(&path, MV, report(at(0), 10_000_000))
        .await
        .expect_error(400, None, "ten times");
    t.post(&path, MV, report(at(-3600), 1))
        .await
        .expect_error(400, None, "within the last hour");
    t.post(&path, MV, report(at(7200), 1))
        .await
        .expect_error(400, None, "within the last hour");
    let mut unknown = report(at(0), 1);
    unknown["consumers"] =
        json!([{"consumer_uuid": uuid(), "cpu_milli_used": 1, "memory_mb_used": 1}]);
    t.post(&path, MV, unknown.clone())
        .await
        .expect_error(400, None, "no allocations");
    // One sample per consumer: a consumer listed twice is refused before
    // anything is written (it was a 500 from the sample's upsert).
    let listed = unknown["consumers"][0].clone();
    unknown["consumers"] = json!([listed, listed]);
    t.post(&path, MV, unknown)
        .await
        .expect_error(400, None, "reported twice");
    t.post(
        &format!("/resource_providers/{}/usage_reports", uuid()),
        MV,
        report(at(0), 1),
    )
    .await
    .expect(404);
    t.get(&format!("/resource_providers/{rp}/suppression"), MV)
        .await
        .expect_error(409, Some("placement.colocation.no_report"), "not reported");
    t.put(
        &format!("/consumers/{}/priority", uuid()),
        MV,
        json!({"priority_class": "batch", "priority": 9500}),
    )
    .await
    .expect_error(400, None, "outside");
    let inv = t
        .get(&format!("/resource_providers/{rp}/inventories"), MV)
        .await
        .expect(200)
        .json();
    assert!(
        inv["inventories"].get("BATCH_VCPU_MILLI").is_none(),
        "nothing stored"
    );
}
