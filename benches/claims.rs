//! Claims under contention: two `placement serve` processes on one fresh
//! database, 32 concurrent clients claiming VCPU and memory until capacity
//! runs out. Reports claims/s, the 409 count, and verifies afterwards that
//! no inventory is overcommitted and every 204 is an allocation.
//!
//! Then the scheduler's shape (Placement's perfload inventory on 2,000
//! providers): each client asks `GET /allocation_candidates?…&limit=10`
//! and claims the first candidate, as a naive scheduler does; once with
//! the candidates in Placement's order and once with the servers started
//! with `--randomize-allocation-candidates`.
//!
//! Needs DATABASE_URL (a server where it may create a database):
//! `cargo bench --bench claims`; `BENCH_POOLER=pgbouncer` runs the servers
//! through PgBouncer in transaction mode; `BENCH_CLAIMS=direct` or
//! `=candidates` runs one of the two scenarios, `BENCH_ORDER=placement`
//! or `=random` one of the scheduler's two orders, `BENCH_WARMUP=n` the
//! claims each of its clients makes before the measured run (10).

#[path = "claims/scheduler.rs"]
mod scheduler;

use scheduler::scheduler_claims;
use serde_json::{json, Value};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const CLIENTS: usize = 32;
const PROVIDERS: usize = 20;
const VCPU_PER_PROVIDER: i64 = 64;
const CLAIMS_PER_CLIENT: usize = 50;
const PROJECTS: usize = 8;
const ROUNDS: usize = 3;

/// The servers' allocator for the clients too: they share the two cores
/// with what they measure, and glibc's malloc was a quarter of their CPU.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

struct Servers(Vec<Child>);

impl Drop for Servers {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or(0)
}

fn admin(rb: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
    rb.header("x-auth-token", "admin")
        .header("openstack-api-version", "placement 1.39")
}

#[tokio::main]
async fn main() {
    let Ok(base_url) = std::env::var("DATABASE_URL") else {
        eprintln!("claims bench: DATABASE_URL is not set; skipping");
        return;
    };
    let db = format!("bench_claims_{}", uuid::Uuid::new_v4().simple());
    let admin_pool = sqlx::PgPool::connect(&base_url).await.expect("connect");
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {db}")))
        .execute(&admin_pool)
        .await
        .expect("create db");
    let (prefix, _) = base_url.rsplit_once('/').expect("database url with a name");
    let url = format!("{prefix}/{db}");

    // BENCH_POOLER=pgbouncer: the servers go through PgBouncer in
    // transaction mode, 8 server connections for the database.
    let bouncer = (std::env::var("BENCH_POOLER").as_deref() == Ok("pgbouncer"))
        .then(|| placement_testkit::pgbouncer::PgBouncer::start(&base_url, 8));
    let (server_url, extra) = match &bouncer {
        None => (url.clone(), Vec::new()),
        Some(b) => b.serve(&base_url, &db, &url),
    };
    let scenario = std::env::var("BENCH_CLAIMS").unwrap_or_default();
    if scenario != "candidates" {
        let (servers, bases) = start_servers(&server_url, &extra).await;
        direct_claims(&bases).await;
        drop(servers);
    }
    if scenario != "direct" {
        scheduler_claims(&server_url, &extra).await;
    }
    drop(bouncer);
    admin_pool.close().await;
    let admin_pool = sqlx::PgPool::connect(&base_url).await.expect("connect");
    let _ = sqlx::query(sqlx::AssertSqlSafe(format!(
        "DROP DATABASE IF EXISTS {db} WITH (FORCE)"
    )))
    .execute(&admin_pool)
    .await;
}

