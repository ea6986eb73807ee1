//! The fault suite: two real `placement serve` processes on one private
//! PostgreSQL, under a load of claims and deletes, while
//!   1. PostgreSQL is stopped for 10 s and started again,
//!   2. one server is killed with SIGKILL and started again,
//!   3. reshapes over the same providers race in opposite orders.
//!
//! The client keeps a ledger of what each answer promised: 204 means
//! written, a 503 `database.unavailable` or a 409 means not written, a 503
//! `outcome_unknown` or a dropped connection means either. Afterwards an
//! audit in SQL checks that nothing promised is lost, nothing refused
//! exists (no phantom), nothing is overcommitted or partial, and no answer
//! was a 5xx other than 503. Bounded: about a minute.

use placement_testkit::cluster;
use placement_testkit::pg;

use serde_json::{json, Value};
use sqlx::{Connection, PgConnection};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use uuid::Uuid;

const MV: &str = "placement 1.28";
const PROVIDERS: usize = 8;
const WORKERS: usize = 12;

/// What the client was told, per consumer, and every answer counted.
#[derive(Default)]
struct Ledger {
    /// Consumers whose claim was answered 204 (and not deleted since): provider, VCPU.
    written: HashMap<Uuid, (String, i64)>,
    /// Consumers whose outcome the client cannot know.
    unknown: HashSet<Uuid>,
    /// Answers by kind ("claim 204", "delete 503 unavailable", ...).
    counts: BTreeMap<String, u64>,
    /// When each claim succeeded.
    successes: Vec<Instant>,
}

type Shared = Arc<Mutex<Ledger>>;

fn count(ledger: &Shared, what: String) {
    *ledger.lock().unwrap().counts.entry(what).or_default() += 1;
}

/// The answer's kind: status, and for 503s which promise it makes.
async fn kind(r: reqwest::Response) -> (u16, String) {
    let status = r.status().as_u16();
    let body: Value = r.json().await.unwrap_or(Value::Null);
    let code = body["errors"][0]["code"].as_str().unwrap_or("").to_string();
    match status {
        503 if code.ends_with("outcome_unknown") => (503, "503 outcome_unknown".into()),
        503 => (503, "503 unavailable".into()),
        s => (s, s.to_string()),
    }
}

struct Load {
    client: reqwest::Client,
    bases: Vec<String>,
    providers: Vec<String>,
    ledger: Shared,
    stop: Arc<AtomicBool>,
}

impl Load {
    async fn claim(&self, server: usize, n: u64) {
        let consumer = Uuid::new_v4();
        let rp = self.providers[(n as usize * 7) % PROVIDERS].clone();
        let vcpu = 1 + (n % 4) as i64;
        let sent = self
            .client
            .put(format!("{}/allocations/{consumer}", self.bases[server]))
            .header("x-auth-token", "admin")
            .header("openstack-api-version", MV)
            .json(&json!({"allocations": {&rp: {"resources": {"VCPU": vcpu}}},
                          "project_id": "p", "user_id": "u", "consumer_generation": null}))
            .send()
            .await;
        let what = match sent {
            // Refused: the request never reached a server, so nothing was written.
            Err(e) if e.is_connect() => "connection error (refused)".to_string(),
            Err(_) => {
                self.ledger.lock().unwrap().unknown.insert(consumer);
                "connection error".to_string()
            }
            Ok(r) => {
                let (status, what) = kind(r).await;
                let mut l = self.ledger.lock().unwrap();
                match status {
                    204 => {
                        l.written.insert(consumer, (rp, vcpu));
                        l.successes.push(Instant::now());
                    }
                    503 if what.contains("unknown") => {
                        l.unknown.insert(consumer);
                    }
                    _ => {}
                }
                what
            }
        };
        count(&self.ledger, format!("claim {what}"));
    }

    async fn delete(&self, server: usize) {
        let victim = {
            let mut l = self.ledger.lock().unwrap();
            let v = l.written.keys().next().copied();
            v.map(|c| (c, l.written.remove(&c).unwrap()))
        };
        let Some((consumer, held)) = victim else {
            return;
        };
        let sent = self
            .client
            .delete(format!("{}/allocations/{consumer}", self.bases[server]))
            .header("x-auth-token", "admin")
            .header("openstack-api-version", MV)
            .send()
            .await;
        let what = match sent {
            Err(e) if e.is_connect() => {
                self.ledger.lock().unwrap().written.insert(consumer, held);
                "connection error (refused)".to_string()
            }
            Err(_) => {
                self.ledger.lock().unwrap().unknown.insert(consumer);
                "connection error".to_string()
            }
            Ok(r) => {
                let (status, what) = kind(r).await;
                let mut l = self.ledger.lock().unwrap();
                match status {
                    204 => {}
                    503 if what.contains("unknown") => {
                        l.unknown.insert(consumer);
                    }
                    // Not deleted: it is still held.
                    _ => {
                        l.written.insert(consumer, held);
                    }
                }
                what
            }
        };
        count(&self.ledger, format!("delete {what}"));
    }

