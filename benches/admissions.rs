//! One admission round through HTTP on a real database: 10,000 pending
//! requests from 100 projects over 1,000 providers, first as a dry run
//! (load + decision + answer), then committed (every admitted allocation
//! written in one transaction). Prints both times and checks that the
//! committed usages equal the admitted requests.
//!
//! Then the fair queue on the same server: a request queued into an
//! idle queue until it is admitted (submit, then `GET /queue/{id}?wait=`),
//! and 16 clients submitting one request each at a time for 5 s while the
//! rounds admit them, with the rounds' mean duration from `/metrics`.
//!
//! With `BENCH_QUEUE_PENDING=100000` (and `BENCH_QUEUE_PROVIDERS`, 10,000)
//! it also times one round over that many pending requests from 1,000
//! projects on a fresh database of providers of 2 VCPU each: the first
//! 10,000 fill half the pool, the round under test admits the other half
//! and leaves the rest pending.
//!
//! `cargo bench --bench admissions` (starts its own PostgreSQL when
//! DATABASE_URL is not set).

use placement_testkit::{cluster, common};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

const PROVIDERS: usize = 1_000;
const PROJECTS: usize = 100;
const REQUESTS: usize = 10_000;

fn admin(rb: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
    rb.header("x-auth-token", "admin")
        .header("openstack-api-version", "placement 1.39")
}

/// Creates `count` providers named `{prefix}{i}` with `inventories`, 16
/// clients at once; their uuids.
async fn providers(
    http: &reqwest::Client,
    base: &str,
    count: usize,
    prefix: &'static str,
    inventories: Value,
) -> Vec<uuid::Uuid> {
    let uuids: Vec<uuid::Uuid> = (0..count).map(|_| uuid::Uuid::new_v4()).collect();
    let mut tasks = Vec::new();
    for worker in 0..16 {
        let (http, base, uuids) = (http.clone(), base.to_string(), uuids.clone());
        let inventories = inventories.clone();
        tasks.push(tokio::spawn(async move {
            for i in (worker..uuids.len()).step_by(16) {
                let rp = uuids[i];
                let r = admin(http.post(format!("{base}/resource_providers")))
                    .json(&json!({"name": format!("{prefix}{i:05}"), "uuid": rp}))
                    .send()
                    .await
                    .expect("create provider");
                assert!(r.status().is_success(), "create provider: {}", r.status());
                let r = admin(http.put(format!("{base}/resource_providers/{rp}/inventories")))
                    .json(&json!({"resource_provider_generation": 0, "inventories": inventories}))
                    .send()
                    .await
                    .expect("set inventory");
                assert!(r.status().is_success(), "inventory: {}", r.status());
            }
        }));
    }
    for t in tasks {
        t.await.expect("provider task");
    }
    uuids
}

fn batch(dry_run: bool) -> Value {
    let requests: Vec<Value> = (0..REQUESTS)
        .map(|i| {
            json!({"id": format!("r{i}"), "consumer_uuid": uuid::Uuid::new_v4(),
                   "project_id": format!("project-{:03}", i % PROJECTS), "user_id": "u",
                   "resources": {"VCPU": 2, "MEMORY_MB": 4096}})
        })
        .collect();
    json!({"dry_run": dry_run, "seed": 1, "requests": requests})
}

async fn round(http: &reqwest::Client, base: &str, dry_run: bool) -> (Duration, usize) {
    let body = batch(dry_run);
    let started = Instant::now();
    let r = admin(http.post(format!("{base}/admissions")))
        .json(&body)
        .send()
        .await
        .expect("admission round");
    assert_eq!(r.status(), 200, "admission round");
    let answer: Value = r.json().await.expect("answer");
    let elapsed = started.elapsed();
    let admitted = answer["decisions"]
        .as_array()
        .expect("decisions")
        .iter()
        .filter(|d| d["decision"] == "admitted")
        .count();
    (elapsed, admitted)
}

