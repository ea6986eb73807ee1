//! Strategies (eru.md §3/§4, vectors `seed_*`): AUTO, EACH, FILL, GLOBAL.

use super::*;

/// eru.md §4 example (a), vector `seed_auto_even_need11`: existing A:3 B:1
/// C:5 D:4 with remaining capacities A:10 B:13 C:7 D:2; 11 more with AUTO
/// gives A+3 B+5 C+1 D+2, every node at 6.
#[tokio::test]
async fn auto_keeps_the_app_even() {
    let t = TestApp::new().await;
    let nodes = example_nodes(
        &t,
        "web",
        256,
        &[("A", 3, 10), ("B", 1, 13), ("C", 5, 7), ("D", 4, 2)],
    )
    .await;
    let all = refs(&nodes);
    assert_eq!(
        app_counts(&t, "web", &all).await,
        expect_map(&[("A", 3), ("B", 1), ("C", 5), ("D", 4)])
    );

    // Dry runs of the neighbouring vectors first (need 4 and 7), then 11.
    let r = deploy(
        &t,
        "web",
        4,
        256,
        json!({"strategy": "auto", "dry_run": true}),
    )
    .await
    .expect(200);
    assert_eq!(
        named(&r.json()["deploy_map"], &all),
        expect_map(&[("A", 1), ("B", 3)])
    );
    let r = deploy(
        &t,
        "web",
        7,
        256,
        json!({"strategy": "auto", "dry_run": true}),
    )
    .await
    .expect(200);
    assert_eq!(
        named(&r.json()["deploy_map"], &all),
        expect_map(&[("A", 2), ("B", 4), ("D", 1)])
    );

    let r = deploy(&t, "web", 11, 256, json!({"strategy": "auto"}))
        .await
        .expect(201);
    let v = r.json();
    assert_eq!(v["app"], json!("web"));
    assert_eq!(
        named(&v["capacity_map"], &all),
        expect_map(&[("A", 10), ("B", 13), ("C", 7), ("D", 2)])
    );
    assert_eq!(
        named(&v["deploy_map"], &all),
        expect_map(&[("A", 3), ("B", 5), ("C", 1), ("D", 2)])
    );
    // One instance per deployed unit, on the node the map names.
    let mut created = 0;
    for n in &nodes {
        let list = v["instances"][&n.uuid]
            .as_array()
            .cloned()
            .unwrap_or_default();
        for i in &list {
            assert_eq!(i["resource_provider_uuid"], json!(n.uuid));
            assert_eq!(i["cpu_map"], json!({}), "unbound");
            let c = i["consumer_uuid"].as_str().unwrap();
            let a = consumer_allocations(&t, c).await;
            assert_eq!(
                a["allocations"][&n.uuid]["resources"],
                json!({"MEMORY_MB": 256})
            );
        }
        created += list.len();
    }
    assert_eq!(created, 11);
    assert_eq!(
        app_counts(&t, "web", &all).await,
        expect_map(&[("A", 6), ("B", 6), ("C", 6), ("D", 6)])
    );
    assert_eq!(deployment(&t, "web").await["count"], json!(24));
    // D is full now: MEMORY_MB used == capacity.
    assert_eq!(
        usages(&t, &nodes[3].uuid).await["MEMORY_MB"],
        json!(6 * 256)
    );

    // Vector `seed_auto_even_need12` from the original state would put the
    // 12th on B; from here (all at 6, D full) one more goes to B (largest
    // remaining capacity: B 8 > A 7 > C 6).
    let r = deploy(
        &t,
        "web",
        1,
        256,
        json!({"strategy": "auto", "dry_run": true}),
    )
    .await
    .expect(200);
    assert_eq!(
        named(&r.json()["deploy_map"], &all),
        expect_map(&[("B", 1)])
    );
}

/// Vector `seed_auto_need_exceeds_total`: asking for more than the summed
/// capacity is a 409 naming the capacity map; nothing is written.
#[tokio::test]
async fn auto_beyond_total_capacity_is_refused() {
    let t = TestApp::new().await;
    let nodes = example_nodes(
        &t,
        "web",
        256,
        &[("A", 3, 10), ("B", 1, 13), ("C", 5, 7), ("D", 4, 2)],
    )
    .await;
    let before: Vec<Value> = {
        let mut v = Vec::new();
        for n in &nodes {
            v.push(usages(&t, &n.uuid).await);
        }
        v
    };
    let r = deploy(&t, "web", 33, 256, json!({"strategy": "auto"})).await;
    let r = r.expect(409);
    assert_eq!(
        r.error()["code"],
        "placement.deploy.insufficient_resource",
        "a stable code, not placement.undefined_code"
    );
    let detail = r.error()["detail"].as_str().unwrap().to_string();
    for (n, cap) in nodes.iter().zip([10, 13, 7, 2]) {
        assert!(
            detail.contains(&format!("\"{}\":{cap}", n.uuid)),
            "{}:{cap} missing from {detail}",
            n.name
        );
    }
    assert!(detail.contains("32"), "total missing: {detail}");
    for (n, b) in nodes.iter().zip(before) {
        assert_eq!(usages(&t, &n.uuid).await, b, "{} changed", n.name);
    }
    assert_eq!(deployment(&t, "web").await["count"], json!(13));
}

