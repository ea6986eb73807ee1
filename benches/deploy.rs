//! Deployments at scale: two release `placement serve` processes on a fresh
//! database, 1,000 nodes of 64 cores (share base 100) and 256 GiB MEMORY_MB
//! created through the API, one dry-run deployment answered by each process
//! (a running service's processes are past their first read of every node),
//! then
//!   1. one `POST /deployments` of 10,000 instances (1.7 CPU bound,
//!      2048 MiB, strategy auto), timed;
//!   2. 100 concurrent single-instance deployments spread over both
//!      processes, wall time, p50/p95/p99 and the CPU seconds of the servers
//!      and of their database backends (`BENCH_SINGLES_ROUNDS` rounds,
//!      default 3, each of a new app). Round 0 follows the big deployment,
//!      which changed every node: each process re-reads all 1,000 first.
//!
//!   3. sustained single-instance deploys of one app (1.5 bound cores,
//!      1 GiB, `member_of` the aggregate every node is in) by 32 client
//!      tasks over both processes for `BENCH_SUSTAINED_SECS` (default 10):
//!      deploys/s, p50/p99, and the CPU milliseconds one deploy costs the
//!      servers and their database backends (from /proc), beside the
//!      bench's own (the client's) share.
//!
//! Before the timed parts each server answers a dry run of part 1's shape
//! and places one instance of part 3's (as a running service's processes
//! have: a process's first deployment of a query and shape reads every
//! node).
//!
//! `BENCH_DEPLOY_NODES` sets the number of nodes (default 1,000);
//! `BENCH_SERVER_BIN` runs another build of the server (to alternate with
//! an older one on the same machine); `BENCH_BIG=0` skips part 1.
//! `BENCH_KEEP_DB=1` keeps the database afterwards, to study its queries.
//!
//! Afterwards it checks that no core holds more than its share base and no
//! inventory is overcommitted on a sample of nodes.
//!
//! Needs DATABASE_URL (a server where it may create a database):
//! `cargo bench --bench deploy`. Without it the bench prints a line and
//! exits, so `cargo test --benches` stays a smoke run.

use serde_json::{json, Value};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

const CORES: usize = 64;
const MEMORY_MB: i64 = 256 * 1024;
const BIG_DEPLOY: i64 = 10_000;
const SINGLES: usize = 100;
const SETUP_PARALLELISM: usize = 32;
const SUSTAINED_CLIENTS: usize = 32;

fn setting(var: &str, default: usize) -> usize {
    std::env::var(var)
        .ok()
        .and_then(|v| v.replace(['_', ','], "").parse().ok())
        .unwrap_or(default)
}

struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// CPU seconds (user + system) the given local processes have used, from
/// /proc; 0 for any that cannot be read (a remote database, another OS).
fn cpu_seconds(pids: &[u32]) -> f64 {
    let ticks: u64 = pids
        .iter()
        .filter_map(|p| std::fs::read_to_string(format!("/proc/{p}/stat")).ok())
        .filter_map(|stat| {
            // Fields after the command name (which may hold spaces): utime
            // and stime are the 12th and 13th.
            let rest = stat.rsplit_once(')')?.1;
            let f: Vec<&str> = rest.split_whitespace().collect();
            Some(f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?)
        })
        .sum();
    ticks as f64 / 100.0
}

