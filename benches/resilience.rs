//! Latency under hostile load, on one release `placement serve`:
//! 1. the 12-group wide-tree search (no answer, ~1.2e9 steps unbounded)
//!    alone, then 8 at once while `GET /` is probed every 10 ms;
//! 2. a normal client's `GET /resource_providers` with nobody else, then
//!    with 2,000 idle connections (half with a half-sent head) and 50
//!    bodies trickling in open.
//!
//! Needs DATABASE_URL (a server where it may create a database):
//! `cargo bench --bench resilience`.

use serde_json::json;
use std::io::Write;
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn admin(rb: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
    rb.header("x-auth-token", "admin")
        .header("openstack-api-version", "placement 1.39")
}

fn percentiles(mut v: Vec<Duration>) -> String {
    v.sort();
    let at = |q: f64| {
        let i = ((v.len() as f64 - 1.0) * q).round() as usize;
        v[i].as_secs_f64() * 1e3
    };
    format!(
        "p50 {:.2} ms, p95 {:.2} ms, p99 {:.2} ms, max {:.2} ms ({} samples)",
        at(0.5),
        at(0.95),
        at(0.99),
        at(1.0),
        v.len()
    )
}

async fn provider(http: &reqwest::Client, base: &str, name: &str, parent: Option<&str>) -> String {
    let r = admin(http.post(format!("{base}/resource_providers")))
        .json(&json!({"name": name, "parent_provider_uuid": parent}))
        .send()
        .await
        .expect("create provider");
    assert!(r.status().is_success());
    r.json::<serde_json::Value>().await.unwrap()["uuid"]
        .as_str()
        .unwrap()
        .to_string()
}

/// The 11-child tree and the 12-group query over it.
async fn wide_tree(http: &reqwest::Client, base: &str) -> String {
    admin(http.put(format!("{base}/resource_classes/CUSTOM_X")))
        .send()
        .await
        .unwrap();
    let root = provider(http, base, "root", None).await;
    for i in 0..11 {
        let child = provider(http, base, &format!("c{i}"), Some(&root)).await;
        let r = admin(http.put(format!("{base}/resource_providers/{child}/inventories")))
            .json(&json!({"resource_provider_generation": 0,
                          "inventories": {"CUSTOM_X": {"total": 6}}}))
            .send()
            .await
            .unwrap();
        assert!(r.status().is_success());
    }
    let groups: Vec<String> = (1..=12)
        .map(|i| format!("resources{i}=CUSTOM_X:6"))
        .collect();
    format!(
        "{base}/allocation_candidates?{}&group_policy=none",
        groups.join("&")
    )
}

async fn stalls(http: &reqwest::Client, base: &str, query: &str) {
    let t = Instant::now();
    let r = admin(http.get(query)).send().await.unwrap();
    assert_eq!(r.status(), 200);
    println!(
        "one 12-group search alone: {:.0} ms",
        t.elapsed().as_secs_f64() * 1e3
    );

    let started = Instant::now();
    let searches: Vec<_> = (0..8)
        .map(|_| {
            let r = admin(http.get(query)).send();
            tokio::spawn(async move {
                let r = r.await.unwrap();
                assert_eq!(r.status(), 200);
                Instant::now()
            })
        })
        .collect();
    let mut probes = Vec::new();
    let all_done = async {
        let mut last = started;
        for s in searches {
            last = last.max(s.await.unwrap());
        }
        last
    };
    tokio::pin!(all_done);
    let finished = loop {
        tokio::select! {
            last = &mut all_done => break last,
            _ = tokio::time::sleep(Duration::from_millis(10)) => {
                let t = Instant::now();
                let r = http.get(format!("{base}/")).send().await.unwrap();
                assert_eq!(r.status(), 200);
                probes.push(t.elapsed());
            }
        }
    };
    println!(
        "8 concurrent 12-group searches: all answered in {:.0} ms",
        finished.duration_since(started).as_secs_f64() * 1e3
    );
    println!("GET / meanwhile: {}", percentiles(probes));
}

async fn normal_client(http: &reqwest::Client, base: &str, label: &str) {
    let mut lat = Vec::new();
    for _ in 0..300 {
        let t = Instant::now();
        let r = admin(http.get(format!("{base}/resource_providers")))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        lat.push(t.elapsed());
    }
    println!("GET /resource_providers, {label}: {}", percentiles(lat));
}

fn hostile_connections(addr: &str) -> Vec<TcpStream> {
    let mut open = Vec::new();
    for i in 0..2000 {
        let mut c = TcpStream::connect(addr).expect("connect");
        if i % 2 == 0 {
            let _ = c.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n");
        }
        open.push(c);
    }
    for _ in 0..50 {
        let mut c = TcpStream::connect(addr).expect("connect");
        let _ = c.write_all(
            b"POST /resource_providers HTTP/1.1\r\nHost: x\r\nx-auth-token: admin\r\n\
              content-type: application/json\r\ncontent-length: 100\r\n\r\n{",
        );
        open.push(c);
    }
    open
}

#[tokio::main]
async fn main() {
    let Ok(base_url) = std::env::var("DATABASE_URL") else {
        eprintln!("resilience bench: DATABASE_URL is not set; skipping");
        return;
    };
    let db = format!("bench_resilience_{}", uuid::Uuid::new_v4().simple());
    let admin_pool = sqlx::PgPool::connect(&base_url).await.expect("connect");
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {db}")))
        .execute(&admin_pool)
        .await
        .expect("create db");
    let (prefix, _) = base_url.rsplit_once('/').expect("database url with a name");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap();
    let _server = Server(
        Command::new(env!("CARGO_BIN_EXE_placement"))
            .args(["serve", "--bind", &format!("127.0.0.1:{port}")])
            .env("DATABASE_URL", format!("{prefix}/{db}"))
            .env("RUST_LOG", "error")
            .stdout(Stdio::null())
            .spawn()
            .expect("start server"),
    );
    let base = format!("http://127.0.0.1:{port}");
    let http = reqwest::Client::new();
    for _ in 0..200 {
        if http.get(format!("{base}/")).send().await.is_ok() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let query = wide_tree(&http, &base).await;
    stalls(&http, &base, &query).await;
    normal_client(&http, &base, "alone").await;
    let open = hostile_connections(&format!("127.0.0.1:{port}"));
    normal_client(&http, &base, "with 2,000 idle and 50 slow connections open").await;
    drop(open);
    drop(_server);
    let _ = sqlx::query(sqlx::AssertSqlSafe(format!(
        "DROP DATABASE IF EXISTS {db} WITH (FORCE)"
    )))
    .execute(&admin_pool)
    .await;
}