    /// One worker: claims and some deletes until told to stop, moving to
    /// the other server after a connection error.
    async fn worker(self: Arc<Self>, id: usize) {
        let mut server = id % self.bases.len();
        let mut n = id as u64 * 1000;
        while !self.stop.load(Ordering::Relaxed) {
            n += 1;
            let errors_before = self.connection_errors();
            if n % 10 < 7 {
                self.claim(server, n).await;
            } else {
                self.delete(server).await;
            }
            if self.connection_errors() > errors_before {
                server = (server + 1) % self.bases.len();
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }

    fn connection_errors(&self) -> u64 {
        let l = self.ledger.lock().unwrap();
        l.counts
            .iter()
            .filter(|(k, _)| k.contains("connection error"))
            .map(|(_, v)| v)
            .sum()
    }
}

async fn make_provider(client: &reqwest::Client, base: &str, name: &str) -> String {
    let r = client
        .post(format!("{base}/resource_providers"))
        .header("x-auth-token", "admin")
        .header("openstack-api-version", "placement 1.20")
        .json(&json!({"name": name}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let rp = r.json::<Value>().await.unwrap()["uuid"]
        .as_str()
        .unwrap()
        .to_string();
    let r = client
        .put(format!("{base}/resource_providers/{rp}/inventories"))
        .header("x-auth-token", "admin")
        .json(&json!({"resource_provider_generation": 0,
                      "inventories": {"VCPU": {"total": 64}, "DISK_GB": {"total": 1000}}}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    rp
}

/// Reshapes over providers a and b, in opposite orders through the two
/// servers at once, `rounds` times; the answers by status.
async fn opposite_reshapes(
    client: &reqwest::Client,
    bases: &[String],
    a: &str,
    b: &str,
    rounds: u32,
) -> BTreeMap<u16, u32> {
    let mut seen = BTreeMap::new();
    for round in 0..rounds {
        let generation = |rp: String| async move {
            let r = client
                .get(format!("{}/resource_providers/{rp}", bases[0]))
                .header("x-auth-token", "admin")
                .header("openstack-api-version", "placement 1.30")
                .send()
                .await
                .unwrap();
            r.json::<Value>().await.unwrap()["generation"]
                .as_i64()
                .unwrap()
        };
        let (ga, gb) = (generation(a.into()).await, generation(b.into()).await);
        let body = |first: (&str, i64), second: (&str, i64)| {
            // serde_json keeps insertion order: the server sees this order.
            let mut inv = serde_json::Map::new();
            for (rp, g) in [first, second] {
                inv.insert(
                    rp.to_string(),
                    json!({"resource_provider_generation": g,
                           "inventories": {"VCPU": {"total": 64 + round},
                                           "DISK_GB": {"total": 1000}}}),
                );
            }
            json!({"inventories": inv, "allocations": {}})
        };
        let send = |base: &String, body: Value| {
            client
                .post(format!("{base}/reshaper"))
                .header("x-auth-token", "admin")
                .header("openstack-api-version", "placement 1.30")
                .json(&body)
                .send()
        };
        let (x, y) = tokio::join!(
            send(&bases[0], body((a, ga), (b, gb))),
            send(&bases[1], body((b, gb), (a, ga)))
        );
        for r in [x, y] {
            *seen
                .entry(r.expect("reshape answered").status().as_u16())
                .or_default() += 1;
        }
    }
    seen
}

/// Problems found by the audit, by kind.
async fn audit(url: &str, ledger: &Ledger) -> BTreeMap<&'static str, Vec<String>> {
    let mut db = PgConnection::connect(url).await.unwrap();
    let mut found: BTreeMap<&'static str, Vec<String>> = BTreeMap::new();
    let over: Vec<(i64, i32)> = sqlx::query_as(
        "SELECT i.resource_provider_id, i.resource_class_id FROM inventories i
           JOIN (SELECT resource_provider_id, resource_class_id, SUM(used) AS u
                   FROM allocations GROUP BY 1, 2) a
             USING (resource_provider_id, resource_class_id)
          WHERE a.u > (i.total - i.reserved) * i.allocation_ratio",
    )
    .fetch_all(&mut db)
    .await
    .unwrap();
    found.insert(
        "overcommitted",
        over.iter().map(|o| format!("{o:?}")).collect(),
    );
    let empty: Vec<Uuid> = sqlx::query_scalar(
        "SELECT c.uuid FROM consumers c
          WHERE NOT EXISTS (SELECT 1 FROM allocations a WHERE a.consumer_id = c.id)",
    )
    .fetch_all(&mut db)
    .await
    .unwrap();
    found.insert("partial", empty.iter().map(Uuid::to_string).collect());
    let held: Vec<(Uuid, Uuid, i64)> = sqlx::query_as(
        "SELECT c.uuid, rp.uuid, SUM(a.used)::bigint FROM allocations a
           JOIN consumers c ON c.id = a.consumer_id
           JOIN resource_providers rp ON rp.id = a.resource_provider_id
           JOIN resource_classes rc ON rc.id = a.resource_class_id
          WHERE rc.name = 'VCPU' GROUP BY 1, 2",
    )
    .fetch_all(&mut db)
    .await
    .unwrap();
    let in_db: HashMap<Uuid, (String, i64)> = held
        .into_iter()
        .map(|(c, rp, n)| (c, (rp.to_string(), n)))
        .collect();
    let lost = ledger
        .written
        .iter()
        .filter(|(c, want)| !ledger.unknown.contains(c) && in_db.get(c) != Some(want));
    found.insert("lost", lost.map(|(c, _)| c.to_string()).collect());
    let phantom = in_db
        .keys()
        .filter(|c| !ledger.written.contains_key(c) && !ledger.unknown.contains(c));
    found.insert("phantom", phantom.map(Uuid::to_string).collect());
    let _ = db.close().await;
    found
}

async fn run_load(load: &Arc<Load>, for_time: Duration) {
    load.stop.store(false, Ordering::Relaxed);
    let workers: Vec<_> = (0..WORKERS)
        .map(|i| tokio::spawn(load.clone().worker(i)))
        .collect();
    tokio::time::sleep(for_time).await;
    load.stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn writes_survive_database_outages_killed_servers_and_racing_reshapes() {
    let pg = pg::PgCluster::start();
    let url = pg.url();
    let args = ["--db-max-connections", "10"];
    let (s0, s1) = tokio::join!(
        cluster::start_server_with(&url, "fault0", &args),
        cluster::start_server_with(&url, "fault1", &args)
    );
    let mut servers = [s0, s1];
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(20))
        .build()
        .unwrap();
    let bases: Vec<String> = servers.iter().map(|s| s.base.clone()).collect();
    let mut providers = Vec::new();
    for i in 0..PROVIDERS {
        providers.push(make_provider(&client, &bases[i % 2], &format!("cn{i}")).await);
    }
    let load = Arc::new(Load {
        client: client.clone(),
        bases: bases.clone(),
        providers,
        ledger: Arc::default(),
        stop: Arc::default(),
    });

    // 1. PostgreSQL stopped for 10 s under load, then started again.
    let during = {
        let load = load.clone();
        tokio::spawn(async move { run_load(&load, Duration::from_secs(18)).await })
    };
    tokio::time::sleep(Duration::from_secs(3)).await;
    pg.down();
    tokio::time::sleep(Duration::from_secs(10)).await;
    pg.up();
    let back = Instant::now();
    during.await.unwrap();
    let first_success = load
        .ledger
        .lock()
        .unwrap()
        .successes
        .iter()
        .filter(|t| **t >= back)
        .min()
        .map(|t| t.duration_since(back));

    // 2. One server killed with SIGKILL under load, then started again.
    let during = {
        let load = load.clone();
        tokio::spawn(async move { run_load(&load, Duration::from_secs(8)).await })
    };
    tokio::time::sleep(Duration::from_secs(2)).await;
    let port = servers[1].port;
    servers[1].child.kill().unwrap();
    let _ = servers[1].child.wait();
    tokio::time::sleep(Duration::from_secs(2)).await;
    servers[1] = cluster::start_on_port(&url, "fault1b", &args, port).await;
    during.await.unwrap();

    // 3. Reshapes over the same two providers in opposite orders.
    let (a, b) = (
        make_provider(&client, &bases[0], "reshape-a").await,
        make_provider(&client, &bases[1], "reshape-b").await,
    );
    let reshapes = opposite_reshapes(&client, &bases, &a, &b, 50).await;

    let ledger = std::mem::take(&mut *load.ledger.lock().unwrap());
    let problems = audit(&url, &ledger).await;
    println!("fault suite: answers {:?}", ledger.counts);
    println!("fault suite: reshapes by status {reshapes:?}");
    println!(
        "fault suite: first success {:?} after PostgreSQL was back; {} consumers written, {} of unknown outcome",
        first_success,
        ledger.written.len(),
        ledger.unknown.len()
    );
    println!(
        "fault suite: audit {:?}",
        problems
            .iter()
            .map(|(k, v)| (*k, v.len()))
            .collect::<BTreeMap<_, _>>()
    );
    let server_errors: Vec<_> = ledger
        .counts
        .iter()
        .filter(|(k, _)| {
            k.split(' ')
                .nth(1)
                .is_some_and(|s| s.starts_with('5') && !s.starts_with("503"))
        })
        .collect();
    assert!(
        server_errors.is_empty(),
        "5xx other than 503: {server_errors:?}"
    );
    assert!(
        reshapes.keys().all(|s| *s == 204 || *s == 409),
        "reshapes answered {reshapes:?}"
    );
    for (kind, list) in &problems {
        assert!(list.is_empty(), "audit: {kind}: {list:?}");
    }
    assert!(
        ledger
            .counts
            .get("claim 503 unavailable")
            .is_some_and(|n| *n > 0),
        "the outage was never seen: {:?}",
        ledger.counts
    );
    // Recovery is a sqlx backoff capped at a fifth of the acquire timeout;
    // this bound only catches a hang (the figure is printed above).
    let first = first_success.expect("no claim succeeded after PostgreSQL came back");
    assert!(
        first < Duration::from_secs(5),
        "first success after {first:?}"
    );
}
