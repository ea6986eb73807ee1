//! `GET /allocation_candidates/explain`: each reason with its numbers, the
//! same 400s as `/allocation_candidates`, and on random trees and queries
//! exactly the roots `/allocation_candidates` returns are the ones
//! explain says fit.

use crate::common::{uuid, TestApp};
use serde_json::{json, Value};
use std::collections::BTreeSet;

const MV: &str = "1.39";

async fn explain(t: &TestApp, query: &str) -> Value {
    t.get(&format!("/allocation_candidates/explain?{query}"), MV)
        .await
        .expect(200)
        .json()
}

/// The verdict of one root.
fn verdict<'a>(v: &'a Value, root: &str) -> &'a Value {
    v["providers"]
        .as_array()
        .and_then(|p| p.iter().find(|x| x["root_provider_uuid"] == root))
        .unwrap_or_else(|| panic!("no verdict for {root}: {v}"))
}

#[tokio::test]
async fn every_reason_with_its_numbers() {
    let t = TestApp::new().await;
    let (big, small, agg_only, child_parent) = (uuid(), uuid(), uuid(), uuid());
    t.create_rp_full("big", &big, None).await;
    t.set_inventories(
        &big,
        json!({"VCPU": {"total": 16}, "MEMORY_MB": {"total": 8192}}),
    )
    .await;
    t.create_trait("CUSTOM_FAST").await;
    t.set_traits(&big, &["CUSTOM_FAST", "HW_CPU_X86_AVX2"])
        .await;
    t.create_rp_full("small", &small, None).await;
    t.set_inventories(
        &small,
        json!({"VCPU": {"total": 2, "allocation_ratio": 1.0}, "MEMORY_MB": {"total": 1024}}),
    )
    .await;
    t.allocate(&uuid(), "p", "u", json!({&small: {"VCPU": 1}}))
        .await;
    t.create_rp_full("agg_only", &agg_only, None).await;
    t.set_inventories(
        &agg_only,
        json!({"VCPU": {"total": 16}, "MEMORY_MB": {"total": 8192}}),
    )
    .await;
    let agg = uuid();
    t.set_aggregates(&agg_only, &[&agg]).await;
    t.create_rp_full("parent", &child_parent, None).await;
    t.set_inventories(&child_parent, json!({"DISK_GB": {"total": 100}}))
        .await;

    let v = explain(&t, "resources=VCPU:4,MEMORY_MB:512").await;
    assert_eq!(verdict(&v, &big)["fits"], true);
    assert_eq!(verdict(&v, &big)["reason"], Value::Null);
    let s = verdict(&v, &small);
    assert_eq!(
        (s["fits"].clone(), s["reason"].clone(), s["group"].clone()),
        (json!(false), json!("capacity"), json!(""))
    );
    assert_eq!(
        s["detail"],
        json!({"resource_class": "VCPU", "provider": small, "requested": 4, "total": 2, "reserved": 0,
               "allocation_ratio": 1.0, "used": 1, "free": 1, "min_unit": 1, "max_unit": 2147483647, "step_size": 1})
    );
    assert_eq!(verdict(&v, &child_parent)["reason"], "no_inventory");
    assert_eq!(
        verdict(&v, &child_parent)["detail"]["resource_class"],
        "VCPU"
    );
    assert_eq!(
        v["summary"],
        json!({"fits": 2, "capacity": 1, "no_inventory": 1})
    );
    assert_eq!(v["complete"], true);

    let v = explain(&t, "resources=VCPU:1&required=CUSTOM_FAST").await;
    assert_eq!(verdict(&v, &agg_only)["reason"], "required_trait");
    assert_eq!(
        verdict(&v, &agg_only)["detail"],
        json!({"any_of": ["CUSTOM_FAST"]})
    );
    let v = explain(&t, "resources=VCPU:1&required=!CUSTOM_FAST").await;
    assert_eq!(verdict(&v, &big)["reason"], "forbidden_trait");
    let v = explain(&t, &format!("resources=VCPU:1&member_of={agg}")).await;
    assert_eq!(verdict(&v, &big)["reason"], "member_of");
    assert_eq!(verdict(&v, &agg_only)["fits"], true);
    let v = explain(&t, &format!("resources=VCPU:1&in_tree={agg_only}")).await;
    assert_eq!(verdict(&v, &big)["reason"], "in_tree");
    let v = explain(&t, "resources=VCPU:1&root_required=HW_CPU_X86_AVX2").await;
    assert_eq!(verdict(&v, &agg_only)["reason"], "root_required");
    assert_eq!(
        verdict(&v, &agg_only)["detail"]["missing"],
        json!(["HW_CPU_X86_AVX2"])
    );
    // Two groups that each fit `small` alone but not both on one provider
    // under isolate.
    let v = explain(
        &t,
        "resources1=VCPU:1&resources2=MEMORY_MB:1&group_policy=isolate",
    )
    .await;
    assert_eq!(verdict(&v, &small)["reason"], "combination");
    assert_eq!(verdict(&v, &small)["detail"]["group_policy_isolate"], true);
    // limit bounds the providers shown, not the search.
    let v = explain(&t, "resources=VCPU:1&limit=2").await;
    assert_eq!(v["providers"].as_array().map(Vec::len), Some(2));
    assert_eq!(v["summary"]["fits"], 3);
}

