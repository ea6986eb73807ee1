//! A real `placement serve` process under hostile clients: expensive
//! candidate searches, thousands of idle or half-open connections, slow
//! bodies, clients that hang up, and SIGTERM with a request in flight;
//! and its background work: silent providers' batch inventory degrades.
//! These check behaviour (who gets served, what is cut, what finishes);
//! latency figures come from `cargo bench --bench resilience`.

use placement_testkit::cluster;
use placement_testkit::common;

use serde_json::json;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// A server on a fresh database, its database dropped afterwards.
struct One {
    server: cluster::Server,
    client: reqwest::Client,
    admin_url: String,
    db: String,
}

impl Drop for One {
    fn drop(&mut self) {
        let _ = self.server.child.kill();
        common::drop_database(&self.admin_url, &self.db);
    }
}

async fn one(label: &str, extra: &[&str]) -> One {
    let (admin_url, db) = common::fresh_database().await;
    let server =
        cluster::start_server_with(&common::url_with_db(&admin_url, &db), label, extra).await;
    One {
        server,
        client: reqwest::Client::new(),
        admin_url,
        db,
    }
}

impl One {
    fn req(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        self.client
            .request(method, format!("{}{path}", self.server.base))
            .header("x-auth-token", "admin")
            .header("openstack-api-version", "placement 1.39")
    }

