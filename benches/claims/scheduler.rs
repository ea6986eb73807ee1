//! The scheduler's shape of claims: 32 clients, each asking for ten
//! candidates and claiming the first, on 2,000 providers with Placement's
//! perfload inventory (32 VCPU, 8 GiB, 8 TiB each), in Placement's order
//! and with `--randomize-allocation-candidates`.

use super::{admin, start_servers, used, CLIENTS};
use serde::Deserialize;
use serde_json::json;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// Providers of the scenario.
const PROVIDERS: usize = 2_000;
/// Claims each client makes (a 409 counts as one).
const CLAIMS_PER_CLIENT: usize = 100;
/// Claims each client makes before the measured run.
const WARM_UP: usize = 10;
/// What each claim asks: Placement's perfload request.
const QUERY: &str = "/allocation_candidates?resources=VCPU:1,DISK_GB:10,MEMORY_MB:256&limit=10";

/// The part of a candidates answer a client uses: the allocation
/// requests' allocations. Read into these types rather than a
/// `serde_json::Value`, the rest is skipped without being built: the
/// clients share the two cores with the servers and PostgreSQL, and a
/// whole answer as a `Value` cost them as much CPU as the rest of a claim.
#[derive(Deserialize)]
struct Candidates {
    allocation_requests: Vec<AllocationRequest>,
}

#[derive(Deserialize)]
struct AllocationRequest {
    allocations: BTreeMap<String, Resources>,
}

#[derive(Deserialize, serde::Serialize)]
struct Resources {
    resources: BTreeMap<String, u64>,
}

/// What one run measured.
#[derive(Default)]
struct Run {
    committed: u64,
    conflicts: u64,
    other: u64,
    get: Vec<Duration>,
    put: Vec<Duration>,
}

/// Both orders on one set of providers, each on freshly started servers.
pub async fn scheduler_claims(url: &str, extra: &[String]) {
    let (servers, bases) = start_servers(url, extra).await;
    let providers = create_providers(&bases[0]).await;
    let mut committed = 0;
    // BENCH_ORDER=placement or =random runs one of the two.
    let only = std::env::var("BENCH_ORDER").unwrap_or_default();
    // Each client first makes WARM_UP claims on the fresh servers (or
    // BENCH_WARMUP=n), reported on their own line: the measured run is a
    // running service's, not its first second, when every connection it
    // opens still plans its statements and a new process loads its
    // snapshot.
    let warm_up: usize = std::env::var("BENCH_WARMUP")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(WARM_UP);
    for (label, flags) in [
        ("in Placement's order", Vec::new()),
        (
            "randomized",
            vec!["--randomize-allocation-candidates".to_string()],
        ),
    ]
    .into_iter()
    .filter(|(_, flags)| match only.as_str() {
        "random" => !flags.is_empty(),
        "placement" => flags.is_empty(),
        _ => true,
    }) {
        let (servers, bases) = match flags.is_empty() {
            true => (None, bases.clone()),
            false => {
                let (s, b) = start_servers(url, &[extra, &flags].concat()).await;
                (Some(s), b)
            }
        };
        if warm_up > 0 {
            committed += run(&bases, &format!("{label}, warm-up"), warm_up).await;
        }
        committed += run(&bases, label, CLAIMS_PER_CLIENT).await;
        drop(servers);
    }
    audit(&bases[0], &providers, committed).await;
    drop(servers);
}

/// Creates the providers, 16 at a time; their uuids.
async fn create_providers(base: &str) -> Vec<String> {
    let started = Instant::now();
    let http = reqwest::Client::new();
    let mut uuids = Vec::new();
    for chunk in (0..PROVIDERS).collect::<Vec<_>>().chunks(16) {
        let mut tasks = Vec::new();
        for &i in chunk {
            let (http, base) = (http.clone(), base.to_string());
            tasks.push(tokio::spawn(async move {
                let rp = uuid::Uuid::new_v4().to_string();
                let r = admin(http.post(format!("{base}/resource_providers")))
                    .json(&json!({"name": format!("scheduler cn{i}"), "uuid": rp}))
                    .send()
                    .await
                    .expect("create provider");
                assert!(r.status().is_success(), "create provider: {}", r.status());
                let r = admin(http.put(format!("{base}/resource_providers/{rp}/inventories")))
                    .json(&json!({"resource_provider_generation": 0, "inventories": {
                        "VCPU": {"total": 32, "max_unit": 16},
                        "MEMORY_MB": {"total": 8192, "min_unit": 128, "max_unit": 8192},
                        "DISK_GB": {"total": 8192, "min_unit": 5, "max_unit": 8192}}}))
                    .send()
                    .await
                    .expect("set inventory");
                assert!(r.status().is_success(), "inventory: {}", r.status());
                rp
            }));
        }
        for t in tasks {
            uuids.push(t.await.expect("provider task"));
        }
    }
    println!(
        "scheduler claims: {PROVIDERS} providers created in {:.1}s",
        started.elapsed().as_secs_f64()
    );
    uuids
}