/// `same_subtree` (siblings have no ancestor among them) and a class
/// offered only by a sharing provider in an aggregate the tree is not in.
#[tokio::test]
async fn same_subtree_and_sharing_aggregates() {
    let t = TestApp::new().await;
    let (root, left, right) = (uuid(), uuid(), uuid());
    t.create_rp_full("root", &root, None).await;
    t.create_rp_full("left", &left, Some(&root)).await;
    t.create_rp_full("right", &right, Some(&root)).await;
    for (rp, tr) in [(&left, "CUSTOM_LEFT"), (&right, "CUSTOM_RIGHT")] {
        t.create_trait(tr).await;
        t.set_traits(rp, &[tr]).await;
        t.set_inventories(rp, json!({"VCPU": {"total": 4}})).await;
    }
    let q = "resources_A=VCPU:1&required_A=CUSTOM_LEFT&resources_B=VCPU:1&required_B=CUSTOM_RIGHT&group_policy=none";
    assert_eq!(verdict(&explain(&t, q).await, &root)["fits"], true);
    let v = explain(&t, &format!("{q}&same_subtree=_A,_B")).await;
    assert_eq!(verdict(&v, &root)["reason"], "combination");
    assert_eq!(verdict(&v, &root)["detail"]["same_subtree"], true);

    let (disk, agg) = (uuid(), uuid());
    t.create_rp_full("shared-disk", &disk, None).await;
    t.set_inventories(&disk, json!({"DISK_GB": {"total": 1000}}))
        .await;
    t.set_traits(&disk, &["MISC_SHARES_VIA_AGGREGATE"]).await;
    t.set_aggregates(&disk, &[&agg]).await;
    let v = explain(&t, "resources=VCPU:1,DISK_GB:10&group_policy=none").await;
    let r = verdict(&v, &root);
    assert_eq!(r["reason"], "sharing_aggregate", "{v}");
    assert_eq!(r["detail"]["sharing_providers"], json!([disk]));
    assert_eq!(r["detail"]["tree_aggregate_count"], 0);
    // Once the tree joins the aggregate, the shared disk serves it.
    t.set_aggregates(&root, &[&agg]).await;
    let v = explain(&t, "resources=VCPU:1,DISK_GB:10&group_policy=none").await;
    assert_eq!(verdict(&v, &root)["fits"], true, "{v}");
}

