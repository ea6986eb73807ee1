//! The service at cloud scale: W1 (root providers with VCPU 64 ratio 4,
//! MEMORY_MB 262144 reserved 2048, DISK_GB 2000; half with
//! HW_CPU_X86_AVX2; 10 aggregates; allocations on 30 %) and nested trees
//! (root → 2 NUMA nodes with VCPU and memory → 2 PFs each with VFs),
//! loaded by bulk SQL into a fresh database (not through the API), then
//! served by a fresh process:
//!
//! - cold start: from spawning `placement serve` to its first candidates
//!   answer (migrations already applied, snapshot loaded on first use);
//! - the process's resident memory after that load;
//! - `GET /allocation_candidates?resources=VCPU:2,MEMORY_MB:4096,DISK_GB:20&limit=1000`
//!   p50/p99, and with `required` + `member_of`;
//! - a claim's `PUT /allocations` p50 under 32 clients on random providers;
//! - a second process's catch-up: its first candidates answer after the
//!   first process made 10,000 writes, beside its steady p50.
//!
//! Needs DATABASE_URL (a server where it may create a database).
//! `BENCH_SCALE_W1=10000,100000,1000000` (default 1000000) and
//! `BENCH_SCALE_TREES=100000` choose the sizes (0 skips); `BENCH_RUNS` the
//! repetitions (default 50). `BENCH_KEEP_DB=1` keeps the W1 database and
//! prints its URL; `BENCH_SCALE_DB=<url>` runs W1 on it instead of loading
//! one (to alternate two builds, `BENCH_SERVER_BIN`, on the same data);
//! `BENCH_SERVER_LOG` sets the servers' RUST_LOG (their logs go to the
//! temporary directory).

use serde_json::json;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

const QUERY: &str = "resources=VCPU:2,MEMORY_MB:4096,DISK_GB:20&limit=1000";
const CLIENTS: usize = 32;

struct Server {
    child: Child,
    base: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Server {
    fn rss_mib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .unwrap_or_default();
        status
            .lines()
            .find(|l| l.starts_with("VmRSS:"))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
            / 1024
    }
}

fn admin(rb: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
    rb.header("x-auth-token", "admin")
        .header("openstack-api-version", "placement 1.39")
}

