//! Deployments racing across real `placement serve` processes on one
//! database: two apps deployed at once onto the same nodes by two
//! processes, resizes and deletes racing deploys on one node, and three apps
//! (bound, fractional and non-bound, on nodes with and without a CPU
//! topology) deploying, resizing and deleting through four processes.
//! Afterwards no core holds more than its share base, no inventory is
//! overcommitted, Placement's CUSTOM_CPU_SHARES usage equals the bound
//! shares, every instance a 201 reported exists in `GET /deployments/{app}`
//! and `GET /allocations/{consumer}` exactly as reported (no phantom), and
//! every refusal was a 409 (never a 5xx).
//!
//! Needs `DATABASE_URL` (a server where the role may `CREATE DATABASE`).

mod refresh;
mod state;
mod together;

use placement_testkit::cluster;

use cluster::Cluster;
use serde_json::{json, Value};
use state::{answer, check_state, check_state_with, cpu_map, record, Created};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// One deploy request of the race.
#[derive(Debug, Clone)]
struct Ask {
    app: &'static str,
    count: i64,
    cpu: f64,
    bind: bool,
    memory_mb: i64,
    strategy: &'static str,
}

fn ask(i: usize) -> Ask {
    const STRATEGIES: [&str; 4] = ["auto", "global", "auto", "drained"];
    if i.is_multiple_of(2) {
        Ask {
            app: "alpha",
            count: 1 + (i as i64 / 2) % 3,
            cpu: 1.7,
            bind: true,
            memory_mb: 512,
            strategy: STRATEGIES[(i / 2) % 4],
        }
    } else {
        Ask {
            app: "beta",
            count: 1 + (i as i64 / 2) % 2,
            cpu: 0.5,
            bind: true,
            memory_mb: 256,
            strategy: STRATEGIES[(i / 2 + 1) % 4],
        }
    }
}

fn deploy_body(a: &Ask) -> Value {
    json!({"app": a.app, "count": a.count, "cpu": a.cpu, "cpu_bind": a.bind,
           "memory_mb": a.memory_mb, "strategy": a.strategy,
           "project_id": "p", "user_id": "u"})
}

/// `n` servers for a race. A request may wait up to 60 s for a database
/// connection, not the default 3: the races check what is answered and
/// stored, and on a loaded machine dozens of deploys queueing for the same
/// nodes' locks must not turn into 503s (other concurrency tests do the
/// same with 10 s; these hold their locks longer).
async fn racing(label: &str, n: usize) -> Cluster {
    Cluster::with_flags(label, "1.39", n, &["--db-acquire-timeout", "60"]).await
}

