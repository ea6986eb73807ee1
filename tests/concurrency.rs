//! Races between two real server processes on one database: capacity is
//! never oversold and every lost race is a clean 409, whichever process
//! served the request; the same through PgBouncer in transaction mode.

use placement_testkit::cluster;

use cluster::Cluster;
use serde_json::{json, Value};

/// One answer: status and the error code, if any.
async fn outcome(r: reqwest::Response) -> (u16, Option<String>) {
    let status = r.status().as_u16();
    let body: Value = if status == 204 {
        Value::Null
    } else {
        r.json().await.unwrap_or(Value::Null)
    };
    let code = body["errors"][0]["code"].as_str().map(str::to_string);
    (status, code)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn capacity_is_never_oversold_across_two_servers() {
    // 60 claims race for one provider's row lock through 20 connections:
    // on a loaded test machine the last may wait past the default 3 s for
    // a connection (a 503, as it should be), so they may wait 10, as the
    // pooled variant's do.
    let flags = ["--db-acquire-timeout", "10"];
    never_oversold(Cluster::with_flags("concurrency", "1.28", 2, &flags).await).await;
}

/// The same through PgBouncer in transaction mode.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn capacity_is_never_oversold_across_two_servers_through_a_transaction_pooler() {
    never_oversold(Cluster::behind_pgbouncer("concurrency-pooled", "1.28").await).await;
}

async fn never_oversold(c: Cluster) {
    let rp = c.provider("cn", json!({"VCPU": {"total": 10}})).await;

    const CLAIMS: usize = 60;
    let barrier = std::sync::Arc::new(tokio::sync::Barrier::new(CLAIMS));
    let mut tasks = Vec::new();
    for i in 0..CLAIMS {
        let consumer = uuid::Uuid::new_v4().to_string();
        let req = c
            .request(i, reqwest::Method::PUT, &format!("/allocations/{consumer}"))
            .json(&json!({
                "allocations": {&rp: {"resources": {"VCPU": 1}}},
                "project_id": "p", "user_id": "u", "consumer_generation": null,
            }));
        let barrier = barrier.clone();
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            let r = req.send().await.expect("request");
            (consumer, outcome(r).await)
        }));
    }
    let mut won = Vec::new();
    let mut codes = std::collections::BTreeMap::<String, usize>::new();
    let mut other = Vec::new();
    for t in tasks {
        let (consumer, (status, code)) = t.await.unwrap();
        match status {
            204 => won.push(consumer),
            409 => *codes.entry(code.unwrap_or_default()).or_default() += 1,
            _ => other.push(format!("{consumer}: {status} {code:?}")),
        }
    }
    assert!(other.is_empty(), "answers other than 204/409: {other:?}");
    assert_eq!(won.len(), 10, "claims won; 409 codes: {codes:?}");
    assert_eq!(codes.values().sum::<usize>(), CLAIMS - 10, "{codes:?}");
    for code in codes.keys() {
        assert!(
            code == "placement.undefined_code" || code == "placement.concurrent_update",
            "{codes:?}"
        );
    }

    // Both servers see the same, exact state.
    for s in 0..2 {
        let usages = c.json(s, &format!("/resource_providers/{rp}/usages")).await;
        assert_eq!(usages["usages"], json!({"VCPU": 10}));
        let allocs = c
            .json(s, &format!("/resource_providers/{rp}/allocations"))
            .await;
        let map = allocs["allocations"].as_object().unwrap();
        let sum: i64 = map
            .values()
            .map(|a| a["resources"]["VCPU"].as_i64().unwrap())
            .sum();
        assert_eq!(sum, 10);
        let mut holders: Vec<&String> = map.keys().collect();
        holders.sort();
        let mut winners: Vec<&String> = won.iter().collect();
        winners.sort();
        assert_eq!(holders, winners);
    }
    // Each winner's own view agrees.
    for consumer in &won {
        let a = c.json(0, &format!("/allocations/{consumer}")).await;
        assert_eq!(a["allocations"][&rp]["resources"]["VCPU"], json!(1));
        assert_eq!(a["consumer_generation"], json!(1));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_consumer_generation_wins_across_two_servers() {
    let c = Cluster::new("concurrency", "1.28").await;
    let rp = uuid::Uuid::new_v4().to_string();
    let r = c
        .request(0, reqwest::Method::POST, "/resource_providers")
        .header("openstack-api-version", "placement 1.20")
        .json(&json!({"name": "cn", "uuid": rp}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let r = c
        .request(
            1,
            reqwest::Method::PUT,
            &format!("/resource_providers/{rp}/inventories"),
        )
        .json(&json!({"resource_provider_generation": 0, "inventories": {"VCPU": {"total": 100}}}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let consumer = uuid::Uuid::new_v4().to_string();
    let body = |vcpu: i64, gen: Value| {
        json!({"allocations": {&rp: {"resources": {"VCPU": vcpu}}},
               "project_id": "p", "user_id": "u", "consumer_generation": gen})
    };
    let r = c
        .request(0, reqwest::Method::PUT, &format!("/allocations/{consumer}"))
        .json(&body(1, json!(null)))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204);

    // 20 writers all holding generation 1: exactly one may win.
    const WRITERS: usize = 20;
    let barrier = std::sync::Arc::new(tokio::sync::Barrier::new(WRITERS));
    let mut tasks = Vec::new();
    for i in 0..WRITERS {
        let req = c
            .request(i, reqwest::Method::PUT, &format!("/allocations/{consumer}"))
            .json(&body(i as i64 + 2, json!(1)));
        let barrier = barrier.clone();
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            (
                i as i64 + 2,
                outcome(req.send().await.expect("request")).await,
            )
        }));
    }
    let mut winners = Vec::new();
    let mut other = Vec::new();
    for t in tasks {
        let (vcpu, (status, code)) = t.await.unwrap();
        match (status, code.as_deref()) {
            (204, _) => winners.push(vcpu),
            (409, Some("placement.concurrent_update")) => {}
            _ => other.push(format!("{vcpu}: {status} {code:?}")),
        }
    }
    assert!(other.is_empty(), "{other:?}");
    assert_eq!(winners.len(), 1, "{winners:?}");
    let a = c.json(1, &format!("/allocations/{consumer}")).await;
    assert_eq!(a["consumer_generation"], json!(2));
    assert_eq!(
        a["allocations"][&rp]["resources"]["VCPU"],
        json!(winners[0])
    );
    let usages = c.json(0, &format!("/resource_providers/{rp}/usages")).await;
    assert_eq!(usages["usages"]["VCPU"], json!(winners[0]));
}

/// Sends `n` requests at once (alternating servers); returns (status, code) per request.
async fn burst<F>(n: usize, make: F) -> Vec<(u16, Option<String>)>
where
    F: Fn(usize) -> reqwest::RequestBuilder,
{
    let barrier = std::sync::Arc::new(tokio::sync::Barrier::new(n));
    let mut tasks = Vec::new();
    for i in 0..n {
        let req = make(i);
        let barrier = barrier.clone();
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            outcome(req.send().await.expect("request")).await
        }));
    }
    let mut out = Vec::new();
    for t in tasks {
        out.push(t.await.unwrap());
    }
    out
}

