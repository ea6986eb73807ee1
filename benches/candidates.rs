//! Allocation-candidate workloads of issue 4, populated through the HTTP API
//! on a fresh database and queried repeatedly through a real server:
//!
//! - W1: N root providers (VCPU 64 ratio 4, MEMORY_MB 262144 reserved 2048,
//!   DISK_GB 2000), half with HW_CPU_X86_AVX2, 10 aggregates, allocations on
//!   30%; plain query with limit 1000, and with required + member_of.
//! - W2: 1,000 trees root → 2 NUMA (PCPU, MEMORY_MB) → 2 PF each (VFs,
//!   CUSTOM_PHYSNET_A/B), 10 sharing DISK_GB providers each aggregated with
//!   100 roots; granular request with same_subtree and isolate, limit 100.
//! - W3: one root with 8 children of CUSTOM_X 6; 6 groups of CUSTOM_X:1,
//!   group_policy none, limit 1000.
//! - E1/E2: `GET /allocation_candidates/explain` with three isolated
//!   groups of VCPU:1 (no limit) over one root with 100 children (E1) and
//!   over a chain of 3,001 nested providers (E2), each with VCPU 4: the
//!   time of one answer and the server's peak memory, on a fresh process.
//!
//! Prints p50/p95/p99 per workload and the server's resident memory.
//! Needs DATABASE_URL. `BENCH_W1_SIZES=1000,10000,100000` chooses W1 sizes
//! (default 1000,10000); `BENCH_RUNS` the repetitions (default 50).

use serde_json::{json, Value};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