/// eru.md §4 example (b), vectors `seed_each_3`, `seed_each_5_no_limit`,
/// `seed_each_5_limit2`: capacities A5 B3 C7 D4.
#[tokio::test]
async fn each_deploys_n_per_node() {
    let t = TestApp::new().await;
    let nodes = example_nodes(
        &t,
        "api",
        100,
        &[("A", 0, 5), ("B", 0, 3), ("C", 0, 7), ("D", 0, 4)],
    )
    .await;
    let all = refs(&nodes);

    // N=3: every node can take 3.
    let r = deploy(
        &t,
        "api",
        3,
        100,
        json!({"strategy": "each", "dry_run": true}),
    )
    .await
    .expect(200);
    let v = r.json();
    assert_eq!(
        named(&v["capacity_map"], &all),
        expect_map(&[("A", 5), ("B", 3), ("C", 7), ("D", 4)])
    );
    assert_eq!(v["total_capacity"], json!(19));
    assert_eq!(
        named(&v["deploy_map"], &all),
        expect_map(&[("A", 3), ("B", 3), ("C", 3), ("D", 3)])
    );

    // N=5 without a limit: the code (unlike the seed doc) needs every node
    // to hold 5, so it is refused and nothing is written.
    let r = deploy(&t, "api", 5, 100, json!({"strategy": "each"})).await;
    r.expect(409);
    assert_eq!(deployment(&t, "api").await["count"], json!(0));
    for n in &nodes {
        assert_eq!(usages(&t, &n.uuid).await["MEMORY_MB"], json!(0));
    }

    // N=5 on 2 nodes: the two largest (C7, A5). "average" is an alias.
    let r = deploy(
        &t,
        "api",
        5,
        100,
        json!({"strategy": "average", "nodes_limit": 2}),
    )
    .await
    .expect(201);
    assert_eq!(
        named(&r.json()["deploy_map"], &all),
        expect_map(&[("A", 5), ("C", 5)])
    );
    assert_eq!(
        app_counts(&t, "api", &all).await,
        expect_map(&[("A", 5), ("C", 5)])
    );
    assert_eq!(usages(&t, &nodes[0].uuid).await["MEMORY_MB"], json!(500));
    assert_eq!(usages(&t, &nodes[2].uuid).await["MEMORY_MB"], json!(500));
    assert_eq!(usages(&t, &nodes[1].uuid).await["MEMORY_MB"], json!(0));
}

/// eru.md §4 example (c), vectors `seed_fill_to_10` and `seed_fill_to_5`:
/// counts A2 B3 C5 D7, capacity 10 each.
#[tokio::test]
async fn fill_tops_nodes_up() {
    let t = TestApp::new().await;
    let nodes = example_nodes(
        &t,
        "db",
        128,
        &[("A", 2, 10), ("B", 3, 10), ("C", 5, 10), ("D", 7, 10)],
    )
    .await;
    let all = refs(&nodes);

    let r = deploy(
        &t,
        "db",
        5,
        128,
        json!({"strategy": "fill", "dry_run": true}),
    )
    .await
    .expect(200);
    assert_eq!(
        named(&r.json()["deploy_map"], &all),
        expect_map(&[("A", 3), ("B", 2)])
    );

    let r = deploy(&t, "db", 10, 128, json!({"strategy": "fill"}))
        .await
        .expect(201);
    let v = r.json();
    assert_eq!(
        named(&v["deploy_map"], &all),
        expect_map(&[("A", 8), ("B", 7), ("C", 5), ("D", 3)])
    );
    let made: usize = v["instances"]
        .as_object()
        .unwrap()
        .values()
        .map(|l| l.as_array().unwrap().len())
        .sum();
    assert_eq!(made, 23);
    assert_eq!(
        app_counts(&t, "db", &all).await,
        expect_map(&[("A", 10), ("B", 10), ("C", 10), ("D", 10)])
    );
    // Everyone is at 10 now: filling to 10 again is ErrAlreadyFilled (409).
    deploy(&t, "db", 10, 128, json!({"strategy": "fill"}))
        .await
        .expect(409);
    assert_eq!(deployment(&t, "db").await["count"], json!(40));
}

