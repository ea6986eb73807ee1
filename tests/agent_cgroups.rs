//! `placement agent --colocation` on this machine's real cgroups (v1),
//! with real processes and a real server: the best-effort CPU limit
//! follows production load, batch work held far under its requests is
//! evicted by CPU satisfaction, memory past its watermark kills batch work
//! within a second and never production, with the service down too (the
//! record arrives once it is back, across an agent restart), and the
//! batch inventory in the service follows the machine's real load.
//!
//! Where the machine does not allow cgroups (not root, no v1
//! controllers) each test says NOT RUN and why on stderr, and the test
//! command's summary says so (`testkit::cgroups::check_or_say`).

use placement_testkit::cgroups::{self, AgentProcess, TestCgroups, BUSY};
use placement_testkit::cluster::{start_on_port, Cluster};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// One at a time: each test loads the machine's CPUs and memory.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

const PROD: &str = "7a1e9c3b-0d24-4b6e-8f15-3e2d6c9b8a02";
const BATCH: &str = "b83d2f6a-91c4-4e7d-a5b0-6f4c1e2d3b03";

/// A server, the test's cgroups, the agent, and the node it published.
struct Node {
    cluster: Cluster,
    cgroups: TestCgroups,
    agent: AgentProcess,
    rp: String,
    name: String,
}

