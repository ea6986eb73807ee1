//! The candidate snapshot each process keeps stays exact: writes reach it
//! through the change log, and a log pruned past the cached snapshot
//! makes the next search load everything again. Admission rounds place on
//! the same cache, with the providers changed since read again.

use crate::common::{uuid, TestApp};
use serde_json::json;

const QUERY: &str = "/allocation_candidates?resources=VCPU:1";

async fn candidates(t: &TestApp) -> usize {
    t.get(QUERY, "1.29").await.expect(200).json()["allocation_requests"]
        .as_array()
        .map_or(0, Vec::len)
}

async fn claim(t: &TestApp, rp: &str, vcpu: i64) {
    t.put(
        &format!("/allocations/{}", uuid()),
        "1.29",
        json!({"allocations": {rp: {"resources": {"VCPU": vcpu}}},
               "project_id": "p", "user_id": "u", "consumer_generation": null}),
    )
    .await
    .expect(204);
}

/// A claim after the cache was loaded is seen by the next search, and so
/// is one whose change-log row was pruned before any search read it.
#[tokio::test]
async fn searches_see_claims_even_when_the_change_log_was_pruned() {
    let t = TestApp::new().await;
    let (a, b) = (t.create_rp("a").await, t.create_rp("b").await);
    t.set_inventories(&a, json!({"VCPU": {"total": 2}})).await;
    t.set_inventories(&b, json!({"VCPU": {"total": 2}})).await;
    assert_eq!(candidates(&t).await, 2);
    claim(&t, &a, 2).await;
    assert_eq!(candidates(&t).await, 1, "the claim reached the cache");
    // Several searches in a row, after the look at rest found the cache
    // behind: each is still exact.
    for _ in 0..10 {
        assert_eq!(candidates(&t).await, 1);
    }
    claim(&t, &b, 2).await;
    let mut conn = t.pool.acquire().await.unwrap();
    let pruned = placement::db::candidates::prune_change_log(&mut conn, 0.0)
        .await
        .unwrap();
    assert!(pruned > 0, "the claim's row was pruned");
    assert_eq!(candidates(&t).await, 0, "a full load saw the pruned claim");
}

/// An admission round places on the cache as refreshed before its
/// transaction opened; inside it, the providers changed since are read
/// again, into the round's own copy (the cache keeps its snapshot).
#[tokio::test]
async fn a_round_reads_again_the_providers_changed_after_its_cache() {
    use placement::candidates::speed::snapshot_cache::SnapshotCache;
    use placement::fairness::round_providers;
    let t = TestApp::new().await;
    let (a, b) = (t.create_rp("a").await, t.create_rp("b").await);
    t.set_inventories(&a, json!({"VCPU": {"total": 2}})).await;
    t.set_inventories(&b, json!({"VCPU": {"total": 2}})).await;
    let db = placement::db::Pool::new(t.pool.clone());
    let cache = SnapshotCache::default();
    let cached = round_providers::refresh(&db, &cache).await.unwrap();
    claim(&t, &a, 2).await;
    let mut tx = db.begin().await.unwrap();
    let snap = round_providers::as_of_now(&mut tx, cached).await.unwrap();
    let used = |snap: &placement::candidates::snapshot::Snapshot, rp: &str| {
        let i = snap.by_uuid(&rp.parse().unwrap()).unwrap();
        snap.nodes[i].stock.iter().map(|s| s.used).sum::<i64>()
    };
    assert_eq!(used(&snap, &a), 2, "the claim after the refresh is seen");
    assert_eq!(used(&snap, &b), 0);
    tx.rollback().await.unwrap();
    // The cache itself is untouched until its next refresh, which sees it.
    let again = round_providers::refresh(&db, &cache).await.unwrap();
    let mut tx = db.begin().await.unwrap();
    assert_eq!(
        used(
            &round_providers::as_of_now(&mut tx, again).await.unwrap(),
            &a
        ),
        2
    );
}

