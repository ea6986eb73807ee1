//! Candidate searches that arrive together share one read of their names
//! and snapshot (`candidates::speed::shared_reads`), yet each stays exact:
//! a claim acknowledged by either server process before a search was sent
//! is seen by it, whichever process serves it and however many searches
//! share its read, and each search answers for its own names; so does a
//! speculative solve on a snapshot that turns out stale. Two server processes,
//! directly and through PgBouncer in transaction mode.

use placement_testkit::cluster::Cluster;
use serde_json::{json, Value};
use std::collections::BTreeSet;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn searches_arriving_together_each_see_every_acknowledged_claim() {
    let flags = ["--db-acquire-timeout", "10"];
    each_exact(Cluster::with_flags("searches-together", "1.38", 2, &flags).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn searches_arriving_together_each_see_every_acknowledged_claim_through_a_transaction_pooler()
{
    each_exact(Cluster::behind_pgbouncer("searches-together-pooled", "1.38").await).await;
}

/// What one search of the burst asks, and so must get.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ask {
    /// A VCPU: every provider not yet claimed, and no other.
    Vcpu,
    /// Disk: the disk provider alone, whatever the others share its turn.
    Disk,
    /// An unknown class: its own 400, though others in its turn are valid.
    Unknown,
}

impl Ask {
    fn path(self) -> &'static str {
        match self {
            Ask::Vcpu => "/allocation_candidates?resources=VCPU:1",
            Ask::Disk => "/allocation_candidates?resources=DISK_GB:10",
            Ask::Unknown => "/allocation_candidates?resources=CUSTOM_NOPE:1",
        }
    }
}

const ASKS: [Ask; 14] = [
    Ask::Vcpu,
    Ask::Disk,
    Ask::Vcpu,
    Ask::Unknown,
    Ask::Vcpu,
    Ask::Vcpu,
    Ask::Disk,
    Ask::Vcpu,
    Ask::Vcpu,
    Ask::Unknown,
    Ask::Vcpu,
    Ask::Disk,
    Ask::Vcpu,
    Ask::Vcpu,
];

async fn each_exact(c: Cluster) {
    // One VCPU each: one claim fills a provider, which must then be no
    // candidate for anyone.
    let mut ones = Vec::new();
    for i in 0..10 {
        ones.push(
            c.provider(&format!("one{i}"), json!({"VCPU": {"total": 1}}))
                .await,
        );
    }
    let disk = c.provider("disk", json!({"DISK_GB": {"total": 100}})).await;
    for (round, rp) in ones.iter().enumerate() {
        // The writer alternates; the burst goes to both processes.
        claim(&c, round % 2, rp).await;
        let free: BTreeSet<String> = ones[round + 1..].iter().cloned().collect();
        for (ask, (status, body)) in ASKS.iter().zip(search_together(&c).await) {
            match ask {
                Ask::Vcpu => {
                    assert_eq!(status, 200, "{body}");
                    assert_eq!(candidates(&body), free, "round {round}");
                }
                Ask::Disk => {
                    assert_eq!(status, 200, "{body}");
                    assert_eq!(candidates(&body), BTreeSet::from([disk.clone()]));
                }
                Ask::Unknown => {
                    assert_eq!(status, 400, "{body}");
                    let detail = body["errors"][0]["detail"].as_str().unwrap_or_default();
                    assert!(
                        detail.contains("No such resource class CUSTOM_NOPE"),
                        "{detail}"
                    );
                }
            }
        }
    }
    // Some searches shared a read (the path under test), counted by the
    // servers.
    let together = c.counter_total("placement_searches_together_total").await;
    assert!(together >= 2.0, "no searches shared a read");
}

/// Claims `rp`'s one VCPU through `server`, and waits for the 204.
async fn claim(c: &Cluster, server: usize, rp: &str) {
    let consumer = uuid::Uuid::new_v4();
    let body = json!({"allocations": {rp: {"resources": {"VCPU": 1}}}, "project_id": "p",
                      "user_id": "u", "consumer_generation": null, "consumer_type": "INSTANCE"});
    let r = c
        .request(
            server,
            reqwest::Method::PUT,
            &format!("/allocations/{consumer}"),
        )
        .json(&body)
        .send()
        .await
        .expect("claim");
    assert_eq!(r.status(), 204);
}

/// Every search of [`ASKS`] at once, spread over the two servers; each
/// answer's status and body.
async fn search_together(c: &Cluster) -> Vec<(u16, Value)> {
    let barrier = std::sync::Arc::new(tokio::sync::Barrier::new(ASKS.len()));
    let mut tasks = Vec::new();
    for (i, ask) in ASKS.iter().enumerate() {
        let req = c.request(i, reqwest::Method::GET, ask.path());
        let barrier = barrier.clone();
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            let r = req.send().await.expect("search");
            let status = r.status().as_u16();
            (status, r.json().await.unwrap_or(Value::Null))
        }));
    }
    let mut answers = Vec::new();
    for t in tasks {
        answers.push(t.await.expect("search task"));
    }
    answers
}

/// The providers an answer's allocation requests name.
fn candidates(body: &Value) -> BTreeSet<String> {
    body["allocation_requests"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| r["allocations"].as_object())
        .flat_map(|a| a.keys().cloned())
        .collect()
}

/// A search that goes to the blocking pool may be solved on the cached
/// snapshot while its read runs (`candidates::speed::speculative_solve`), and is answered so
/// only when the read finds that very snapshot. A claim through the other
/// process between two searches makes the next search's solve ahead stale:
/// it is thrown away, and the claim is seen.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_search_solved_ahead_of_its_read_still_sees_every_acknowledged_claim() {
    let c = Cluster::with_servers("solved-ahead", "1.38", 2).await;
    let mut ones = Vec::new();
    for i in 0..70 {
        ones.push(
            c.provider(&format!("one{i}"), json!({"VCPU": {"total": 1}}))
                .await,
        );
    }
    // No limit: up to 1,000 results, so not a small search solved in place.
    let path = "/allocation_candidates?resources=VCPU:1";
    let all: BTreeSet<String> = ones.iter().cloned().collect();
    for _ in 0..3 {
        assert_eq!(candidates(&c.json(0, path).await), all);
    }
    let ahead = c
        .counter_total("placement_searches_solved_ahead_total")
        .await;
    assert!(ahead >= 1.0, "no search was solved ahead of its read");
    for (round, rp) in ones.iter().take(5).enumerate() {
        claim(&c, 1, rp).await;
        let free: BTreeSet<String> = ones[round + 1..].iter().cloned().collect();
        assert_eq!(candidates(&c.json(0, path).await), free, "round {round}");
        // Found unchanged by this search's read: the next one solves ahead.
        assert_eq!(
            candidates(&c.json(0, path).await),
            free,
            "round {round}, again"
        );
    }
    let discarded = c
        .counter_total("placement_solves_ahead_discarded_total")
        .await;
    assert!(
        discarded >= 5.0,
        "stale solves ahead thrown away: {discarded}"
    );
}
