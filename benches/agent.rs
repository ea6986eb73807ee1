//! The node agent on this machine's real cgroups (issue 67), with a real
//! server:
//!
//! 1. Its own cost with 100 consumer cgroups (50 production, 50
//!    best-effort, a sleeping process in each), at its defaults (memory
//!    looked at every 100 ms, CPU twice a second) and a report every 10 s:
//!    CPU from `/proc/<pid>/stat` over `BENCH_AGENT_SECONDS` (60) after a
//!    warm-up, as a share of one core, and its resident memory (VmRSS,
//!    VmHWM).
//! 2. The time from the memory watermark to the kill, `BENCH_KILL_TRIALS`
//!    times (100): a batch worker grows by 8 MB every 20 ms in a parent of
//!    512 MB whose watermark is 60 %, and the bench reads the parent's
//!    working set every 2 ms and waits for the worker's death (p50, p99,
//!    max). The memory cooldown is 0, so that each trial is evicted alone.
//!
//! `cargo bench --bench agent`; needs DATABASE_URL and root with cgroup
//! v1's controllers (without either it prints a line and exits, so that
//! `cargo test --benches` stays a smoke run).

use placement_testkit::cgroups::{self, AgentProcess, TestCgroups};
use placement_testkit::cluster::Cluster;
use serde_json::json;
use std::time::{Duration, Instant};

fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// utime + stime of a process, in clock ticks (100 a second).
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // After the command's closing parenthesis: field 14 and 15 overall.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<u64> = rest
        .split_whitespace()
        .map(|x| x.parse().unwrap_or(0))
        .collect();
    f.get(11).copied().unwrap_or(0) + f.get(12).copied().unwrap_or(0)
}

/// A `/proc/<pid>/status` line's kB.
fn status_kb(pid: u32, key: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// Part 1: the agent's own CPU and memory with 100 consumers.
async fn own_cost(base: &str, cgroups: &mut TestCgroups) {
    for i in 0..100 {
        let tier = if i % 2 == 0 { "prod" } else { "be" };
        let consumer = uuid::Uuid::new_v4().to_string();
        cgroups.spawn_in(tier, &consumer, &["sleep", "3600"]);
    }
    let agent = AgentProcess::start(base, "agent-bench", cgroups, &["--report-interval", "10"]);
    let pid = agent.child.id();
    tokio::time::sleep(Duration::from_secs(10)).await;
    let seconds = env_number("BENCH_AGENT_SECONDS", 60);
    let (t0, c0) = (Instant::now(), cpu_ticks(pid));
    tokio::time::sleep(Duration::from_secs(seconds)).await;
    let (elapsed, ticks) = (t0.elapsed(), cpu_ticks(pid) - c0);
    let share = ticks as f64 / 100.0 / elapsed.as_secs_f64() * 100.0;
    println!(
        "agent, 100 consumer cgroups, {seconds} s: CPU {share:.2} % of one core ({ticks} ticks); \
         VmRSS {} kB, VmHWM {} kB",
        status_kb(pid, "VmRSS:"),
        status_kb(pid, "VmHWM:")
    );
    assert!(agent.log().contains("enforcing"), "{}", agent.log());
}

/// Part 2: threshold to kill, trial after trial.
async fn kill_latency(base: &str, cgroups: &mut TestCgroups) {
    cgroups.limit_memory_mb(512);
    let prod = cgroups.worker(
        "prod",
        &uuid::Uuid::new_v4().to_string(),
        &cgroups::holding(100),
    );
    cgroups.wait_ready(prod);
    let agent = AgentProcess::start(
        base,
        "agent-bench-kill",
        cgroups,
        &["--report-interval", "1"],
    );
    tokio::time::sleep(Duration::from_secs(5)).await;
    let trials = env_number("BENCH_KILL_TRIALS", 100);
    let mut took = Vec::new();
    for _ in 0..trials {
        let w = cgroups.worker(
            "be",
            &uuid::Uuid::new_v4().to_string(),
            &cgroups::growing(8, 20, 420),
        );
        cgroups.wait_ready(w);
        let mut crossed = None;
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if crossed.is_none() && cgroups.working_set_mb() >= 307 {
                crossed = Some(Instant::now());
            }
            if cgroups.child(w).try_wait().unwrap().is_some() {
                let at = crossed.expect("killed below the watermark");
                took.push(at.elapsed());
                break;
            }
            assert!(Instant::now() < deadline, "never killed:\n{}", agent.log());
            std::thread::sleep(Duration::from_millis(2));
        }
        assert!(
            cgroups.child(prod).try_wait().unwrap().is_none(),
            "production was touched"
        );
        // The memory the worker held goes back before the next.
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    took.sort();
    println!(
        "threshold to kill, {} trials: p50 {:?}, p99 {:?}, max {:?}",
        took.len(),
        percentile(&took, 0.5),
        percentile(&took, 0.99),
        took.last().unwrap()
    );
}

#[tokio::main]
async fn main() {
    if std::env::var("DATABASE_URL").is_err() {
        println!("agent bench: DATABASE_URL is not set; nothing measured");
        return;
    }
    if !cgroups::check_or_say("agent bench") {
        return;
    }
    let cluster = Cluster::with_servers("agent-bench", "1.39", 1).await;
    let r = cluster
        .request(0, reqwest::Method::PUT, "/colocation_policy")
        .json(&json!({"memoryEvictThresholdPercent": 60, "cooldown": {"cpu": 20, "memory": 0}}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let base = cluster.servers[0].base.clone();
    {
        let mut cost = TestCgroups::new("agent-bench-cost");
        own_cost(&base, &mut cost).await;
    }
    let mut kills = TestCgroups::new("agent-bench-kill");
    kill_latency(&base, &mut kills).await;
}
