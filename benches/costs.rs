//! The scale-out model's inputs, measured: CPU seconds per request of the
//! server and of PostgreSQL for each route class (candidates, claim,
//! deploy, usage report), and the connections each keeps busy. Then the
//! model is checked: with the servers pinned to core 0 and PostgreSQL and
//! the clients to core 1 (`taskset`), it predicts each route's rate from
//! the unpinned costs, at one and at two server processes.
//!
//! Starts its own durable PostgreSQL (`fsync` and `synchronous_commit`
//! on): `cargo bench --bench costs`. `BENCH_COST_SECONDS` (5) per run,
//! `BENCH_COST_REPEATS` (3) runs of each set-up, medians quoted. Under
//! `cargo test --benches` it is a smoke run (0.3 s, once).

use futures_util::stream::{self, StreamExt};
use placement_testkit::cpu::{children, Clock};
use placement_testkit::{cluster::free_port, pg::PgCluster, placement_bin};
use serde_json::{json, Value};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const CLIENTS: usize = 16;
const PROVIDERS: usize = 1_000;
const NODES: usize = 200;

/// One request shape the model prices.
#[derive(Clone, Copy)]
enum Route {
    /// `GET /allocation_candidates`, 1,000 answers (Nova's default limit).
    CandidatesWide,
    /// The same with `limit=10`.
    CandidatesNarrow,
    /// `PUT /allocations/{new}` on one provider.
    Claim,
    /// `POST /deployments` of one instance with bound cores.
    Deploy,
    /// `POST /resource_providers/{rp}/usage_reports`.
    Report,
}

const ROUTES: [Route; 5] = [
    Route::CandidatesWide,
    Route::CandidatesNarrow,
    Route::Claim,
    Route::Deploy,
    Route::Report,
];

impl Route {
    fn name(self) -> &'static str {
        match self {
            Route::CandidatesWide => "candidates, limit=1000",
            Route::CandidatesNarrow => "candidates, limit=10",
            Route::Claim => "claim (PUT /allocations)",
            Route::Deploy => "deploy (1 instance)",
            Route::Report => "usage report",
        }
    }

    /// The `i`th request of this class against `base`.
    fn request(
        self,
        http: &reqwest::Client,
        base: &str,
        fleet: &Fleet,
        i: u64,
    ) -> reqwest::RequestBuilder {
        let n = usize::try_from(i).unwrap_or(0);
        let rb = match self {
            Route::CandidatesWide | Route::CandidatesNarrow => {
                let limit = if matches!(self, Route::CandidatesWide) { 1000 } else { 10 };
                http.get(format!(
                    "{base}/allocation_candidates?resources=VCPU:1,MEMORY_MB:256,DISK_GB:10&limit={limit}"
                ))
            }
            Route::Claim => {
                let rp = fleet.providers[n % PROVIDERS];
                http.put(format!("{base}/allocations/{}", uuid::Uuid::new_v4()))
                    .json(&json!({"allocations": {rp.to_string(): {"resources": {"VCPU": 1, "MEMORY_MB": 256}}},
                        "project_id": "p", "user_id": "u", "consumer_generation": null,
                        "consumer_type": "INSTANCE"}))
            }
            Route::Deploy => http.post(format!("{base}/deployments")).json(&json!({
                "app": format!("app-{}", uuid::Uuid::new_v4().simple()), "count": 1, "cpu": 1.7,
                "cpu_bind": true, "memory_mb": 512, "strategy": "auto", "project_id": "p", "user_id": "u"})),
            Route::Report => {
                let rp = fleet.providers[n % PROVIDERS];
                http.post(format!("{base}/resource_providers/{rp}/usage_reports"))
                    .json(&json!({"sampled_at": chrono::Utc::now().to_rfc3339(), "window_seconds": 10,
                        "node": {"cpu_milli_used": 12_800 + (n % 8) * 300, "memory_mb_used": 70_000},
                        "system": {"cpu_milli_used": 1_000, "memory_mb_used": 8_192}, "consumers": []}))
            }
        };
        rb.header("x-auth-token", "admin")
            .header("openstack-api-version", "placement 1.39")
    }
}