#[tokio::test]
async fn explain_validates_like_allocation_candidates() {
    let t = TestApp::new().await;
    for query in [
        "resources=VCPU:0",
        "resources=VCPU",
        "limit=0&resources=VCPU:1",
        "resources=VCPU:1&group_policy=bogus",
    ] {
        let a = t.get(&format!("/allocation_candidates?{query}"), MV).await;
        let e = t
            .get(&format!("/allocation_candidates/explain?{query}"), MV)
            .await;
        assert_eq!(a.status, e.status, "{query}");
        assert_eq!(a.status.as_u16(), 400, "{query}");
        let detail = |r: &crate::common::Resp| r.json()["errors"][0]["detail"].clone();
        assert_eq!(detail(&a), detail(&e), "{query}");
    }
    assert_eq!(
        t.get("/allocation_candidates/explain?resources=VCPU:1", "1.9")
            .await
            .status
            .as_u16(),
        404
    );
}

/// A small deterministic generator (no extra crate): the same trees every run.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
}

#[tokio::test]
async fn explain_agrees_with_allocation_candidates_on_random_trees() {
    let t = TestApp::new().await;
    let mut rng = Lcg(7);
    t.create_trait("CUSTOM_A").await;
    let agg = uuid();
    let mut roots = Vec::new();
    for i in 0..8 {
        let root = uuid();
        t.create_rp_full(&format!("r{i}"), &root, None).await;
        t.set_inventories(&root, json!({"VCPU": {"total": 1 + rng.next(6)}, "MEMORY_MB": {"total": 512 * (1 + rng.next(4))}}))
            .await;
        if rng.next(2) == 0 {
            t.set_traits(&root, &["CUSTOM_A"]).await;
        }
        if rng.next(2) == 0 {
            t.set_aggregates(&root, &[&agg]).await;
        }
        if rng.next(2) == 0 {
            let child = uuid();
            t.create_rp_full(&format!("r{i}c"), &child, Some(&root))
                .await;
            t.set_inventories(&child, json!({"DISK_GB": {"total": 10 + rng.next(90)}}))
                .await;
        }
        if rng.next(3) == 0 {
            t.allocate(&uuid(), "p", "u", json!({&root: {"VCPU": 1}}))
                .await;
        }
        roots.push(root);
    }
    for _ in 0..25 {
        let mut q = format!(
            "resources=VCPU:{},MEMORY_MB:{}",
            1 + rng.next(5),
            256 * (1 + rng.next(6))
        );
        match rng.next(5) {
            0 => q.push_str("&required=CUSTOM_A"),
            1 => q.push_str(&format!("&member_of={agg}")),
            2 => q.push_str(&format!("&resources1=DISK_GB:{}", 5 + rng.next(80))),
            3 => q.push_str("&required=!CUSTOM_A"),
            _ => {}
        }
        if q.contains("resources1") {
            q.push_str("&group_policy=none");
        }
        let c = t
            .get(&format!("/allocation_candidates?{q}"), MV)
            .await
            .expect(200)
            .json();
        let returned: BTreeSet<String> = c["provider_summaries"]
            .as_object()
            .map(|m| {
                m.iter()
                    .filter(|(_, s)| s["parent_provider_uuid"].is_null())
                    .filter(|(u, _)| roots.contains(u))
                    .map(|(u, _)| u.clone())
                    .collect()
            })
            .unwrap_or_default();
        let e = explain(&t, &q).await;
        let fits: BTreeSet<String> = e["providers"]
            .as_array()
            .map(|p| {
                p.iter()
                    .filter(|x| x["fits"] == true)
                    .map(|x| x["root_provider_uuid"].as_str().unwrap_or("").to_string())
                    .collect()
            })
            .unwrap_or_default();
        assert_eq!(returned, fits, "{q}");
        for p in e["providers"].as_array().into_iter().flatten() {
            assert_eq!(p["fits"] == true, p["reason"].is_null(), "{q}: {p}");
        }
    }
}
