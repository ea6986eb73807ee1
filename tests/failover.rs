//! Failover to a standby with nothing acknowledged lost: a primary and a
//! synchronous streaming standby (`synchronous_commit = remote_apply`),
//! two `placement serve` processes on a two-host URL with
//! `target_session_attrs=read-write`, and 16 clients claiming and
//! deleting while the primary is SIGKILLed and the standby promoted.
//! Afterwards: every write answered 204 is on the new primary and none
//! answered with an error is, nothing is overcommitted, `placement audit`
//! is clean, no answer was a 500, and candidates from both processes see
//! exactly what the new primary holds. The 503 window, from promotion to
//! the first 204, is printed. Bounded: about half a minute.

use placement_testkit::load::{audit, require_clean, run_load, Load};
use placement_testkit::{cluster, pg};
use serde_json::Value;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const PROVIDERS: usize = 8;
const CLIENTS: usize = 16;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_failover_to_the_standby_loses_nothing_acknowledged() {
    let (primary, standby) = pg::PgCluster::start_replicated();
    let url = two_hosts(&primary, &standby);
    let args = ["--db-max-connections", "10"];
    let (s0, s1) = tokio::join!(
        cluster::start_server_with(&url, "failover0", &args),
        cluster::start_server_with(&url, "failover1", &args)
    );
    let servers = [s0, s1];
    let bases: Vec<String> = servers.iter().map(|s| s.base.clone()).collect();
    let load = Load::over(bases.clone(), PROVIDERS, CLIENTS).await;
    let client = load.client.clone();

    let during = {
        let load = load.clone();
        tokio::spawn(async move { run_load(&load, Duration::from_secs(14)).await })
    };
    tokio::time::sleep(Duration::from_secs(4)).await;
    let before = load.ledger.lock().unwrap().successes.len();
    primary.kill();
    // A failover manager notices the loss before it promotes.
    tokio::time::sleep(Duration::from_secs(1)).await;
    standby.promote();
    let promoted = Instant::now();
    during.await.unwrap();

    let ledger = std::mem::take(&mut *load.ledger.lock().unwrap());
    let window = ledger
        .successes
        .iter()
        .filter(|t| **t >= promoted)
        .min()
        .map(|t| t.duration_since(promoted));
    let problems = audit(&standby.url(), &ledger).await;
    println!("failover: answers {:?}", ledger.counts);
    println!(
        "failover: {before} claims before the kill; first 204 {window:?} after the promotion; {} consumers written, {} of unknown outcome",
        ledger.written.len(),
        ledger.unknown.len()
    );
    require_clean("failover", &ledger, &problems);
    assert!(before > 0, "no claim succeeded before the kill");
    // Only catches a hang: the figure is printed above.
    let window = window.expect("no claim succeeded after the promotion");
    assert!(
        window < Duration::from_secs(10),
        "first 204 after {window:?}"
    );

    // The audit command, on the same two-host URL, finds the new primary.
    let out = std::process::Command::new(placement_testkit::placement_bin())
        .arg("audit")
        .env("DATABASE_URL", &url)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "placement audit: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );

    // Both processes' candidates see exactly what the new primary holds.
    let held = standby.sql(
        "SELECT string_agg(rp.uuid || '=' || COALESCE(u.used, 0), ',' ORDER BY rp.uuid)
           FROM resource_providers rp
           LEFT JOIN (SELECT a.resource_provider_id, SUM(a.used) AS used FROM allocations a
                        JOIN resource_classes rc ON rc.id = a.resource_class_id
                       WHERE rc.name = 'VCPU' GROUP BY 1) u ON u.resource_provider_id = rp.id
          WHERE rp.name LIKE 'cn%'",
    );
    for base in &bases {
        let r = disk_answer(&client, base, "1.29").await;
        let mut seen: Vec<String> = load
            .providers
            .iter()
            .map(|rp| {
                let used = r["provider_summaries"][rp]["resources"]["VCPU"]["used"]
                    .as_i64()
                    .unwrap_or(-1);
                format!("{rp}={used}")
            })
            .collect();
        seen.sort();
        assert_eq!(seen.join(","), held, "candidates from {base}");
    }
}