    /// 11 children of 6 CUSTOM_X under one root; the query asking 12 of
    /// them for a whole child (no answer, ~1.2e9 steps unbounded).
    async fn wide_tree(&self) -> String {
        let r = self
            .req(reqwest::Method::PUT, "/resource_classes/CUSTOM_X")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 201);
        let root = self.provider("root", None).await;
        for i in 0..11 {
            let child = self.provider(&format!("c{i}"), Some(&root)).await;
            let r = self
                .req(
                    reqwest::Method::PUT,
                    &format!("/resource_providers/{child}/inventories"),
                )
                .json(&json!({"resource_provider_generation": 0,
                              "inventories": {"CUSTOM_X": {"total": 6}}}))
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 200);
        }
        let groups: Vec<String> = (1..=12)
            .map(|i| format!("resources{i}=CUSTOM_X:6"))
            .collect();
        format!(
            "/allocation_candidates?{}&group_policy=none",
            groups.join("&")
        )
    }

    async fn provider(&self, name: &str, parent: Option<&str>) -> String {
        let r = self
            .req(reqwest::Method::POST, "/resource_providers")
            .json(&json!({"name": name, "parent_provider_uuid": parent}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        r.json::<serde_json::Value>().await.unwrap()["uuid"]
            .as_str()
            .unwrap()
            .to_string()
    }

    fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.server.port)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cheap_requests_are_served_while_expensive_searches_run() {
    let s = one("stall", &[]).await;
    let q = s.wide_tree().await;
    let stalls: Vec<_> = (0..8)
        .map(|_| {
            let r = s.req(reqwest::Method::GET, &q).send();
            tokio::spawn(async move {
                let r = r.await.unwrap();
                (r.status().as_u16(), Instant::now())
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut probes_done = Instant::now();
    for _ in 0..20 {
        let r = s
            .client
            .get(format!("{}/", s.server.base))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        probes_done = Instant::now();
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let mut last_stall = Instant::now() - Duration::from_secs(3600);
    for h in stalls {
        let (status, at) = h.await.unwrap();
        assert_eq!(
            status, 200,
            "a search over its budget answers what it found"
        );
        last_stall = last_stall.max(at);
    }
    // The version document never waited for the searches to end.
    assert!(
        probes_done < last_stall,
        "GET / was starved by the searches"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_client_that_hangs_up_stops_its_search() {
    // Unbounded searches: only cancellation can end them.
    let s = one("cancel", &["--allocation-candidates-max-steps", "0"]).await;
    let q = s.wide_tree().await;
    let doomed: Vec<_> = (0..6)
        .map(|_| {
            s.client
                .get(format!("{}{q}", s.server.base))
                .header("x-auth-token", "admin")
                .header("openstack-api-version", "placement 1.39")
                .timeout(Duration::from_millis(800))
                .send()
        })
        .collect();
    for r in futures_util::future::join_all(doomed).await {
        assert!(r.is_err(), "an unbounded search answered: {r:?}");
    }
    // Every CPU permit was held by a search that would run for hours; a
    // cheap search is served only once the hung-up ones have stopped.
    let r = s
        .req(
            reqwest::Method::GET,
            "/allocation_candidates?resources=CUSTOM_X:1",
        )
        .timeout(Duration::from_secs(60))
        .send()
        .await
        .expect("the abandoned searches were never stopped");
    assert_eq!(r.status(), 200);
}

/// Reads what the server sends until it closes or `wait` passes.
fn read_all(stream: &mut TcpStream, wait: Duration) -> (String, bool) {
    stream.set_read_timeout(Some(wait)).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return (String::from_utf8_lossy(&got).into(), true),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(_) => return (String::from_utf8_lossy(&got).into(), false),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn idle_and_slow_connections_do_not_starve_clients_and_are_cut() {
    let s = one(
        "idle",
        &["--http-header-timeout", "2", "--http-body-timeout", "2"],
    )
    .await;
    let addr = s.addr();
    let mut idle = Vec::new();
    for i in 0..2000 {
        let mut c = TcpStream::connect(&addr).unwrap();
        if i % 2 == 0 {
            // Half a request head.
            c.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n").unwrap();
        }
        idle.push(c);
    }
    let mut slow = Vec::new();
    for _ in 0..50 {
        let mut c = TcpStream::connect(&addr).unwrap();
        c.write_all(
            b"POST /resource_providers HTTP/1.1\r\nHost: x\r\nx-auth-token: admin\r\n\
              content-type: application/json\r\ncontent-length: 100\r\n\r\n{",
        )
        .unwrap();
        slow.push(c);
    }
    // A normal client is served while all of that is open.
    let r = s
        .req(reqwest::Method::GET, "/resource_providers")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    // Past the timeouts: slow bodies got 408 and were closed, idle and
    // half-open connections were closed.
    tokio::time::sleep(Duration::from_secs(3)).await;
    for c in slow.iter_mut().take(10) {
        let (text, closed) = read_all(c, Duration::from_secs(5));
        assert!(text.starts_with("HTTP/1.1 408"), "slow body got {text:?}");
        assert!(closed, "slow connection left open");
    }
    for c in idle.iter_mut().step_by(100) {
        let (_, closed) = read_all(c, Duration::from_secs(5));
        assert!(closed, "idle connection left open");
    }
    // Nothing was created by the cut-off bodies.
    let list: serde_json::Value = s
        .req(reqwest::Method::GET, "/resource_providers")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(list["resource_providers"], json!([]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn past_the_connection_cap_the_oldest_idle_connection_makes_room() {
    let s = one("cap", &["--http-max-connections", "50"]).await;
    let addr = s.addr();
    let idle: Vec<TcpStream> = (0..120)
        .map(|_| TcpStream::connect(&addr).unwrap())
        .collect();
    let r = s
        .req(reqwest::Method::GET, "/resource_providers")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    // The first connections were the ones closed.
    let mut first = idle.into_iter().next().unwrap();
    let (_, closed) = read_all(&mut first, Duration::from_secs(5));
    assert!(closed, "the oldest idle connection was not evicted");
}

/// One request over `stream`, kept alive: the answer's status line, or
/// why there was none (the server closed the connection).
fn keep_alive_get(stream: &mut TcpStream, path: &str) -> Result<String, String> {
    use std::io::{BufRead, BufReader, Read, Write};
    let head = format!("GET {path} HTTP/1.1\r\nHost: placement\r\nx-auth-token: admin\r\n\r\n");
    stream
        .write_all(head.as_bytes())
        .map_err(|e| e.to_string())?;
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .map_err(|e| e.to_string())?;
    let mut reader = BufReader::new(stream);
    let mut status = String::new();
    if reader.read_line(&mut status).map_err(|e| e.to_string())? == 0 {
        return Err("closed".into());
    }
    let mut length = 0usize;
    loop {
        let mut line = String::new();
        reader.read_line(&mut line).map_err(|e| e.to_string())?;
        if line == "\r\n" || line.is_empty() {
            break;
        }
        if let Some((name, value)) = line.split_once(':') {
            if name.eq_ignore_ascii_case("content-length") {
                length = value.trim().parse().unwrap_or(0);
            }
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body).map_err(|e| e.to_string())?;
    Ok(status.trim().to_string())
}

/// A steady keep-alive client (Nova's) keeps its one connection while
/// idle sockets arrive past the cap: the never-answered ones are closed,
/// not the oldest. Every request goes over the connection it opened
/// first, and none finds it closed.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_steady_keep_alive_client_keeps_its_connection_at_the_cap() {
    let s = one("keepalive", &["--http-max-connections", "20"]).await;
    let addr = s.addr();
    let mut steady = TcpStream::connect(&addr).unwrap();
    assert_eq!(
        keep_alive_get(&mut steady, "/resource_providers").as_deref(),
        Ok("HTTP/1.1 200 OK")
    );
    let mut idle = Vec::new();
    for round in 0..10 {
        idle.extend((0..15).map(|_| TcpStream::connect(&addr).unwrap()));
        tokio::time::sleep(Duration::from_millis(100)).await;
        let answer = keep_alive_get(&mut steady, "/resource_providers");
        assert_eq!(
            answer.as_deref(),
            Ok("HTTP/1.1 200 OK"),
            "round {round}: the keep-alive connection was closed for an idle socket"
        );
    }
    drop(idle);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigterm_finishes_requests_in_flight_then_exits() {
    let mut s = one("term", &["--shutdown-grace", "10"]).await;
    let addr = s.addr();
    let body = br#"{"name": "created-during-shutdown"}"#;
    let mut c = TcpStream::connect(&addr).unwrap();
    write!(
        c,
        "POST /resource_providers HTTP/1.1\r\nHost: x\r\nx-auth-token: admin\r\n\
         openstack-api-version: placement 1.20\r\ncontent-type: application/json\r\n\
         content-length: {}\r\n\r\n",
        body.len()
    )
    .unwrap();
    c.write_all(&body[..10]).unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let pid = s.server.child.id().to_string();
    assert!(std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap()
        .success());
    tokio::time::sleep(Duration::from_millis(500)).await;
    // No new connections once shutdown has begun.
    assert!(
        TcpStream::connect(&addr).is_err(),
        "still accepting after SIGTERM"
    );
    // The request in flight completes.
    c.write_all(&body[10..]).unwrap();
    let (text, _) = read_all(&mut c, Duration::from_secs(10));
    assert!(
        text.starts_with("HTTP/1.1 200"),
        "in-flight request got {text:?}"
    );
    // And the process exits by itself, cleanly.
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        if let Some(status) = s.server.child.try_wait().unwrap() {
            assert!(status.success(), "exit status {status}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "server did not exit after SIGTERM"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The background sweep sets to 0 the batch inventory of a provider whose
/// reports stopped for longer than its own degradeTimeMinutes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_providers_batch_inventory_degrades_to_zero() {
    let one = one("degrade", &["--colocation-sweep-interval", "1"]).await;
    let rp = one.provider("silent", None).await;
    let ok = |r: reqwest::Response, status: u16| {
        assert_eq!(r.status(), status);
        r
    };
    let put = |path: String, body: serde_json::Value| {
        one.req(reqwest::Method::PUT, &path).json(&body).send()
    };
    ok(
        put(
            format!("/resource_providers/{rp}/inventories"),
            json!({"resource_provider_generation": 0,
                   "inventories": {"VCPU": {"total": 8}, "MEMORY_MB": {"total": 8192}}}),
        )
        .await
        .unwrap(),
        200,
    );
    ok(
        put(
            format!("/resource_providers/{rp}/colocation_policy"),
            json!({"degradeTimeMinutes": 1}),
        )
        .await
        .unwrap(),
        200,
    );
    let sampled = chrono::Utc::now() - chrono::Duration::seconds(55);
    let used = json!({"cpu_milli_used": 500, "memory_mb_used": 500});
    let r = one
        .req(
            reqwest::Method::POST,
            &format!("/resource_providers/{rp}/usage_reports"),
        )
        .json(
            &json!({"sampled_at": sampled.to_rfc3339(), "window_seconds": 10,
                      "node": used, "system": used, "consumers": []}),
        )
        .send()
        .await
        .unwrap();
    ok(r, 202);
    let batch_total = || async {
        let r = one
            .req(
                reqwest::Method::GET,
                &format!("/resource_providers/{rp}/inventories"),
            )
            .send()
            .await
            .unwrap();
        r.json::<serde_json::Value>().await.unwrap()["inventories"]["BATCH_VCPU_MILLI"]["total"]
            .as_i64()
            .unwrap()
    };
    assert!(batch_total().await > 0, "55 s is under a minute");
    let deadline = Instant::now() + Duration::from_secs(30);
    while batch_total().await > 0 {
        assert!(
            Instant::now() < deadline,
            "still not degraded 30 s later: {}",
            one.server.log()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Sends `head` (and the first byte of a body) on a new connection.
fn half_sent(addr: &str, head: &str) -> TcpStream {
    let mut c = TcpStream::connect(addr).unwrap();
    c.write_all(head.as_bytes()).unwrap();
    c
}

/// Issue 50, item 2: route, method and caller are decided from the head,
/// before a body is read; bodies and long polls have budgets of their
/// own; so half-sent bodies and long polls cannot take the connections
/// an admin needs.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn half_sent_bodies_and_long_polls_cannot_take_the_connections() {
    let s = one(
        "admission",
        &[
            "--http-max-connections",
            "200",
            "--http-max-body-uploads",
            "20",
            "--http-body-timeout",
            "60",
        ],
    )
    .await;
    let addr = s.addr();
    // Public routes and refused callers: answered from the head at once,
    // and the connection closed (its body was never read).
    let mut public: Vec<TcpStream> = (0..90)
        .map(|_| {
            half_sent(
                &addr,
                "POST /healthcheck HTTP/1.1\r\nHost: x\r\ncontent-type: application/json\r\n\
                 content-length: 100\r\n\r\n{",
            )
        })
        .collect();
    let mut anonymous: Vec<TcpStream> = (0..90)
        .map(|_| {
            half_sent(
                &addr,
                "PUT /resource_classes/CUSTOM_A HTTP/1.1\r\nHost: x\r\n\
                 content-type: application/json\r\ncontent-length: 10000000\r\n\r\n{",
            )
        })
        .collect();
    for c in public.iter_mut().step_by(9) {
        let (text, closed) = read_all(c, Duration::from_secs(10));
        assert!(text.starts_with("HTTP/1.1 405"), "{text:?}");
        assert!(closed, "a refused body's connection stayed open");
    }
    for c in anonymous.iter_mut().step_by(9) {
        let (text, closed) = read_all(c, Duration::from_secs(10));
        assert!(text.starts_with("HTTP/1.1 401"), "{text:?}");
        assert!(closed, "a refused body's connection stayed open");
    }
    // Long polls: a quarter of the cap (50), 3 of one project; past that
    // a poll is answered at once.
    let r = s
        .req(reqwest::Method::POST, "/queue")
        .json(
            &json!({"consumer_uuid": uuid::Uuid::new_v4(), "project_id": "P",
                      "user_id": "u", "resources": {"VCPU": 1}}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202);
    let id = r.json::<serde_json::Value>().await.unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();
    // An admitted caller's bodies: 20 are received at once, the rest are
    // told to come back.
    let body_head = "POST /resource_providers HTTP/1.1\r\nHost: x\r\nx-auth-token: admin\r\n\
                     content-type: application/json\r\ncontent-length: 100\r\n\r\n{";
    let mut receiving: Vec<TcpStream> = (0..20).map(|_| half_sent(&addr, body_head)).collect();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut turned_away: Vec<TcpStream> = (0..20).map(|_| half_sent(&addr, body_head)).collect();
    for c in turned_away.iter_mut() {
        let (text, closed) = read_all(c, Duration::from_secs(10));
        assert!(text.starts_with("HTTP/1.1 503"), "{text:?}");
        assert!(
            text.to_ascii_lowercase().contains("retry-after: 1"),
            "{text:?}"
        );
        assert!(closed);
    }
    let poll = format!(
        "GET /queue/{id}?wait=60 HTTP/1.1\r\nHost: x\r\nx-auth-token: admin\r\n\
         openstack-api-version: placement 1.39\r\n\r\n"
    );
    let mut held: Vec<TcpStream> = (0..3).map(|_| half_sent(&addr, &poll)).collect();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut past: Vec<TcpStream> = (0..3).map(|_| half_sent(&addr, &poll)).collect();
    for c in past.iter_mut() {
        let (text, _) = read_all(c, Duration::from_secs(5));
        assert!(
            text.starts_with("HTTP/1.1 200") && text.contains("\"pending\""),
            "a poll past the budget was held: {text:?}"
        );
    }
    for c in held.iter_mut() {
        c.set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        let mut buf = [0u8; 64];
        assert!(
            c.read(&mut buf).is_err(),
            "a poll in the budget answered early"
        );
    }
    // With all that open, the admin is served.
    let r = s
        .req(reqwest::Method::GET, "/resource_providers")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    drop(receiving.drain(..));
}

/// Issue 64, defect 1: any token could stop every write. A reader of an
/// unrelated project, whose own complete `POST /queue` is refused, is now
/// refused from the head and holds no body budget; a member who may queue
/// holds its share of the budgets and no more (uploads, and memory for
/// heads declaring 10 MB); the admin, Nova's service user and another
/// tenant are still served.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_token_cannot_spend_the_body_budgets() {
    let s = one(
        "body-budgets",
        &[
            "--http-max-connections",
            "1000",
            "--http-body-timeout",
            "60",
        ],
    )
    .await;
    let addr = s.addr();
    let rp = s.provider("node", None).await;
    let r = s
        .req(
            reqwest::Method::PUT,
            &format!("/resource_providers/{rp}/inventories"),
        )
        .json(&json!({"resource_provider_generation": 0,
                      "inventories": {"VCPU": {"total": 64}}}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let head = |who: &str, roles: &str, length: usize| {
        format!(
            "POST /queue HTTP/1.1\r\nHost: x\r\nx-auth-token: {who}\r\nx-roles: {roles}\r\n\
             x-project-id: {who}\r\nopenstack-api-version: placement 1.39\r\n\
             content-type: application/json\r\ncontent-length: {length}\r\n\r\n{{"
        )
    };
    // The reader: refused from its head, 256 times, its connections closed.
    let mut reader: Vec<TcpStream> = (0..256)
        .map(|_| half_sent(&addr, &head("mallory", "reader", 100)))
        .collect();
    for c in reader.iter_mut() {
        let (text, closed) = read_all(c, Duration::from_secs(10));
        assert!(text.starts_with("HTTP/1.1 403"), "{text:?}");
        assert!(closed);
    }
    // The member: 256 half-sent bodies, of which its share (56 of the 224
    // not reserved for operators) is received and the rest turned away.
    let mut member: Vec<TcpStream> = (0..256)
        .map(|_| half_sent(&addr, &head("eve", "member", 100)))
        .collect();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (mut busy, mut receiving) = (0, 0);
    for c in member.iter_mut() {
        let (text, _) = read_all(c, Duration::from_millis(100));
        if text.is_empty() {
            receiving += 1;
        } else {
            assert!(text.starts_with("HTTP/1.1 503"), "{text:?}");
            assert!(
                text.contains("placement.http.busy") || text.contains("too many"),
                "{text:?}"
            );
            busy += 1;
        }
    }
    assert_eq!((receiving, busy), (56, 200));
    // Another member declaring 10 MB bodies: its memory share (56 MiB) is
    // five of them; the rest are turned away.
    let mut hog: Vec<TcpStream> = (0..26)
        .map(|_| half_sent(&addr, &head("hog", "member", 10_000_000)))
        .collect();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut held = 0;
    for c in hog.iter_mut() {
        if read_all(c, Duration::from_millis(100)).0.is_empty() {
            held += 1;
        }
    }
    assert_eq!(held, 5);
    // With all of that open: the admin writes, Nova's service user
    // claims, another tenant queues.
    let r = s
        .req(reqwest::Method::POST, "/resource_providers")
        .json(&json!({"name": "after-the-attack"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let consumer = uuid::Uuid::new_v4();
    let r = s
        .client
        .put(format!("{}/allocations/{consumer}", s.server.base))
        .header("x-auth-token", "nova")
        .header("x-roles", "service")
        .header("x-project-id", "service")
        .header("openstack-api-version", "placement 1.39")
        .json(
            &json!({"allocations": {rp.clone(): {"resources": {"VCPU": 2}}},
                      "project_id": "p", "user_id": "u", "consumer_generation": null,
                      "consumer_type": "INSTANCE"}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204, "{}", r.text().await.unwrap_or_default());
    let r = s
        .client
        .post(format!("{}/queue", s.server.base))
        .header("x-auth-token", "alice")
        .header("x-roles", "member")
        .header("x-project-id", "alice")
        .header("openstack-api-version", "placement 1.39")
        .json(
            &json!({"consumer_uuid": uuid::Uuid::new_v4(), "project_id": "alice",
                      "user_id": "alice", "resources": {"VCPU": 1}}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202, "{}", r.text().await.unwrap_or_default());
    drop((reader, member, hog));
}

/// Issue 50, item 5: a huge aggregates list is checked in linear time,
/// before the provider's row is locked: two of them at once leave an
/// unauthenticated health check answered, and the provider writable.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn huge_aggregate_lists_are_checked_quickly_and_before_any_lock() {
    let s = one("aggregates", &[]).await;
    let rp = s.provider("many-aggregates", None).await;
    let mut aggregates: Vec<String> = (0..60_000)
        .map(|_| uuid::Uuid::new_v4().to_string())
        .collect();
    aggregates.push(aggregates[0].clone());
    let body = json!({"aggregates": aggregates, "resource_provider_generation": 0});
    let put = |body: serde_json::Value| {
        s.req(
            reqwest::Method::PUT,
            &format!("/resource_providers/{rp}/aggregates"),
        )
        .json(&body)
        .send()
    };
    let health = async {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let r = reqwest::Client::new()
            .get(format!("{}/healthcheck", s.server.base))
            .timeout(Duration::from_secs(5))
            .send()
            .await;
        // Meanwhile the provider's row is free: a valid write goes through.
        let w =
            put(json!({"aggregates": [uuid::Uuid::new_v4()], "resource_provider_generation": 0}))
                .await
                .unwrap();
        (r.map(|r| r.status().as_u16()), w.status().as_u16())
    };
    let (a, b, (health, write)) = tokio::join!(put(body.clone()), put(body.clone()), health);
    for r in [a.unwrap(), b.unwrap()] {
        assert_eq!(r.status(), 400);
        let text = r.text().await.unwrap();
        assert!(
            text.contains("non-unique elements"),
            "{}",
            &text[..200.min(text.len())]
        );
    }
    assert_eq!(health.expect("the health check was answered"), 200);
    assert_eq!(write, 200);
}

/// Issue 51, item 5: under an open-files limit of 1,024 (systemd's
/// default soft limit), 2,000 idle connections leave the database pool
/// its descriptors: the soft limit is raised to the hard one, and where
/// that is no higher the connection cap is lowered to fit.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn idle_connections_never_take_the_pools_descriptors() {
    let (admin_url, db) = common::fresh_database().await;
    for (nofile, label) in [("1024:1024", "fd-capped"), ("1024:8192", "fd-raised")] {
        let port = cluster::free_port();
        let log = std::env::temp_dir().join(format!("placement-{label}-{port}.log"));
        let out = std::fs::File::create(&log).unwrap();
        let mut child = std::process::Command::new("prlimit")
            .arg(format!("--nofile={nofile}"))
            .arg("--")
            .arg(placement_testkit::placement_bin())
            .args(["serve", "--bind", &format!("127.0.0.1:{port}")])
            .env("DATABASE_URL", common::url_with_db(&admin_url, &db))
            .env("RUST_LOG", "info")
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .expect("prlimit");
        let base = format!("http://127.0.0.1:{port}");
        let client = reqwest::Client::new();
        let deadline = Instant::now() + Duration::from_secs(60);
        while client.get(format!("{base}/")).send().await.is_err() {
            assert!(Instant::now() < deadline, "never answered");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let idle: Vec<TcpStream> = (0..2000)
            .filter_map(|_| TcpStream::connect(format!("127.0.0.1:{port}")).ok())
            .collect();
        tokio::time::sleep(Duration::from_millis(300)).await;
        for _ in 0..20 {
            let r = client
                .get(format!("{base}/resource_providers"))
                .header("x-auth-token", "admin")
                .send()
                .await
                .expect("answered");
            assert_eq!(r.status(), 200, "{label}");
        }
        drop(idle);
        let _ = child.kill();
        let _ = child.wait();
        let text = std::fs::read_to_string(&log).unwrap();
        // Only the accept loop may meet the limit (it then evicts and
        // pauses); the database pool never does.
        let starved: Vec<&str> = text
            .lines()
            .filter(|l| l.contains("Too many open files") && !l.contains("accept failed"))
            .collect();
        assert!(starved.is_empty(), "{label}: {starved:?}");
        let said = if label == "fd-capped" {
            "--http-max-connections lowered"
        } else {
            "open_files=8192"
        };
        assert!(text.contains(said), "{label}: {text}");
    }
    common::drop_database(&admin_url, &db);
}

/// Transactions dropped while their BEGIN runs (a deadline or a hung-up
/// client drops a request anywhere) leave no connection of the pool
/// inside a transaction: the next `BEGIN ISOLATION LEVEL …` on each
/// succeeds. (A BEGIN dropped after it was sent used to leave one open,
/// and every later statement on that connection failed.)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_transaction_dropped_while_it_begins_leaves_no_connection_inside_it() {
    let (admin_url, db) = common::fresh_database().await;
    let inner = sqlx::postgres::PgPoolOptions::new()
        .max_connections(4)
        .connect(&common::url_with_db(&admin_url, &db))
        .await
        .expect("connect");
    let pool = placement::db::Pool::new(inner);
    // A BEGIN whose answer takes 50 ms (the sleep runs inside it), each
    // dropped 10 ms in: sent, and not answered.
    for _ in 0..8 {
        let slow = pool.begin_with("BEGIN; SELECT pg_sleep(0.05)");
        assert!(tokio::time::timeout(Duration::from_millis(10), slow)
            .await
            .is_err());
    }
    // Dropped transactions are rolled back on their connection's way in.
    tokio::time::sleep(Duration::from_millis(200)).await;
    for _ in 0..40 {
        let mut tx = pool
            .begin_with("BEGIN ISOLATION LEVEL REPEATABLE READ")
            .await
            .expect("a connection that was inside a transaction");
        let level: String = sqlx::query_scalar("SHOW transaction_isolation")
            .fetch_one(&mut *tx)
            .await
            .expect("the transaction's first statement");
        assert_eq!(level, "repeatable read");
        tx.commit().await.expect("commit");
    }
    drop(pool);
    common::drop_database(&admin_url, &db);
}
