//! `placement agent` against a real server: the seed example of
//! Placement's nested model (`tests/data/agent/seed-node`, copies of `/sys`
//! and `/proc`) published by `--once` gives exactly its provider tree, and
//! a second run changes no generation.

use placement_testkit::{cluster, common};
use serde_json::Value;
use std::process::Command;

async fn get(client: &reqwest::Client, base: &str, path: &str) -> Value {
    client
        .get(format!("{base}{path}"))
        .header("x-auth-token", "admin")
        .header("openstack-api-version", "placement 1.39")
        .send()
        .await
        .expect("GET")
        .json()
        .await
        .expect("JSON")
}

fn agent_once(base: &str) -> std::process::Output {
    agent_once_with(base, &[])
}

/// Runs the agent once with `flags` (it must succeed), and the tree then:
/// the providers and each one's parent by name.
async fn published(
    client: &reqwest::Client,
    base: &str,
    flags: &[&str],
) -> Vec<(String, i64, String, Value, Value)> {
    let out = agent_once_with(base, flags);
    assert!(
        out.status.success(),
        "the agent: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    tree(client, base).await
}

fn shape(t: &[(String, i64, String, Value, Value)]) -> Vec<(&str, &str)> {
    t.iter().map(|p| (p.0.as_str(), p.2.as_str())).collect()
}

fn agent_once_with(base: &str, extra: &[&str]) -> std::process::Output {
    let seed = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/agent/seed-node");
    Command::new(placement_testkit::placement_bin())
        .args([
            "agent",
            "--once",
            "--provider-name",
            "seed",
            "--placement-url",
            base,
        ])
        .args(extra)
        .arg("--sysfs-root")
        .arg(seed.join("sys"))
        .arg("--procfs-root")
        .arg(seed.join("proc"))
        .env("PLACEMENT_TOKEN", "admin")
        .env_remove("PLACEMENT_CONFIG_FILE")
        .output()
        .expect("run the agent")
}

/// name → (generation, parent name, inventories, traits) of every provider.
async fn tree(client: &reqwest::Client, base: &str) -> Vec<(String, i64, String, Value, Value)> {
    let list = get(client, base, "/resource_providers").await;
    let providers = list["resource_providers"]
        .as_array()
        .expect("providers")
        .clone();
    let name_of = |uuid: &Value| {
        providers
            .iter()
            .find(|p| &p["uuid"] == uuid)
            .map_or(String::new(), |p| {
                p["name"].as_str().unwrap_or("").to_string()
            })
    };
    let mut out = Vec::new();
    for p in &providers {
        let uuid = p["uuid"].as_str().unwrap();
        let inv = get(
            client,
            base,
            &format!("/resource_providers/{uuid}/inventories"),
        )
        .await;
        let traits = get(client, base, &format!("/resource_providers/{uuid}/traits")).await;
        out.push((
            p["name"].as_str().unwrap().to_string(),
            p["generation"].as_i64().unwrap(),
            name_of(&p["parent_provider_uuid"]),
            inv["inventories"].clone(),
            traits["traits"].clone(),
        ));
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

#[tokio::test]
async fn the_seed_example_is_published_as_its_tree_and_again_changes_nothing() {
    let (admin_url, db) = common::fresh_database().await;
    let server =
        cluster::start_server_with(&common::url_with_db(&admin_url, &db), "agent", &[]).await;
    let client = reqwest::Client::new();
    let first = published(&client, &server.base, &[]).await;
    assert_eq!(
        shape(&first),
        [
            ("seed", ""),
            ("seed_0000:3b:00.0", "seed_NUMA0"),
            ("seed_0000:af:00.0", "seed_NUMA1"),
            ("seed_NUMA0", "seed"),
            ("seed_NUMA1", "seed"),
        ],
        "{first:?}"
    );
    let total = |class: &str| -> i64 {
        first
            .iter()
            .filter_map(|p| p.3[class]["total"].as_i64())
            .sum()
    };
    assert_eq!(total("VCPU"), 16);
    assert_eq!(total("MEMORY_MB"), 32_768);
    assert_eq!(first[1].3["SRIOV_NET_VF"]["total"], 8);
    assert_eq!(first[2].3["SRIOV_NET_VF"]["total"], 2);
    let root_traits = first[0].4.as_array().unwrap();
    assert!(
        root_traits.iter().any(|t| t == "HW_CPU_X86_AVX2"),
        "{root_traits:?}"
    );
    // Again: nothing to write, no generation moves.
    assert_eq!(first, published(&client, &server.base, &[]).await);
    drop(server);
    common::drop_database(&admin_url, &db);
}

/// The flat layout for the deployment engine: the CPUs and memory on the
/// node, its CPU topology (each CPU a core in its cell, each cell's
/// memory) and a volume of the filesystem a path is on; again, nothing
/// moves.
#[tokio::test]
async fn the_flat_node_carries_its_topology_and_volumes_and_again_changes_nothing() {
    let (admin_url, db) = common::fresh_database().await;
    let server =
        cluster::start_server_with(&common::url_with_db(&admin_url, &db), "agent-flat", &[]).await;
    let client = reqwest::Client::new();
    let volume = std::env::temp_dir();
    let volume = volume.to_str().unwrap();
    let flags = [
        "--tree-layout",
        "flat",
        "--cpu-topology",
        "--volume",
        volume,
    ];
    let first = published(&client, &server.base, &flags).await;
    assert_eq!(
        shape(&first),
        [
            ("seed", ""),
            ("seed_0000:3b:00.0", "seed"),
            ("seed_0000:af:00.0", "seed")
        ]
    );
    assert_eq!(first[0].3["VCPU"]["total"], 16);
    assert_eq!(first[0].3["MEMORY_MB"]["total"], 32_768);
    let list = get(&client, &server.base, "/resource_providers?name=seed").await;
    let node = list["resource_providers"][0]["uuid"]
        .as_str()
        .unwrap()
        .to_string();
    let topology = get(
        &client,
        &server.base,
        &format!("/resource_providers/{node}/cpu_topology"),
    )
    .await;
    let cores = topology["cores"].as_array().unwrap();
    assert_eq!(cores.len(), 16, "{topology}");
    let in_cell = |n: &str| cores.iter().filter(|c| c["numa_node"] == n).count();
    assert_eq!((in_cell("0"), in_cell("1")), (8, 8), "{topology}");
    assert_eq!(
        topology["numa_memory_mb"],
        serde_json::json!({"0": 16384, "1": 16384})
    );
    let volumes = get(
        &client,
        &server.base,
        &format!("/resource_providers/{node}/volumes"),
    )
    .await;
    assert!(
        volumes["volumes"][volume]["size"].as_i64().unwrap() > 0,
        "{volumes}"
    );
    assert_eq!(first, published(&client, &server.base, &flags).await);
    let nested = agent_once_with(&server.base, &["--cpu-topology"]);
    assert_eq!(nested.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&nested.stderr).contains("--tree-layout flat"));
    drop(server);
    common::drop_database(&admin_url, &db);
}

/// A service that cannot be reached is a clear error and exit 1, never a
/// panic; a machine copy without its files, likewise.
#[tokio::test]
async fn an_unreachable_service_or_an_unreadable_machine_is_a_clear_error() {
    let port = cluster::free_port();
    let out = agent_once(&format!("http://127.0.0.1:{port}"));
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("placement agent:") && err.contains("127.0.0.1"),
        "{err}"
    );
    let out = Command::new(placement_testkit::placement_bin())
        .args([
            "agent",
            "--once",
            "--provider-name",
            "x",
            "--sysfs-root",
            "/nonexistent",
            "--procfs-root",
            "/nonexistent",
        ])
        .env("PLACEMENT_TOKEN", "admin")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("/nonexistent/devices/system/cpu/online"),
        "{err}"
    );
}
