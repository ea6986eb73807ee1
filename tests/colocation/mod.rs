//! The Part B (Koordinator) checks of tests/vectors/fairness.json, called
//! from `fairness_vectors.rs` so that one summary line counts them.

use placement::sched::colocation::batch_allocatable::{
    self, CalculatePolicy, HpConsumer, Knobs, NodeState,
};
use placement::sched::colocation::evict::{
    self, BeCpu, BeVictim, CpuEvictPolicy, SatisfactionKnobs, UsageCandidate,
};
use placement::sched::colocation::load_aware::{self, EmptyEstimate};
use placement::sched::colocation::suppress::{self, SuppressInput};
use placement::sched::colocation::CpuMem;
use serde_json::Value;

fn int(v: &Value) -> i64 {
    v.as_i64()
        .or_else(|| v.as_f64().map(|f| f as i64))
        .unwrap_or(0)
}

fn opt(v: &Value) -> Option<i64> {
    v.as_i64().or_else(|| v.as_f64().map(|f| f as i64))
}

fn same<T: PartialEq + std::fmt::Debug>(what: &str, got: T, want: T) -> Result<(), String> {
    (got == want)
        .then_some(())
        .ok_or_else(|| format!("{what}: got {got:?}, want {want:?}"))
}

/// cpu_milli with memory_bytes or memory_mb.
fn cpumem(v: &Value) -> CpuMem {
    let mem = if v.get("memory_bytes").is_some() {
        &v["memory_bytes"]
    } else {
        &v["memory_mb"]
    };
    CpuMem::new(int(&v["cpu_milli"]), int(mem))
}

fn policy(v: &Value) -> CalculatePolicy {
    serde_json::from_value(v.clone()).unwrap_or_default()
}

fn names(v: &Value) -> Vec<String> {
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s.as_str().map(str::to_string))
        .collect()
}

pub fn check_batch(v: &Value) -> Result<(), String> {
    let (i, node) = (&v["input"], &v["input"]["node"]);
    let hp: Vec<HpConsumer> = node["pods"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| {
            !matches!(
                p["priority_class"].as_str(),
                Some("koord-batch" | "koord-free")
            )
        })
        .filter(|p| matches!(p["phase"].as_str(), Some("Running" | "Pending")))
        .map(|p| HpConsumer {
            request: cpumem(&p["request"]),
            used: p["used"].is_object().then(|| cpumem(&p["used"])),
        })
        .collect();
    let totals = batch_allocatable::hp_totals(&hp);
    same("hp_used", totals.used, cpumem(&i["derived"]["hp_used"]))?;
    same(
        "hp_request",
        totals.request,
        cpumem(&i["derived"]["hp_request"]),
    )?;
    same(
        "hp_max_used_request",
        totals.max_used_request,
        cpumem(&i["derived"]["hp_max_used_request"]),
    )?;
    let s = &i["strategy"];
    let state = NodeState {
        capacity: cpumem(&node["capacity"]),
        system_used: cpumem(&node["system_used"]),
        node_reserved: cpumem(&node["node_reserved"]),
    };
    let cpu = Knobs {
        reclaim_percent: opt(&s["cpuReclaimThresholdPercent"]).unwrap_or(60),
        policy: policy(&s["cpuCalculatePolicy"]),
        threshold_percent: opt(&s["batchCPUThresholdPercent"]),
    };
    let memory = Knobs {
        reclaim_percent: opt(&s["memoryReclaimThresholdPercent"]).unwrap_or(65),
        policy: policy(&s["memoryCalculatePolicy"]),
        threshold_percent: opt(&s["batchMemoryThresholdPercent"]),
    };
    let got = batch_allocatable::batch_allocatable(&state, &totals, cpu, memory);
    let e = &v["expected"];
    same(
        "batch",
        got,
        CpuMem::new(int(&e["batch_cpu_milli"]), int(&e["batch_memory_bytes"])),
    )
}