/// The primary turns read-only and its standby is promoted while one
/// client searches back to back (so the searches' turns keep their
/// connection, see `db::kept`): the process moves to the new primary on
/// the first failed write, and every search sent after a write there was
/// acknowledged sees it, never the old host's data.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn searches_back_to_back_follow_the_switch_to_the_new_primary() {
    let (primary, standby) = pg::PgCluster::start_replicated();
    let url = two_hosts(&primary, &standby);
    let server = cluster::start_server_with(&url, "switch", &[]).await;
    let base = server.base.clone();
    let client = reqwest::Client::new();
    assert!(disk_provider(&client, &base, "before").await.is_some());

    let stop = Arc::new(AtomicBool::new(false));
    let searches = tokio::spawn(search_back_to_back(
        client.clone(),
        base.clone(),
        stop.clone(),
    ));
    tokio::time::sleep(Duration::from_millis(500)).await;
    primary.sql("ALTER SYSTEM SET default_transaction_read_only = on");
    primary.sql("SELECT pg_reload_conf()");
    standby.promote();
    let deadline = Instant::now() + Duration::from_secs(30);
    let after = loop {
        if let Some(uuid) = disk_provider(&client, &base, "after").await {
            break uuid;
        }
        assert!(
            Instant::now() < deadline,
            "no write succeeded on the new primary"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let acknowledged = Instant::now();
    tokio::time::sleep(Duration::from_secs(1)).await;
    stop.store(true, Ordering::Relaxed);
    let seen = searches.await.unwrap();
    let later: Vec<&(Instant, u16, Vec<String>)> = seen
        .iter()
        .filter(|(sent, ..)| *sent >= acknowledged)
        .collect();
    println!(
        "switch: {} searches, {} sent after the write on the new primary",
        seen.len(),
        later.len()
    );
    assert!(
        later.len() > 10,
        "too few searches after the write: {}",
        later.len()
    );
    for (_, status, providers) in later {
        assert_eq!(*status, 200);
        assert!(
            providers.contains(&after),
            "a search missed {after}: {providers:?}"
        );
    }
}

/// Creates a provider with DISK_GB; its uuid once both writes succeeded,
/// None when either failed (the database is read-only or away).
async fn disk_provider(client: &reqwest::Client, base: &str, name: &str) -> Option<String> {
    let uuid = uuid::Uuid::new_v4().to_string();
    let created = client
        .post(format!("{base}/resource_providers"))
        .header("x-auth-token", "admin")
        .header("openstack-api-version", "placement 1.39")
        .json(&serde_json::json!({"name": format!("{name}-{uuid}"), "uuid": uuid}))
        .send()
        .await
        .ok()?;
    if !created.status().is_success() {
        return None;
    }
    let inventory = client
        .put(format!("{base}/resource_providers/{uuid}/inventories"))
        .header("x-auth-token", "admin")
        .header("openstack-api-version", "placement 1.39")
        .json(&serde_json::json!({"resource_provider_generation": 0,
            "inventories": {"DISK_GB": {"total": 100}}}))
        .send()
        .await
        .ok()?;
    inventory.status().is_success().then_some(uuid)
}

/// Searches one after another until `stop`: when each was sent, its
/// status, and the providers it answered.
async fn search_back_to_back(
    client: reqwest::Client,
    base: String,
    stop: Arc<AtomicBool>,
) -> Vec<(Instant, u16, Vec<String>)> {
    let mut seen = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        let sent = Instant::now();
        let Ok(r) = disk_search(&client, &base, "1.39").send().await else {
            continue;
        };
        let status = r.status().as_u16();
        let body: Value = r.json().await.unwrap_or(Value::Null);
        seen.push((sent, status, summarised(&body)));
    }
    seen
}

/// The process moves to a server whose transaction ids lag far behind the
/// old one's (as after an asynchronous failover that lost the last
/// commits, or onto another cluster): by their numbers the old server's
/// snapshots seem to cover the new one's, yet the searches' cache is
/// loaded again from the new server, not served or brought forward from
/// the old one's data.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_switch_to_a_server_with_fewer_transactions_loads_the_cache_again() {
    let (old, new) = (pg::PgCluster::start(), pg::PgCluster::start());
    let client = reqwest::Client::new();
    let on_new = {
        let only_new = cluster::start_server_with(&new.url(), "switch-new", &[]).await;
        disk_provider(&client, &only_new.base, "on-new")
            .await
            .expect("a provider on the new server")
    };
    let url = two_hosts(&old, &new);
    let server = cluster::start_server_with(&url, "switch-old", &[]).await;
    let on_old = disk_provider(&client, &server.base, "on-old")
        .await
        .expect("a provider on the old server");
    old.sql(
        "DO $$ BEGIN FOR i IN 1..500 LOOP PERFORM pg_current_xact_id(); COMMIT; END LOOP; END $$",
    );
    assert_eq!(disk_providers(&client, &server.base).await, [on_old]);

    old.sql("ALTER SYSTEM SET default_transaction_read_only = on");
    old.sql("SELECT pg_reload_conf()");
    let deadline = Instant::now() + Duration::from_secs(30);
    let after = loop {
        if let Some(uuid) = disk_provider(&client, &server.base, "after").await {
            break uuid;
        }
        assert!(
            Instant::now() < deadline,
            "no write succeeded on the new server"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let mut expected = vec![on_new, after];
    expected.sort();
    assert_eq!(disk_providers(&client, &server.base).await, expected);
}

/// A search for DISK_GB:1 at `version`, as an admin.
fn disk_search(client: &reqwest::Client, base: &str, version: &str) -> reqwest::RequestBuilder {
    client
        .get(format!("{base}/allocation_candidates?resources=DISK_GB:1"))
        .header("x-auth-token", "admin")
        .header("openstack-api-version", format!("placement {version}"))
}

/// The providers an answer's summaries name, sorted.
fn summarised(body: &Value) -> Vec<String> {
    let mut found: Vec<String> = body["provider_summaries"]
        .as_object()
        .map(|m| m.keys().cloned().collect())
        .unwrap_or_default();
    found.sort();
    found
}

/// The answer of a search for DISK_GB:1 at `version`.
async fn disk_answer(client: &reqwest::Client, base: &str, version: &str) -> Value {
    let r = disk_search(client, base, version).send().await;
    r.unwrap().json().await.unwrap()
}

/// The providers a search for DISK_GB:1 answers, sorted.
async fn disk_providers(client: &reqwest::Client, base: &str) -> Vec<String> {
    summarised(&disk_answer(client, base, "1.39").await)
}

/// The URL of `first` then `second`, for the host that accepts writes.
fn two_hosts(first: &pg::PgCluster, second: &pg::PgCluster) -> String {
    format!(
        "postgres://postgres@127.0.0.1:{},127.0.0.1:{}/app?target_session_attrs=read-write",
        first.port, second.port
    )
}
