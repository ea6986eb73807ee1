//! Faults measured by what a client waits, beside what it was promised:
//! real `placement serve` processes on a private PostgreSQL that is
//!   1. frozen for 10 s (SIGSTOP: connections open, nothing answers),
//!   2. stopped for 15 s,
//!   3. behind a role `CONNECTION LIMIT` of 6 with a pool of 20, and
//!      with two of those 6 taken behind the pool's back,
//!
//! and a server whose clock runs 20 minutes fast (libfaketime).
//!
//! While the database is away every request is answered within the
//! request deadline plus a second, 503 only, and the ledger audit finds
//! nothing lost and nothing phantom. A pool PostgreSQL will not let grow
//! stops at what it has: no 503, and not the collapse it caused (a fifth
//! of a right-sized pool's rate). A fast clock changes no batch placement.

use placement_testkit::cluster;
use placement_testkit::load::{audit, run_load, Load};
use placement_testkit::pg;

use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// The loads here run one at a time: each measures what a client waits
/// or how much is served, which another load on the same cores would skew.
static ONE_LOAD_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The request deadline the servers here run with (`--db-request-timeout`).
const DEADLINE: Duration = Duration::from_secs(2);

/// The slowest answer to a request sent while the database was away
/// (from `from` to `to`): at most the deadline plus a second.
fn answered_within_the_deadline(load: &Load, fault: &str, from: Instant, to: Instant) {
    let ledger = load.ledger.lock().unwrap();
    let (took, what) = ledger
        .slowest_sent_within(from, to)
        .unwrap_or_else(|| panic!("{fault}: no request was sent meanwhile"));
    println!("fault bounds: {fault}: the slowest answer took {took:?} ({what})");
    assert!(
        took <= DEADLINE + Duration::from_secs(1),
        "{fault}: an answer took {took:?} ({what})"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_frozen_or_stopped_database_costs_a_request_at_most_its_deadline() {
    let _alone = ONE_LOAD_AT_A_TIME.lock().await;
    let pg = pg::PgCluster::start();
    let url = pg.url();
    let deadline = DEADLINE.as_secs().to_string();
    let server = cluster::start_server_with(
        &url,
        "bounds",
        &[
            "--db-request-timeout",
            &deadline,
            "--db-max-connections",
            "10",
        ],
    )
    .await;
    let load = Load::over(vec![server.base.clone()], 4, 12).await;

    // 1. Frozen for 10 s.
    let during = {
        let load = load.clone();
        tokio::spawn(async move { run_load(&load, Duration::from_secs(16)).await })
    };
    tokio::time::sleep(Duration::from_secs(3)).await;
    let frozen = Instant::now();
    pg.freeze();
    tokio::time::sleep(Duration::from_secs(10)).await;
    pg.thaw();
    let thawed = Instant::now();
    during.await.unwrap();
    answered_within_the_deadline(&load, "frozen 10 s", frozen, thawed);

    // 2. Stopped for 15 s.
    let during = {
        let load = load.clone();
        tokio::spawn(async move { run_load(&load, Duration::from_secs(21)).await })
    };
    tokio::time::sleep(Duration::from_secs(3)).await;
    let stopped = Instant::now();
    pg.down();
    tokio::time::sleep(Duration::from_secs(15)).await;
    pg.up();
    let started = Instant::now();
    during.await.unwrap();
    answered_within_the_deadline(&load, "stopped 15 s", stopped, started);

    let ledger = std::mem::take(&mut *load.ledger.lock().unwrap());
    println!("fault bounds: answers {:?}", ledger.counts);
    let server_errors = ledger.server_errors();
    assert!(
        server_errors.is_empty(),
        "5xx other than 503: {server_errors:?}"
    );
    for (kind, list) in &audit(&url, &ledger).await {
        assert!(list.is_empty(), "audit: {kind}: {list:?}");
    }
    let after = |from: Instant| ledger.successes.iter().any(|t| *t >= from);
    assert!(
        after(started),
        "no claim succeeded after PostgreSQL came back"
    );
    assert!(
        ledger.counts.keys().any(|k| k.contains("503")),
        "the faults were never seen: {:?}",
        ledger.counts
    );
}

/// A Prometheus gauge or counter of the server at `base`.
async fn metric(base: &str, name: &str) -> Option<f64> {
    let text = reqwest::get(format!("{base}/metrics"))
        .await
        .ok()?
        .text()
        .await
        .ok()?;
    text.lines()
        .find(|l| l.split([' ', '{']).next() == Some(name))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
}

/// Claims a second through one server of `pool` connections under a role
/// limited to 6, and the answers by kind.
async fn rate_under_the_role_limit(
    url: &str,
    pool: &str,
) -> (f64, std::collections::BTreeMap<String, u64>, Option<f64>) {
    let server = cluster::start_server_with(url, "capped", &["--db-max-connections", pool]).await;
    let load = Load::over(vec![server.base.clone()], 8, 16).await;
    // The first fit reads the room at start; give it its turn.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let began = Instant::now();
    run_load(&load, Duration::from_secs(8)).await;
    let seconds = began.elapsed().as_secs_f64();
    let seats = metric(&server.base, "placement_db_pool_budget").await;
    let counts = std::mem::take(&mut load.ledger.lock().unwrap().counts);
    let answered: u64 = counts.values().sum();
    if std::env::var_os("FAULT_BOUNDS_LOGS").is_some() {
        println!("{}", server.log());
    }
    drop(server);
    (answered as f64 / seconds, counts, seats)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_pool_larger_than_the_role_allows_stops_at_what_it_has() {
    let _alone = ONE_LOAD_AT_A_TIME.lock().await;
    let pg = pg::PgCluster::start();
    pg.sql("CREATE ROLE capped LOGIN CONNECTION LIMIT 6");
    // A database for each run: the load names its providers alike.
    pg.sql("CREATE DATABASE right_sized OWNER capped");
    pg.sql("CREATE DATABASE oversized OWNER capped");
    let url = |db: &str| format!("postgres://capped@127.0.0.1:{}/{db}", pg.port);

    let (right, right_counts, _) = rate_under_the_role_limit(&url("right_sized"), "6").await;
    // The killed server's sessions end as PostgreSQL notices.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (larger, larger_counts, seats) = rate_under_the_role_limit(&url("oversized"), "20").await;
    println!(
        "fault bounds: role limit 6: pool 6 {right:.0} answers/s {right_counts:?}; pool 20 {larger:.0} answers/s {larger_counts:?}, seats {seats:?}"
    );
    for counts in [&right_counts, &larger_counts] {
        assert!(
            counts.keys().all(|k| !k.contains(" 5")),
            "a 5xx under the role limit: {counts:?}"
        );
    }
    assert!(
        seats.is_some_and(|s| s <= 6.0),
        "the pool did not fit the role's limit: seats {seats:?}"
    );
    // Only a collapse fails here (it was a fifth); the figures are printed.
    assert!(
        larger >= right * 0.5,
        "pool 20 under a limit of 6 served {larger:.0}/s against {right:.0}/s"
    );
}

/// Sessions of the role opened behind the pool's back, after it read the
/// room, leave its budget too high until it reads the room again. With
/// every connection it holds busy, a request opens one more, which
/// PostgreSQL refuses for the limit, and sqlx retries it until the acquire
/// timeout. The read of the room that such a wait asks for must not wait
/// in that same line: it did, and every request waiting was answered 503.
/// Here a table lock holds the pool's connections up for a second.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sessions_opened_behind_the_pools_back_cost_no_503() {
    use sqlx::{Connection, Executor};
    let _alone = ONE_LOAD_AT_A_TIME.lock().await;
    let pg = pg::PgCluster::start();
    // As many seats as the pool may have: its budget is its own size.
    pg.sql("CREATE ROLE capped LOGIN CONNECTION LIMIT 20");
    pg.sql("CREATE DATABASE crowded OWNER capped");
    let url = format!("postgres://capped@127.0.0.1:{}/crowded", pg.port);
    let server = cluster::start_server_with(&url, "capped", &["--db-max-connections", "20"]).await;
    // Past its reads at start and a second later; the next is 5 s on.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let budget = metric(&server.base, "placement_db_pool_budget").await;
    // Every seat the role has left.
    let mut behind = Vec::new();
    while let Ok(session) = sqlx::PgConnection::connect(&url).await {
        behind.push(session);
    }
    let taken = behind.len();
    assert!(taken > 0, "the server left no seat to take");
    let superuser = format!("postgres://postgres@127.0.0.1:{}/crowded", pg.port);
    let mut locker = sqlx::PgConnection::connect(&superuser).await.unwrap();
    locker.execute("BEGIN").await.unwrap();
    locker
        .execute("LOCK TABLE resource_providers IN ACCESS EXCLUSIVE MODE")
        .await
        .unwrap();
    // More writers than the pool holds connections: each takes its own.
    let client = reqwest::Client::new();
    let writers: Vec<_> = (0..12)
        .map(|i| {
            let request = client
                .post(format!("{}/resource_providers", server.base))
                .header("x-auth-token", "admin")
                .header("openstack-api-version", "placement 1.39")
                .json(&json!({"name": format!("behind-{i}")}))
                .send();
            tokio::spawn(async move { request.await.map(|r| r.status().as_u16()) })
        })
        .collect();
    tokio::time::sleep(Duration::from_secs(1)).await;
    locker.execute("COMMIT").await.unwrap();
    let mut answers = std::collections::BTreeMap::<u16, u32>::new();
    for writer in writers {
        *answers.entry(writer.await.unwrap().unwrap()).or_default() += 1;
    }
    let seats = metric(&server.base, "placement_db_pool_budget").await;
    println!("fault bounds: {taken} sessions behind the pool's back: budget {budget:?} then {seats:?}, answers {answers:?}");
    assert_eq!(
        answers,
        [(200, 12)].into(),
        "every writer answered once the lock went\n{}",
        server.log()
    );
    let room = u32::try_from(20 - taken).unwrap();
    assert!(
        seats.is_some_and(|s| s <= f64::from(room)),
        "the budget counts the {taken} seats taken: {seats:?}"
    );
    for session in behind {
        session.close().await.unwrap();
    }
}

/// A node of 10 VCPU and 10,000 MB made through the server at `base`, for
/// the clock tests; its uuid.
async fn clocked_node(client: &reqwest::Client, base: &str, name: &str) -> String {
    let rp = uuid::Uuid::new_v4().to_string();
    let admin = |method: reqwest::Method, path: String, body: Value| {
        client
            .request(method, format!("{base}{path}"))
            .header("x-auth-token", "admin")
            .header("openstack-api-version", "placement 1.39")
            .json(&body)
            .send()
    };
    let made = admin(
        reqwest::Method::POST,
        "/resource_providers".into(),
        json!({"name": name, "uuid": rp}),
    );
    assert_eq!(made.await.unwrap().status(), 200);
    let inv = admin(
        reqwest::Method::PUT,
        format!("/resource_providers/{rp}/inventories"),
        json!({"resource_provider_generation": 0,
               "inventories": {"VCPU": {"total": 10}, "MEMORY_MB": {"total": 10000}}}),
    );
    assert_eq!(inv.await.unwrap().status(), 200);
    rp
}

/// libfaketime's preload library, as Debian installs it.
fn libfaketime() -> String {
    let found = std::fs::read_dir("/usr/lib")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path().join("faketime/libfaketime.so.1"))
        .find(|p| p.exists());
    found
        .expect("libfaketime is not installed: apt-get install libfaketime (scripts/test.sh does)")
        .display()
        .to_string()
}

/// Whether a batch search through the server at `base` offers `rp`.
async fn batch_offers(client: &reqwest::Client, base: &str, rp: &str) -> bool {
    let body: Value = client
        .get(format!(
            "{base}/allocation_candidates?resources=BATCH_VCPU_MILLI:1000,BATCH_MEMORY_MB:100&priority_class=batch"
        ))
        .header("x-auth-token", "admin")
        .header("openstack-api-version", "placement 1.39")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    body["provider_summaries"]
        .as_object()
        .is_some_and(|p| p.contains_key(rp))
}

#[tokio::test]
async fn a_server_whose_clock_is_20_minutes_fast_places_batch_work_as_the_others() {
    // Its database and two servers beside a load skew what the load
    // measures: in a full run on two cores, the pool under a role limit
    // answered one claim 503 with this test running beside it.
    let _alone = ONE_LOAD_AT_A_TIME.lock().await;
    let pg = pg::PgCluster::start();
    let url = pg.url();
    let right = cluster::start_server_with(&url, "clock-right", &[]).await;
    let preload = libfaketime();
    let fast = cluster::start_with_env(
        &url,
        "clock-fast",
        &[],
        &[
            ("LD_PRELOAD", preload.as_str()),
            ("FAKETIME", "+20m"),
            ("FAKETIME_DONT_FAKE_MONOTONIC", "1"),
        ],
        cluster::free_port(),
    )
    .await;
    let client = reqwest::Client::new();
    let send = |method: reqwest::Method, base: &str, path: &str, body: Value| {
        client
            .request(method, format!("{base}{path}"))
            .header("x-auth-token", "admin")
            .header("openstack-api-version", "placement 1.39")
            .json(&body)
            .send()
    };
    let rp = clocked_node(&client, &right.base, "clocked").await;
    // The node reports on the true time, through the fast server.
    let report = send(
        reqwest::Method::POST,
        &fast.base,
        &format!("/resource_providers/{rp}/usage_reports"),
        json!({"sampled_at": chrono::Utc::now().to_rfc3339(), "window_seconds": 10,
               "node": {"cpu_milli_used": 1000, "memory_mb_used": 1000},
               "system": {"cpu_milli_used": 1000, "memory_mb_used": 1000},
               "consumers": []}),
    )
    .await
    .unwrap();
    let status = report.status();
    let accepted: Value = report.json().await.unwrap();
    assert_eq!(status, 202, "{accepted}");
    println!("fault bounds: a report through the fast server: {accepted}");
    let offset = metric(&fast.base, "placement_clock_offset_milliseconds").await;
    println!("fault bounds: the fast server's offset from the database: {offset:?} ms");
    assert!(
        batch_offers(&client, &right.base, &rp).await,
        "the report through the fast server left no batch capacity: {accepted}"
    );
    assert!(
        batch_offers(&client, &fast.base, &rp).await,
        "the fast server finds the fresh report stale"
    );
}

/// Issue 68: one server of three an hour fast (NTP broken on its host).
/// A 1-VCPU claim through it and a 1-VCPU request admitted by its queue
/// round, then a fresh usage report through it: every server gives the same batch capacity for the node, as
/// batch capacity is computed from the database's clock and the report's
/// own stamp, never from a server's.
#[tokio::test]
async fn a_server_an_hour_fast_gives_the_batch_capacity_the_others_give() {
    // Three servers: not beside the load tests, whose figures it would bend.
    let _alone = ONE_LOAD_AT_A_TIME.lock().await;
    let pg = pg::PgCluster::start();
    let url = pg.url();
    let preload = libfaketime();
    let fast_env = [
        ("LD_PRELOAD", preload.as_str()),
        ("FAKETIME", "+1h"),
        ("FAKETIME_DONT_FAKE_MONOTONIC", "1"),
    ];
    // The fast server first: it leads the fair queue's rounds, so the
    // queued request below is admitted by the process an hour fast.
    let fast =
        cluster::start_with_env(&url, "clock-hour", &[], &fast_env, cluster::free_port()).await;
    let (right, other) = tokio::join!(
        cluster::start_server_with(&url, "clock-right", &[]),
        cluster::start_server_with(&url, "clock-other", &[])
    );
    let client = reqwest::Client::new();
    let send = |method: reqwest::Method, base: &str, path: &str, body: Value| {
        client
            .request(method, format!("{base}{path}"))
            .header("x-auth-token", "admin")
            .header("openstack-api-version", "placement 1.39")
            .json(&body)
            .send()
    };
    let rp = clocked_node(&client, &right.base, "hour").await;
    let status = |r: reqwest::Response| r.status().as_u16();
    let consumer = uuid::Uuid::new_v4().to_string();
    let claim = send(
        reqwest::Method::PUT,
        &fast.base,
        &format!("/allocations/{consumer}"),
        json!({"allocations": {&rp: {"resources": {"VCPU": 1, "MEMORY_MB": 100}}},
               "project_id": "p", "user_id": "u", "consumer_generation": null,
               "consumer_type": "INSTANCE"}),
    );
    assert_eq!(status(claim.await.unwrap()), 204);
    // And one admitted by the queue's round.
    let queued = uuid::Uuid::new_v4().to_string();
    let submitted: Value = send(
        reqwest::Method::POST,
        &fast.base,
        "/queue",
        json!({"consumer_uuid": queued, "project_id": "p", "user_id": "u",
               "resources": {"VCPU": 1, "MEMORY_MB": 100}}),
    )
    .await
    .unwrap()
    .json()
    .await
    .unwrap();
    let id = submitted["id"]
        .as_str()
        .expect("a queued request")
        .to_string();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let v: Value = send(
            reqwest::Method::GET,
            &fast.base,
            &format!("/queue/{id}?wait=5"),
            json!(null),
        )
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
        if v["state"] == "admitted" {
            break;
        }
        assert!(Instant::now() < deadline, "never admitted: {v}");
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    // The node's report, stamped on the true time: the same through each server.
    let report_body = || {
        json!({"sampled_at": chrono::Utc::now().to_rfc3339(), "window_seconds": 10,
                   "node": {"cpu_milli_used": 1000, "memory_mb_used": 1000},
                   "system": {"cpu_milli_used": 0, "memory_mb_used": 0},
                   "consumers": [{"consumer_uuid": consumer, "cpu_milli_used": 900, "memory_mb_used": 100},
                                     {"consumer_uuid": queued, "cpu_milli_used": 100, "memory_mb_used": 100}]})
    };
    let reports = format!("/resource_providers/{rp}/usage_reports");
    let report = send(reqwest::Method::POST, &fast.base, &reports, report_body())
        .await
        .unwrap();
    assert_eq!(
        report.status(),
        202,
        "{}",
        report.text().await.unwrap_or_default()
    );
    let mut seen = Vec::new();
    for base in [&right.base, &other.base, &fast.base] {
        seen.push((base.clone(), batch_capacity(&client, base, &rp).await));
    }
    println!("fault bounds: batch capacity through each server: {seen:?}");
    // The batch inventory the report wrote, and the one the same report
    // writes through a server whose clock is right.
    let stored = |base: String| {
        let client = client.clone();
        let rp = rp.clone();
        async move {
            let v: Value = client
                .get(format!("{base}/resource_providers/{rp}/inventories"))
                .header("x-auth-token", "admin")
                .header("openstack-api-version", "placement 1.39")
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            v["inventories"]["BATCH_VCPU_MILLI"]["total"].as_i64()
        }
    };
    let through_fast = stored(right.base.clone()).await;
    let again = send(reqwest::Method::POST, &right.base, &reports, report_body())
        .await
        .unwrap();
    assert_eq!(again.status(), 202);
    let through_right = stored(fast.base.clone()).await;
    println!(
        "fault bounds: BATCH_VCPU_MILLI written by the same report through the fast server {through_fast:?}, through a right one {through_right:?}"
    );
    assert_eq!(through_fast, through_right);
    assert!(seen[0].1.is_some(), "no batch capacity at all: {seen:?}");
    assert!(
        seen.iter().all(|(_, c)| *c == seen[0].1),
        "the servers disagree: {seen:?}"
    );
}

/// BATCH_VCPU_MILLI's capacity for `rp` in a batch search through `base`.
async fn batch_capacity(client: &reqwest::Client, base: &str, rp: &str) -> Option<i64> {
    let body: Value = client
        .get(format!(
            "{base}/allocation_candidates?resources=BATCH_VCPU_MILLI:1,BATCH_MEMORY_MB:1&priority_class=batch"
        ))
        .header("x-auth-token", "admin")
        .header("openstack-api-version", "placement 1.39")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    body["provider_summaries"][rp]["resources"]["BATCH_VCPU_MILLI"]["capacity"].as_i64()
}
