//! The eager refresh: a deployment over many nodes, committed by one
//! process, brings the other process's candidate snapshot and node states
//! up to date without any deployment request to it, and what that process
//! then plans on is exact.

use super::*;

/// A counter of `GET /metrics` on one server (0 when absent).
pub async fn counter(c: &Cluster, server: usize, name: &str) -> f64 {
    let text = c
        .request(server, reqwest::Method::GET, "/metrics")
        .send()
        .await
        .expect("scrape")
        .text()
        .await
        .expect("metrics text");
    text.lines()
        .filter_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .filter_map(|v| v.trim().parse::<f64>().ok())
        .sum()
}

fn web(count: i64, dry_run: bool) -> Value {
    json!({"app": "web", "count": count, "cpu": 1.0, "cpu_bind": true, "memory_mb": 256,
           "strategy": "auto", "dry_run": dry_run, "project_id": "p", "user_id": "u"})
}

/// `POST /deployments` of `web` on one server: (status, body).
async fn post_web(c: &Cluster, server: usize, count: i64, dry_run: bool) -> (u16, Value) {
    let r = c
        .request(server, reqwest::Method::POST, "/deployments")
        .json(&web(count, dry_run))
        .send()
        .await
        .expect("deploy");
    answer(r).await
}

#[tokio::test]
async fn a_large_deployment_refreshes_the_other_process() {
    refreshes_the_other_process(Cluster::new("deploy-refresh", "1.39").await).await;
}

/// Through PgBouncer in transaction mode the listener takes the session
/// URL, and the announcement still reaches the other process.
#[tokio::test]
async fn a_large_deployment_refreshes_the_other_process_through_a_transaction_pooler() {
    refreshes_the_other_process(Cluster::behind_pgbouncer("deploy-refresh-pooled", "1.39").await)
        .await;
}

async fn refreshes_the_other_process(c: Cluster) {
    let mut nodes = Vec::new();
    for i in 0..32 {
        nodes.push(c.node(&format!("rn{i}"), 4096, 4).await);
    }
    // Server 1 holds every node's state, as a running process does.
    let (status, dry) = post_web(&c, 1, 1, true).await;
    assert_eq!(status, 200, "{dry}");
    let refreshes = "placement_node_refreshes_total";
    let patched = "placement_snapshot_providers_patched_total";
    let before = (
        counter(&c, 1, refreshes).await,
        counter(&c, 1, patched).await,
    );

    // One instance on each of the 32 nodes, through server 0.
    let (status, big) = post_web(&c, 0, 32, false).await;
    assert_eq!(status, 201, "{big}");
    assert!(
        big["deploy_map"]
            .as_object()
            .unwrap()
            .values()
            .all(|n| n == 1),
        "{big}"
    );

    // Server 1 refreshes on its own: no deployment request reaches it.
    let mut after = before;
    for _ in 0..100 {
        after = (
            counter(&c, 1, refreshes).await,
            counter(&c, 1, patched).await,
        );
        if after.0 > before.0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(
        after.0 > before.0,
        "server 1 never refreshed: {before:?} -> {after:?}\n{}",
        c.servers[1].log()
    );
    assert!(
        after.1 >= before.1 + 32.0,
        "the snapshot re-read the 32 nodes: {before:?} -> {after:?}"
    );

    // What it plans on is the state after the deployment: 3 free cores a node.
    let (status, dry) = post_web(&c, 1, 1, true).await;
    assert_eq!(status, 200, "{dry}");
    let caps: Vec<i64> = dry["capacity_map"]
        .as_object()
        .unwrap()
        .values()
        .filter_map(Value::as_i64)
        .collect();
    assert_eq!(caps, vec![3; 32], "{dry}");
}
