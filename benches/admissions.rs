//! One admission round through HTTP on a real database: 10,000 pending
//! requests from 100 projects over 1,000 providers, first as a dry run
//! (load + decision + answer), then committed (every admitted allocation
//! written in one transaction). Prints both times and checks that the
//! committed usages equal the admitted requests.
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

/// Creates the providers (64 VCPU, 256 GiB each) with 8 clients at once.
async fn providers(http: &reqwest::Client, base: &str) {
    let mut tasks = Vec::new();
    for worker in 0..8 {
        let (http, base) = (http.clone(), base.to_string());
        tasks.push(tokio::spawn(async move {
            for i in (worker..PROVIDERS).step_by(8) {
                let rp = uuid::Uuid::new_v4();
                let r = admin(http.post(format!("{base}/resource_providers")))
                    .json(&json!({"name": format!("cn{i:04}"), "uuid": rp}))
                    .send()
                    .await
                    .expect("create provider");
                assert!(r.status().is_success(), "create provider: {}", r.status());
                let r = admin(http.put(format!("{base}/resource_providers/{rp}/inventories")))
                    .json(&json!({"resource_provider_generation": 0, "inventories": {
                        "VCPU": {"total": 64}, "MEMORY_MB": {"total": 262_144}}}))
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
    providers(&http, &server.base).await;
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
    drop(server);
    common::drop_database(&admin_url, &db);
}
