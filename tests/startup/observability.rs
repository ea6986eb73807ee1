//! JSON logs and Prometheus metrics of a real process.

use super::*;
use placement_testkit::{cluster, common};

/// `--log-format json`: every line is one JSON object, and a request's
/// line carries its id, route, microversion, status and latency.
#[tokio::test]
async fn json_logs_carry_the_request() {
    let (admin_url, db) = common::fresh_database().await;
    let port = cluster::free_port();
    let log = std::env::temp_dir().join(format!("placement-json-{port}.log"));
    let mut child = Command::new(placement_testkit::placement_bin())
        .args([
            "serve",
            "--bind",
            &format!("127.0.0.1:{port}"),
            "--log-format",
            "json",
        ])
        .env("DATABASE_URL", common::url_with_db(&admin_url, &db))
        .env("RUST_LOG", "info,sqlx=warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).expect("log"))
        .spawn()
        .expect("start");
    let b = format!("http://127.0.0.1:{port}");
    let deadline = Instant::now() + Duration::from_secs(60);
    while reqwest::get(format!("{b}/")).await.is_err() {
        assert!(Instant::now() < deadline, "never answered");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (status, headers, _) = send(
        &b,
        reqwest::Method::GET,
        "/resource_providers",
        &[("x-auth-token", "admin")],
    )
    .await;
    assert_eq!(status, 200);
    let id = headers["x-openstack-request-id"]
        .to_str()
        .expect("id")
        .to_string();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let _ = child.kill();
    let _ = child.wait();
    let text = std::fs::read_to_string(&log).expect("log");
    let _ = std::fs::remove_file(&log);
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    let line = lines
        .iter()
        .find(|l| l["span"]["request_id"] == id.as_str() && l["fields"]["message"] == "request")
        .unwrap_or_else(|| panic!("no line for {id}: {text}"));
    assert_eq!(line["span"]["route"], "/resource_providers");
    assert_eq!(line["span"]["microversion"], "1.39");
    assert_eq!(line["fields"]["status"], 200);
    assert!(line["fields"]["ms"].as_f64().is_some(), "{line}");
    // What Placement's request log carries, and who asked.
    assert_eq!(line["target"], "placement::requestlog", "{line}");
    assert_eq!(line["fields"]["method"], "GET", "{line}");
    assert_eq!(line["fields"]["uri"], "/resource_providers", "{line}");
    assert_eq!(line["fields"]["microversion"], "1.39", "{line}");
    assert!(
        line["fields"]["len"]
            .as_str()
            .is_some_and(|l| l.parse::<u64>().is_ok()),
        "{line}"
    );
    assert_eq!(line["span"]["user_id"], "admin", "{line}");
    common::drop_database(&admin_url, &db);
}

/// `GET /metrics` without a token, parsed by a Prometheus text parser: the
/// request counters move by route (never by uuid), candidates and the
/// snapshot are counted, the pool is shown; `--metrics false` is a 404.
#[tokio::test]
async fn metrics_count_what_happened() {
    let (admin_url, db) = common::fresh_database().await;
    let url = common::url_with_db(&admin_url, &db);
    let server = cluster::start_server_with(&url, "metrics", &[]).await;
    let b = &server.base;
    let scrape = || async {
        let r = reqwest::get(format!("{b}/metrics")).await.expect("scrape");
        assert_eq!(r.status(), 200);
        let text = r.text().await.expect("text");
        let lines = text.lines().map(|l| Ok(l.to_string()));
        prometheus_parse::Scrape::parse(lines).expect("Prometheus text format")
    };
    let value = |s: &prometheus_parse::Scrape, name: &str, labels: &[(&str, &str)]| -> f64 {
        s.samples
            .iter()
            .filter(|x| x.metric == name && labels.iter().all(|(k, v)| x.labels.get(k) == Some(*v)))
            .map(|x| match x.value {
                prometheus_parse::Value::Counter(v)
                | prometheus_parse::Value::Gauge(v)
                | prometheus_parse::Value::Untyped(v) => v,
                _ => 0.0,
            })
            .sum()
    };
    let before = scrape().await;
    let admin = [
        ("x-auth-token", "admin"),
        ("content-type", "application/json"),
    ];
    let rp = uuid::Uuid::new_v4();
    let client = reqwest::Client::new();
    let r = client
        .post(format!("{b}/resource_providers"))
        .header("x-auth-token", "admin")
        .header("openstack-api-version", "placement 1.20")
        .json(&serde_json::json!({"name": "m1", "uuid": rp}))
        .send()
        .await
        .expect("create");
    assert!(r.status().is_success());
    client
        .put(format!("{b}/resource_providers/{rp}/inventories"))
        .header("x-auth-token", "admin")
        .json(&serde_json::json!({"resource_provider_generation": 0, "inventories": {"VCPU": {"total": 4}}}))
        .send()
        .await
        .expect("inventory");
    for _ in 0..3 {
        let (s, _, _) = send(
            b,
            reqwest::Method::GET,
            &format!("/resource_providers/{rp}"),
            &admin,
        )
        .await;
        assert_eq!(s, 200);
    }
    let (s, _, _) = send(
        b,
        reqwest::Method::GET,
        "/allocation_candidates?resources=VCPU:1",
        &admin,
    )
    .await;
    assert_eq!(s, 200);
    let (s, _, _) = send(b, reqwest::Method::GET, "/resource_providers", &[]).await;
    assert_eq!(s, 401);
    // Extension methods, each new and long, add no series.
    let series = before.samples.len();
    for i in 0..50 {
        let name = format!("X{i}{}", "M".repeat(10_000));
        let m = reqwest::Method::from_bytes(name.as_bytes()).expect("method");
        let r = client
            .request(m, format!("{b}/resource_providers"))
            .send()
            .await;
        assert!(r.is_ok_and(|r| r.status().is_client_error()));
    }
    let after = scrape().await;
    let other = [("method", "other")];
    assert_eq!(value(&after, requests_total(), &other), 50.0);
    assert!(
        after.samples.len() < series + 40,
        "{} series after, {series} before",
        after.samples.len()
    );
    assert!(after
        .samples
        .iter()
        .all(|s| s.labels.values().all(|v| v.len() < 100)));
    let shown = [
        ("route", "/resource_providers/:uuid"),
        ("method", "GET"),
        ("status", "200"),
    ];
    let requests = requests_total();
    assert_eq!(
        value(&after, requests, &shown) - value(&before, requests, &shown),
        3.0
    );
    let refused = [("route", "unmatched"), ("method", "GET"), ("status", "401")];
    assert_eq!(
        value(&after, requests, &refused) - value(&before, requests, &refused),
        1.0
    );
    assert!(
        value(
            &after,
            "placement_http_request_duration_seconds_count",
            &[("route", "/allocation_candidates")]
        ) >= 1.0
    );
    assert_eq!(
        value(&after, "placement_candidates_returned_total", &[]),
        1.0
    );
    assert!(value(&after, "placement_snapshot_reloads_total", &[]) >= 1.0);
    assert_eq!(
        value(&after, "placement_db_pool_connections", &[("state", "max")]),
        10.0
    );
    assert_eq!(value(&after, "placement_db_pool_waiting", &[]), 0.0);
    let uuid_labels = after
        .samples
        .iter()
        .flat_map(|s| s.labels.values())
        .any(|v| uuid::Uuid::parse_str(v).is_ok());
    assert!(!uuid_labels, "no uuid in any label");
    drop(server);
    let off = cluster::start_server_with(&url, "metrics-off", &["--metrics", "false"]).await;
    assert_eq!(
        reqwest::get(format!("{}/metrics", off.base))
            .await
            .expect("get")
            .status(),
        404
    );
    drop(off);
    common::drop_database(&admin_url, &db);
}

fn requests_total() -> &'static str {
    "placement_http_requests_total"
}

/// `placement_db_pool_waiting` counts the callers queued for a connection
/// and drops back when they get one, or give up.
#[tokio::test]
async fn the_pool_counts_its_waiters() {
    let (admin_url, db) = common::fresh_database().await;
    let url = common::url_with_db(&admin_url, &db);
    let inner = sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .connect(&url)
        .await
        .expect("connect");
    let pool = placement::db::Pool::new(inner);
    let waiting = || placement::metrics::metrics().pool_waiting.get();
    let held = pool.acquire().await.expect("the only connection");
    let before = waiting();
    let queued = tokio::spawn({
        let pool = pool.clone();
        async move { pool.begin().await.map(|_| ()) }
    });
    let deadline = Instant::now() + Duration::from_secs(10);
    while waiting() == before {
        assert!(Instant::now() < deadline, "the waiter was never counted");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(waiting(), before + 1);
    drop(held);
    queued
        .await
        .expect("join")
        .expect("the waiter's transaction");
    assert_eq!(waiting(), before);
    let given_up = tokio::time::timeout(Duration::from_millis(50), async {
        let _held = pool.acquire().await;
        pool.acquire().await
    })
    .await;
    assert!(given_up.is_err(), "the second acquire waits for the first");
    assert_eq!(waiting(), before, "a cancelled wait is no longer counted");
    drop(pool);
    common::drop_database(&admin_url, &db);
}