/// Polls `f` every 20 ms until it gives Some, for at most `within`.
async fn until<T, F: std::future::Future<Output = Option<T>>>(
    within: Duration,
    mut f: impl FnMut() -> F,
) -> Option<T> {
    let deadline = Instant::now() + within;
    loop {
        if let Some(v) = f().await {
            return Some(v);
        }
        if Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn get(c: &Cluster, path: &str) -> Option<Value> {
    let r = c.request(0, reqwest::Method::GET, path).send().await.ok()?;
    (r.status() == 200).then_some(())?;
    r.json().await.ok()
}

/// The node's batch inventory total of `class`.
async fn batch_total(n: &Node, class: &str) -> Option<i64> {
    let inv = get(
        &n.cluster,
        &format!("/resource_providers/{}/inventories", n.rp),
    )
    .await?;
    inv["inventories"][class]["total"].as_i64()
}

/// A server with `policy` as the cluster's colocation policy, and the
/// agent started on the test's cgroups; waits for the agent's tree, its
/// first report (the batch inventory) and the policy in its state.
async fn node(name: &str, policy: Value) -> Node {
    let cluster = Cluster::with_servers(name, "1.39", 1).await;
    let r = cluster
        .request(0, reqwest::Method::PUT, "/colocation_policy")
        .json(&policy)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    let cgroups = TestCgroups::new(name);
    let agent = AgentProcess::start(
        &cluster.servers[0].base,
        name,
        &cgroups,
        &["--report-interval", "1"],
    );
    let rp = until(Duration::from_secs(20), || async {
        let list = get(&cluster, &format!("/resource_providers?name={name}")).await?;
        list["resource_providers"][0]["uuid"]
            .as_str()
            .map(str::to_string)
    })
    .await
    .unwrap_or_else(|| panic!("the agent published no node:\n{}", agent.log()));
    let mut n = Node {
        cluster,
        cgroups,
        agent,
        rp,
        name: name.to_string(),
    };
    let reported = until(Duration::from_secs(20), || {
        batch_total(&n, "BATCH_MEMORY_MB")
    })
    .await;
    assert!(reported.is_some(), "no usage report:\n{}", n.agent.log());
    let agent = &n.agent;
    let kept = until(Duration::from_secs(20), || async {
        let held: Value = serde_json::from_str(&agent.state("policy.json")).ok()?;
        let fields = policy.as_object()?;
        fields.iter().all(|(k, v)| &held[k] == v).then_some(())
    })
    .await;
    assert!(
        kept.is_some(),
        "the agent never took the policy:\n{}",
        agent.log()
    );
    n.name = name.to_string();
    n
}

/// Allocates for a consumer on the node (a batch one gets its priority
/// first).
async fn place(n: &Node, consumer: &str, batch: bool, resources: Value) {
    if batch {
        let r = n
            .cluster
            .request(
                0,
                reqwest::Method::PUT,
                &format!("/consumers/{consumer}/priority"),
            )
            .json(&json!({"priority_class": "batch", "priority": 5500}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    }
    let body = json!({"allocations": {n.rp.clone(): {"resources": resources}},
        "project_id": "p", "user_id": "u", "consumer_generation": null, "consumer_type": "INSTANCE"});
    let r = n
        .cluster
        .request(0, reqwest::Method::PUT, &format!("/allocations/{consumer}"))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204, "{}", r.text().await.unwrap());
}

fn be_quota(n: &Node) -> i64 {
    let path = n.cgroups.dir("cpu").join("be/cpu.cfs_quota_us");
    std::fs::read_to_string(&path)
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_batch_process_is_held_under_the_limit_while_production_is_busy() {
    if !cgroups::check_or_say("suppression") {
        return;
    }
    let _alone = ONE_AT_A_TIME.lock().await;
    let mut n = node("agent-suppress", json!({"cpuSuppressPolicy": "cfsQuota"})).await;
    let batch = n.cgroups.worker("be", BATCH, BUSY);
    n.cgroups.wait_ready(batch);
    tokio::time::sleep(Duration::from_secs(3)).await;
    let quiet = be_quota(&n);
    let prod = n.cgroups.worker("prod", PROD, BUSY);
    let rose = Instant::now();
    // With production on one of the two CPUs, best-effort work may have
    // 65 % of 2,000 milli less that 1,000 and the system's share: 300 at most.
    let held = until(Duration::from_secs(2), || async {
        (be_quota(&n) <= 30_000).then_some(())
    })
    .await;
    let took = rose.elapsed();
    assert!(
        held.is_some(),
        "quota {} after {took:?} (quiet: {quiet}):\n{}",
        be_quota(&n),
        n.agent.log()
    );
    let limit_milli = u64::try_from(be_quota(&n) / 100).unwrap();
    let used = n.cgroups.cpu_milli("be", BATCH, Duration::from_secs(2));
    assert!(
        used <= limit_milli + 100,
        "batch used {used} milli under a limit of {limit_milli}"
    );
    n.cgroups.child(prod).kill().unwrap();
    let fell = Instant::now();
    let released = until(Duration::from_secs(3), || async {
        (be_quota(&n) >= 60_000).then_some(())
    })
    .await;
    assert!(
        released.is_some(),
        "quota {} after production stopped:\n{}",
        be_quota(&n),
        n.agent.log()
    );
    eprintln!(
        "suppression: quiet quota {quiet} µs, held to {limit_milli} milli {took:?} after production rose \
         (batch used {used}), released {:?} after it fell",
        fell.elapsed()
    );
}

/// Grows a batch worker past the memory watermark; when the test's own
/// reading of the parent first crossed `threshold_mb`, and when the
/// worker died.
async fn grow_until_killed(n: &mut Node, threshold_mb: u64) -> (Instant, Instant) {
    let batch = n.cgroups.worker("be", BATCH, &cgroups::growing(8, 20, 420));
    n.cgroups.wait_ready(batch);
    let mut crossed = None;
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if crossed.is_none() && n.cgroups.working_set_mb() >= threshold_mb {
            crossed = Some(Instant::now());
        }
        if n.cgroups.child(batch).try_wait().unwrap().is_some() {
            let died = Instant::now();
            let crossed =
                crossed.unwrap_or_else(|| panic!("killed below the watermark:\n{}", n.agent.log()));
            return (crossed, died);
        }
        assert!(
            Instant::now() < deadline,
            "never killed:\n{}",
            n.agent.log()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Grows batch work past the watermark (60 % of 512 MB): it must die
/// within a second of the crossing, production beside it untouched.
async fn evicted_in_time(n: &mut Node, prod: usize, when: &str) -> Duration {
    let (crossed, died) = grow_until_killed(n, 307).await;
    let took = died - crossed;
    assert!(
        took < Duration::from_secs(1),
        "killed {took:?} after the watermark, {when}"
    );
    let untouched = n.cgroups.child(prod).try_wait().unwrap().is_none();
    assert!(untouched, "production was touched, {when}");
    took
}

/// The node's memory test: a parent of 512 MB, the watermark at 60 %
/// (307 MB), production holding 100 MB, both consumers allocated.
async fn memory_node(name: &str) -> (Node, usize) {
    let mut n = node(name, json!({"memoryEvictThresholdPercent": 60})).await;
    n.cgroups.limit_memory_mb(512);
    let prod = n.cgroups.worker("prod", PROD, &cgroups::holding(100));
    n.cgroups.wait_ready(prod);
    place(&n, PROD, false, json!({"VCPU": 1, "MEMORY_MB": 128})).await;
    place(
        &n,
        BATCH,
        true,
        json!({"BATCH_VCPU_MILLI": 500, "BATCH_MEMORY_MB": 128}),
    )
    .await;
    (n, prod)
}

/// Whether the service holds `BATCH` as evicted (pending release).
async fn recorded(n: &Node) -> Option<()> {
    let advice = get(
        &n.cluster,
        &format!("/resource_providers/{}/eviction_candidates", n.rp),
    )
    .await?;
    let pending = advice["pending_release"].as_array()?;
    pending.iter().any(|u| u == BATCH).then_some(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_past_its_watermark_kills_batch_work_within_a_second_and_never_production() {
    if !cgroups::check_or_say("memory eviction") {
        return;
    }
    let _alone = ONE_AT_A_TIME.lock().await;
    let (mut n, prod) = memory_node("agent-memory").await;
    let took = evicted_in_time(&mut n, prod, "service up").await;
    let r = until(Duration::from_secs(20), || recorded(&n)).await;
    assert!(
        r.is_some(),
        "the eviction never reached the service:\n{}",
        n.agent.log()
    );
    assert!(n.agent.log().contains("best-effort consumer evicted"));
    eprintln!("memory eviction: killed {took:?} after the watermark was crossed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_service_down_memory_is_still_defended_and_the_record_arrives_later() {
    if !cgroups::check_or_say("memory eviction, service down") {
        return;
    }
    let _alone = ONE_AT_A_TIME.lock().await;
    let (mut n, prod) = memory_node("agent-offline").await;
    // The agent has read the consumers before the service goes.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let port = n.cluster.servers[0].port;
    n.cluster.servers.clear();
    let took = evicted_in_time(&mut n, prod, "service down").await;
    let agent = &n.agent;
    let kept = until(Duration::from_secs(5), || async {
        agent.state("evictions.json").contains(BATCH).then_some(())
    })
    .await;
    assert!(
        kept.is_some(),
        "the eviction was not kept on disk:\n{}",
        agent.log()
    );
    // A restart of the agent meanwhile loses nothing.
    let base = format!("http://127.0.0.1:{port}");
    n.agent.restart(&base, &n.name, &n.cgroups);
    let url = n.cluster.database_url();
    n.cluster
        .servers
        .push(start_on_port(&url, &n.name, &[], port).await);
    let r = until(Duration::from_secs(60), || recorded(&n)).await;
    assert!(r.is_some(), "the record never arrived:\n{}", n.agent.log());
    let agent = &n.agent;
    let emptied = until(Duration::from_secs(10), || async {
        (agent.state("evictions.json") == "[]").then_some(())
    })
    .await;
    assert!(
        emptied.is_some(),
        "still kept: {}",
        agent.state("evictions.json")
    );
    eprintln!("memory eviction with the service down: killed {took:?} after the watermark; recorded once it was back");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_batch_inventory_follows_the_machines_real_load() {
    if !cgroups::check_or_say("batch inventory") {
        return;
    }
    let _alone = ONE_AT_A_TIME.lock().await;
    let mut n = node("agent-inventory", json!({})).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let quiet = batch_total(&n, "BATCH_VCPU_MILLI").await.unwrap();
    assert!(
        quiet >= 600,
        "the machine is too busy for this test: batch CPU {quiet} milli when quiet"
    );
    let prod = n.cgroups.worker("prod", PROD, BUSY);
    place(&n, PROD, false, json!({"VCPU": 1, "MEMORY_MB": 128})).await;
    let busy = until(Duration::from_secs(15), || async {
        batch_total(&n, "BATCH_VCPU_MILLI")
            .await
            .filter(|b| *b * 10 <= quiet * 6)
    })
    .await;
    assert!(
        busy.is_some(),
        "batch CPU did not fall from {quiet}:\n{}",
        n.agent.log()
    );
    n.cgroups.child(prod).kill().unwrap();
    let back = until(Duration::from_secs(20), || async {
        batch_total(&n, "BATCH_VCPU_MILLI")
            .await
            .filter(|b| *b * 10 >= quiet * 8)
    })
    .await;
    assert!(
        back.is_some(),
        "batch CPU did not come back to {quiet}:\n{}",
        n.agent.log()
    );
    eprintln!(
        "batch inventory: {quiet} milli quiet, {} with production busy, {} after",
        busy.unwrap(),
        back.unwrap()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn beside_nova_the_agent_reports_and_never_writes_the_tree() {
    if !cgroups::check_or_say("beside nova") {
        return;
    }
    let _alone = ONE_AT_A_TIME.lock().await;
    let name = "agent-beside-nova";
    let cluster = Cluster::with_servers(name, "1.39", 1).await;
    // The compute node as nova-compute made it.
    let inventories = json!({"VCPU": {"total": 2}, "MEMORY_MB": {"total": 8192, "reserved": 512}});
    let rp = cluster.provider(name, inventories).await;
    let traits_path = format!("/resource_providers/{rp}/traits");
    let r = cluster
        .request(0, reqwest::Method::PUT, "/traits/CUSTOM_NOVA_OWNED")
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success());
    let r = cluster
        .request(0, reqwest::Method::PUT, &traits_path)
        .json(&json!({"resource_provider_generation": 1, "traits": ["CUSTOM_NOVA_OWNED"]}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    let cgroups = TestCgroups::new(name);
    let flags = ["--beside-nova", "--report-interval", "1"];
    let agent = AgentProcess::start(&cluster.servers[0].base, name, &cgroups, &flags);
    let inv_path = format!("/resource_providers/{rp}/inventories");
    let reported = until(Duration::from_secs(20), || async {
        let inv = get(&cluster, &inv_path).await?;
        inv["inventories"]["BATCH_VCPU_MILLI"]["total"].as_i64()
    })
    .await;
    assert!(reported.is_some(), "no usage report:\n{}", agent.log());
    let inv = get(&cluster, &inv_path).await.unwrap();
    assert_eq!(inv["inventories"]["VCPU"]["total"], 2, "{inv}");
    assert_eq!(inv["inventories"]["MEMORY_MB"]["total"], 8192, "{inv}");
    assert_eq!(inv["inventories"]["MEMORY_MB"]["reserved"], 512, "{inv}");
    let traits = get(&cluster, &traits_path).await.unwrap();
    assert_eq!(traits["traits"], json!(["CUSTOM_NOVA_OWNED"]), "{traits}");
    let all = get(&cluster, "/resource_providers").await.unwrap();
    assert_eq!(
        all["resource_providers"].as_array().unwrap().len(),
        1,
        "{all}"
    );
    assert!(
        !agent.log().contains("provider tree synced"),
        "{}",
        agent.log()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batch_work_starved_of_its_requests_is_evicted_by_satisfaction() {
    if !cgroups::check_or_say("CPU satisfaction") {
        return;
    }
    let _alone = ONE_AT_A_TIME.lock().await;
    let policy = json!({"cpuSuppressPolicy": "cfsQuota",
        "cpuEvictBESatisfactionLowerPercent": 40, "cpuEvictBESatisfactionUpperPercent": 60});
    let mut n = node("agent-satisfaction", policy).await;
    place(
        &n,
        BATCH,
        true,
        json!({"BATCH_VCPU_MILLI": 800, "BATCH_MEMORY_MB": 64}),
    )
    .await;
    let batch = n.cgroups.worker("be", BATCH, BUSY);
    n.cgroups.wait_ready(batch);
    // Quiet: best-effort work may use ~1,200 of its 800 requested.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        n.cgroups.child(batch).try_wait().unwrap().is_none(),
        "evicted while satisfied:\n{}",
        n.agent.log()
    );
    let prod = n.cgroups.worker("prod", PROD, BUSY);
    let rose = Instant::now();
    // Production on a CPU holds best-effort work to ~300 of its 800 (37 %),
    // at its limit: under the lower watermark (40 %), it goes.
    while n.cgroups.child(batch).try_wait().unwrap().is_none() {
        let waited = rose.elapsed();
        assert!(
            waited < Duration::from_secs(10),
            "never evicted (quota {}):\n{}",
            be_quota(&n),
            n.agent.log()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let took = rose.elapsed();
    assert!(
        n.cgroups.child(prod).try_wait().unwrap().is_none(),
        "production was touched"
    );
    let r = until(Duration::from_secs(20), || recorded(&n)).await;
    assert!(
        r.is_some(),
        "the eviction never reached the service:\n{}",
        n.agent.log()
    );
    // The agent logs an eviction just after its kill, so the child can be
    // seen gone before the line is written; the record it sends to the
    // service comes after the line.
    assert!(
        n.agent.log().contains("be_cpu_satisfaction"),
        "{}",
        n.agent.log()
    );
    eprintln!("CPU satisfaction: batch work evicted {took:?} after production rose");
}
