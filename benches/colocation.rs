//! Colocation under load, through one real server (issue 12):
//!
//! 1. 10,000 providers (64 VCPU, 256 GiB), every one reports once; 1,000 of
//!    them carry two production consumers and one batch consumer.
//! 2. Ingestion: the 1,000 report as fast as 32 clients can send
//!    (`BENCH_INGEST_SECONDS`, 20) with steady production (the batch
//!    inventory rewritten every 300 s) and churning production (rewritten
//!    on most reports), then steady while batch candidate queries run back
//!    to back: reports/s, report latency, candidates p50/p95.
//! 3. The same queries at a cluster's real rate, 1,000 nodes every 10 s
//!    (100 reports/s, `BENCH_PACED_SECONDS`, 30), and with no reports.
//! 4. Soak: 100 reports/s for `BENCH_SOAK_SECONDS` (600; 0 skips it), the
//!    database size and the sample count each minute.
//!
//! Every provider stays eligible for batch work (the cluster policy sets
//! metricExpirationSeconds and degradeTimeMinutes to an hour), so each
//! query runs the load filter over all 10,000 and answers `limit` of them.
//! The server keeps samples `BENCH_RETENTION` seconds (120, so that a
//! 10-minute soak reaches its steady state; the default is an hour).
//!
//! `cargo bench --bench colocation`; needs DATABASE_URL (without it the
//! bench prints a line and exits, so `cargo test --benches` stays a smoke
//! run).

use placement_testkit::{cluster, common};
use serde_json::{json, Value};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const PROVIDERS: usize = 10_000;
const REPORTERS: usize = 1_000;
const BATCH_QUERY: &str =
    "resources=BATCH_VCPU_MILLI:1000,BATCH_MEMORY_MB:2048&priority_class=batch";

fn env_secs(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[derive(Clone)]
struct Api {
    http: reqwest::Client,
    base: String,
}

impl Api {
    async fn send(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> Value {
        let mut rb = self
            .http
            .request(method.clone(), format!("{}{path}", self.base))
            .header("x-auth-token", "admin")
            .header("openstack-api-version", "placement 1.39");
        if let Some(b) = body {
            rb = rb.json(&b);
        }
        let r = rb.send().await.expect("request");
        let status = r.status();
        let text = r.text().await.unwrap_or_default();
        assert!(status.is_success(), "{method} {path}: {status} {text}");
        serde_json::from_str(&text).unwrap_or(Value::Null)
    }
}

/// Runs `f(i)` for i in 0..n with `width` in flight.
async fn parallel<F, Fut>(n: usize, width: usize, f: F)
where
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let f = Arc::new(f);
    let next = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..width {
        let (f, next) = (f.clone(), next.clone());
        tasks.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= n {
                    break;
                }
                f(i).await;
            }
        }));
    }
    for t in tasks {
        t.await.expect("worker");
    }
}

/// A provider and the consumers its reports name.
#[derive(Clone)]
struct Node {
    rp: uuid::Uuid,
    consumers: Vec<uuid::Uuid>,
}

/// How production's measured use moves from one report to the next.
#[derive(Clone, Copy, PartialEq)]
enum Load {
    /// Between 20 % and 42 % of the node in steps of 2 cores: the batch
    /// inventory moves past the 10 % hysteresis and is rewritten on most
    /// reports.
    Churning,
    /// Within 1.5 % of the node: rewritten only every 300 s.
    Steady,
}

fn report(node: &Node, tick: usize, load: Load) -> Value {
    let prod_cpu = match load {
        Load::Churning => 12_800 + (tick % 8) as i64 * 2_000,
        Load::Steady => 12_800 + (tick % 3) as i64 * 300,
    };
    let consumers: Vec<Value> = node
        .consumers
        .iter()
        .map(|c| json!({"consumer_uuid": c, "cpu_milli_used": prod_cpu / 3, "memory_mb_used": 20_000}))
        .collect();
    json!({"sampled_at": chrono::Utc::now().to_rfc3339(), "window_seconds": 10,
           "node": {"cpu_milli_used": prod_cpu + 1_000, "memory_mb_used": 70_000},
           "system": {"cpu_milli_used": 1_000, "memory_mb_used": 8_192},
           "consumers": consumers,
           "be": {"cpu_milli_used": prod_cpu / 3, "cpu_milli_request": 4_000, "cpu_milli_real_limit": 8_000}})
}

