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

use placement_testkit::load::{audit, run_load, Load};
use placement_testkit::{cluster, pg};
use serde_json::Value;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

const PROVIDERS: usize = 8;
const CLIENTS: usize = 16;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_failover_to_the_standby_loses_nothing_acknowledged() {
    let (primary, standby) = pg::PgCluster::start_replicated();
    let url = format!(
        "postgres://postgres@127.0.0.1:{},127.0.0.1:{}/app?target_session_attrs=read-write",
        primary.port, standby.port
    );
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
    println!(
        "failover: audit {:?}",
        problems
            .iter()
            .map(|(k, v)| (*k, v.len()))
            .collect::<BTreeMap<_, _>>()
    );
    for (kind, list) in &problems {
        assert!(list.is_empty(), "audit: {kind}: {list:?}");
    }
    let server_errors = ledger.server_errors();
    assert!(
        server_errors.is_empty(),
        "5xx other than 503: {server_errors:?}"
    );
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
        let r: Value = client
            .get(format!("{base}/allocation_candidates?resources=DISK_GB:1"))
            .header("x-auth-token", "admin")
            .header("openstack-api-version", "placement 1.29")
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
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
