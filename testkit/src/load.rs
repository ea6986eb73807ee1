//! A load of claims and deletes against real server processes, with a
//! ledger of what each answer promised, and an audit in SQL of the
//! database against that ledger (the fault and failover suites).
//!
//! 204 means written, a 503 `database.unavailable` or a 409 means not
//! written, a 503 `outcome_unknown` or a dropped connection means either.
//! The audit checks that nothing promised is lost, nothing refused exists
//! (no phantom), nothing is overcommitted or partial.

use serde_json::{json, Value};
use sqlx::{Connection, PgConnection};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use uuid::Uuid;

/// The microversion of the load's requests.
pub const MV: &str = "placement 1.28";

/// What the client was told, per consumer, and every answer counted.
#[derive(Default)]
pub struct Ledger {
    /// Consumers whose claim was answered 204 (and not deleted since): provider, VCPU.
    pub written: HashMap<Uuid, (String, i64)>,
    /// Consumers whose outcome the client cannot know.
    pub unknown: HashSet<Uuid>,
    /// Answers by kind ("claim 204", "delete 503 unavailable", ...).
    pub counts: BTreeMap<String, u64>,
    /// When each claim succeeded.
    pub successes: Vec<Instant>,
    /// Every answer: when its request was sent, how long it took, its kind.
    pub answers: Vec<(Instant, Duration, String)>,
}

impl Ledger {
    /// The slowest answer to a request sent within `from..to`, and its kind.
    pub fn slowest_sent_within(&self, from: Instant, to: Instant) -> Option<(Duration, &str)> {
        self.answers
            .iter()
            .filter(|(sent, _, _)| *sent >= from && *sent < to)
            .max_by_key(|(_, took, _)| *took)
            .map(|(_, took, what)| (*took, what.as_str()))
    }

    /// The answers that were a 5xx other than 503, by kind.
    pub fn server_errors(&self) -> Vec<(&String, &u64)> {
        self.counts
            .iter()
            .filter(|(k, _)| {
                k.split(' ')
                    .nth(1)
                    .is_some_and(|s| s.starts_with('5') && !s.starts_with("503"))
            })
            .collect()
    }
}

pub type Shared = Arc<Mutex<Ledger>>;

fn count(ledger: &Shared, sent: Instant, what: String) {
    let mut l = ledger.lock().unwrap();
    l.answers.push((sent, sent.elapsed(), what.clone()));
    *l.counts.entry(what).or_default() += 1;
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

pub struct Load {
    pub client: reqwest::Client,
    pub bases: Vec<String>,
    pub providers: Vec<String>,
    pub ledger: Shared,
    pub stop: Arc<AtomicBool>,
    /// How many clients run at once.
    pub workers: usize,
}

impl Load {
    /// `providers` providers (VCPU 64, DISK_GB 1000) made through the
    /// servers at `bases` in turn, and a load of `workers` clients on them.
    pub async fn over(bases: Vec<String>, providers: usize, workers: usize) -> Arc<Load> {
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(20))
            .build()
            .unwrap();
        let mut made = Vec::new();
        for i in 0..providers {
            made.push(make_provider(&client, &bases[i % bases.len()], &format!("cn{i}")).await);
        }
        Arc::new(Load {
            client,
            bases,
            providers: made,
            ledger: Arc::default(),
            stop: Arc::default(),
            workers,
        })
    }

    pub async fn claim(&self, server: usize, n: u64) {
        let consumer = Uuid::new_v4();
        let rp = self.providers[(n as usize * 7) % self.providers.len()].clone();
        let vcpu = 1 + (n % 4) as i64;
        let started = Instant::now();
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
        count(&self.ledger, started, format!("claim {what}"));
    }

    pub async fn delete(&self, server: usize) {
        let victim = {
            let mut l = self.ledger.lock().unwrap();
            let v = l.written.keys().next().copied();
            v.map(|c| (c, l.written.remove(&c).unwrap()))
        };
        let Some((consumer, held)) = victim else {
            return;
        };
        let started = Instant::now();
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
        count(&self.ledger, started, format!("delete {what}"));
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

pub async fn make_provider(client: &reqwest::Client, base: &str, name: &str) -> String {
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

/// Prints the audit's counts under `label`, then fails on any problem it
/// found (a write acknowledged and lost, one refused and present, an
/// overcommit) and on any 5xx but 503.
pub fn require_clean(label: &str, ledger: &Ledger, problems: &BTreeMap<&'static str, Vec<String>>) {
    println!(
        "{label}: audit {:?}",
        problems
            .iter()
            .map(|(k, v)| (*k, v.len()))
            .collect::<BTreeMap<_, _>>()
    );
    for (kind, list) in problems {
        assert!(list.is_empty(), "audit: {kind}: {list:?}");
    }
    let server_errors = ledger.server_errors();
    assert!(
        server_errors.is_empty(),
        "5xx other than 503: {server_errors:?}"
    );
}

/// Problems found by the audit, by kind.
pub async fn audit(url: &str, ledger: &Ledger) -> BTreeMap<&'static str, Vec<String>> {
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

pub async fn run_load(load: &Arc<Load>, for_time: Duration) {
    load.stop.store(false, Ordering::Relaxed);
    let workers: Vec<_> = (0..load.workers)
        .map(|i| tokio::spawn(load.clone().worker(i)))
        .collect();
    tokio::time::sleep(for_time).await;
    load.stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.await.unwrap();
    }
}