/// Vectors `seed_fill_to_7_fails` and `seed_fill_to_7_limit1`: A can reach
/// 7 (count 5, capacity 3), B C D cannot (capacity 1): without a limit the
/// whole plan fails; with nodes_limit 1 only A is filled.
#[tokio::test]
async fn fill_fails_whole_unless_limited() {
    let t = TestApp::new().await;
    let nodes = example_nodes(
        &t,
        "db",
        128,
        &[("A", 5, 3), ("B", 5, 1), ("C", 5, 1), ("D", 5, 1)],
    )
    .await;
    let all = refs(&nodes);
    deploy(&t, "db", 7, 128, json!({"strategy": "fill"}))
        .await
        .expect(409);
    assert_eq!(
        app_counts(&t, "db", &all).await,
        expect_map(&[("A", 5), ("B", 5), ("C", 5), ("D", 5)])
    );
    for n in &nodes {
        assert_eq!(usages(&t, &n.uuid).await["MEMORY_MB"], json!(5 * 128));
    }
    let r = deploy(
        &t,
        "db",
        7,
        128,
        json!({"strategy": "fill", "nodes_limit": 1}),
    )
    .await
    .expect(201);
    assert_eq!(
        named(&r.json()["deploy_map"], &all),
        expect_map(&[("A", 2)])
    );
    assert_eq!(
        app_counts(&t, "db", &all).await,
        expect_map(&[("A", 7), ("B", 5), ("C", 5), ("D", 5)])
    );
}

/// Vectors `seed_fill_to_4`, `seed_fill_to_4_limit2_already_filled`,
/// `seed_fill_to_4_limit3`: A c2 cap10, B c3 cap5, C c4 cap7, D c5 cap9.
#[tokio::test]
async fn fill_to_4_with_and_without_limits() {
    let t = TestApp::new().await;
    let nodes = example_nodes(
        &t,
        "db",
        64,
        &[("A", 2, 10), ("B", 3, 5), ("C", 4, 7), ("D", 5, 9)],
    )
    .await;
    let all = refs(&nodes);
    // The two highest-count nodes are already at 4 or more: already filled.
    deploy(
        &t,
        "db",
        4,
        64,
        json!({"strategy": "fill", "nodes_limit": 2, "dry_run": true}),
    )
    .await
    .expect(409);
    let r = deploy(
        &t,
        "db",
        4,
        64,
        json!({"strategy": "fill", "nodes_limit": 3, "dry_run": true}),
    )
    .await
    .expect(200);
    assert_eq!(
        named(&r.json()["deploy_map"], &all),
        expect_map(&[("B", 1)])
    );
    let r = deploy(&t, "db", 4, 64, json!({"strategy": "fill"}))
        .await
        .expect(201);
    assert_eq!(
        named(&r.json()["deploy_map"], &all),
        expect_map(&[("A", 2), ("B", 1)])
    );
    assert_eq!(
        app_counts(&t, "db", &all).await,
        expect_map(&[("A", 4), ("B", 4), ("C", 4), ("D", 5)])
    );
}

/// eru.md §4 example (d), vectors `seed_global_need3` and `seed_global_need5`:
/// usage/rate n1 0.01/0.004, n2 0.02/0.006, n3 0.03/0.01 (unbound requests:
/// memory used / capacity and request / capacity). The code gives all 3 to
/// n1 (keys 0.014, 0.018, 0.022 < n2's 0.026), not the seed doc's n1:2 n2:1.
#[tokio::test]
async fn global_evens_out_utilisation() {
    let t = TestApp::new().await;
    // 6 MiB per instance: n1 1500 MiB with 15 used, n2 1000/20, n3 600/18.
    let mut nodes = Vec::new();
    for (name, total, used) in [("n1", 1500, 15), ("n2", 1000, 20), ("n3", 600, 18)] {
        let n = node(&t, name, total, 2).await;
        t.allocate(
            &common::uuid(),
            "other",
            "other",
            json!({ &n.uuid: {"MEMORY_MB": used} }),
        )
        .await;
        nodes.push(n);
    }
    let all = refs(&nodes);
    let r = deploy(
        &t,
        "g",
        5,
        6,
        json!({"strategy": "global", "dry_run": true}),
    )
    .await
    .expect(200);
    let v = r.json();
    assert_eq!(
        named(&v["capacity_map"], &all),
        expect_map(&[("n1", 247), ("n2", 163), ("n3", 97)])
    );
    assert_eq!(
        named(&v["deploy_map"], &all),
        expect_map(&[("n1", 4), ("n2", 1)])
    );

    let r = deploy(&t, "g", 3, 6, json!({"strategy": "global"}))
        .await
        .expect(201);
    assert_eq!(
        named(&r.json()["deploy_map"], &all),
        expect_map(&[("n1", 3)])
    );
    assert_eq!(
        usages(&t, &nodes[0].uuid).await["MEMORY_MB"],
        json!(15 + 18)
    );
    assert_eq!(usages(&t, &nodes[1].uuid).await["MEMORY_MB"], json!(20));
    // Now n1 is at 33/1500 = 0.022 (+0.004 = 0.026, a tie with n2's 0.026);
    // the next two go one to each whatever the tie-break.
    let r = deploy(
        &t,
        "g",
        2,
        6,
        json!({"strategy": "global", "dry_run": true}),
    )
    .await
    .expect(200);
    assert_eq!(
        named(&r.json()["deploy_map"], &all),
        expect_map(&[("n1", 1), ("n2", 1)])
    );
}