fn count(results: &[(u16, Option<String>)], status: u16) -> usize {
    results.iter().filter(|(s, _)| *s == status).count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_creates_of_one_name_are_clean() {
    let c = Cluster::new("concurrency", "1.28").await;
    const N: usize = 12;

    // Same trait: one 201, the rest 204.
    let r = burst(N, |i| {
        c.request(i, reqwest::Method::PUT, "/traits/CUSTOM_RACE")
            .header("openstack-api-version", "placement 1.6")
    })
    .await;
    assert_eq!((count(&r, 201), count(&r, 204)), (1, N - 1), "{r:?}");

    // Same resource class (1.7 create-or-verify): one 201, the rest 204.
    let r = burst(N, |i| {
        c.request(i, reqwest::Method::PUT, "/resource_classes/CUSTOM_RACE")
            .header("openstack-api-version", "placement 1.7")
    })
    .await;
    assert_eq!((count(&r, 201), count(&r, 204)), (1, N - 1), "{r:?}");

    // Same provider name: one 200, the rest 409 duplicate_name.
    let r = burst(N, |i| {
        c.request(i, reqwest::Method::POST, "/resource_providers")
            .header("openstack-api-version", "placement 1.23")
            .json(&json!({"name": "racer"}))
    })
    .await;
    assert_eq!(count(&r, 200), 1, "{r:?}");
    assert!(
        r.iter()
            .filter(|(s, _)| *s != 200)
            .all(|(s, code)| *s == 409 && code.as_deref() == Some("placement.duplicate_name")),
        "{r:?}"
    );

    // A new aggregate set on many providers at once: all succeed.
    let mut rps = Vec::new();
    for i in 0..N {
        let u = uuid::Uuid::new_v4().to_string();
        let r = c
            .request(i, reqwest::Method::POST, "/resource_providers")
            .header("openstack-api-version", "placement 1.20")
            .json(&json!({"name": format!("agg-member-{i}"), "uuid": u}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        rps.push(u);
    }
    let agg = uuid::Uuid::new_v4().to_string();
    let r = burst(N, |i| {
        c.request(
            i,
            reqwest::Method::PUT,
            &format!("/resource_providers/{}/aggregates", rps[i]),
        )
        .header("openstack-api-version", "placement 1.1")
        .json(&json!([agg]))
    })
    .await;
    assert_eq!(count(&r, 200), N, "{r:?}");
    let members = c
        .json(0, &format!("/resource_providers?member_of={agg}"))
        .await;
    assert_eq!(members["resource_providers"].as_array().unwrap().len(), N);

    // One inventory generation, many writers: exactly one wins.
    let rp = &rps[0];
    let r = burst(N, |i| {
        c.request(
            i,
            reqwest::Method::PUT,
            &format!("/resource_providers/{rp}/inventories"),
        )
        .json(&json!({"resource_provider_generation": 0,
                          "inventories": {"VCPU": {"total": i + 1}}}))
    })
    .await;
    assert_eq!(count(&r, 200), 1, "{r:?}");
    assert!(
        r.iter()
            .filter(|(s, _)| *s != 200)
            .all(|(s, code)| *s == 409 && code.as_deref() == Some("placement.concurrent_update")),
        "{r:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn deleting_a_provider_while_it_is_claimed() {
    let c = Cluster::new("concurrency", "1.28").await;
    let rp = uuid::Uuid::new_v4().to_string();
    let r = c
        .request(0, reqwest::Method::POST, "/resource_providers")
        .header("openstack-api-version", "placement 1.20")
        .json(&json!({"name": "doomed", "uuid": rp}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let r = c
        .request(
            1,
            reqwest::Method::PUT,
            &format!("/resource_providers/{rp}/inventories"),
        )
        .json(&json!({"resource_provider_generation": 0, "inventories": {"VCPU": {"total": 100}}}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);

    const N: usize = 21;
    let r = burst(N, |i| {
        if i == N / 2 {
            c.request(
                i,
                reqwest::Method::DELETE,
                &format!("/resource_providers/{rp}"),
            )
        } else {
            let consumer = uuid::Uuid::new_v4();
            c.request(i, reqwest::Method::PUT, &format!("/allocations/{consumer}"))
                .json(&json!({"allocations": {&rp: {"resources": {"VCPU": 1}}},
                              "project_id": "p", "user_id": "u", "consumer_generation": null}))
        }
    })
    .await;
    assert!(r.iter().all(|(s, _)| *s < 500), "{r:?}");
    let (delete_status, _) = r[N / 2].clone();
    let claims: Vec<u16> = r
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != N / 2)
        .map(|(_, (s, _))| *s)
        .collect();
    let won = claims.iter().filter(|s| **s == 204).count();
    let shown = c
        .request(
            0,
            reqwest::Method::GET,
            &format!("/resource_providers/{rp}"),
        )
        .send()
        .await
        .unwrap()
        .status();
    match delete_status {
        // Deleted: it had no allocations then, and every later claim was refused.
        204 => {
            assert_eq!(shown, 404);
            assert_eq!(won, 0, "claims on a deleted provider: {r:?}");
            assert!(claims.iter().all(|s| *s == 400), "{r:?}");
        }
        // Refused: some claim got there first, and the provider keeps them all.
        409 => {
            assert_eq!(shown, 200);
            assert!(won >= 1, "{r:?}");
            let usages = c.json(1, &format!("/resource_providers/{rp}/usages")).await;
            assert_eq!(usages["usages"]["VCPU"], json!(won));
        }
        s => panic!("DELETE answered {s}: {r:?}"),
    }
}

/// Admission rounds and plain claims of several projects at once, through
/// two processes: afterwards no limit is exceeded, no reservation is used
/// by another project, no inventory is overcommitted, and every answer
/// was a success or a clean 409.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn admissions_and_claims_respect_limits_and_reservations() {
    limits_and_reservations_hold(Cluster::new("fairness-concurrency", "1.28").await).await;
}

/// The same through PgBouncer in transaction mode.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn admissions_and_claims_respect_limits_and_reservations_through_a_transaction_pooler() {
    limits_and_reservations_hold(
        Cluster::behind_pgbouncer("fairness-concurrency-pooled", "1.28").await,
    )
    .await;
}

async fn limits_and_reservations_hold(c: Cluster) {
    let reserved = c.provider("r0", json!({"VCPU": {"total": 8}})).await;
    let mut others = Vec::new();
    for i in 1..4 {
        others.push(
            c.provider(&format!("n{i}"), json!({"VCPU": {"total": 8}}))
                .await,
        );
    }
    let put = |server: usize, path: String, body: Value| {
        c.request(server, reqwest::Method::PUT, &path)
            .json(&body)
            .send()
    };
    let r = put(
        0,
        "/projects/L/quota".into(),
        json!({"limits": {"VCPU": 10}}),
    )
    .await
    .unwrap();
    assert_eq!(r.status(), 200);
    let path = format!("/resource_providers/{reserved}/project_reservations/R");
    let body = json!({"resource_provider_generation": 1, "resources": {"VCPU": 6}});
    assert_eq!(put(1, path, body).await.unwrap().status(), 200);

    let mut tasks = Vec::new();
    for i in 0..40 {
        // L claims anywhere; S claims on the reserved provider.
        let (project, rp) = match i % 2 {
            0 => ("L", others[i % 3].clone()),
            _ => ("S", reserved.clone()),
        };
        let consumer = uuid::Uuid::new_v4();
        let req = c
            .request(i, reqwest::Method::PUT, &format!("/allocations/{consumer}"))
            .json(&json!({
                "allocations": {&rp: {"resources": {"VCPU": 1}}},
                "project_id": project, "user_id": "u", "consumer_generation": null,
            }));
        tasks.push(tokio::spawn(async move {
            let (status, _) = outcome(req.send().await.unwrap()).await;
            (status, Vec::<(String, String)>::new(), Some((project, rp)))
        }));
    }
    for round in 0..4 {
        let requests: Vec<Value> = ["L", "S", "R"]
            .iter()
            .flat_map(|p| {
                (0..4).map(move |k| {
                    json!({"id": format!("{p}{round}-{k}"), "consumer_uuid": uuid::Uuid::new_v4(),
                           "project_id": p, "user_id": "u", "resources": {"VCPU": 1}})
                })
            })
            .collect();
        let req = c
            .request(round, reqwest::Method::POST, "/admissions")
            .json(&json!({"requests": requests}));
        tasks.push(tokio::spawn(async move {
            let r = req.send().await.unwrap();
            let status = r.status().as_u16();
            let body: Value = r.json().await.unwrap_or(Value::Null);
            let placed = body["decisions"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|d| d["decision"] == "admitted")
                .map(|d| {
                    let rp = d["allocations"]
                        .as_object()
                        .unwrap()
                        .keys()
                        .next()
                        .unwrap()
                        .clone();
                    (d["request"].as_str().unwrap()[..1].to_string(), rp)
                })
                .collect();
            (status, placed, None)
        }));
    }
    // (project, provider) → units won.
    let mut won: std::collections::BTreeMap<(String, String), i64> = Default::default();
    for t in tasks {
        let (status, placed, claim) = t.await.unwrap();
        assert!(matches!(status, 200 | 204 | 409), "answer {status}");
        if status == 204 {
            let (p, rp) = claim.unwrap();
            *won.entry((p.to_string(), rp)).or_default() += 1;
        }
        for (p, rp) in placed {
            *won.entry((p, rp)).or_default() += 1;
        }
    }
    let on = |p: &str, rp: &str| {
        won.get(&(p.to_string(), rp.to_string()))
            .copied()
            .unwrap_or(0)
    };
    let l_total: i64 = won
        .iter()
        .filter(|((p, _), _)| p == "L")
        .map(|(_, n)| n)
        .sum();
    assert!(
        l_total <= 10,
        "L holds {l_total} VCPU over its limit of 10: {won:?}"
    );
    let q = c.json(0, "/projects/L/quota").await;
    assert_eq!(q["allocated"]["VCPU"].as_i64().unwrap_or(0), l_total);
    // Others may use only what R's reservation leaves on r0.
    let others_on_r0 = on("L", &reserved) + on("S", &reserved);
    assert!(
        others_on_r0 + on("R", &reserved).max(6) <= 8,
        "reservation used by others: {won:?}"
    );
    for rp in std::iter::once(&reserved).chain(&others) {
        let u = c.json(1, &format!("/resource_providers/{rp}/usages")).await;
        let used = u["usages"]["VCPU"].as_i64().unwrap_or(0);
        assert!(used <= 8, "{rp} overcommitted: {used}");
        let counted: i64 = ["L", "S", "R"].iter().map(|p| on(p, rp)).sum();
        assert_eq!(used, counted, "every success is an allocation on {rp}");
    }
}
