//! The `colocation_provider_scenario` vectors through
//! `sched::colocation::node`, the code the HTTP endpoints use.

use super::{cpumem, int, names, opt, same};
use placement::sched::colocation::evict::BeCpu;
use placement::sched::colocation::knobs::Policy;
use placement::sched::colocation::node::{self, Consumer, NodeView};
use placement::sched::colocation::CpuMem;
use serde_json::{json, Value};

/// The scenario's watermarks as a policy (its forbid thresholds go by
/// `forbid_usageThresholds` there).
fn policy(w: &Value) -> Result<Policy, String> {
    let mut merged = serde_json::to_value(Policy::default()).map_err(|e| e.to_string())?;
    for (k, v) in w.as_object().into_iter().flatten() {
        let key = if k == "forbid_usageThresholds" {
            "forbidUsageThresholds"
        } else {
            k.as_str()
        };
        if !v.is_null() {
            merged[key] = v.clone();
        }
    }
    serde_json::from_value(merged).map_err(|e| e.to_string())
}

fn view(i: &Value) -> NodeView<String> {
    let consumers: Vec<Consumer<String>> = i["consumers"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| Consumer {
            key: c["name"].as_str().unwrap_or_default().to_string(),
            low_priority: matches!(c["priority_class"].as_str(), Some("batch" | "free")),
            priority: opt(&c["priority"]),
            request: cpumem(&c["request"]),
            used: Some(cpumem(&c["used"])),
        })
        .collect();
    let system = cpumem(&i["system_used"]);
    let node_used = consumers
        .iter()
        .filter_map(|c| c.used)
        .fold(system, CpuMem::plus);
    let be = &i["be_window_avg_milli"];
    NodeView {
        capacity: cpumem(&i["provider"]["capacity"]),
        node_reserved: cpumem(&i["provider"]["node_reserved"]),
        system_used: system,
        node_used,
        consumers,
        be_window: Some(BeCpu {
            used: int(&be["used"]),
            request: int(&be["request"]),
            real_limit: int(&be["real_limit"]),
        }),
        be_current: None,
    }
}

fn round6(x: f64) -> f64 {
    (x * 1e6).round() / 1e6
}

pub fn check_scenario(v: &Value) -> Result<(), String> {
    let (i, e) = (&v["input"], &v["expected"]);
    let p = policy(&i["watermarks"])?;
    let n = view(i);
    let alloc = node::batch_allocatable(&n, &p);
    same("batch_allocatable", alloc, cpumem(&e["batch_allocatable"]))?;
    let requested = node::batch_requested(&n);
    same("batch_requested", requested, cpumem(&e["batch_requested"]))?;
    let probe = cpumem(&i["probe_low_priority_request"]["request"]);
    same(
        "probe_estimate",
        node::estimate(probe, &p),
        cpumem(&e["forbid_check"]["probe_estimate"]),
    )?;
    let load = node::load_check(&n, &p, CpuMem::default(), probe);
    let f = &e["forbid_check"];
    same(
        "load %",
        load.percent,
        CpuMem::new(
            int(&f["cpu_usage_percent_with_probe"]),
            int(&f["memory_usage_percent_with_probe"]),
        ),
    )?;
    let mut reasons = Vec::new();
    if requested.cpu + probe.cpu > alloc.cpu {
        reasons.push("insufficient BATCH_VCPU capacity".to_string());
    }
    if requested.memory + probe.memory > alloc.memory {
        reasons.push("insufficient BATCH_MEMORY capacity".to_string());
    }
    if let Some(r) = load.rejected {
        reasons.push(format!(
            "{} usage above forbid watermark",
            json!(r).as_str().unwrap_or_default()
        ));
    }
    same(
        "probe_reject_reasons",
        reasons.clone(),
        names(&e["probe_reject_reasons"]),
    )?;
    same(
        "probe_allowed",
        reasons.is_empty(),
        e["probe_allowed"].as_bool() == Some(true),
    )?;
    let s = node::suppression(&n, &p);
    let es = &e["suppress"];
    same(
        "suppress",
        (
            s.be_cpu_limit_milli,
            s.cfs_quota_us,
            s.effective_be_limit_milli,
        ),
        (
            int(&es["be_cpu_limit_milli"]),
            int(&es["cfs_quota_us_per_100ms"]),
            int(&es["effective_be_limit_milli"]),
        ),
    )?;
    let (check, cpu) =
        node::cpu_eviction(&n, &p, alloc.cpu, &[]).ok_or("the satisfaction evictor is off")?;
    let ec = &e["cpu_eviction"];
    same(
        "satisfaction",
        round6(check.satisfaction),
        ec["satisfaction"].as_f64().unwrap_or(-1.0),
    )?;
    same(
        "be_usage_ratio",
        round6(check.usage_ratio),
        ec["be_usage_ratio"].as_f64().unwrap_or(-1.0),
    )?;
    same(
        "cpu release",
        cpu.release,
        int(&ec["release_request_milli"]),
    )?;
    same("cpu sorted", cpu.sorted, names(&ec["sorted_candidates"]))?;
    same("cpu victims", cpu.victims, names(&ec["evict_in_order"]))?;
    same(
        "cpu released",
        cpu.released,
        int(&ec["released_request_milli"]),
    )?;
    let (usage, mem) = node::memory_eviction(&n, &p, &[]);
    let em = &e["memory_eviction"];
    same(
        "memory usage %",
        usage.usage_percent,
        int(&em["usage_percent"]),
    )?;
    same("memory release", mem.release, int(&em["release_mb"]))?;
    same("memory sorted", mem.sorted, names(&em["sorted_candidates"]))?;
    same("memory victims", mem.victims, names(&em["evict_in_order"]))?;
    same("memory released", mem.released, int(&em["released_mb"]))
}