/// Spawns a server and waits for its first candidates answer to `query`;
/// the server and the time that took.
async fn start(http: &reqwest::Client, db_url: &str, query: &str) -> (Server, Duration) {
    let port = placement_testkit::cluster::free_port();
    let started = Instant::now();
    let bin = placement_testkit::placement_bin();
    let log = std::env::temp_dir().join(format!("placement-scale-bench-{port}.log"));
    let child = Command::new(bin)
        .args(["serve", "--bind", &format!("127.0.0.1:{port}")])
        .env("DATABASE_URL", db_url)
        .env("PLACEMENT_DB_MAX_CONNECTIONS", "40")
        .env(
            "RUST_LOG",
            std::env::var("BENCH_SERVER_LOG").unwrap_or_else(|_| "warn".into()),
        )
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).expect("server log"))
        .spawn()
        .expect("start server");
    let server = Server {
        child,
        base: format!("http://127.0.0.1:{port}"),
    };
    let url = format!("{}/allocation_candidates?{query}", server.base);
    loop {
        if let Ok(r) = admin(http.get(&url)).send().await {
            if r.status().is_success() && r.bytes().await.is_ok() {
                return (server, started.elapsed());
            }
        }
        assert!(started.elapsed() < Duration::from_secs(600), "no answer");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A fresh, migrated database; its URL.
async fn fresh_database(base_url: &str, label: &str) -> String {
    let db = format!("bench_scale_{label}_{}", uuid::Uuid::new_v4().simple());
    let admin_pool = sqlx::PgPool::connect(base_url).await.expect("connect");
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {db}")))
        .execute(&admin_pool)
        .await
        .expect("create db");
    admin_pool.close().await;
    let (prefix, _) = base_url.rsplit_once('/').expect("database url with a name");
    let url = format!("{prefix}/{db}");
    let pool = sqlx::PgPool::connect(&url).await.expect("connect");
    placement::db::prepare(&pool).await.expect("migrate");
    pool.close().await;
    url
}

async fn run_sql(url: &str, statements: &[String]) {
    let pool = sqlx::PgPool::connect(url).await.expect("connect");
    for s in statements {
        sqlx::raw_sql(sqlx::AssertSqlSafe(s.clone()))
            .execute(&pool)
            .await
            .unwrap_or_else(|e| panic!("{s}: {e}"));
    }
    sqlx::raw_sql("VACUUM ANALYZE")
        .execute(&pool)
        .await
        .expect("analyze");
    pool.close().await;
}

/// Inventories of provider ids `ids` (a SQL set expression over g).
fn inventory_sql(ids: &str, classes: &[(&str, i64, i64, f64)]) -> String {
    let values: Vec<String> = classes
        .iter()
        .map(|(c, total, reserved, ratio)| format!("('{c}', {total}, {reserved}, {ratio:.1})"))
        .collect();
    format!(
        "INSERT INTO inventories (resource_provider_id, resource_class_id, total, reserved, min_unit, max_unit, step_size, allocation_ratio)
         SELECT g, rc.id, v.total, v.reserved, 1, v.total, 1, v.ratio FROM {ids}
         CROSS JOIN (VALUES {}) v(name, total, reserved, ratio)
         JOIN resource_classes rc ON rc.name = v.name",
        values.join(", ")
    )
}

/// W1 at `n` roots, by bulk SQL: as the candidates bench builds it
/// through the API, the members of the first aggregate (every tenth) all
/// have the trait, so `required` + `member_of` matches a tenth.
fn w1_sql(n: usize) -> Vec<String> {
    vec![
        format!(
            "INSERT INTO resource_providers (id, uuid, name, generation, root_provider_id)
             SELECT g, gen_random_uuid(), 'w1-' || g, 1, g FROM generate_series(1, {n}) g"
        ),
        "SELECT setval(pg_get_serial_sequence('resource_providers', 'id'), (SELECT max(id) FROM resource_providers))".into(),
        inventory_sql(
            &format!("generate_series(1, {n}) g"),
            &[
                ("VCPU", 64, 0, 4.0),
                ("MEMORY_MB", 262144, 2048, 1.0),
                ("DISK_GB", 2000, 0, 1.0),
            ],
        ),
        format!(
            "INSERT INTO resource_provider_traits (resource_provider_id, trait_id)
             SELECT g, t.id FROM generate_series(2, {n}, 2) g, traits t WHERE t.name = 'HW_CPU_X86_AVX2'"
        ),
        "INSERT INTO placement_aggregates (uuid) SELECT gen_random_uuid() FROM generate_series(1, 10)".into(),
        format!(
            "INSERT INTO resource_provider_aggregates (resource_provider_id, aggregate_id)
             SELECT g, a.id FROM generate_series(1, {n}) g
             JOIN (SELECT id, row_number() OVER (ORDER BY id) - 1 AS k FROM placement_aggregates) a ON a.k = g % 10"
        ),
        "INSERT INTO projects (external_id) VALUES ('p') ON CONFLICT DO NOTHING".into(),
        "INSERT INTO users (external_id) VALUES ('u') ON CONFLICT DO NOTHING".into(),
        format!(
            "INSERT INTO consumers (id, uuid, project_id, user_id, generation)
             SELECT g, gen_random_uuid(), p.id, u.id, 1 FROM generate_series(1, {n}) g, projects p, users u
              WHERE g % 10 < 3 AND p.external_id = 'p' AND u.external_id = 'u'"
        ),
        "SELECT setval(pg_get_serial_sequence('consumers', 'id'), (SELECT max(id) FROM consumers))".into(),
        "INSERT INTO allocations (resource_provider_id, consumer_id, resource_class_id, used)
         SELECT c.id, c.id, rc.id, v.used FROM consumers c
         CROSS JOIN (VALUES ('VCPU', 4), ('MEMORY_MB', 8192), ('DISK_GB', 40)) v(name, used)
         JOIN resource_classes rc ON rc.name = v.name".into(),
    ]
}

/// `t` nested trees of 7 providers: root → 2 NUMA (VCPU 32, MEMORY_MB
/// 131072) → 2 PFs each (SRIOV_NET_VF 8); ids 7k+1 … 7k+7.
fn trees_sql(t: usize) -> Vec<String> {
    let n = t * 7;
    vec![
        // Offsets in a tree: 0 root, 1-2 NUMA, 3-6 PFs (3,4 under 1; 5,6 under 2).
        format!(
            "INSERT INTO resource_providers (id, uuid, name, generation, root_provider_id, parent_provider_id)
             SELECT g, gen_random_uuid(), 'tree-' || g, 1, g - (g - 1) % 7,
                    CASE (g - 1) % 7 WHEN 0 THEN NULL WHEN 1 THEN g - 1 WHEN 2 THEN g - 2
                                     WHEN 3 THEN g - 2 WHEN 4 THEN g - 3 WHEN 5 THEN g - 3 ELSE g - 4 END
               FROM generate_series(1, {n}) g ORDER BY g"
        ),
        "SELECT setval(pg_get_serial_sequence('resource_providers', 'id'), (SELECT max(id) FROM resource_providers))".into(),
        inventory_sql(
            &format!("(SELECT g FROM generate_series(1, {n}) g WHERE (g - 1) % 7 IN (1, 2)) s(g)"),
            &[("VCPU", 32, 0, 4.0), ("MEMORY_MB", 131072, 1024, 1.0)],
        ),
        inventory_sql(
            &format!("(SELECT g FROM generate_series(1, {n}) g WHERE (g - 1) % 7 >= 3) s(g)"),
            &[("SRIOV_NET_VF", 8, 0, 1.0)],
        ),
    ]
}

fn percentile(sorted: &[f64], q: f64) -> f64 {
    let i = ((sorted.len() as f64 * q) as usize).min(sorted.len().saturating_sub(1));
    sorted.get(i).copied().unwrap_or(f64::NAN)
}

/// p50 and p99 in ms of `runs` candidates queries.
async fn latencies(http: &reqwest::Client, s: &Server, query: &str, runs: usize) -> (f64, f64) {
    let url = format!("{}/allocation_candidates?{query}", s.base);
    let mut lat = Vec::with_capacity(runs);
    for _ in 0..runs {
        let t = Instant::now();
        let r = admin(http.get(&url)).send().await.expect("request");
        let status = r.status();
        let body = r.text().await.expect("body");
        assert!(status.is_success(), "{query}: {status} {body}");
        lat.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    lat.sort_by(f64::total_cmp);
    (percentile(&lat, 0.5), percentile(&lat, 0.99))
}

/// `total` claims of VCPU 1 by 32 clients on random providers through
/// `s`: the PUT latencies' p50 and p99 in ms, and the 204 count.
async fn claims(
    http: &reqwest::Client,
    s: &Server,
    rps: &[uuid::Uuid],
    total: usize,
) -> (f64, f64, usize) {
    let rps = Arc::new(rps.to_vec());
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..CLIENTS {
        let (http, base, rps, next) = (http.clone(), s.base.clone(), rps.clone(), next.clone());
        tasks.push(tokio::spawn(async move {
            let mut seen = Vec::new();
            loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if i >= total {
                    return seen;
                }
                let rp = rps[(i * 7919) % rps.len()];
                let body = json!({"allocations": {rp.to_string(): {"resources": {"VCPU": 1}}},
                    "project_id": "p", "user_id": "u", "consumer_generation": null,
                    "consumer_type": "INSTANCE"});
                let t = Instant::now();
                let r = admin(http.put(format!("{base}/allocations/{}", uuid::Uuid::new_v4())))
                    .json(&body)
                    .send()
                    .await
                    .expect("claim");
                seen.push((t.elapsed().as_secs_f64() * 1000.0, r.status().as_u16()));
            }
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.expect("client"));
    }
    let ok = all.iter().filter(|(_, s)| *s == 204).count();
    let mut lat: Vec<f64> = all.iter().map(|(l, _)| *l).collect();
    lat.sort_by(f64::total_cmp);
    (percentile(&lat, 0.5), percentile(&lat, 0.99), ok)
}

async fn random_providers(url: &str, count: usize) -> Vec<uuid::Uuid> {
    let pool = sqlx::PgPool::connect(url).await.expect("connect");
    let rps: Vec<uuid::Uuid> = sqlx::query_scalar(
        "SELECT rp.uuid FROM resource_providers rp JOIN inventories i ON i.resource_provider_id = rp.id
           JOIN resource_classes rc ON rc.id = i.resource_class_id AND rc.name = 'VCPU'
          ORDER BY random() LIMIT $1",
    )
    .bind(i64::try_from(count).unwrap_or(i64::MAX))
    .fetch_all(&pool)
    .await
    .expect("providers");
    pool.close().await;
    rps
}

async fn w1(base_url: &str, n: usize, runs: usize) {
    let http = reqwest::Client::new();
    // A database loaded before (BENCH_SCALE_DB, kept by BENCH_KEEP_DB=1)
    // spares the load when two builds are alternated on it.
    let kept = std::env::var("BENCH_SCALE_DB").ok();
    let url = match &kept {
        Some(url) => url.clone(),
        None => {
            let url = fresh_database(base_url, "w1").await;
            let t = Instant::now();
            run_sql(&url, &w1_sql(n)).await;
            println!(
                "scale W1 n={n}: loaded by SQL in {:.1} s",
                t.elapsed().as_secs_f64()
            );
            url
        }
    };
    let (a, cold) = start(&http, &url, QUERY).await;
    println!(
        "scale W1 n={n}: cold start to the first answer {:.1} s; RSS after load {} MiB",
        cold.as_secs_f64(),
        a.rss_mib()
    );
    let (p50, p99) = latencies(&http, &a, QUERY, runs).await;
    println!("scale W1 n={n} plain: p50 {p50:.1} ms, p99 {p99:.1} ms over {runs} runs");
    let agg: uuid::Uuid = {
        let pool = sqlx::PgPool::connect(&url).await.expect("connect");
        let a = sqlx::query_scalar("SELECT uuid FROM placement_aggregates ORDER BY id LIMIT 1")
            .fetch_one(&pool)
            .await
            .expect("aggregate");
        pool.close().await;
        a
    };
    let q = format!("{QUERY}&required=HW_CPU_X86_AVX2&member_of={agg}");
    let (p50, p99) = latencies(&http, &a, &q, runs).await;
    println!(
        "scale W1 n={n} required+member_of: p50 {p50:.1} ms, p99 {p99:.1} ms over {runs} runs"
    );

    // A second process, warm, then 10,000 writes through the first.
    let (b, _) = start(&http, &url, QUERY).await;
    let (steady, _) = latencies(&http, &b, QUERY, runs.min(20)).await;
    let rps = random_providers(&url, 20_000).await;
    // Catch-up after a few writes: what it costs should follow them.
    for writes in [100, 1_000] {
        claims(&http, &a, &rps, writes).await;
        let t = Instant::now();
        first_answer(&http, &b).await;
        println!(
            "scale W1 n={n} catch-up after {writes} writes: {:.1} ms",
            t.elapsed().as_secs_f64() * 1000.0
        );
    }
    let t = Instant::now();
    let (c50, c99, ok) = claims(&http, &a, &rps, 10_000).await;
    let secs = t.elapsed().as_secs_f64();
    println!(
        "scale W1 n={n} claims: {ok} of 10000 answered 204 by {CLIENTS} clients in {secs:.1} s ({:.0}/s); PUT p50 {c50:.1} ms, p99 {c99:.1} ms",
        ok as f64 / secs
    );
    let t = Instant::now();
    first_answer(&http, &b).await;
    println!(
        "scale W1 n={n} catch-up: the second process's first answer after those writes took {:.1} ms (steady p50 {steady:.1} ms); RSS {} MiB and {} MiB",
        t.elapsed().as_secs_f64() * 1000.0,
        a.rss_mib(),
        b.rss_mib()
    );
    drop((a, b));
    match (&kept, std::env::var_os("BENCH_KEEP_DB")) {
        (None, None) => drop_database(base_url, &url).await,
        (None, Some(_)) => println!("scale W1 n={n}: kept database {url}"),
        (Some(_), _) => {}
    }
}

/// One answer of `s` to the plain query.
async fn first_answer(http: &reqwest::Client, s: &Server) {
    let r = admin(http.get(format!("{}/allocation_candidates?{QUERY}", s.base)))
        .send()
        .await
        .expect("catch-up query");
    assert!(r.status().is_success());
    r.bytes().await.expect("body");
}

async fn trees(base_url: &str, t: usize, runs: usize) {
    let http = reqwest::Client::new();
    let url = fresh_database(base_url, "trees").await;
    let started = Instant::now();
    run_sql(&url, &trees_sql(t)).await;
    println!(
        "scale trees t={t} ({} providers): loaded by SQL in {:.1} s",
        t * 7,
        started.elapsed().as_secs_f64()
    );
    let q = "resources=VCPU:2,MEMORY_MB:4096&limit=1000";
    let (s, cold) = start(&http, &url, q).await;
    println!(
        "scale trees t={t}: cold start to the first answer {:.1} s; RSS after load {} MiB",
        cold.as_secs_f64(),
        s.rss_mib()
    );
    let (p50, p99) = latencies(&http, &s, q, runs).await;
    println!("scale trees t={t} VCPU+MEMORY_MB: p50 {p50:.1} ms, p99 {p99:.1} ms over {runs} runs");
    let q = "resources1=VCPU:2,MEMORY_MB:4096&resources2=SRIOV_NET_VF:1&same_subtree=1,2&group_policy=none&limit=1000";
    let (p50, p99) = latencies(&http, &s, q, runs).await;
    println!(
        "scale trees t={t} NUMA+VF same_subtree: p50 {p50:.1} ms, p99 {p99:.1} ms over {runs} runs"
    );
    drop(s);
    drop_database(base_url, &url).await;
}

async fn drop_database(base_url: &str, url: &str) {
    let (_, db) = url.rsplit_once('/').expect("a database name");
    let pool = sqlx::PgPool::connect(base_url).await.expect("connect");
    let _ = sqlx::query(sqlx::AssertSqlSafe(format!(
        "DROP DATABASE IF EXISTS {db} WITH (FORCE)"
    )))
    .execute(&pool)
    .await;
    pool.close().await;
}

fn size(var: &str, default: usize) -> usize {
    std::env::var(var)
        .ok()
        .and_then(|v| v.replace(['_', ','], "").parse().ok())
        .unwrap_or(default)
}

/// A comma-separated list of sizes (0 or none: skip).
fn sizes(var: &str, default: usize) -> Vec<usize> {
    match std::env::var(var) {
        Ok(v) => v
            .split(',')
            .filter_map(|n| n.trim().replace('_', "").parse().ok())
            .filter(|n| *n > 0)
            .collect(),
        Err(_) => vec![default],
    }
}

#[tokio::main]
async fn main() {
    let Ok(base_url) = std::env::var("DATABASE_URL") else {
        eprintln!("scale bench: DATABASE_URL is not set; skipping");
        return;
    };
    let runs = size("BENCH_RUNS", 50).max(1);
    let t = size("BENCH_SCALE_TREES", 100_000);
    for n in sizes("BENCH_SCALE_W1", 1_000_000) {
        w1(&base_url, n, runs).await;
    }
    if t > 0 {
        trees(&base_url, t, runs).await;
    }
}