#[tokio::main]
async fn main() {
    let (admin_url, db) = common::fresh_database().await;
    let url = common::url_with_db(&admin_url, &db);
    let server = cluster::start_server_with(&url, "bench-admissions", &[]).await;
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(300))
        .build()
        .expect("client");
    let inventories = json!({"VCPU": {"total": 64}, "MEMORY_MB": {"total": 262_144}});
    providers(&http, &server.base, PROVIDERS, "cn", inventories).await;
    for (p, weight) in [(0, 2.0), (1, 3.0)] {
        let r = admin(http.put(format!("{}/projects/project-{p:03}/fairness", server.base)))
            .json(&json!({"weight": weight}))
            .send()
            .await
            .expect("weight");
        assert_eq!(r.status(), 200);
    }
    let (dry, admitted_dry) = round(&http, &server.base, true).await;
    let (real, admitted) = round(&http, &server.base, false).await;
    println!(
        "admissions: {REQUESTS} requests, {PROJECTS} projects, {PROVIDERS} providers: dry run {:.0} ms ({admitted_dry} admitted), committed {:.0} ms ({admitted} admitted)",
        dry.as_secs_f64() * 1e3,
        real.as_secs_f64() * 1e3
    );
    let usages: Value = http
        .get(format!("{}/usages?project_id=project-000", server.base))
        .header("x-auth-token", "admin")
        .header("openstack-api-version", "placement 1.9")
        .send()
        .await
        .expect("usages")
        .json()
        .await
        .expect("usages json");
    let per_project = REQUESTS / PROJECTS;
    assert_eq!(
        usages["usages"]["VCPU"],
        json!(2 * per_project),
        "committed usage"
    );
    // The server logs each round's phases (load, decision, write, commit).
    for line in server
        .log()
        .lines()
        .filter(|l| l.contains("admission round"))
    {
        println!("  {line}");
    }
    idle_queue(&http, &server.base).await;
    let logged = server.log().lines().count();
    sustained_queue(&http, &server.base).await;
    // Its rounds' phases, when the server logs them
    // (TESTKIT_RUST_LOG=warn,placement::fairness=debug).
    for line in server
        .log()
        .lines()
        .skip(logged)
        .filter(|l| l.contains("admission round decided") || l.contains("queue round"))
    {
        println!("  {line}");
    }
    drop(server);
    common::drop_database(&admin_url, &db);
    let pending: usize = std::env::var("BENCH_QUEUE_PENDING")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    if pending > 0 {
        let providers: usize = std::env::var("BENCH_QUEUE_PROVIDERS")
            .ok()
            .and_then(|n| n.parse().ok())
            .unwrap_or(10_000);
        large_queue(&http, pending, providers).await;
    }
}