/// The database backends serving this bench's database.
async fn backend_pids(pool: &sqlx::PgPool) -> Vec<u32> {
    sqlx::query_scalar::<_, i32>(
        "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()",
    )
    .fetch_all(pool)
    .await
    .unwrap_or_default()
    .into_iter()
    .filter_map(|p| u32::try_from(p).ok())
    .collect()
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

async fn must(rb: reqwest::RequestBuilder, what: &str) -> Value {
    let r = admin(rb)
        .send()
        .await
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    let status = r.status();
    let text = r.text().await.unwrap_or_default();
    assert!(status.is_success(), "{what}: {status} {text}");
    serde_json::from_str(&text).unwrap_or(Value::Null)
}

/// One node: provider in the bench's aggregate, MEMORY_MB inventory,
/// 64-core topology.
async fn make_node(http: &reqwest::Client, base: &str, i: usize, agg: &str) -> String {
    let rp = uuid::Uuid::new_v4().to_string();
    must(
        http.post(format!("{base}/resource_providers"))
            .json(&json!({"name": format!("node-{i:05}"), "uuid": rp})),
        "create provider",
    )
    .await;
    must(
        http.put(format!("{base}/resource_providers/{rp}/aggregates"))
            .json(&json!({"resource_provider_generation": 0, "aggregates": [agg]})),
        "aggregates",
    )
    .await;
    must(
        http.put(format!("{base}/resource_providers/{rp}/inventories"))
            .json(&json!({"resource_provider_generation": 1,
                          "inventories": {"MEMORY_MB": {"total": MEMORY_MB}}})),
        "inventory",
    )
    .await;
    let cores: Vec<Value> = (0..CORES)
        .map(|c| json!({"id": c.to_string(), "numa_node": null}))
        .collect();
    must(
        http.put(format!("{base}/resource_providers/{rp}/cpu_topology"))
            .json(&json!({"share_base": 100, "max_fragment_cores": -1, "cores": cores})),
        "topology",
    )
    .await;
    rp
}

fn deploy_body(app: &str, count: i64) -> Value {
    json!({"app": app, "count": count, "cpu": 1.7, "cpu_bind": true, "memory_mb": 2048,
           "strategy": "auto", "project_id": "bench", "user_id": "bench"})
}

fn pct(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i].as_secs_f64() * 1000.0
}

/// The bench's servers and what they run against.
struct Bench {
    servers: Vec<Server>,
    /// Base URLs with their log files.
    bases: Vec<(String, std::path::PathBuf)>,
    http: reqwest::Client,
    url: String,
}

/// Two `placement serve` processes on `url`, answering.
async fn start_servers(url: &str) -> Bench {
    let bin = placement_testkit::placement_bin();
    println!("deploy bench: server binary {}", bin.display());
    let mut servers = Vec::new();
    let mut bases = Vec::new();
    for _ in 0..2 {
        let port = free_port();
        let log = std::env::temp_dir().join(format!("placement-deploy-bench-{port}.log"));
        let log_file = std::fs::File::create(&log).expect("server log");
        println!("deploy bench: server log {}", log.display());
        servers.push(Server(
            Command::new(&bin)
                .args(["serve", "--bind", &format!("127.0.0.1:{port}")])
                .env("DATABASE_URL", url)
                .env(
                    "RUST_LOG",
                    std::env::var("BENCH_SERVER_LOG").unwrap_or_else(|_| "warn".into()),
                )
                .stdout(Stdio::null())
                .stderr(log_file)
                .spawn()
                .expect("start server"),
        ));
        bases.push((format!("http://127.0.0.1:{port}"), log));
    }
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(900))
        .build()
        .expect("a client");
    for (base, _) in &bases {
        let mut up = false;
        for _ in 0..600 {
            if http.get(format!("{base}/")).send().await.is_ok() {
                up = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(up, "server {base} never answered");
    }
    Bench {
        servers,
        bases,
        http,
        url: url.to_string(),
    }
}

/// `count` nodes through the API, in one aggregate (returned with them).
async fn populate(b: &Bench, count: usize) -> (Vec<String>, String) {
    let agg = uuid::Uuid::new_v4().to_string();
    let started = Instant::now();
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut workers = Vec::new();
    for w in 0..SETUP_PARALLELISM {
        let (http, next, agg) = (b.http.clone(), next.clone(), agg.clone());
        let base = b.bases[w % b.bases.len()].0.clone();
        workers.push(tokio::spawn(async move {
            let mut made = Vec::new();
            loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if i >= count {
                    return made;
                }
                made.push(make_node(&http, &base, i, &agg).await);
            }
        }));
    }
    let mut nodes = Vec::new();
    for w in workers {
        nodes.extend(w.await.expect("setup worker"));
    }
    let setup = started.elapsed();
    println!(
        "deploy setup: {count} nodes x {CORES} cores, {} GiB each, {} API calls with {SETUP_PARALLELISM} clients in {:.2}s ({:.0} calls/s)",
        MEMORY_MB / 1024,
        count * 4,
        setup.as_secs_f64(),
        (count * 4) as f64 / setup.as_secs_f64()
    );
    (nodes, agg)
}