async fn populate(api: &Api) -> Vec<Node> {
    let started = Instant::now();
    api.send(
        reqwest::Method::PUT,
        "/colocation_policy",
        Some(json!({"metricExpirationSeconds": 3600, "degradeTimeMinutes": 60})),
    )
    .await;
    let nodes: Arc<Vec<Node>> = Arc::new(
        (0..PROVIDERS)
            .map(|_| Node {
                rp: uuid::Uuid::new_v4(),
                consumers: Vec::new(),
            })
            .collect(),
    );
    let (a, ns) = (api.clone(), nodes.clone());
    parallel(PROVIDERS, 16, move |i| {
        let (api, rp) = (a.clone(), ns[i].rp);
        async move {
            api.send(
                reqwest::Method::POST,
                "/resource_providers",
                Some(json!({"name": format!("cn{i:05}"), "uuid": rp})),
            )
            .await;
            let inv = json!({"resource_provider_generation": 0, "inventories": {
                "VCPU": {"total": 64}, "MEMORY_MB": {"total": 262_144}}});
            let path = format!("/resource_providers/{rp}/inventories");
            api.send(reqwest::Method::PUT, &path, Some(inv)).await;
        }
    })
    .await;
    let mut nodes: Vec<Node> = nodes.iter().cloned().collect();
    for n in nodes.iter_mut().take(REPORTERS) {
        n.consumers = (0..3).map(|_| uuid::Uuid::new_v4()).collect();
    }
    let nodes = Arc::new(nodes);
    let (a, ns) = (api.clone(), nodes.clone());
    parallel(REPORTERS, 16, move |i| {
        let (api, n) = (a.clone(), ns[i].clone());
        async move {
            for c in &n.consumers[..2] {
                let body = json!({"allocations": {n.rp.to_string(): {"resources": {"VCPU": 8, "MEMORY_MB": 32_768}}},
                    "project_id": "prod", "user_id": "u", "consumer_generation": null, "consumer_type": "INSTANCE"});
                api.send(reqwest::Method::PUT, &format!("/allocations/{c}"), Some(body)).await;
            }
            let batch = n.consumers[2];
            api.send(
                reqwest::Method::PUT,
                &format!("/consumers/{batch}/priority"),
                Some(json!({"priority_class": "batch", "priority": 5500})),
            )
            .await;
        }
    })
    .await;
    let (a, ns) = (api.clone(), nodes.clone());
    parallel(PROVIDERS, 16, move |i| {
        let (api, n) = (a.clone(), ns[i].clone());
        async move {
            let quiet = Node {
                rp: n.rp,
                consumers: n.consumers[..n.consumers.len().min(2)].to_vec(),
            };
            let path = format!("/resource_providers/{}/usage_reports", n.rp);
            api.send(reqwest::Method::POST, &path, Some(report(&quiet, 0, Load::Steady)))
                .await;
            if let Some(batch) = n.consumers.get(2) {
                let body = json!({"allocations": {n.rp.to_string(): {"resources": {"BATCH_VCPU_MILLI": 4_000, "BATCH_MEMORY_MB": 8_192}}},
                    "project_id": "batch", "user_id": "u", "consumer_generation": null, "consumer_type": "INSTANCE"});
                api.send(reqwest::Method::PUT, &format!("/allocations/{batch}"), Some(body)).await;
            }
        }
    })
    .await;
    println!(
        "populated {PROVIDERS} providers ({REPORTERS} with 2 production and 1 batch consumer), each reported once: {:.1} s",
        started.elapsed().as_secs_f64()
    );
    Arc::try_unwrap(nodes).unwrap_or_else(|a| (*a).clone())
}

fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((sorted.len() as f64 * q) as usize).min(sorted.len() - 1)]
}

/// Batch candidate queries back to back until `stop`: latencies in ms and
/// the answer size of the last one.
async fn query_until(api: Api, query: String, stop: Arc<AtomicBool>) -> (Vec<f64>, usize) {
    let mut lat = Vec::new();
    let mut found = 0;
    while !stop.load(Ordering::Relaxed) {
        let t = Instant::now();
        let v = api
            .send(
                reqwest::Method::GET,
                &format!("/allocation_candidates?{query}"),
                None,
            )
            .await;
        lat.push(t.elapsed().as_secs_f64() * 1e3);
        found = v["allocation_requests"].as_array().map_or(0, Vec::len);
    }
    lat.sort_by(f64::total_cmp);
    (lat, found)
}

/// Reports from the reporters: `rate` per second in total, or as fast as
/// 32 clients can when None, for `secs`. Returns sorted latencies (ms).
async fn reports_for(
    api: &Api,
    nodes: &[Node],
    rate: Option<u64>,
    secs: u64,
    load: Load,
) -> Vec<f64> {
    let nodes: Arc<Vec<Node>> = Arc::new(nodes[..REPORTERS].to_vec());
    let until = Instant::now() + Duration::from_secs(secs);
    let next = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..32 {
        let (api, nodes, next) = (api.clone(), nodes.clone(), next.clone());
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::new();
            while Instant::now() < until {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if let Some(r) = rate {
                    // Report i is due at i / rate seconds.
                    let due = started + Duration::from_secs_f64(i as f64 / r as f64);
                    tokio::time::sleep_until(due.into()).await;
                    if Instant::now() >= until {
                        break;
                    }
                }
                let n = &nodes[i % nodes.len()];
                let path = format!("/resource_providers/{}/usage_reports", n.rp);
                let t = Instant::now();
                api.send(
                    reqwest::Method::POST,
                    &path,
                    Some(report(n, i / nodes.len() + 1, load)),
                )
                .await;
                lat.push(t.elapsed().as_secs_f64() * 1e3);
            }
            lat
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.expect("reporter"));
    }
    all.sort_by(f64::total_cmp);
    all
}

/// Reports at `rate` (None: flat out) for `secs` while batch queries run.
/// (An empty query runs none.)
async fn phase(
    api: &Api,
    nodes: &[Node],
    (label, load): (&str, Load),
    rate: Option<u64>,
    secs: u64,
    query: &str,
) {
    let stop = Arc::new(AtomicBool::new(query.is_empty()));
    let querier = tokio::spawn(query_until(api.clone(), query.to_string(), stop.clone()));
    let started = Instant::now();
    let lat = if rate == Some(0) {
        tokio::time::sleep(Duration::from_secs(secs)).await;
        Vec::new()
    } else {
        reports_for(api, nodes, rate, secs, load).await
    };
    let elapsed = started.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    let (q, found) = querier.await.expect("querier");
    println!(
        "{label}: {} reports in {elapsed:.1} s = {:.0}/s (report p50 {:.1} ms, p99 {:.1} ms); \
         batch candidates ({query}): {found} answers, p50 {:.1} ms, p95 {:.1} ms over {} queries",
        lat.len(),
        lat.len() as f64 / elapsed,
        percentile(&lat, 0.5),
        percentile(&lat, 0.99),
        percentile(&q, 0.5),
        percentile(&q, 0.95),
        q.len()
    );
}