/// What the requests address (deployments choose their own nodes).
struct Fleet {
    providers: Vec<uuid::Uuid>,
}

/// Pins a process and all its threads to `cpus` (a taskset list).
fn pin(pid: u32, cpus: &str) {
    let _ = Command::new("taskset")
        .args(["-a", "-p", "-c", cpus, &pid.to_string()])
        .stdout(Stdio::null())
        .status();
}

/// PostgreSQL (its postmaster, so every backend forked later) and this
/// process onto `cpus`.
fn pin_database_and_clients(postmaster: u32, cpus: &str) {
    pin(postmaster, cpus);
    for pid in children(postmaster) {
        pin(pid, cpus);
    }
    pin(std::process::id(), cpus);
}

/// Server processes, killed when dropped.
struct Servers {
    children: Vec<Child>,
    bases: Vec<String>,
}

impl Drop for Servers {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

async fn start_servers(url: &str, count: usize, cpus: &str, http: &reqwest::Client) -> Servers {
    let mut servers = Servers {
        children: Vec::new(),
        bases: Vec::new(),
    };
    for _ in 0..count {
        let port = free_port();
        let child = Command::new("taskset")
            .args(["-c", cpus])
            .arg(placement_bin())
            .args(["serve", "--bind", &format!("127.0.0.1:{port}")])
            .env("DATABASE_URL", url)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .spawn()
            .expect("start placement serve");
        servers.children.push(child);
        servers.bases.push(format!("http://127.0.0.1:{port}"));
    }
    for b in &servers.bases {
        let deadline = Instant::now() + Duration::from_secs(60);
        while http.get(format!("{b}/")).send().await.is_err() {
            assert!(Instant::now() < deadline, "{b} never answered");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    servers
}

async fn must(rb: reqwest::RequestBuilder, what: &str) {
    let r = rb.send().await.expect(what);
    let status = r.status();
    assert!(
        status.is_success(),
        "{what}: {status} {}",
        r.text().await.unwrap_or_default()
    );
}

fn admin(rb: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
    rb.header("x-auth-token", "admin")
        .header("openstack-api-version", "placement 1.39")
}

/// 1,000 providers of the W1 shape and 200 nodes of 64 bound cores.
async fn populate(http: &reqwest::Client, base: &str) -> Fleet {
    let providers: Vec<uuid::Uuid> = (0..PROVIDERS).map(|_| uuid::Uuid::new_v4()).collect();
    let nodes: Vec<uuid::Uuid> = (0..NODES).map(|_| uuid::Uuid::new_v4()).collect();
    stream::iter(providers.iter().enumerate())
        .for_each_concurrent(16, |(i, rp)| async move {
            let name = format!("cn{i:05}");
            must(
                admin(http.post(format!("{base}/resource_providers")))
                    .json(&json!({"name": name, "uuid": rp})),
                "provider",
            )
            .await;
            let inv = json!({"resource_provider_generation": 0, "inventories": {
                "VCPU": {"total": 64, "allocation_ratio": 16.0}, "MEMORY_MB": {"total": 262_144},
                "DISK_GB": {"total": 2_000}}});
            must(
                admin(http.put(format!("{base}/resource_providers/{rp}/inventories"))).json(&inv),
                "inventory",
            )
            .await;
        })
        .await;
    stream::iter(nodes.iter().enumerate())
        .for_each_concurrent(16, |(i, rp)| async move {
            let name = format!("node{i:04}");
            must(admin(http.post(format!("{base}/resource_providers"))).json(&json!({"name": name, "uuid": rp})), "node").await;
            let inv = json!({"resource_provider_generation": 0, "inventories": {"MEMORY_MB": {"total": 1_048_576}}});
            must(admin(http.put(format!("{base}/resource_providers/{rp}/inventories"))).json(&inv), "node inventory").await;
            let cores: Vec<Value> = (0..64).map(|c| json!({"id": c.to_string(), "numa_node": null})).collect();
            let topology = json!({"share_base": 100, "max_fragment_cores": -1, "cores": cores});
            must(admin(http.put(format!("{base}/resource_providers/{rp}/cpu_topology"))).json(&topology), "topology").await;
        })
        .await;
    Fleet { providers }
}

/// What one run of one route measured.
struct Run {
    rate: f64,
    server: f64,
    database: f64,
    client: f64,
    busy_connections: f64,
}

impl Run {
    fn per_request_ms(&self, seconds_per_second: f64) -> f64 {
        seconds_per_second / self.rate * 1000.0
    }
}

/// The connections of `db` doing something (a statement or an open
/// transaction), sampled every 10 ms until `stop`.
async fn sample_busy(pool: sqlx::PgPool, stop: Arc<AtomicU64>) -> f64 {
    let (mut total, mut samples) = (0i64, 0i64);
    while stop.load(Ordering::Relaxed) == 0 {
        let busy: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() \
             AND state <> 'idle' AND pid <> pg_backend_pid()",
        )
        .fetch_one(&pool)
        .await
        .unwrap_or(0);
        total += busy;
        samples += 1;
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    total as f64 / samples.max(1) as f64
}

/// `CLIENTS` loops sending `route` for `secs`, round robin over the servers.
async fn drive(
    http: &reqwest::Client,
    servers: &Servers,
    fleet: &Fleet,
    route: Route,
    secs: f64,
) -> u64 {
    let next = AtomicU64::new(0);
    let done = AtomicU64::new(0);
    let end = Instant::now() + Duration::from_secs_f64(secs);
    stream::iter(0..CLIENTS)
        .for_each_concurrent(CLIENTS, |_| async {
            while Instant::now() < end {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let base = &servers.bases[usize::try_from(i).unwrap_or(0) % servers.bases.len()];
                let r = route
                    .request(http, base, fleet, i)
                    .send()
                    .await
                    .expect("request");
                let status = r.status().as_u16();
                let body = r.bytes().await.unwrap_or_default();
                let text = || String::from_utf8_lossy(&body).into_owned();
                assert!(
                    status < 300 || status == 409,
                    "{}: {status} {}",
                    route.name(),
                    text()
                );
                done.fetch_add(u64::from(status < 300), Ordering::Relaxed);
            }
        })
        .await;
    done.load(Ordering::Relaxed)
}

struct Bench {
    http: reqwest::Client,
    pg: PgCluster,
    clock: Clock,
    fleet: Fleet,
    seconds: f64,
}

impl Bench {
    /// One measured run (after a one-second warm-up) of `route`.
    async fn run(&self, servers: &Servers, route: Route) -> Run {
        drive(
            &self.http,
            servers,
            &self.fleet,
            route,
            self.seconds.min(1.0),
        )
        .await;
        let pids: Vec<u32> = servers.children.iter().map(Child::id).collect();
        let postmaster = self.pg.postmaster_pid();
        let server_cpu = |c: &Clock| pids.iter().map(|p| c.own(*p)).sum::<f64>();
        let before = (
            server_cpu(&self.clock),
            self.clock.postgres(postmaster),
            self.clock.own(std::process::id()),
        );
        let pool = sqlx::PgPool::connect(&self.pg.url())
            .await
            .expect("sampler");
        let stop = Arc::new(AtomicU64::new(0));
        let sampler = tokio::spawn(sample_busy(pool, stop.clone()));
        let started = Instant::now();
        let done = drive(&self.http, servers, &self.fleet, route, self.seconds).await;
        let elapsed = started.elapsed().as_secs_f64();
        stop.store(1, Ordering::Relaxed);
        let busy = sampler.await.unwrap_or(0.0);
        let after = (
            server_cpu(&self.clock),
            self.clock.postgres(postmaster),
            self.clock.own(std::process::id()),
        );
        Run {
            rate: done as f64 / elapsed,
            server: (after.0 - before.0) / elapsed,
            database: (after.1 - before.1) / elapsed,
            client: (after.2 - before.2) / elapsed,
            busy_connections: busy,
        }
    }

    async fn runs(&self, count: usize, cpus: &str) -> Vec<Run> {
        let servers = start_servers(&self.pg.url(), count, cpus, &self.http).await;
        let mut runs = Vec::new();
        for route in ROUTES {
            runs.push(self.run(&servers, route).await);
        }
        runs
    }
}

fn print_costs(free: &[Run], repeats: usize) {
    println!(
        "\nCPU per request, one unpinned server, {CLIENTS} clients, durable PostgreSQL \
         (the run of the median rate of {repeats}):"
    );
    println!("| route | req/s | server ms | PostgreSQL ms | client ms | busy connections | connection ms per request |");
    println!("|---|---|---|---|---|---|---|");
    for (route, r) in ROUTES.iter().zip(free) {
        println!(
            "| {} | {:.0} | {:.2} | {:.2} | {:.2} | {:.1} | {:.2} |",
            route.name(),
            r.rate,
            r.per_request_ms(r.server),
            r.per_request_ms(r.database),
            r.per_request_ms(r.client),
            r.busy_connections,
            r.busy_connections / r.rate * 1000.0
        );
    }
}

/// The model's rate on two pinned cores: the servers' core or the core
/// PostgreSQL and the clients share, whichever runs out first.
fn predicted(cost: &Run) -> f64 {
    let server = cost.per_request_ms(cost.server) / 1000.0;
    let shared = cost.per_request_ms(cost.database + cost.client) / 1000.0;
    (1.0 / server).min(1.0 / shared)
}

fn print_check(free: &[Run], one: &[Run], two: &[Run]) {
    println!("\nPinned: servers on core 0, PostgreSQL and clients on core 1; the model's rate from the unpinned costs:");
    println!("| route | predicted req/s | N=1 req/s (server ms, PostgreSQL ms) | N=2 req/s (server ms, PostgreSQL ms) |");
    println!("|---|---|---|---|");
    for (i, route) in ROUTES.iter().enumerate() {
        let cell = |r: &Run| {
            format!(
                "{:.0} ({:.2}, {:.2})",
                r.rate,
                r.per_request_ms(r.server),
                r.per_request_ms(r.database)
            )
        };
        println!(
            "| {} | {:.0} | {} | {} |",
            route.name(),
            predicted(&free[i]),
            cell(&one[i]),
            cell(&two[i])
        );
    }
}

/// Per route, the run of the median rate.
fn medians(mut repeats: Vec<Vec<Run>>) -> Vec<Run> {
    let mut out = Vec::new();
    for i in (0..ROUTES.len()).rev() {
        let mut runs: Vec<Run> = repeats.iter_mut().filter_map(|r| r.pop()).collect();
        runs.sort_by(|a, b| a.rate.total_cmp(&b.rate));
        assert_eq!(runs.len(), repeats.len(), "route {i} in every repeat");
        out.push(runs.swap_remove(runs.len() / 2));
    }
    out.reverse();
    out
}

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

#[tokio::main]
async fn main() {
    // Under `cargo test --benches` (no `--bench` flag) a short smoke run.
    let measuring = std::env::args().any(|a| a == "--bench");
    let seconds = env_or("BENCH_COST_SECONDS", if measuring { 5.0 } else { 0.3 });
    let repeats = env_or("BENCH_COST_REPEATS", if measuring { 3usize } else { 1 }).max(1);
    let pg = PgCluster::start_durable();
    let http = reqwest::Client::new();
    let fleet = {
        let setup = start_servers(&pg.url(), 1, "0,1", &http).await;
        populate(&http, &setup.bases[0]).await
    };
    let bench = Bench {
        http,
        pg,
        clock: Clock::new(),
        fleet,
        seconds,
    };
    // The three set-ups take turns, so that a noisy neighbour or the
    // growing database weighs on each alike.
    let (mut free, mut one, mut two) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..repeats {
        free.push(bench.runs(1, "0,1").await);
        pin_database_and_clients(bench.pg.postmaster_pid(), "1");
        one.push(bench.runs(1, "0").await);
        two.push(bench.runs(2, "0").await);
        pin_database_and_clients(bench.pg.postmaster_pid(), "0,1");
    }
    let free = medians(free);
    print_costs(&free, repeats);
    print_check(&free, &medians(one), &medians(two));
}
