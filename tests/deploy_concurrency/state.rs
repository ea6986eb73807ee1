//! What the races check afterwards: the instances each success reported,
//! and the invariants of cores, inventories, deployments and allocations.

use placement_testkit::cluster::Cluster;
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};

/// One answer: status and body (Null when empty or not JSON).
pub async fn answer(r: reqwest::Response) -> (u16, Value) {
    let status = r.status().as_u16();
    let text = r.text().await.unwrap_or_default();
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

/// What a 201 said about one instance.
#[derive(Debug, Clone, PartialEq)]
pub struct Created {
    pub app: String,
    pub node: String,
    pub cpu: f64,
    pub memory_mb: i64,
    pub cpu_map: BTreeMap<String, i64>,
}

pub fn cpu_map(v: &Value) -> BTreeMap<String, i64> {
    v.as_object()
        .unwrap_or_else(|| panic!("cpu_map not a map: {v}"))
        .iter()
        .map(|(k, s)| (k.clone(), s.as_i64().unwrap()))
        .collect()
}

/// Records a 201's instances; checks they add up to the requested count.
pub fn record(
    created: &mut BTreeMap<String, Created>,
    (app, cpu, memory_mb): (&str, f64, i64),
    count: i64,
    body: &Value,
) {
    let mut n = 0;
    for (node, list) in body["instances"].as_object().unwrap() {
        let list = list.as_array().unwrap();
        assert_eq!(
            body["deploy_map"][node].as_i64(),
            Some(list.len() as i64),
            "{body}"
        );
        for i in list {
            assert_eq!(i["resource_provider_uuid"], json!(node));
            let c = i["consumer_uuid"].as_str().unwrap().to_string();
            let prev = created.insert(
                c.clone(),
                Created {
                    app: app.to_string(),
                    node: node.clone(),
                    cpu,
                    memory_mb,
                    cpu_map: cpu_map(&i["cpu_map"]),
                },
            );
            assert!(prev.is_none(), "consumer {c} reported twice");
            n += 1;
        }
    }
    assert_eq!(
        n, count,
        "a 201 must create exactly count instances: {body}"
    );
}

/// The invariants after a race: per-core and per-inventory limits, Placement
/// usage equal to bound shares, and every live instance as last reported.
pub async fn check_state(c: &Cluster, nodes: &[String], live: &BTreeMap<String, Created>) {
    check_state_with(c, nodes, &[], live).await;
}

/// Whole VCPUs an instance holds on a node without a topology.
fn vcpus(cpu: f64) -> i64 {
    cpu.ceil() as i64
}

/// Nodes without a topology: VCPU and memory within capacity and equal to
/// what the live instances there hold.
async fn check_placement_nodes(c: &Cluster, nodes: &[String], live: &BTreeMap<String, Created>) {
    for s in 0..c.servers.len() {
        for rp in nodes {
            let inv = c
                .json(s, &format!("/resource_providers/{rp}/inventories"))
                .await;
            let usages = c.json(s, &format!("/resource_providers/{rp}/usages")).await;
            let here = || live.values().filter(|i| i.node == *rp);
            let want = [
                ("VCPU", here().map(|i| vcpus(i.cpu)).sum::<i64>()),
                ("MEMORY_MB", here().map(|i| i.memory_mb).sum::<i64>()),
            ];
            for (rc, held) in want {
                let total = inv["inventories"][rc]["total"].as_i64().unwrap();
                let used = usages["usages"][rc].as_i64().unwrap_or(0);
                assert!(used <= total, "{rp} {rc}: {used} > {total}");
                assert_eq!(used, held, "{rp} {rc} on server {s}");
            }
        }
    }
}

/// [`check_state`] over nodes with a topology and nodes without one.
pub async fn check_state_with(
    c: &Cluster,
    nodes: &[String],
    placement_nodes: &[String],
    live: &BTreeMap<String, Created>,
) {
    check_placement_nodes(c, placement_nodes, live).await;
    // Cores and inventories, seen from every server.
    for s in 0..c.servers.len() {
        for rp in nodes {
            let top = c
                .json(s, &format!("/resource_providers/{rp}/cpu_topology"))
                .await;
            let base = top["share_base"].as_i64().unwrap();
            let mut bound = 0;
            let mut expected: BTreeMap<String, i64> = BTreeMap::new();
            for inst in live.values().filter(|i| i.node == *rp) {
                for (core, s) in &inst.cpu_map {
                    *expected.entry(core.clone()).or_default() += s;
                }
            }
            for core in top["cores"].as_array().unwrap() {
                let id = core["id"].as_str().unwrap();
                let used = core["used_shares"].as_i64().unwrap();
                assert!(
                    (0..=base).contains(&used),
                    "core {id} of {rp}: {used} shares bound (share base {base})"
                );
                assert_eq!(core["free_shares"].as_i64().unwrap(), base - used);
                assert_eq!(
                    used,
                    expected.get(id).copied().unwrap_or(0),
                    "core {id} of {rp}: bound shares differ from the instances' maps"
                );
                bound += used;
            }
            let inv = c
                .json(s, &format!("/resource_providers/{rp}/inventories"))
                .await;
            let usages = c.json(s, &format!("/resource_providers/{rp}/usages")).await;
            for rc in ["MEMORY_MB", "CUSTOM_CPU_SHARES"] {
                let i = &inv["inventories"][rc];
                let cap = (i["total"].as_f64().unwrap() - i["reserved"].as_f64().unwrap())
                    * i["allocation_ratio"].as_f64().unwrap();
                let used = usages["usages"][rc].as_f64().unwrap_or(0.0);
                assert!(used <= cap, "{rp} {rc}: usage {used} > capacity {cap}");
            }
            assert_eq!(
                usages["usages"]["CUSTOM_CPU_SHARES"].as_i64().unwrap_or(0),
                bound,
                "{rp}: Placement usage differs from the bound shares"
            );
            let mem: i64 = live
                .values()
                .filter(|i| i.node == *rp)
                .map(|i| i.memory_mb)
                .sum();
            assert_eq!(usages["usages"]["MEMORY_MB"].as_i64().unwrap_or(0), mem);
        }
    }

    // Every live instance in GET /deployments/{app}, nothing more.
    let apps: BTreeSet<&str> = live
        .values()
        .map(|i| i.app.as_str())
        .chain(["alpha", "beta", "gamma"])
        .collect();
    for app in apps {
        for s in 0..c.servers.len() {
            let d = c.json(s, &format!("/deployments/{app}")).await;
            let mut shown = BTreeMap::new();
            for (node, entry) in d["nodes"].as_object().unwrap() {
                let list = entry["instances"].as_array().unwrap();
                assert_eq!(entry["count"].as_i64(), Some(list.len() as i64));
                for i in list {
                    shown.insert(
                        i["consumer_uuid"].as_str().unwrap().to_string(),
                        Created {
                            app: app.to_string(),
                            node: node.clone(),
                            cpu: i["cpu"].as_f64().unwrap(),
                            memory_mb: i["memory_mb"].as_i64().unwrap(),
                            cpu_map: cpu_map(&i["cpu_map"]),
                        },
                    );
                }
            }
            let want: BTreeMap<String, Created> = live
                .iter()
                .filter(|(_, i)| i.app == app)
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            assert_eq!(
                d["count"].as_i64(),
                Some(want.len() as i64),
                "GET /deployments/{app} count"
            );
            assert_eq!(shown, want, "GET /deployments/{app} on server {s}");
        }
    }

    // Every live instance's own allocations.
    for (i, (consumer, inst)) in live.iter().enumerate() {
        let a = c.json(i, &format!("/allocations/{consumer}")).await;
        let allocs = a["allocations"].as_object().unwrap();
        assert_eq!(allocs.len(), 1, "{consumer}: {a}");
        let shares: i64 = inst.cpu_map.values().sum();
        let mut want = json!({"MEMORY_MB": inst.memory_mb});
        if shares > 0 {
            want["CUSTOM_CPU_SHARES"] = json!(shares);
        }
        if placement_nodes.contains(&inst.node) && vcpus(inst.cpu) > 0 {
            want["VCPU"] = json!(vcpus(inst.cpu));
        }
        assert_eq!(allocs[&inst.node]["resources"], want, "{consumer}");
    }
}