/// A search at rest brings the cache forward by one patch statement
/// (`covering`): the claimed provider is read again, the other keeps the
/// very node it had, and a new provider asks for a full load. Checked on
/// the cache itself: a patch statement that failed would send every search
/// down its own full read, and their answers, still exact, would not tell.
#[tokio::test]
async fn a_patch_reads_again_only_the_changed_providers() {
    use placement::candidates::speed::snapshot_cache::SnapshotCache;
    use placement::db::candidates::seen;
    let t = TestApp::new().await;
    let (a, b) = (t.create_rp("a").await, t.create_rp("b").await);
    t.set_inventories(&a, json!({"VCPU": {"total": 2}})).await;
    t.set_inventories(&b, json!({"VCPU": {"total": 2}})).await;
    let cache = SnapshotCache::default();
    let mut conn = t.pool.acquire().await.unwrap();
    let before = cache.current(&mut conn).await.unwrap();
    claim(&t, &a, 2).await;
    let now = seen(&mut conn).await.unwrap();
    let after = cache
        .covering(&mut conn, &now)
        .await
        .expect("the patch statement runs")
        .expect("a claim is patched in, not loaded again");
    let node = |snap: &placement::candidates::snapshot::Snapshot, rp: &str| {
        snap.nodes[snap.by_uuid(&rp.parse().unwrap()).unwrap()].clone()
    };
    let used =
        |n: &placement::candidates::snapshot::Node| n.stock.iter().map(|s| s.used).sum::<i64>();
    assert_eq!(used(&node(&before, &a)), 0);
    assert_eq!(
        used(&node(&after, &a)),
        2,
        "the claim is in the patched cache"
    );
    assert!(
        std::sync::Arc::ptr_eq(&node(&before, &b), &node(&after, &b)),
        "the provider nobody changed was not read again"
    );
    t.create_rp("c").await;
    let now = seen(&mut conn).await.unwrap();
    assert!(
        cache.covering(&mut conn, &now).await.unwrap().is_none(),
        "a new provider needs a full load"
    );
}

/// A window in which only allocations changed is brought forward by the
/// units the change log records (a claim, a claim and its removal), and
/// the next window, with an inventory change, by reading the changed
/// providers again. Each checked on the log and on the cache.
#[tokio::test]
async fn allocations_alone_reach_the_cache_as_units_from_the_log() {
    use placement::candidates::speed::snapshot_cache::SnapshotCache;
    use placement::db::candidates::{seen, usage_since, UsageDelta};
    let t = TestApp::new().await;
    let (a, b) = (t.create_rp("a").await, t.create_rp("b").await);
    t.set_inventories(&a, json!({"VCPU": {"total": 4}})).await;
    t.set_inventories(&b, json!({"VCPU": {"total": 4}})).await;
    let cache = SnapshotCache::default();
    let mut conn = t.pool.acquire().await.unwrap();
    let before = cache.current(&mut conn).await.unwrap();
    let since = seen(&mut conn).await.unwrap().snapshot;
    claim(&t, &a, 2).await;
    let gone = uuid();
    t.put(
        &format!("/allocations/{gone}"),
        "1.29",
        json!({"allocations": {&b: {"resources": {"VCPU": 3}}},
               "project_id": "p", "user_id": "u", "consumer_generation": null}),
    )
    .await
    .expect(204);
    t.delete(&format!("/allocations/{gone}"), "1.29")
        .await
        .expect(204);
    let usage = usage_since(&mut conn, &since).await.unwrap();
    assert!(!usage.other, "allocations alone changed");
    let id = |rp: &str| before.nodes[before.by_uuid(&rp.parse().unwrap()).unwrap()].id;
    let vcpu = before.nodes[0].stock[0].class;
    let delta = |rp: &str, units| UsageDelta {
        provider_id: id(rp),
        class_id: vcpu,
        units,
    };
    let mut expected = vec![delta(&a, 2), delta(&b, 0)];
    expected.sort_by_key(|d| d.provider_id);
    assert_eq!(usage.deltas, expected);
    let used = |snap: &placement::candidates::snapshot::Snapshot, rp: &str| {
        snap.nodes[snap.by_uuid(&rp.parse().unwrap()).unwrap()].stock[0].used
    };
    let now = seen(&mut conn).await.unwrap();
    let after = cache.covering(&mut conn, &now).await.unwrap().unwrap();
    assert_eq!((used(&after, &a), used(&after, &b)), (2, 0));
    assert_eq!(cache.usage_patches(), 1, "brought forward by units");
    // An inventory change in the next window: the provider is read again.
    let since = now.snapshot;
    t.set_inventories(&b, json!({"VCPU": {"total": 8}})).await;
    claim(&t, &b, 5).await;
    assert!(usage_since(&mut conn, &since).await.unwrap().other);
    let now = seen(&mut conn).await.unwrap();
    let after = cache.covering(&mut conn, &now).await.unwrap().unwrap();
    let i = after.by_uuid(&b.parse().unwrap()).unwrap();
    assert_eq!(
        (after.nodes[i].stock[0].inventory.total, used(&after, &b)),
        (8, 5)
    );
    assert_eq!(used(&after, &a), 2);
    assert_eq!(cache.usage_patches(), 1, "read again, not by units");
}