/// One run of the clients; the claims it committed.
async fn run(bases: &[String], label: &str, claims_per_client: usize) -> u64 {
    let started = Instant::now();
    let mut tasks = Vec::new();
    for c in 0..CLIENTS {
        let base = bases[c % bases.len()].clone();
        tasks.push(tokio::spawn(client(base, c, claims_per_client)));
    }
    let mut all = Run::default();
    for t in tasks {
        let r = t.await.expect("client task");
        all.committed += r.committed;
        all.conflicts += r.conflicts;
        all.other += r.other;
        all.get.extend(r.get);
        all.put.extend(r.put);
    }
    let secs = started.elapsed().as_secs_f64();
    let (get, put) = (percentiles(&mut all.get), percentiles(&mut all.put));
    println!(
        "scheduler claims ({label}): {CLIENTS} clients over {} servers, {} committed in {secs:.2}s = {:.0} claims/s, {} answered 409, {} other; GET p50 {:.1} p99 {:.1} ms, PUT p50 {:.1} p99 {:.1} ms",
        bases.len(),
        all.committed,
        all.committed as f64 / secs,
        all.conflicts,
        all.other,
        get.0,
        get.1,
        put.0,
        put.1
    );
    assert_eq!(all.other, 0, "some requests got neither 2xx nor 409");
    all.committed
}

/// One client: ask, claim the first candidate, again.
async fn client(base: String, c: usize, claims: usize) -> Run {
    let http = reqwest::Client::new();
    let mut run = Run::default();
    for _ in 0..claims {
        let t = Instant::now();
        let r = admin(http.get(format!("{base}{QUERY}"))).send().await;
        run.get.push(t.elapsed());
        let Ok(r) = r.filter_ok() else {
            run.other += 1;
            continue;
        };
        let body: Candidates = r.json().await.expect("candidates json");
        let Some(first) = body.allocation_requests.first().map(|r| &r.allocations) else {
            run.other += 1;
            continue;
        };
        let consumer = uuid::Uuid::new_v4();
        let t = Instant::now();
        let r = admin(http.put(format!("{base}/allocations/{consumer}")))
            .json(&json!({"allocations": first, "project_id": format!("p{}", c % 8),
                          "user_id": "u", "consumer_generation": null, "consumer_type": "INSTANCE"}))
            .send()
            .await;
        run.put.push(t.elapsed());
        match r.map(|r| r.status().as_u16()) {
            Ok(204) => run.committed += 1,
            Ok(409) => run.conflicts += 1,
            _ => run.other += 1,
        }
    }
    run
}

/// Sends back only successful answers.
trait FilterOk: Sized {
    fn filter_ok(self) -> Result<reqwest::Response, ()>;
}

impl FilterOk for reqwest::Result<reqwest::Response> {
    fn filter_ok(self) -> Result<reqwest::Response, ()> {
        self.ok().filter(|r| r.status().is_success()).ok_or(())
    }
}

/// p50 and p99 in milliseconds.
fn percentiles(xs: &mut [Duration]) -> (f64, f64) {
    xs.sort();
    let at = |p: f64| {
        xs.get(((xs.len() as f64 * p) as usize).min(xs.len().saturating_sub(1)))
            .map_or(0.0, |d| d.as_secs_f64() * 1000.0)
    };
    (at(0.5), at(0.99))
}

/// No provider holds more than its inventory, and the claims are all there.
async fn audit(base: &str, providers: &[String], committed: u64) {
    let http = reqwest::Client::new();
    let (mut vcpu, mut over) = (0, 0);
    for rp in providers {
        let cpu = used(&http, base, rp, "VCPU").await;
        let memory = used(&http, base, rp, "MEMORY_MB").await;
        vcpu += cpu;
        over += usize::from(cpu > 32 || memory > 8192);
    }
    println!(
        "scheduler claims check: {committed} committed, {vcpu} VCPU allocated, overcommitted providers {over}"
    );
    assert_eq!(over, 0, "an inventory was overcommitted");
    assert_eq!(
        vcpu,
        i64::try_from(committed).unwrap_or(-1),
        "a claim is missing or extra"
    );
}