/// Sends the requests all at once (behind a barrier); returns the answers in order.
async fn burst(reqs: Vec<reqwest::RequestBuilder>) -> Vec<(u16, Value)> {
    let barrier = Arc::new(tokio::sync::Barrier::new(reqs.len()));
    let mut tasks = Vec::new();
    for req in reqs {
        let barrier = barrier.clone();
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            answer(req.send().await.expect("request")).await
        }));
    }
    let mut out = Vec::new();
    for t in tasks {
        out.push(t.await.unwrap());
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_apps_deploying_at_once_on_two_servers() {
    let c = racing("deploy-concurrency", 2).await;
    // 4 nodes x 8 cores (3200 shares) and 4 GiB each: a 1.7-CPU instance
    // takes 170 shares (4 per node), a 0.5 one 50; demand is ~3x capacity.
    let mut nodes = Vec::new();
    for i in 0..4 {
        nodes.push(c.node(&format!("cn{i}"), 4096, 8).await);
    }

    const N: usize = 64;
    let asks: Vec<Ask> = (0..N).map(ask).collect();
    let reqs = asks
        .iter()
        .enumerate()
        .map(|(i, a)| {
            c.request(i, reqwest::Method::POST, "/deployments")
                .json(&deploy_body(a))
        })
        .collect();
    let answers = burst(reqs).await;

    let mut created = BTreeMap::new();
    let mut refused = 0;
    let mut reasons = BTreeMap::<String, usize>::new();
    let mut other = Vec::new();
    for (a, (status, body)) in asks.iter().zip(&answers) {
        match status {
            201 => record(&mut created, (a.app, a.cpu, a.memory_mb), a.count, body),
            409 => {
                refused += 1;
                let d = body["errors"][0]["detail"].as_str().unwrap_or_default();
                *reasons
                    .entry(
                        d.split(" Capacity map")
                            .next()
                            .unwrap_or_default()
                            .to_string(),
                    )
                    .or_insert(0) += 1;
                assert!(body["errors"][0]["detail"].is_string(), "{body}");
            }
            _ => other.push(format!("{a:?}: {status} {body}")),
        }
    }
    eprintln!(
        "{N} deploys: {} instances created, {refused} refused",
        created.len()
    );
    eprintln!("409s: {reasons:#?}");
    assert!(other.is_empty(), "answers other than 201/409: {other:#?}");
    assert!(!created.is_empty(), "nothing was deployed");
    assert!(
        refused > 0,
        "demand exceeds capacity, yet nothing was refused"
    );
    check_state(&c, &nodes, &created).await;

    // Whatever is left over is still usable: fill it up, one server at a
    // time, and the state stays consistent at the limit.
    for (i, a) in [ask(1), ask(0)].iter().enumerate() {
        let mut a = a.clone();
        a.count = 1;
        loop {
            let r = c
                .request(i, reqwest::Method::POST, "/deployments")
                .json(&deploy_body(&a))
                .send()
                .await
                .unwrap();
            let (status, body) = answer(r).await;
            match status {
                201 => record(&mut created, (a.app, a.cpu, a.memory_mb), 1, &body),
                409 => break,
                s => panic!("{s}: {body}"),
            }
        }
    }
    check_state(&c, &nodes, &created).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn resizes_deletes_and_deploys_racing_on_one_node() {
    let c = racing("deploy-concurrency", 2).await;
    let node = c.node("cn", 8192, 8).await;
    // 6 one-core instances on the 8 cores.
    let r = c
        .request(0, reqwest::Method::POST, "/deployments")
        .json(
            &json!({"app": "alpha", "count": 6, "cpu": 1, "cpu_bind": true, "memory_mb": 512,
                      "project_id": "p", "user_id": "u"}),
        )
        .send()
        .await
        .unwrap();
    let (status, body) = answer(r).await;
    assert_eq!(status, 201, "{body}");
    let mut created = BTreeMap::new();
    record(&mut created, ("alpha", 1.0, 512), 6, &body);
    let first: Vec<String> = created.keys().cloned().collect();

    // At once: grow four instances by 0.6 CPU (2 free cores: not all fit),
    // delete two, and deploy betas of 0.5 CPU.
    enum Op {
        Resize(String),
        Delete(String),
        Deploy,
    }
    let mut ops = Vec::new();
    for c in &first[..4] {
        ops.push(Op::Resize(c.clone()));
    }
    for c in &first[4..] {
        ops.push(Op::Delete(c.clone()));
    }
    for _ in 0..10 {
        ops.push(Op::Deploy);
    }
    let reqs = ops
        .iter()
        .enumerate()
        .map(|(i, op)| match op {
            Op::Resize(consumer) => c
                .request(
                    i,
                    reqwest::Method::POST,
                    &format!("/deployments/alpha/instances/{consumer}/resize"),
                )
                .json(&json!({"cpu": 0.6, "memory_mb": 128})),
            Op::Delete(consumer) => c
                .request(
                    i,
                    reqwest::Method::DELETE,
                    &format!("/allocations/{consumer}"),
                )
                .header("openstack-api-version", "placement 1.28"),
            Op::Deploy => c.request(i, reqwest::Method::POST, "/deployments").json(
                &json!({"app": "beta", "count": 1, "cpu": 0.5, "cpu_bind": true,
                              "memory_mb": 256, "project_id": "p", "user_id": "u"}),
            ),
        })
        .collect();
    let answers = burst(reqs).await;
    let mut other = Vec::new();
    let (mut grown, mut deployed) = (0, 0);
    for (op, (status, body)) in ops.iter().zip(&answers) {
        match (op, status) {
            (Op::Resize(consumer), 200) => {
                assert_eq!(body["cpu"], json!(1.6), "{body}");
                assert_eq!(body["memory_mb"], json!(640), "{body}");
                let inst = created.get_mut(consumer).unwrap();
                inst.memory_mb = 640;
                inst.cpu = 1.6;
                inst.cpu_map = cpu_map(&body["cpu_map"]);
                assert_eq!(inst.cpu_map.values().sum::<i64>(), 160, "{body}");
                grown += 1;
            }
            (Op::Delete(consumer), 204) => {
                created.remove(consumer);
            }
            (Op::Deploy, 201) => {
                record(&mut created, ("beta", 0.5, 256), 1, body);
                deployed += 1;
            }
            (_, 409) => {}
            (_, s) => other.push(format!("{s}: {body}")),
        }
    }
    eprintln!("race on one node: {grown} resized, {deployed} deployed");
    assert!(other.is_empty(), "{other:#?}");
    assert!(grown + deployed > 0, "{answers:?}");
    check_state(&c, std::slice::from_ref(&node), &created).await;
    // The shares in use are exactly what the survivors hold.
    let total: i64 = created
        .values()
        .map(|i| i.cpu_map.values().sum::<i64>())
        .sum();
    let alphas = created.values().filter(|i| i.app == "alpha").count() as i64;
    assert_eq!(alphas, 4, "both deletes answered 204");
    assert_eq!(total, alphas * 100 + grown * 60 + deployed * 50);
}

/// The third app of the four-server race: 1 CPU, not bound, so it also
/// lands on the node without a topology.
fn ask3(i: usize) -> Ask {
    match i % 3 {
        0 | 1 => Ask {
            count: 1 + (i as i64 / 3) % 3,
            ..ask(i % 3)
        },
        _ => Ask {
            app: "gamma",
            count: 1 + (i as i64 / 3) % 2,
            cpu: 1.0,
            bind: false,
            memory_mb: 256,
            strategy: ["auto", "global", "drained"][(i / 3) % 3],
        },
    }
}

/// One step of the mixed burst.
enum Step {
    Deploy(Ask),
    Resize(String, String, Value),
    Delete(String),
}

fn request(c: &Cluster, i: usize, step: &Step) -> reqwest::RequestBuilder {
    match step {
        Step::Deploy(a) => c
            .request(i, reqwest::Method::POST, "/deployments")
            .json(&deploy_body(a)),
        Step::Resize(consumer, app, delta) => c
            .request(
                i,
                reqwest::Method::POST,
                &format!("/deployments/{app}/instances/{consumer}/resize"),
            )
            .json(delta),
        Step::Delete(consumer) => c
            .request(
                i,
                reqwest::Method::DELETE,
                &format!("/allocations/{consumer}"),
            )
            .header("openstack-api-version", "placement 1.28"),
    }
}

/// Sends the steps at once through every server, then applies the answers
/// to the live instances; returns the unexpected answers and the successes.
async fn run(
    c: &Cluster,
    steps: &[Step],
    live: &mut BTreeMap<String, Created>,
) -> (Vec<String>, usize) {
    let reqs = steps
        .iter()
        .enumerate()
        .map(|(i, s)| request(c, i, s))
        .collect();
    let answers = burst(reqs).await;
    let succeeded = answers.iter().filter(|(s, _)| *s < 300).count();
    (apply(steps, &answers, live), succeeded)
}

/// Applies a burst's answers to the live instances; returns the answers
/// that were neither a success nor a 409.
fn apply(
    steps: &[Step],
    answers: &[(u16, Value)],
    live: &mut BTreeMap<String, Created>,
) -> Vec<String> {
    let mut other = Vec::new();
    for (step, (status, body)) in steps.iter().zip(answers) {
        match (step, status) {
            (Step::Deploy(a), 201) => record(live, (a.app, a.cpu, a.memory_mb), a.count, body),
            (Step::Resize(consumer, ..), 200) => {
                let inst = live.get_mut(consumer).expect("a live instance");
                inst.cpu = body["cpu"].as_f64().expect("cpu");
                inst.memory_mb = body["memory_mb"].as_i64().expect("memory");
                inst.cpu_map = cpu_map(&body["cpu_map"]);
            }
            (Step::Delete(consumer), 204) => {
                live.remove(consumer);
            }
            (_, 409) => {}
            (_, s) => other.push(format!("{s}: {body}")),
        }
    }
    other
}

/// Three apps through four processes: alpha (1.7 CPUs bound), beta (0.5
/// bound) and gamma (1 CPU, not bound, also placed on a node registered the
/// Placement way) deploy at once; then, at once again, more deploys,
/// resizes of a third of the live instances and deletes of another third.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn four_servers_three_apps_deploy_resize_and_delete_at_once() {
    let c = racing("deploy-race4", 4).await;
    let mut nodes = Vec::new();
    for i in 0..3 {
        nodes.push(c.node(&format!("cn{i}"), 4096, 8).await);
    }
    let nova = c
        .provider(
            "nova",
            json!({"VCPU": {"total": 8, "allocation_ratio": 1.0},
                   "MEMORY_MB": {"total": 4096, "allocation_ratio": 1.0}}),
        )
        .await;
    let placement_nodes = [nova];

    let steps: Vec<Step> = (0..48).map(|i| Step::Deploy(ask3(i))).collect();
    let mut live = BTreeMap::new();
    let (other, _) = run(&c, &steps, &mut live).await;
    assert!(other.is_empty(), "answers other than 201/409: {other:#?}");
    let apps: BTreeSet<&str> = live.values().map(|i| i.app.as_str()).collect();
    assert_eq!(apps.len(), 3, "every app placed something: {apps:?}");
    assert!(
        live.values().any(|i| i.node == placement_nodes[0]),
        "the Placement node took gamma instances"
    );
    check_state_with(&c, &nodes, &placement_nodes, &live).await;

    let mut steps: Vec<Step> = Vec::new();
    for (k, (consumer, inst)) in live.iter().enumerate() {
        let delta = match inst.app.as_str() {
            "gamma" => json!({"cpu": 1.0, "memory_mb": 128}),
            _ => json!({"cpu": 0.3}),
        };
        match k % 3 {
            0 => steps.push(Step::Resize(consumer.clone(), inst.app.clone(), delta)),
            1 => steps.push(Step::Delete(consumer.clone())),
            _ => {}
        }
    }
    steps.extend((48..72).map(|i| Step::Deploy(ask3(i))));
    let (other, succeeded) = run(&c, &steps, &mut live).await;
    assert!(
        other.is_empty(),
        "answers other than success/409: {other:#?}"
    );
    eprintln!(
        "four servers: {} steps, {succeeded} succeeded, {} instances live",
        steps.len(),
        live.len()
    );
    check_state_with(&c, &nodes, &placement_nodes, &live).await;
}