struct Server {
    child: Child,
    base: String,
    db_url: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Server {
    fn rss_kb(&self) -> (u64, u64) {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .unwrap_or_default();
        let field = |name: &str| {
            status
                .lines()
                .find(|l| l.starts_with(name))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
                .unwrap_or(0)
        };
        (field("VmRSS:"), field("VmHWM:"))
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or(0)
}

async fn fresh_server(base_url: &str) -> Server {
    let db = format!("bench_cand_{}", uuid::Uuid::new_v4().simple());
    let pool = sqlx::PgPool::connect(base_url).await.expect("connect");
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {db}")))
        .execute(&pool)
        .await
        .expect("create db");
    pool.close().await;
    let (prefix, _) = base_url.rsplit_once('/').expect("database url with a name");
    start_server(&format!("{prefix}/{db}"), &[], &[]).await
}

/// `placement serve` on `db_url` with extra flags and environment.
async fn start_server(db_url: &str, extra: &[&str], env: &[(&str, &str)]) -> Server {
    let port = free_port();
    let child = Command::new(placement_testkit::placement_bin())
        .args(["serve", "--bind", &format!("127.0.0.1:{port}")])
        .args(extra)
        .envs(env.iter().copied())
        .env("DATABASE_URL", db_url)
        .env(
            "RUST_LOG",
            std::env::var("BENCH_SERVER_LOG").unwrap_or_else(|_| "warn".into()),
        )
        .stdout(Stdio::null())
        .stderr(
            std::fs::File::create(std::env::temp_dir().join("placement-bench-server.log"))
                .map(Stdio::from)
                .unwrap_or(Stdio::null()),
        )
        .spawn()
        .expect("start server");
    let base = format!("http://127.0.0.1:{port}");
    let http = reqwest::Client::new();
    for _ in 0..400 {
        if http.get(format!("{base}/")).send().await.is_ok() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Server {
        child,
        base,
        db_url: db_url.to_string(),
    }
}

#[derive(Clone)]
struct Api {
    http: reqwest::Client,
    base: String,
}

impl Api {
    async fn call(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> Value {
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

    async fn provider(&self, name: &str, parent: Option<uuid::Uuid>) -> uuid::Uuid {
        let u = uuid::Uuid::new_v4();
        let mut body = json!({"name": name, "uuid": u});
        if let Some(p) = parent {
            body["parent_provider_uuid"] = json!(p);
        }
        self.call(reqwest::Method::POST, "/resource_providers", Some(body))
            .await;
        u
    }

    async fn inventory(&self, rp: uuid::Uuid, gen: i64, inv: Value) -> i64 {
        let path = format!("/resource_providers/{rp}/inventories");
        let v = self
            .call(
                reqwest::Method::PUT,
                &path,
                Some(json!({"resource_provider_generation": gen, "inventories": inv})),
            )
            .await;
        v["resource_provider_generation"]
            .as_i64()
            .unwrap_or(gen + 1)
    }

    async fn traits(&self, rp: uuid::Uuid, gen: i64, traits: &[&str]) -> i64 {
        let path = format!("/resource_providers/{rp}/traits");
        let v = self
            .call(
                reqwest::Method::PUT,
                &path,
                Some(json!({"resource_provider_generation": gen, "traits": traits})),
            )
            .await;
        v["resource_provider_generation"]
            .as_i64()
            .unwrap_or(gen + 1)
    }

    async fn aggregates(&self, rp: uuid::Uuid, gen: i64, aggs: &[uuid::Uuid]) -> i64 {
        let path = format!("/resource_providers/{rp}/aggregates");
        let v = self
            .call(
                reqwest::Method::PUT,
                &path,
                Some(json!({"resource_provider_generation": gen, "aggregates": aggs})),
            )
            .await;
        v["resource_provider_generation"]
            .as_i64()
            .unwrap_or(gen + 1)
    }
}

/// Runs `f(i)` for i in 0..n with `width` requests in flight.
async fn parallel<F, Fut>(n: usize, width: usize, f: F)
where
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let f = Arc::new(f);
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..width {
        let (f, next) = (f.clone(), next.clone());
        tasks.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
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

/// Counts allocation requests without building a JSON tree (the figure is
/// the server's answer time, not the client's parsing).
#[derive(serde::Deserialize)]
struct Counted {
    allocation_requests: Vec<serde::de::IgnoredAny>,
}

async fn measure(api: &Api, server: &Server, label: &str, query: &str, runs: usize) {
    let mut lat = Vec::with_capacity(runs);
    let mut count = 0;
    for _ in 0..runs {
        let t = Instant::now();
        let r = api
            .http
            .get(format!("{}/allocation_candidates?{query}", api.base))
            .header("x-auth-token", "admin")
            .header("openstack-api-version", "placement 1.39")
            .send()
            .await
            .expect("request");
        assert!(r.status().is_success(), "{label}: {}", r.status());
        let bytes = r.bytes().await.expect("body");
        lat.push(t.elapsed().as_secs_f64() * 1000.0);
        count = serde_json::from_slice::<Counted>(&bytes)
            .map(|c| c.allocation_requests.len())
            .unwrap_or(0);
    }
    lat.sort_by(f64::total_cmp);
    let p = |q: f64| lat[((lat.len() as f64 * q) as usize).min(lat.len() - 1)];
    let (rss, hwm) = server.rss_kb();
    println!(
        "{label}: {count} candidates, p50 {:.1} ms, p95 {:.1} ms, p99 {:.1} ms over {runs} runs; server RSS {} MiB (peak {} MiB)",
        p(0.5),
        p(0.95),
        p(0.99),
        rss / 1024,
        hwm / 1024
    );
}

async fn w1(base_url: &str, n: usize, runs: usize) {
    let server = fresh_server(base_url).await;
    let api = Api {
        http: reqwest::Client::new(),
        base: server.base.clone(),
    };
    let aggs: Arc<Vec<uuid::Uuid>> = Arc::new((0..10).map(|_| uuid::Uuid::new_v4()).collect());
    let started = Instant::now();
    let a = api.clone();
    let ag = aggs.clone();
    parallel(n, 16, move |i| {
        let (api, aggs) = (a.clone(), ag.clone());
        async move {
            let rp = api.provider(&format!("w1-{i}"), None).await;
            let inv = json!({
                "VCPU": {"total": 64, "allocation_ratio": 4.0},
                "MEMORY_MB": {"total": 262144, "reserved": 2048},
                "DISK_GB": {"total": 2000}
            });
            let mut gen = api.inventory(rp, 0, inv).await;
            if i % 2 == 0 {
                gen = api.traits(rp, gen, &["HW_CPU_X86_AVX2"]).await;
            }
            api.aggregates(rp, gen, &[aggs[i % 10]]).await;
            if i % 10 < 3 {
                let consumer = uuid::Uuid::new_v4();
                let body = json!({"allocations": {rp.to_string(): {"resources": {"VCPU": 4, "MEMORY_MB": 8192, "DISK_GB": 40}}},
                    "project_id": "p", "user_id": "u", "consumer_generation": null, "consumer_type": "INSTANCE"});
                api.call(reqwest::Method::PUT, &format!("/allocations/{consumer}"), Some(body)).await;
            }
        }
    })
    .await;
    println!(
        "W1 n={n}: populated through the API in {:.1}s",
        started.elapsed().as_secs_f64()
    );
    let q = "resources=VCPU:2,MEMORY_MB:4096,DISK_GB:20&limit=1000";
    measure(&api, &server, &format!("W1 n={n} plain"), q, runs).await;
    let q = format!("{q}&required=HW_CPU_X86_AVX2&member_of={}", aggs[0]);
    measure(
        &api,
        &server,
        &format!("W1 n={n} required+member_of"),
        &q,
        runs,
    )
    .await;
    if let Some(ks) = keystone::Bench::from_env() {
        let plain = "resources=VCPU:2,MEMORY_MB:4096,DISK_GB:20&limit=1000";
        keystone::overhead(&server, &ks, plain, runs.max(200)).await;
    }
}

async fn w2(base_url: &str, runs: usize) {
    let server = fresh_server(base_url).await;
    let api = Api {
        http: reqwest::Client::new(),
        base: server.base.clone(),
    };
    api.call(reqwest::Method::PUT, "/traits/CUSTOM_PHYSNET_A", None)
        .await;
    api.call(reqwest::Method::PUT, "/traits/CUSTOM_PHYSNET_B", None)
        .await;
    let aggs: Arc<Vec<uuid::Uuid>> = Arc::new((0..10).map(|_| uuid::Uuid::new_v4()).collect());
    let started = Instant::now();
    for (k, agg) in aggs.iter().enumerate() {
        let rp = api.provider(&format!("w2-share-{k}"), None).await;
        let gen = api
            .inventory(rp, 0, json!({"DISK_GB": {"total": 100000}}))
            .await;
        let gen = api.traits(rp, gen, &["MISC_SHARES_VIA_AGGREGATE"]).await;
        api.aggregates(rp, gen, &[*agg]).await;
    }
    let a = api.clone();
    let ag = aggs.clone();
    parallel(1000, 16, move |i| {
        let (api, aggs) = (a.clone(), ag.clone());
        async move {
            let root = api.provider(&format!("w2-{i}"), None).await;
            let gen = api
                .inventory(
                    root,
                    0,
                    json!({"VCPU": {"total": 8}, "MEMORY_MB": {"total": 16384}}),
                )
                .await;
            api.aggregates(root, gen, &[aggs[i / 100]]).await;
            for n in 0..2 {
                let numa = api.provider(&format!("w2-{i}-numa{n}"), Some(root)).await;
                let g = api
                    .inventory(
                        numa,
                        0,
                        json!({"PCPU": {"total": 16}, "MEMORY_MB": {"total": 65536}}),
                    )
                    .await;
                api.traits(numa, g, &["HW_NUMA_ROOT"]).await;
                for p in 0..2 {
                    let pf = api
                        .provider(&format!("w2-{i}-numa{n}-pf{p}"), Some(numa))
                        .await;
                    let g = api
                        .inventory(pf, 0, json!({"SRIOV_NET_VF": {"total": 8}}))
                        .await;
                    let physnet = if p == 0 {
                        "CUSTOM_PHYSNET_A"
                    } else {
                        "CUSTOM_PHYSNET_B"
                    };
                    api.traits(pf, g, &[physnet]).await;
                }
            }
        }
    })
    .await;
    println!(
        "W2: populated through the API in {:.1}s",
        started.elapsed().as_secs_f64()
    );
    let q = "resources=DISK_GB:10&resources1=PCPU:2,MEMORY_MB:1024&resources2=SRIOV_NET_VF:1&required2=CUSTOM_PHYSNET_A\
             &same_subtree=1,2&group_policy=isolate&limit=100";
    measure(&api, &server, "W2 granular same_subtree isolate", q, runs).await;
}

async fn w3(base_url: &str, runs: usize) {
    let server = fresh_server(base_url).await;
    let api = Api {
        http: reqwest::Client::new(),
        base: server.base.clone(),
    };
    api.call(reqwest::Method::PUT, "/resource_classes/CUSTOM_X", None)
        .await;
    let root = api.provider("w3-root", None).await;
    for c in 0..8 {
        let child = api.provider(&format!("w3-child-{c}"), Some(root)).await;
        api.inventory(child, 0, json!({"CUSTOM_X": {"total": 6}}))
            .await;
    }
    let q: String = (1..=6)
        .map(|g| format!("resources{g}=CUSTOM_X:1&"))
        .collect::<String>()
        + "group_policy=none&limit=1000";
    measure(&api, &server, "W3 8 children x 6 groups", &q, runs).await;
}

/// One explain request on a fresh server process over `server`'s
/// database: its time and the process's peak resident memory.
async fn explain_once(server: &Server, label: &str, query: &str) {
    let fresh = start_server(&server.db_url, &[], &[]).await;
    let http = reqwest::Client::new();
    let (before, _) = fresh.rss_kb();
    let t = Instant::now();
    let r = http
        .get(format!(
            "{}/allocation_candidates/explain?{query}",
            fresh.base
        ))
        .header("x-auth-token", "admin")
        .header("openstack-api-version", "placement 1.39")
        .send()
        .await
        .expect("request");
    assert!(r.status().is_success(), "{label}: {}", r.status());
    let body: Value = r.json().await.expect("body");
    let ms = t.elapsed().as_secs_f64() * 1000.0;
    let (_, peak) = fresh.rss_kb();
    let fits = body["summary"]["fits"].as_i64().unwrap_or(-1);
    println!(
        "{label}: explain in {ms:.0} ms, complete {}, fits {fits}; server RSS {} MiB before, peak {} MiB",
        body["complete"],
        before / 1024,
        peak / 1024
    );
}

async fn explain_workloads(base_url: &str) {
    let query = "resources1=VCPU:1&resources2=VCPU:1&resources3=VCPU:1&group_policy=isolate";
    let server = fresh_server(base_url).await;
    let api = Api {
        http: reqwest::Client::new(),
        base: server.base.clone(),
    };
    let root = api.provider("e1-root", None).await;
    for c in 0..100 {
        let child = api.provider(&format!("e1-child-{c}"), Some(root)).await;
        api.inventory(child, 0, json!({"VCPU": {"total": 4}})).await;
    }
    explain_once(&server, "E1 one root, 100 children", query).await;
    drop(server);
    let server = fresh_server(base_url).await;
    let api = Api {
        http: reqwest::Client::new(),
        base: server.base.clone(),
    };
    let mut parent = None;
    for c in 0..3001 {
        let p = api.provider(&format!("e2-{c}"), parent).await;
        api.inventory(p, 0, json!({"VCPU": {"total": 4}})).await;
        parent = Some(p);
    }
    explain_once(&server, "E2 a chain of 3,001 providers", query).await;
}

/// W1 through a server that validates Keystone tokens (a cached token)
/// against the noauth2 server, requests interleaved so that both see the
/// same machine. Runs when `scripts/keystone_check.sh --bench` has a real
/// Keystone up and sets `BENCH_KEYSTONE_*`.
mod keystone {
    use super::{start_server, Server};
    use serde_json::json;
    use std::time::Instant;

    pub struct Bench {
        url: String,
        service_password: String,
        admin_password: String,
    }

    impl Bench {
        pub fn from_env() -> Option<Bench> {
            let var = |n: &str| std::env::var(n).ok().filter(|v| !v.is_empty());
            Some(Bench {
                url: var("BENCH_KEYSTONE_URL")?,
                service_password: var("BENCH_KEYSTONE_SERVICE_PASSWORD")?,
                admin_password: var("BENCH_KEYSTONE_ADMIN_PASSWORD")?,
            })
        }

        async fn admin_token(&self, http: &reqwest::Client) -> String {
            let body = json!({"auth": {"identity": {"methods": ["password"], "password": {"user": {
                "name": "admin", "domain": {"id": "default"}, "password": self.admin_password}}},
                "scope": {"project": {"name": "admin", "domain": {"id": "default"}}}}});
            let r = http
                .post(format!("{}/auth/tokens", self.url))
                .json(&body)
                .send()
                .await
                .expect("keystone");
            assert_eq!(r.status().as_u16(), 201, "admin token");
            r.headers()["x-subject-token"]
                .to_str()
                .expect("token")
                .to_string()
        }
    }

    async fn timed(http: &reqwest::Client, url: &str, token: &str) -> f64 {
        let t = Instant::now();
        let r = http
            .get(url)
            .header("x-auth-token", token)
            .header("openstack-api-version", "placement 1.39")
            .send()
            .await
            .expect("request");
        assert!(r.status().is_success(), "{url}: {}", r.status());
        r.bytes().await.expect("body");
        t.elapsed().as_secs_f64() * 1000.0
    }

    pub async fn overhead(populated: &Server, ks: &Bench, query: &str, runs: usize) {
        // Two servers started alike on the populated database, so that
        // only the authentication differs.
        let noauth = start_server(&populated.db_url, &[], &[]).await;
        let keystone = start_server(
            &populated.db_url,
            &[
                "--auth-strategy",
                "keystone",
                "--keystone-url",
                &ks.url,
                "--keystone-username",
                "placement",
                "--keystone-project",
                "service",
            ],
            &[("PLACEMENT_KEYSTONE_PASSWORD", ks.service_password.as_str())],
        )
        .await;
        let http = reqwest::Client::new();
        let token = ks.admin_token(&http).await;
        let plain = format!("{}/allocation_candidates?{query}", noauth.base);
        let checked = format!("{}/allocation_candidates?{query}", keystone.base);
        for _ in 0..5 {
            timed(&http, &plain, "admin").await;
            timed(&http, &checked, &token).await;
        }
        let (mut a, mut b) = (Vec::new(), Vec::new());
        for i in 0..runs {
            // Alternate which goes first, so neither gains from the order.
            if i % 2 == 0 {
                a.push(timed(&http, &plain, "admin").await);
                b.push(timed(&http, &checked, &token).await);
            } else {
                b.push(timed(&http, &checked, &token).await);
                a.push(timed(&http, &plain, "admin").await);
            }
        }
        a.sort_by(f64::total_cmp);
        b.sort_by(f64::total_cmp);
        let (pa, pb) = (a[a.len() / 2], b[b.len() / 2]);
        println!(
            "W1 plain, noauth2 vs keystone (cached token): p50 {pa:.2} ms vs {pb:.2} ms, \
             difference {:+.3} ms over {runs} interleaved runs each",
            pb - pa
        );
    }
}

#[tokio::main]
async fn main() {
    let Ok(base_url) = std::env::var("DATABASE_URL") else {
        eprintln!("candidates bench: DATABASE_URL is not set; skipping");
        return;
    };
    let runs: usize = std::env::var("BENCH_RUNS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(50);
    let sizes: Vec<usize> = std::env::var("BENCH_W1_SIZES")
        .unwrap_or_else(|_| "1000,10000".into())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect();
    let only = std::env::var("BENCH_ONLY").unwrap_or_default();
    if only.is_empty() || only.contains("w3") {
        w3(&base_url, runs).await;
    }
    if only.is_empty() || only.contains("explain") {
        explain_workloads(&base_url).await;
    }
    if only.is_empty() || only.contains("w2") {
        w2(&base_url, runs).await;
    }
    if only.is_empty() || only.contains("w1") {
        for n in sizes {
            w1(&base_url, n, runs).await;
        }
    }
}
