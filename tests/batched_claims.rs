//! Claims of new consumers that arrive together share one statement
//! (`allocation::claims`), yet each gets its own answer: the valid ones are
//! written, each refused one gets the error it would get alone, nothing is
//! half-written, capacity is never oversold, and what the claims wrote
//! beside them (the change log, the per-project totals) agrees. Two server
//! processes, directly and through PgBouncer in transaction mode.

use placement_testkit::cluster::Cluster;
use serde_json::{json, Value};
use std::collections::BTreeMap;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn claims_arriving_together_each_get_their_own_answer() {
    let flags = ["--db-acquire-timeout", "10"];
    each_answered(Cluster::with_flags("claims-together", "1.38", 2, &flags).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn claims_arriving_together_each_get_their_own_answer_through_a_transaction_pooler() {
    each_answered(Cluster::behind_pgbouncer("claims-together-pooled", "1.38").await).await;
}

/// One claim of the burst: its consumer, body and the answer it must get.
struct Claim {
    consumer: String,
    body: Value,
    expect: Expect,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Expect {
    Written,
    /// 400: an unknown class or provider.
    Invalid,
    /// 409 `placement.undefined_code`: units or capacity.
    Refused,
    /// One of a pair racing for one consumer: 204 or 409 concurrent_update.
    Pair,
    /// Four racing for the last four units of `small`: 204 or 409.
    Scarce,
}

fn body(rp: &str, resources: Value, project: &str) -> Value {
    json!({"allocations": {rp: {"resources": resources}}, "project_id": project,
           "user_id": "u", "consumer_generation": null, "consumer_type": "INSTANCE"})
}

fn burst(big: &str, small: &str) -> Vec<Claim> {
    let mut claims = Vec::new();
    let mut add = |n: usize, expect: Expect, make: &dyn Fn(usize) -> Value| {
        for i in 0..n {
            claims.push(Claim {
                consumer: uuid::Uuid::new_v4().to_string(),
                body: make(i),
                expect,
            });
        }
    };
    let unknown_rp = uuid::Uuid::new_v4().to_string();
    add(30, Expect::Written, &|i| {
        body(
            big,
            json!({"VCPU": 1, "MEMORY_MB": 64}),
            &format!("p{}", i % 3),
        )
    });
    add(4, Expect::Invalid, &|_| {
        body(big, json!({"CUSTOM_NOPE": 1}), "p0")
    });
    add(4, Expect::Invalid, &|_| {
        body(&unknown_rp, json!({"VCPU": 1}), "p0")
    });
    add(4, Expect::Refused, &|_| {
        body(big, json!({"VCPU": 17}), "p1")
    });
    add(4, Expect::Refused, &|_| {
        body(big, json!({"MEMORY_MB": 100}), "p1")
    });
    add(8, Expect::Scarce, &|_| {
        body(small, json!({"VCPU": 1}), "p2")
    });
    // Two requests for one consumer.
    let pair = uuid::Uuid::new_v4().to_string();
    for _ in 0..2 {
        claims.push(Claim {
            consumer: pair.clone(),
            body: body(big, json!({"VCPU": 1}), "p0"),
            expect: Expect::Pair,
        });
    }
    claims
}

async fn each_answered(c: Cluster) {
    // VCPU max_unit 16, MEMORY_MB in steps of 64: 17 and 100 break the units.
    let big = c
        .provider(
            "big",
            json!({"VCPU": {"total": 100, "max_unit": 16},
                              "MEMORY_MB": {"total": 10000, "step_size": 64}}),
        )
        .await;
    let small = c.provider("small", json!({"VCPU": {"total": 4}})).await;
    // A project must exist for a claim to go together: the first claim of
    // each creates its project (the statement leaves that to the detailed path).
    for p in ["p0", "p1", "p2"] {
        let first = body(&big, json!({"VCPU": 1}), p);
        let r = c
            .request(
                0,
                reqwest::Method::PUT,
                &format!("/allocations/{}", uuid::Uuid::new_v4()),
            )
            .json(&first)
            .send()
            .await
            .expect("first claim");
        assert_eq!(r.status(), 204);
    }
    // Each server's cache is loaded before the burst, so that afterwards
    // it is brought forward by what the claims logged.
    for s in 0..2 {
        c.json(s, "/allocation_candidates?resources=VCPU:1").await;
    }
    let claims = burst(&big, &small);
    let answers = send_together(&c, &claims).await;
    let mut written = Vec::new();
    let mut tally: BTreeMap<(Expect, u16, String), usize> = BTreeMap::new();
    for (claim, (status, code)) in claims.iter().zip(&answers) {
        *tally
            .entry((claim.expect, *status, code.clone()))
            .or_default() += 1;
        if *status == 204 {
            written.push(claim);
        }
    }
    let expected: BTreeMap<(Expect, u16, String), usize> = [
        ((Expect::Written, 204, String::new()), 30),
        ((Expect::Invalid, 400, "placement.undefined_code".into()), 8),
        ((Expect::Refused, 409, "placement.undefined_code".into()), 8),
        ((Expect::Scarce, 204, String::new()), 4),
        ((Expect::Scarce, 409, "placement.undefined_code".into()), 4),
        ((Expect::Pair, 204, String::new()), 1),
        ((Expect::Pair, 409, "placement.concurrent_update".into()), 1),
    ]
    .into_iter()
    .collect();
    assert_eq!(tally, expected);
    check_state(&c, &big, &small, &claims, &written).await;
    // Some went together (the path under test), counted by the servers.
    let together = c.counter_total("placement_claims_together_total").await;
    assert!(together >= 2.0, "no claims were written together");
}

/// Sends every claim at once, spread over the two servers; each answer's
/// status and error code ("" for none).
async fn send_together(c: &Cluster, claims: &[Claim]) -> Vec<(u16, String)> {
    let barrier = std::sync::Arc::new(tokio::sync::Barrier::new(claims.len()));
    let mut tasks = Vec::new();
    for (i, claim) in claims.iter().enumerate() {
        let req = c
            .request(
                i,
                reqwest::Method::PUT,
                &format!("/allocations/{}", claim.consumer),
            )
            .json(&claim.body);
        let barrier = barrier.clone();
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            let r = req.send().await.expect("claim");
            let status = r.status().as_u16();
            let body: Value = r.json().await.unwrap_or(Value::Null);
            let code = body["errors"][0]["code"].as_str().unwrap_or_default();
            (status, code.to_string())
        }));
    }
    let mut answers = Vec::new();
    for t in tasks {
        answers.push(t.await.expect("claim task"));
    }
    answers
}