pub fn check_suppress(v: &Value) -> Result<(), String> {
    let i = &v["input"];
    let milli = |x: &Value| (x.as_f64().unwrap_or(0.0) * 1000.0).round() as i64;
    let input = SuppressInput {
        capacity: int(&i["node_capacity_cpu_milli"]),
        node_reserved: int(&i["node_reserved_cpu_milli"]),
        node_used: milli(&i["node_used_cores"]),
        consumers: i["pods"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|p| {
                (
                    p["has_meta"].as_bool() == Some(true) && p["qos"] == "BE",
                    milli(&p["used_cores"]),
                )
            })
            .collect(),
    };
    let got = suppress::be_suppress_milli(
        &input,
        int(&i["cpuSuppressThresholdPercent"]),
        opt(&i["cpuSuppressMinPercent"]),
    );
    same(
        "suppress",
        got,
        int(&v["expected"]["be_suppress_cpu_milli"]),
    )
}

fn be_cpu(v: &Value) -> BeCpu {
    BeCpu {
        used: int(&v["used"]),
        request: int(&v["request"]),
        real_limit: int(&v["real_limit"]),
    }
}

fn satisfaction_knobs(i: &Value) -> SatisfactionKnobs {
    SatisfactionKnobs {
        lower_percent: int(&i["cpuEvictBESatisfactionLowerPercent"]),
        upper_percent: int(&i["cpuEvictBESatisfactionUpperPercent"]),
        usage_threshold_percent: opt(&i["cpuEvictBEUsageThresholdPercent"]).unwrap_or(90),
        policy: serde_json::from_value(i["cpuEvictPolicy"].clone())
            .unwrap_or(CpuEvictPolicy::RealLimit),
    }
}

pub fn check_cpu_release(v: &Value) -> Result<(), String> {
    let i = &v["input"];
    let current = i["current_milli"]
        .is_object()
        .then(|| be_cpu(&i["current_milli"]));
    let got = evict::be_cpu_release(
        be_cpu(&i["window_avg_milli"]),
        current,
        satisfaction_knobs(i),
        int(&i["batch_cpu_allocatable_milli"]),
    );
    same(
        "release",
        got,
        int(&v["expected"]["release_batch_cpu_milli"]),
    )
}

pub fn check_cpu_order(v: &Value) -> Result<(), String> {
    let mut victims: Vec<BeVictim<String>> = v["input"]["pods"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| p["qos"] == "BE")
        .map(|p| BeVictim {
            key: p["name"].as_str().unwrap_or_default().to_string(),
            priority: opt(&p["priority"]),
            cpu_request: int(&p["request_milli"]),
            cpu_used: opt(&p["used_milli"]),
            memory_used: None,
        })
        .collect();
    evict::sort_for_cpu(&mut victims);
    let e = &v["expected"];
    same(
        "order",
        victims.iter().map(|v| v.key.clone()).collect(),
        names(&e["order"]),
    )?;
    let ratios: Vec<f64> = e["cpu_usage_ratio"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_f64)
        .collect();
    same(
        "ratios",
        victims.iter().map(BeVictim::cpu_ratio).collect::<Vec<_>>(),
        ratios,
    )
}

pub fn check_usage_release(v: &Value) -> Result<(), String> {
    let i = &v["input"];
    let r = evict::usage_release(
        int(&i["used"]),
        int(&i["capacity"]),
        int(&i["thresholdPercent"]),
        opt(&i["lowerPercent"]),
    );
    let e = &v["expected"];
    same("usage_percent", r.usage_percent, int(&e["usage_percent"]))?;
    same("release", r.release, int(&e["release"]))
}

/// The generic evictor's candidates: active, allowed and low enough.
fn usage_candidates(i: &Value, used_field: &str) -> Vec<UsageCandidate<String>> {
    let threshold = int(&i["evictEnabledPriorityThreshold"]);
    let mut c: Vec<UsageCandidate<String>> = i["pods"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| p["phase"].as_str().is_none_or(|ph| ph == "Running"))
        .filter(|p| p["eviction_enabled"].as_bool() != Some(false))
        .filter(|p| int(&p["priority"]) <= threshold)
        .map(|p| UsageCandidate {
            key: p["name"].as_str().unwrap_or_default().to_string(),
            priority: int(&p["priority"]),
            label_priority: opt(&p["label_priority"]),
            eviction_priority: p["eviction_priority"].as_i64().unwrap_or(0),
            used: int(&p[used_field]),
        })
        .collect();
    evict::sort_for_usage(&mut c);
    c
}