/// Starts BENCH_SERVERS (default 2) server processes on `url` with
/// `extra` flags and waits until each answers; their base URLs.
async fn start_servers(url: &str, extra: &[String]) -> (Servers, Vec<String>) {
    let count: usize = std::env::var("BENCH_SERVERS")
        .ok()
        .and_then(|n| n.parse().ok())
        .filter(|n| *n > 0)
        .unwrap_or(2);
    let ports: Vec<u16> = (0..count).map(|_| free_port()).collect();
    let mut servers = Servers(Vec::new());
    for &p in &ports {
        let child = Command::new(placement_testkit::placement_bin())
            .args(["serve", "--bind", &format!("127.0.0.1:{p}")])
            .args(extra)
            .env("DATABASE_URL", url)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .spawn()
            .expect("start server");
        servers.0.push(child);
    }
    let http = reqwest::Client::new();
    let bases: Vec<String> = ports
        .iter()
        .map(|p| format!("http://127.0.0.1:{p}"))
        .collect();
    for b in &bases {
        for _ in 0..200 {
            if http.get(format!("{b}/")).send().await.is_ok() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    (servers, bases)
}

/// Claims straight at a provider, with and without quota limits on the
/// claiming projects.
async fn direct_claims(bases: &[String]) {
    let http = reqwest::Client::new();
    // The same load on projects that have a limit (high enough never to
    // refuse): the cost of the quota check on every write. The two loads
    // alternate, so that warm-up and a growing database weigh on both.
    for p in 0..PROJECTS {
        let r = admin(http.put(format!("{}/projects/limited-p{p}/quota", bases[0])))
            .json(&json!({"limits": {"VCPU": 1_000_000, "MEMORY_MB": 1_000_000_000}}))
            .send()
            .await
            .expect("set quota");
        assert!(r.status().is_success(), "quota: {}", r.status());
    }
    let (mut plain, mut limited) = (Vec::new(), Vec::new());
    for round in 0..ROUNDS {
        plain.push(phase(&http, bases, &format!("without limits {round}"), "free").await);
        limited.push(phase(&http, bases, &format!("with limits {round}"), "limited").await);
    }
    let (plain, limited) = (median(plain), median(limited));
    println!(
        "claims with limits on every project: {:.0} claims/s vs {:.0} without, medians of {ROUNDS} alternating runs ({:+.1}%)",
        limited,
        plain,
        (limited / plain - 1.0) * 100.0
    );
}

/// Units of `class` the provider's usages report.
async fn used(http: &reqwest::Client, base: &str, rp: impl std::fmt::Display, class: &str) -> i64 {
    let u: Value = admin(http.get(format!("{base}/resource_providers/{rp}/usages")))
        .send()
        .await
        .expect("usages")
        .json()
        .await
        .expect("usages json");
    u["usages"][class].as_i64().unwrap_or(0)
}

/// The middle value.
fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

/// One run of the load on fresh providers, by the projects
/// `{projects}-p0…`; claims committed per second.
async fn phase(http: &reqwest::Client, bases: &[String], label: &str, projects: &str) -> f64 {
    let mut providers = Vec::new();
    for i in 0..PROVIDERS {
        let rp = uuid::Uuid::new_v4();
        let r = admin(http.post(format!("{}/resource_providers", bases[0])))
            .json(&json!({"name": format!("{label} cn{i}"), "uuid": rp}))
            .send()
            .await
            .expect("create provider");
        assert!(r.status().is_success(), "create provider: {}", r.status());
        let r = admin(http.put(format!("{}/resource_providers/{rp}/inventories", bases[0])))
            .json(&json!({"resource_provider_generation": 0, "inventories": {
                "VCPU": {"total": VCPU_PER_PROVIDER}, "MEMORY_MB": {"total": 1_048_576}}}))
            .send()
            .await
            .expect("set inventory");
        assert!(r.status().is_success(), "inventory: {}", r.status());
        providers.push(rp);
    }

    let started = Instant::now();
    let mut tasks = Vec::new();
    for c in 0..CLIENTS {
        let http = http.clone();
        let base = bases[c % bases.len()].clone();
        let providers = providers.clone();
        let projects = projects.to_string();
        tasks.push(tokio::spawn(async move {
            let (mut ok, mut conflict, mut other) = (0u64, 0u64, 0u64);
            let mut latencies = Vec::new();
            for k in 0..CLAIMS_PER_CLIENT {
                let rp = providers[(c * 7 + k) % providers.len()];
                let consumer = uuid::Uuid::new_v4();
                let t = Instant::now();
                let r = admin(http.put(format!("{base}/allocations/{consumer}")))
                    .json(&json!({"allocations": {rp.to_string(): {"resources": {"VCPU": 1, "MEMORY_MB": 512}}},
                                  "project_id": format!("{projects}-p{}", c % PROJECTS), "user_id": "u", "consumer_generation": null,
                                  "consumer_type": "INSTANCE"}))
                    .send()
                    .await;
                latencies.push(t.elapsed());
                match r.map(|r| r.status().as_u16()) {
                    Ok(204) => ok += 1,
                    Ok(409) => conflict += 1,
                    _ => other += 1,
                }
            }
            (ok, conflict, other, latencies)
        }));
    }
    let (mut ok, mut conflict, mut other) = (0, 0, 0);
    let mut lat = Vec::new();
    for t in tasks {
        let (a, b, c, l) = t.await.expect("client task");
        ok += a;
        conflict += b;
        other += c;
        lat.extend(l);
    }
    let elapsed = started.elapsed();
    lat.sort();
    let pct =
        |p: f64| lat[((lat.len() as f64 * p) as usize).min(lat.len() - 1)].as_secs_f64() * 1000.0;

    let mut used_total = 0;
    let mut overcommitted = 0;
    for rp in &providers {
        let used = used(http, &bases[bases.len() - 1], rp, "VCPU").await;
        used_total += used;
        if used > VCPU_PER_PROVIDER {
            overcommitted += 1;
        }
    }
    let attempts = (CLIENTS * CLAIMS_PER_CLIENT) as f64;
    println!(
        "claims ({label}): {CLIENTS} clients over {} servers, {} attempts in {:.2}s = {:.0} requests/s, {ok} committed ({:.0} claims/s), {conflict} answered 409, {other} other",
        bases.len(),
        attempts,
        elapsed.as_secs_f64(),
        attempts / elapsed.as_secs_f64(),
        ok as f64 / elapsed.as_secs_f64()
    );
    println!(
        "claims latency ms: p50 {:.1}, p95 {:.1}, p99 {:.1}",
        pct(0.5),
        pct(0.95),
        pct(0.99)
    );
    println!(
        "claims check: capacity {} VCPU, allocated {used_total}, committed {ok}, overcommitted providers {overcommitted}",
        PROVIDERS as i64 * VCPU_PER_PROVIDER
    );
    assert_eq!(overcommitted, 0, "an inventory was overcommitted");
    assert_eq!(
        used_total, ok as i64,
        "a committed claim is missing or an extra allocation exists"
    );
    assert_eq!(other, 0, "some claims got neither 204 nor 409");
    ok as f64 / elapsed.as_secs_f64()
}