/// The database's size, the samples kept, and the sizes (MiB, with
/// indexes) of the tables reports write.
async fn footprint(url: &str) -> (i64, i64, String) {
    let pool = sqlx::PgPool::connect(url).await.expect("connect");
    let size: i64 = sqlx::query_scalar("SELECT pg_database_size(current_database())")
        .fetch_one(&pool)
        .await
        .expect("size");
    let samples: i64 = sqlx::query_scalar("SELECT count(*) FROM usage_samples")
        .fetch_one(&pool)
        .await
        .expect("count");
    let tables: Vec<(String, i64)> = sqlx::query_as(
        "SELECT relname::text, pg_total_relation_size(oid) FROM pg_class
          WHERE relname IN ('usage_samples', 'change_log', 'consumer_usage', 'provider_colocation', 'inventories')
          ORDER BY 1",
    )
    .fetch_all(&pool)
    .await
    .expect("tables");
    pool.close().await;
    let tables = tables
        .iter()
        .map(|(t, b)| format!("{t} {:.1}", *b as f64 / 1048576.0))
        .collect::<Vec<_>>()
        .join(", ");
    (size, samples, tables)
}

async fn soak(api: &Api, nodes: &[Node], url: &str, secs: u64) {
    let minutes = secs.div_ceil(60);
    for m in 1..=minutes {
        let lat = reports_for(
            api,
            nodes,
            Some(100),
            60.min(secs - (m - 1) * 60),
            Load::Churning,
        )
        .await;
        let (size, samples, tables) = footprint(url).await;
        println!(
            "soak minute {m}: {} reports (p50 {:.1} ms), database {:.1} MiB ({tables}), {samples} samples kept",
            lat.len(),
            percentile(&lat, 0.5),
            size as f64 / 1048576.0
        );
    }
}

#[tokio::main]
async fn main() {
    if std::env::var("DATABASE_URL").is_err() {
        eprintln!("colocation bench: DATABASE_URL is not set; skipping");
        return;
    }
    let (admin_url, db) = common::fresh_database().await;
    let url = common::url_with_db(&admin_url, &db);
    let retention = env_secs("BENCH_RETENTION", 120).to_string();
    let server = cluster::start_server_with(
        &url,
        "bench-colocation",
        &["--colocation-sample-retention", &retention],
    )
    .await;
    let api = Api {
        http: reqwest::Client::builder()
            .timeout(Duration::from_secs(120))
            .build()
            .expect("client"),
        base: server.base.clone(),
    };
    let nodes = populate(&api).await;
    let q1000 = format!("{BATCH_QUERY}&limit=1000");
    let q50 = format!("{BATCH_QUERY}&limit=50");
    let quiet = ("no reports", Load::Steady);
    phase(&api, &nodes, quiet, Some(0), 10, &q50).await;
    phase(&api, &nodes, quiet, Some(0), 10, &q1000).await;
    let flat_out = env_secs("BENCH_INGEST_SECONDS", 20);
    let steady = ("flat out, steady production", Load::Steady);
    let churning = ("flat out, churning production", Load::Churning);
    phase(&api, &nodes, steady, None, flat_out, "").await;
    phase(&api, &nodes, churning, None, flat_out, "").await;
    phase(&api, &nodes, steady, None, flat_out, &q50).await;
    let paced = ("100 reports/s, churning production", Load::Churning);
    phase(
        &api,
        &nodes,
        paced,
        Some(100),
        env_secs("BENCH_PACED_SECONDS", 30),
        &q50,
    )
    .await;
    phase(
        &api,
        &nodes,
        paced,
        Some(100),
        env_secs("BENCH_PACED_SECONDS", 30),
        &q1000,
    )
    .await;
    let (size, samples, tables) = footprint(&url).await;
    println!(
        "before the soak: database {:.1} MiB ({tables}), {samples} samples kept",
        size as f64 / 1048576.0
    );
    let soak_secs = env_secs("BENCH_SOAK_SECONDS", 600);
    if soak_secs > 0 {
        soak(&api, &nodes, &url, soak_secs).await;
    }
    drop(server);
    common::drop_database(&admin_url, &db);
}