/// One deployment of [`BIG_DEPLOY`] instances, timed; the instances made.
async fn big_deploy(b: &Bench) -> i64 {
    let base = &b.bases[0].0;
    let t = Instant::now();
    let r = admin(b.http.post(format!("{base}/deployments")))
        .json(&deploy_body("bench-big", BIG_DEPLOY))
        .send()
        .await
        .expect("big deploy");
    let status = r.status().as_u16();
    let body: Value = r.json().await.unwrap_or(Value::Null);
    let big = t.elapsed();
    assert_eq!(
        status,
        201,
        "big deploy: {}",
        body.to_string().chars().take(500).collect::<String>()
    );
    let made: usize = body["instances"]
        .as_object()
        .map(|m| m.values().map(|l| l.as_array().map_or(0, Vec::len)).sum())
        .unwrap_or(0);
    let per_node: Vec<i64> = body["deploy_map"]
        .as_object()
        .map(|m| m.values().filter_map(Value::as_i64).collect())
        .unwrap_or_default();
    println!(
        "deploy big: 1 POST /deployments of {BIG_DEPLOY} instances (1.7 CPU bound, 2048 MiB, auto) in {:.2}s: {made} instances on {} nodes ({}..{} per node)",
        big.as_secs_f64(),
        per_node.len(),
        per_node.iter().min().copied().unwrap_or(0),
        per_node.iter().max().copied().unwrap_or(0),
    );
    i64::try_from(made).unwrap_or(-1)
}

/// Rounds of [`SINGLES`] concurrent single deployments, each of a new app;
/// (created, failed).
async fn single_rounds(b: &Bench, rounds: usize) -> (usize, usize) {
    let mut ok = 0;
    let mut failed = 0;
    let server_pids: Vec<u32> = b.servers.iter().map(|s| s.0.id()).collect();
    let watcher = sqlx::PgPool::connect(&b.url).await.expect("connect");
    for round in 0..rounds {
        let app = format!("bench-single-{round}");
        let backends = backend_pids(&watcher).await;
        let cpu_before = (cpu_seconds(&server_pids), cpu_seconds(&backends));
        let barrier = Arc::new(tokio::sync::Barrier::new(SINGLES));
        let t = Instant::now();
        let mut tasks = Vec::new();
        for i in 0..SINGLES {
            let (http, barrier, app) = (b.http.clone(), barrier.clone(), app.clone());
            let base = b.bases[i % b.bases.len()].0.clone();
            tasks.push(tokio::spawn(async move {
                barrier.wait().await;
                let s = Instant::now();
                let r = admin(http.post(format!("{base}/deployments")))
                    .json(&deploy_body(&app, 1))
                    .send()
                    .await;
                let status = r.map(|r| r.status().as_u16()).unwrap_or(0);
                (status, s.elapsed())
            }));
        }
        let mut lat = Vec::new();
        let mut statuses = std::collections::BTreeMap::<u16, usize>::new();
        for task in tasks {
            let (status, d) = task.await.expect("single deploy task");
            *statuses.entry(status).or_default() += 1;
            lat.push(d);
        }
        let wall = t.elapsed();
        let cpu = (
            cpu_seconds(&server_pids) - cpu_before.0,
            cpu_seconds(&backends) - cpu_before.1,
        );
        lat.sort();
        let created = statuses.get(&201).copied().unwrap_or(0);
        ok += created;
        failed += SINGLES - created;
        println!(
            "deploy singles round {round}: {SINGLES} concurrent POST /deployments of 1 instance over 2 servers in {:.2}s wall ({:.1} deploys/s): {created} created, statuses {statuses:?}; latency ms p50 {:.1}, p95 {:.1}, p99 {:.1}, max {:.1}; cpu s: servers {:.2}, database {:.2}",
            wall.as_secs_f64(),
            SINGLES as f64 / wall.as_secs_f64(),
            pct(&lat, 0.50),
            pct(&lat, 0.95),
            pct(&lat, 0.99),
            pct(&lat, 1.0),
            cpu.0,
            cpu.1
        );
    }
    watcher.close().await;
    (ok, failed)
}

/// One single-instance deployment of the sustained phase.
fn sustained_body(agg: &str) -> Value {
    json!({"app": "bench-sustained", "count": 1, "cpu": 1.5, "cpu_bind": true,
           "memory_mb": 1024, "strategy": "auto", "member_of": agg,
           "project_id": "bench", "user_id": "bench"})
}

