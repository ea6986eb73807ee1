//! Single deployments arriving together at one process: placed by shared
//! transactions (the `deployments_together` counter moves), spread as if
//! each had committed before the next was planned, and, when one of a
//! turn's deployments cannot be written (its project's quota), every
//! other still placed and that one refused as it would be alone.

use super::refresh::counter;
use super::*;

fn single(app: &str, project: &str) -> Value {
    json!({"app": app, "count": 1, "cpu": 1.0, "cpu_bind": true, "memory_mb": 256,
           "strategy": "auto", "project_id": project, "user_id": "u"})
}

/// 24 single deployments of one app at once over 12 equal nodes: AUTO
/// (fewest of the app's instances first) leaves exactly 2 on each node,
/// as 24 deployments one after another do. Deployments racing each on
/// its own transaction (planned on the same state) doubled up on nodes.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn single_deployments_arriving_together_spread_as_one_after_another() {
    let c = racing("deploy-together", 1).await;
    let mut nodes = Vec::new();
    for i in 0..12 {
        nodes.push(c.node(&format!("tn{i}"), 8192, 8).await);
    }
    // The process has ranked the nodes, as a running service has.
    let warm = c
        .request(0, reqwest::Method::POST, "/deployments")
        .json(
            &json!({"app": "warm", "count": 1, "cpu": 1.0, "cpu_bind": true,
                      "memory_mb": 256, "dry_run": true, "project_id": "p", "user_id": "u"}),
        )
        .send()
        .await
        .expect("dry run");
    assert_eq!(warm.status().as_u16(), 200);
    let before = counter(&c, 0, "placement_deployments_together_total").await;
    let reqs = (0..24)
        .map(|_| {
            c.request(0, reqwest::Method::POST, "/deployments")
                .json(&single("solo", "p"))
        })
        .collect();
    let answers = burst(reqs).await;
    let mut created = BTreeMap::new();
    for (status, body) in &answers {
        assert_eq!(*status, 201, "{body}");
        record(&mut created, ("solo", 1.0, 256), 1, body);
    }
    let together = counter(&c, 0, "placement_deployments_together_total").await - before;
    assert!(
        together >= 2.0,
        "no deployments shared a transaction ({together})"
    );
    let mut per_node: BTreeMap<&str, usize> = BTreeMap::new();
    for i in created.values() {
        *per_node.entry(i.node.as_str()).or_default() += 1;
    }
    assert_eq!(per_node.len(), 12, "{per_node:?}");
    assert!(per_node.values().all(|&n| n == 2), "{per_node:?}");
    check_state(&c, &nodes, &created).await;
}

/// Deployments of a project whose quota allows one instance, at once with
/// others: one is placed, the rest refused with the quota's 409, and every
/// other deployment placed, as each would be alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_refused_deployment_leaves_the_others_of_its_turn_placed() {
    let c = racing("deploy-together-quota", 1).await;
    let mut nodes = Vec::new();
    for i in 0..6 {
        nodes.push(c.node(&format!("qn{i}"), 8192, 8).await);
    }
    let quota = c
        .request(0, reqwest::Method::PUT, "/projects/capped/quota")
        .json(&json!({"limits": {"MEMORY_MB": 256}}))
        .send()
        .await
        .expect("quota");
    assert!(quota.status().is_success(), "{:?}", quota.text().await);
    let asks: Vec<(&str, &str)> = (0..16)
        .map(|i| match i % 4 {
            0 => ("capped-app", "capped"),
            _ => ("free-app", "free"),
        })
        .collect();
    let reqs = asks
        .iter()
        .map(|(app, project)| {
            c.request(0, reqwest::Method::POST, "/deployments")
                .json(&single(app, project))
        })
        .collect();
    let answers = burst(reqs).await;
    let mut created = BTreeMap::new();
    let (mut capped_placed, mut capped_refused) = (0, 0);
    for ((app, project), (status, body)) in asks.iter().zip(&answers) {
        match (*project, status) {
            (_, 201) => {
                record(&mut created, (app, 1.0, 256), 1, body);
                capped_placed += usize::from(*project == "capped");
            }
            ("capped", 409) => capped_refused += 1,
            _ => panic!("{app}: {status} {body}"),
        }
    }
    assert_eq!((capped_placed, capped_refused), (1, 3));
    assert_eq!(created.len(), 13);
    check_state(&c, &nodes, &created).await;
}