/// What the database holds afterwards, as both servers see it: exactly the
/// written claims, each whole, and no consumer of a refused one.
async fn check_state(c: &Cluster, big: &str, small: &str, claims: &[Claim], written: &[&Claim]) {
    for s in 0..2 {
        let usages = c
            .json(s, &format!("/resource_providers/{small}/usages"))
            .await;
        assert_eq!(usages["usages"], json!({"VCPU": 4}), "server {s}");
        let usages = c
            .json(s, &format!("/resource_providers/{big}/usages"))
            .await;
        // Three first claims, 30 written, the pair's winner.
        assert_eq!(
            usages["usages"],
            json!({"VCPU": 34, "MEMORY_MB": 1920}),
            "server {s}"
        );
    }
    for claim in claims {
        let got = c.json(1, &format!("/allocations/{}", claim.consumer)).await;
        match written.iter().find(|w| w.consumer == claim.consumer) {
            Some(w) => {
                let (rp, asked) = w.body["allocations"]
                    .as_object()
                    .and_then(|m| m.iter().next())
                    .expect("one provider");
                assert_eq!(got["allocations"][rp]["resources"], asked["resources"]);
                assert_eq!(got["consumer_generation"], json!(1));
                assert_eq!(got["project_id"], w.body["project_id"]);
                assert_eq!(got["consumer_type"], json!("INSTANCE"));
            }
            None => assert_eq!(got["allocations"], json!({}), "{}", claim.consumer),
        }
    }
    searches_see_the_claims(c, big, small).await;
    let audit = std::process::Command::new(placement_testkit::placement_bin())
        .args(["audit", "--json"])
        .env("DATABASE_URL", c.database_url())
        .output()
        .expect("run placement audit");
    assert!(
        audit.status.success(),
        "{}",
        String::from_utf8_lossy(&audit.stdout)
    );
}

/// Each server's candidates (its cache, brought forward through the change
/// log) count every written claim: `small` is full, `big` shows its usage.
/// Then one claim more reaches both caches as the units it logged.
async fn searches_see_the_claims(c: &Cluster, big: &str, small: &str) {
    for s in 0..2 {
        let found = c.json(s, "/allocation_candidates?resources=VCPU:1").await;
        let summaries = &found["provider_summaries"];
        assert!(summaries.get(small).is_none(), "server {s}: {found}");
        assert_eq!(
            summaries[big]["resources"]["VCPU"]["used"],
            json!(34),
            "server {s}"
        );
    }
    // One claim more, with both caches current: each brings it forward by
    // the units it logged.
    let before = c
        .counter_total("placement_snapshot_usage_patches_total")
        .await;
    let r = c
        .request(
            0,
            reqwest::Method::PUT,
            &format!("/allocations/{}", uuid::Uuid::new_v4()),
        )
        .json(&body(big, json!({"VCPU": 1}), "p0"))
        .send()
        .await
        .expect("one claim more");
    assert_eq!(r.status(), 204);
    for s in 0..2 {
        let found = c.json(s, "/allocation_candidates?resources=VCPU:1").await;
        let used = &found["provider_summaries"][big]["resources"]["VCPU"]["used"];
        assert_eq!(used, &json!(35), "server {s}");
    }
    let after = c
        .counter_total("placement_snapshot_usage_patches_total")
        .await;
    assert_eq!(
        after - before,
        2.0,
        "each cache was brought forward by units"
    );
}