/// What one client task of the sustained phase saw.
#[derive(Default)]
struct Seen {
    latencies: Vec<Duration>,
    statuses: std::collections::BTreeMap<u16, usize>,
}

/// [`SUSTAINED_CLIENTS`] tasks deploying one instance of app
/// `bench-sustained` each in turn, until `secs` have passed; (created,
/// failed).
async fn sustained(b: &Bench, agg: &str, secs: u64) -> (usize, usize) {
    let server_pids: Vec<u32> = b.servers.iter().map(|s| s.0.id()).collect();
    let watcher = sqlx::PgPool::connect(&b.url).await.expect("connect");
    let backends = backend_pids(&watcher).await;
    let me = [std::process::id()];
    let before = (
        cpu_seconds(&server_pids),
        cpu_seconds(&backends),
        cpu_seconds(&me),
    );
    let deadline = Instant::now() + Duration::from_secs(secs);
    let t = Instant::now();
    let mut tasks = Vec::new();
    for i in 0..SUSTAINED_CLIENTS {
        let http = b.http.clone();
        let base = b.bases[i % b.bases.len()].0.clone();
        let body = sustained_body(agg);
        tasks.push(tokio::spawn(async move {
            let mut seen = Seen::default();
            while Instant::now() < deadline {
                let s = Instant::now();
                let r = admin(http.post(format!("{base}/deployments")))
                    .json(&body)
                    .send()
                    .await;
                let status = match r {
                    Ok(r) => {
                        let status = r.status().as_u16();
                        let _ = r.bytes().await;
                        status
                    }
                    Err(_) => 0,
                };
                seen.latencies.push(s.elapsed());
                *seen.statuses.entry(status).or_default() += 1;
            }
            seen
        }));
    }
    let mut all = Seen::default();
    for task in tasks {
        let seen = task.await.expect("sustained task");
        all.latencies.extend(seen.latencies);
        for (s, n) in seen.statuses {
            *all.statuses.entry(s).or_default() += n;
        }
    }
    let wall = t.elapsed().as_secs_f64();
    let backends_now = backend_pids(&watcher).await;
    let cpu = (
        cpu_seconds(&server_pids) - before.0,
        cpu_seconds(&backends_now) - before.1,
        cpu_seconds(&me) - before.2,
    );
    watcher.close().await;
    all.latencies.sort();
    let created = all.statuses.get(&201).copied().unwrap_or(0);
    let done = all.latencies.len();
    let per = |s: f64| s * 1e3 / created.max(1) as f64;
    println!(
        "deploy sustained: {SUSTAINED_CLIENTS} clients, single deploys of one app (1.5 bound, 1 GiB, member_of) for {wall:.1}s: {created} created ({:.0} deploys/s), statuses {:?}; latency ms p50 {:.1}, p99 {:.1}; cpu ms a deploy: servers {:.2}, database {:.2}, together {:.2}; the client's own {:.2}",
        created as f64 / wall,
        all.statuses,
        pct(&all.latencies, 0.50),
        pct(&all.latencies, 0.99),
        per(cpu.0),
        per(cpu.1),
        per(cpu.0 + cpu.1),
        per(cpu.2),
    );
    (created, done - created)
}

/// No core holds more than its share base and no inventory is
/// overcommitted, on a sample of nodes; the problems found.
async fn check_sample(b: &Bench, nodes: &[String]) -> Vec<String> {
    let base = &b.bases[0].0;
    let mut bad = Vec::new();
    for rp in nodes.iter().step_by(nodes.len().div_ceil(20).max(1)) {
        let top = must(
            b.http
                .get(format!("{base}/resource_providers/{rp}/cpu_topology")),
            "topology",
        )
        .await;
        let mut bound = 0;
        for c in top["cores"].as_array().into_iter().flatten() {
            let used = c["used_shares"].as_i64().unwrap_or(0);
            bound += used;
            if used > 100 {
                bad.push(format!("{rp} core {}: {used} shares", c["id"]));
            }
        }
        let u = must(
            b.http.get(format!("{base}/resource_providers/{rp}/usages")),
            "usages",
        )
        .await;
        let shares = u["usages"]["CUSTOM_CPU_SHARES"].as_i64().unwrap_or(0);
        let mem = u["usages"]["MEMORY_MB"].as_i64().unwrap_or(0);
        if shares != bound || shares > (CORES * 100) as i64 || mem > MEMORY_MB {
            bad.push(format!(
                "{rp}: shares {shares} (bound {bound}), memory {mem}"
            ));
        }
    }
    bad
}