/// One round over `pending` queued requests (rounds run only when woken).
async fn large_queue(http: &reqwest::Client, pending: usize, providers_wanted: usize) {
    let (admin_url, db) = common::fresh_database().await;
    let url = common::url_with_db(&admin_url, &db);
    let server =
        cluster::start_server_with(&url, "bench-queue", &["--admission-interval", "0"]).await;
    let base = server.base.clone();
    let rps = providers(
        http,
        &base,
        providers_wanted,
        "q",
        json!({"VCPU": {"total": 2}}),
    )
    .await;
    // The first batch wakes a round (the queue was empty) that fills half
    // the pool; the rest arrive in a queue that is not empty, so no round
    // runs until capacity is freed.
    let mut first: Option<String> = None;
    for start in (0..pending).step_by(10_000) {
        let requests: Vec<Value> = (start..pending.min(start + 10_000))
            .map(|i| json!({"consumer_uuid": uuid::Uuid::new_v4(), "project_id": format!("q-{:04}", i % 1000),
                            "user_id": "u", "resources": {"VCPU": 1}}))
            .collect();
        let r = admin(http.post(format!("{base}/queue")))
            .json(&json!({"requests": requests}))
            .send()
            .await
            .expect("queue batch");
        assert_eq!(r.status(), 202, "queue batch");
        let v: Value = r.json().await.expect("queued");
        if first.is_none() {
            first = v["requests"][0]["consumer_uuid"]
                .as_str()
                .map(str::to_string);
            // Let the woken round finish before the rest arrive.
            let id = v["requests"][0]["id"].as_str().expect("id");
            admin(http.get(format!("{base}/queue/{id}?wait=60")))
                .send()
                .await
                .expect("wait");
        }
    }
    let before = round_metrics(http, &base).await;
    // Freeing one allocation wakes the round under test.
    let consumer = first.expect("a first consumer");
    let r = admin(http.delete(format!("{base}/allocations/{consumer}")))
        .send()
        .await
        .expect("free");
    assert_eq!(r.status(), 204, "free one");
    let deadline = Instant::now() + Duration::from_secs(600);
    let after = loop {
        let now = round_metrics(http, &base).await;
        if now.0 > before.0 {
            break now;
        }
        assert!(Instant::now() < deadline, "the round never ran");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    println!(
        "queue, large: one round over {pending} pending requests from 1,000 projects on {} providers took {:.0} ms, committed",
        rps.len(),
        (after.1 - before.1) * 1e3
    );
    // Its phases, when the server logs them (TESTKIT_RUST_LOG=warn,placement::fairness=debug).
    for line in server
        .log()
        .lines()
        .filter(|l| l.contains("admission round decided") || l.contains("queue round"))
    {
        println!("  {line}");
    }
    drop(server);
    common::drop_database(&admin_url, &db);
}

fn queued_request(project: usize) -> Value {
    json!({"consumer_uuid": uuid::Uuid::new_v4(), "project_id": format!("queue-{project:03}"),
           "user_id": "u", "resources": {"VCPU": 1, "MEMORY_MB": 1024}})
}

fn ms_at(sorted: &[f64], q: f64) -> f64 {
    let i = ((sorted.len() as f64 * q).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i]
}

/// Submit to admitted, one request at a time into an empty queue.
async fn idle_queue(http: &reqwest::Client, base: &str) {
    let mut took = Vec::new();
    for i in 0..50 {
        let started = Instant::now();
        let r = admin(http.post(format!("{base}/queue")))
            .json(&queued_request(i % 10))
            .send()
            .await
            .expect("queue");
        assert_eq!(r.status(), 202, "queue");
        let id = r.json::<Value>().await.expect("queued")["id"]
            .as_str()
            .expect("id")
            .to_string();
        let r = admin(http.get(format!("{base}/queue/{id}?wait=10")))
            .send()
            .await
            .expect("wait");
        let v: Value = r.json().await.expect("state");
        assert_eq!(v["state"], "admitted", "{v}");
        took.push(started.elapsed().as_secs_f64() * 1e3);
    }
    took.sort_by(f64::total_cmp);
    println!(
        "queue, idle: submit to admitted p50 {:.1} ms, p99 {:.1} ms (50 requests one at a time)",
        ms_at(&took, 0.5),
        ms_at(&took, 0.99)
    );
}

/// The rounds' count and total seconds so far, from `/metrics`.
async fn round_metrics(http: &reqwest::Client, base: &str) -> (f64, f64) {
    let text = admin(http.get(format!("{base}/metrics")))
        .send()
        .await
        .expect("metrics")
        .text()
        .await
        .unwrap_or_default();
    let value = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.trim().parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (
        value("placement_queue_round_duration_seconds_count"),
        value("placement_queue_round_duration_seconds_sum"),
    )
}

/// 16 clients submitting for 5 s while the rounds admit.
async fn sustained_queue(http: &reqwest::Client, base: &str) {
    let before = round_metrics(http, base).await;
    let end = Instant::now() + Duration::from_secs(5);
    let started = Instant::now();
    let mut tasks = Vec::new();
    for client in 0..16 {
        let (http, base) = (http.clone(), base.to_string());
        tasks.push(tokio::spawn(async move {
            let mut sent = 0usize;
            while Instant::now() < end {
                let r = admin(http.post(format!("{base}/queue")))
                    .json(&queued_request(client * 7 + sent % 7))
                    .send()
                    .await
                    .expect("queue");
                assert_eq!(r.status(), 202, "queue");
                sent += 1;
            }
            sent
        }));
    }
    let mut sent = 0;
    for t in tasks {
        sent += t.await.expect("client");
    }
    let rate = sent as f64 / started.elapsed().as_secs_f64();
    let after = round_metrics(http, base).await;
    let rounds = after.0 - before.0;
    println!(
        "queue, sustained: {rate:.0} submissions/s from 16 clients while {rounds:.0} rounds ran (mean {:.1} ms each)",
        (after.1 - before.1) / rounds.max(1.0) * 1e3
    );
}