pub fn check_usage_evict(v: &Value) -> Result<(), String> {
    let (i, e) = (&v["input"], &v["expected"]);
    let r = evict::usage_release(
        int(&i["node_used"]),
        int(&i["capacity"]),
        int(&i["cpuEvictThresholdPercent"]),
        opt(&i["cpuEvictLowerPercent"]),
    );
    same("usage_percent", r.usage_percent, int(&e["usage_percent"]))?;
    same("release", r.release, int(&e["release"]))?;
    let c = usage_candidates(i, "used_milli");
    same(
        "sorted",
        c.iter().map(|c| c.key.clone()).collect(),
        names(&e["sorted_candidates"]),
    )?;
    let (mut picked, mut released) = (Vec::new(), 0);
    for c in &c {
        if released >= r.release {
            break;
        }
        released += c.used;
        picked.push(c.key.clone());
    }
    same("evicted", picked, names(&e["evicted_in_order"]))?;
    same("released", released, int(&e["released"]))
}

pub fn check_usage_order(v: &Value) -> Result<(), String> {
    let c = usage_candidates(&v["input"], "used_bytes");
    same(
        "order",
        c.iter().map(|c| c.key.clone()).collect(),
        names(&v["expected"]["order"]),
    )
}

pub fn check_memory_evict(v: &Value) -> Result<(), String> {
    let (i, e) = (&v["input"], &v["expected"]);
    let r = evict::usage_release(
        int(&i["node_used_bytes"]),
        int(&i["node_capacity_bytes"]),
        int(&i["memoryEvictThresholdPercent"]),
        opt(&i["memoryEvictLowerPercent"]),
    );
    same("usage_percent", r.usage_percent, int(&e["usage_percent"]))?;
    same("release", r.release, int(&e["release_bytes"]))?;
    let mut victims: Vec<BeVictim<String>> = i["pods"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| p["qos"] == "BE")
        .map(|p| BeVictim {
            key: p["name"].as_str().unwrap_or_default().to_string(),
            priority: opt(&p["priority"]),
            cpu_request: 0,
            cpu_used: None,
            memory_used: opt(&p["used_bytes"]),
        })
        .collect();
    evict::sort_for_memory(&mut victims);
    if e.get("sorted_be_candidates").is_some() {
        same(
            "sorted",
            victims.iter().map(|v| v.key.clone()).collect(),
            names(&e["sorted_be_candidates"]),
        )?;
    }
    let (picked, released) = evict::pick(&victims, r.release, 0, |v| v.memory_used.unwrap_or(0));
    same("evicted", picked, names(&e["evicted_in_order"]))?;
    if e.get("released_bytes").is_some() {
        same("released", released, int(&e["released_bytes"]))?;
    }
    Ok(())
}

pub fn check_load(v: &Value) -> Result<(), String> {
    let (i, e) = (&v["input"], &v["expected"]);
    let pod = &i["incoming_pod"];
    let est = load_aware::estimate(
        cpumem(&pod["request"]),
        cpumem(&pod["limit"]),
        CpuMem::new(
            int(&i["estimatedScalingFactors"]["cpu"]),
            int(&i["estimatedScalingFactors"]["memory"]),
        ),
        EmptyEstimate(CpuMem::new(250, 200 * 1024 * 1024)),
    );
    same("estimate", est, cpumem(&e["estimated_incoming"]))?;
    let t = &i["usageThresholds"];
    let c = load_aware::check(
        cpumem(&i["node_usage"]),
        est,
        cpumem(&i["node_allocatable"]),
        CpuMem::new(int(&t["cpu"]), int(&t["memory"])),
    );
    same(
        "percent",
        c.percent,
        CpuMem::new(
            int(&e["usage_percent"]["cpu"]),
            int(&e["usage_percent"]["memory"]),
        ),
    )?;
    let rejected = c
        .rejected
        .map(|r| serde_json::to_value(r).unwrap_or_default())
        .unwrap_or(Value::Null);
    same("rejected", rejected, e["rejected_resource"].clone())?;
    same(
        "schedulable",
        c.rejected.is_none(),
        e["schedulable"].as_bool() == Some(true),
    )
}

mod scenario;
pub use scenario::check_scenario;