/// An app's instance count, as `GET /deployments/{app}` gives it.
async fn count_of(b: &Bench, app: &str) -> i64 {
    let base = &b.bases[0].0;
    must(b.http.get(format!("{base}/deployments/{app}")), "show").await["count"]
        .as_i64()
        .unwrap_or(-1)
}

#[tokio::main]
async fn main() {
    let Ok(base_url) = std::env::var("DATABASE_URL") else {
        eprintln!("deploy bench: DATABASE_URL is not set; skipping");
        return;
    };
    let db = format!("bench_deploy_{}", uuid::Uuid::new_v4().simple());
    let admin_pool = sqlx::PgPool::connect(&base_url).await.expect("connect");
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {db}")))
        .execute(&admin_pool)
        .await
        .expect("create db");
    let (prefix, _) = base_url.rsplit_once('/').expect("database url with a name");
    let url = format!("{prefix}/{db}");
    let b = start_servers(&url).await;
    let (nodes, agg) = populate(&b, setting("BENCH_DEPLOY_NODES", 1_000)).await;

    // Every server has answered a deployment before the timed parts, as the
    // processes of a running service have (a process's first request reads
    // every node; that cold start is not what is measured here).
    for (base, _) in &b.bases {
        let mut warm = deploy_body("bench-warm-up", 1);
        warm["dry_run"] = json!(true);
        must(
            b.http.post(format!("{base}/deployments")).json(&warm),
            "warm-up",
        )
        .await;
    }
    // And one of the sustained phase's shape each: a process ranks the
    // nodes of a query and shape it was not asked before by reading them all.
    for (base, _) in &b.bases {
        let body = sustained_body(&agg);
        must(
            b.http.post(format!("{base}/deployments")).json(&body),
            "warm-up",
        )
        .await;
    }
    let big = match setting("BENCH_BIG", 1) {
        0 => None,
        _ => Some(big_deploy(&b).await),
    };
    let rounds = setting("BENCH_SINGLES_ROUNDS", 3);
    let (ok, failed) = single_rounds(&b, rounds).await;
    let secs = setting("BENCH_SUSTAINED_SECS", 10);
    let (sustained_ok, sustained_failed) = match secs {
        0 => (0, 0),
        s => sustained(&b, &agg, u64::try_from(s).unwrap_or(10)).await,
    };

    let bad = check_sample(&b, &nodes).await;
    let big_count = match big {
        Some(_) => count_of(&b, "bench-big").await,
        None => 0,
    };
    let mut single_count = 0;
    for round in 0..rounds {
        single_count += count_of(&b, &format!("bench-single-{round}")).await;
    }
    // Less the warm-up's two.
    let sustained_count = count_of(&b, "bench-sustained").await - 2;
    println!(
        "deploy check: bench-big {big_count} instances, bench-single {single_count}, bench-sustained {sustained_count}, {} problems on sampled nodes",
        bad.len(),
    );

    let logs: Vec<std::path::PathBuf> = b.bases.iter().map(|(_, l)| l.clone()).collect();
    drop(b);
    admin_pool.close().await;
    let admin_pool = sqlx::PgPool::connect(&base_url).await.expect("connect");
    if std::env::var_os("BENCH_KEEP_DB").is_some() {
        println!("deploy bench: kept database {db}");
    } else {
        let _ = sqlx::query(sqlx::AssertSqlSafe(format!(
            "DROP DATABASE IF EXISTS {db} WITH (FORCE)"
        )))
        .execute(&admin_pool)
        .await;
    }
    let failures = failed + sustained_failed;
    if failures == 0 && bad.is_empty() && std::env::var_os("BENCH_SERVER_LOG").is_none() {
        for log in &logs {
            let _ = std::fs::remove_file(log);
        }
    }
    assert!(bad.is_empty(), "{bad:#?}");
    if let Some(made) = big {
        assert_eq!(made, BIG_DEPLOY);
        assert_eq!(big_count, BIG_DEPLOY);
    }
    assert_eq!(single_count, ok as i64);
    assert_eq!(sustained_count, sustained_ok as i64);
    assert_eq!(failures, 0, "every single deployment is placed");
}
