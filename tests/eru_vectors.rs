//! Runs every vector of tests/vectors/eru.json against the sched module; one summary line.

use std::collections::BTreeMap;
use std::path::PathBuf;

use placement::sched::{
    calculate_deploy, calculate_realloc, count_cpu_plans, cpu_plans, deploy, merge_capacity,
    node_capacity, nodes_capacity, CapacityMap, CoreId, CpuMap, DeployInfo, DeployMap,
    NodeCapacity, NodeName, NodeResource, NodeResourceInfo, NumaMemory, NumaNodeId, ReallocRequest,
    ResourceRequest, SchedConfig, SchedError, Strategy, WorkloadResource, UNLIMITED,
};
use serde_json::Value;

type Check = Result<(), String>;
/// A section name and the function that checks one of its vectors.
type Section = (&'static str, fn(&Value) -> Check);

fn vectors_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/vectors/eru.json")
}

// ---------- JSON helpers ----------

fn i64_of(v: &Value, key: &str) -> i64 {
    v.get(key).and_then(Value::as_i64).unwrap_or(0)
}

fn f64_of(v: &Value, key: &str) -> f64 {
    v.get(key).and_then(Value::as_f64).unwrap_or(0.0)
}

fn bool_of(v: &Value, key: &str) -> bool {
    v.get(key).and_then(Value::as_bool).unwrap_or(false)
}

fn str_of<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or("")
}

fn int_map(v: Option<&Value>) -> BTreeMap<String, i64> {
    v.and_then(Value::as_object)
        .map(|o| {
            o.iter()
                .map(|(k, x)| (k.clone(), x.as_i64().unwrap_or(0)))
                .collect()
        })
        .unwrap_or_default()
}

fn cpu_map(v: Option<&Value>) -> CpuMap {
    int_map(v)
        .into_iter()
        .map(|(k, x)| (CoreId(k), x))
        .collect()
}

fn numa_memory(v: Option<&Value>) -> NumaMemory {
    int_map(v)
        .into_iter()
        .map(|(k, x)| (NumaNodeId(k), x))
        .collect()
}

fn numa_node(v: &Value, key: &str) -> Option<NumaNodeId> {
    Some(str_of(v, key))
        .filter(|s| !s.is_empty())
        .map(NumaNodeId::from)
}

fn numa_map(v: Option<&Value>) -> BTreeMap<CoreId, NumaNodeId> {
    v.and_then(Value::as_object)
        .map(|o| {
            o.iter()
                .map(|(k, x)| {
                    (
                        CoreId(k.clone()),
                        NumaNodeId::from(x.as_str().unwrap_or("")),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

fn config(v: &Value) -> SchedConfig {
    let base = v.get("share_base").and_then(Value::as_u64).unwrap_or(100);
    let share_base = u32::try_from(base)
        .ok()
        .and_then(std::num::NonZeroU32::new)
        .unwrap_or(SchedConfig::default().share_base);
    let max = v
        .get("max_fragment_cores")
        .and_then(Value::as_i64)
        .unwrap_or(-1);
    SchedConfig {
        share_base,
        max_fragment_cores: u32::try_from(max).ok(),
    }
}

fn expect_err<T: std::fmt::Debug>(got: Result<T, SchedError>, kind: &str) -> Check {
    match got {
        Err(e) if e.kind().as_str() == kind => Ok(()),
        Err(e) => Err(format!(
            "expected error {kind}, got {} ({e})",
            e.kind().as_str()
        )),
        Ok(v) => Err(format!("expected error {kind}, got Ok({v:?})")),
    }
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * (1.0 + b.abs())
}

fn nonzero(m: BTreeMap<String, i64>) -> BTreeMap<String, i64> {
    m.into_iter().filter(|(_, v)| *v != 0).collect()
}

fn cpu_map_str(m: &CpuMap) -> BTreeMap<String, i64> {
    m.iter().map(|(k, v)| (k.0.clone(), *v)).collect()
}

// ---------- strategies ----------

fn infos(v: &Value) -> Vec<DeployInfo> {
    v.get("infos")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .map(|i| DeployInfo {
                    node: placement_testkit::node(str_of(i, "node")),
                    capacity: i64_of(i, "capacity"),
                    count: i64_of(i, "count"),
                    usage: f64_of(i, "usage"),
                    rate: f64_of(i, "rate"),
                })
                .collect()
        })
        .unwrap_or_default()
}

fn run_strategy_vector(v: &Value) -> Result<DeployMap, SchedError> {
    let strategy: Strategy = str_of(v, "strategy").parse()?;
    let limit = u32::try_from(i64_of(v, "limit")).unwrap_or(0);
    deploy(
        strategy,
        i64_of(v, "need"),
        limit,
        &infos(v),
        i64_of(v, "total"),
    )
}

fn as_plain(m: &DeployMap) -> BTreeMap<String, i64> {
    m.iter()
        .map(|(k, v)| (placement_testkit::label(*k), *v))
        .collect()
}

fn check_strategy(v: &Value) -> Check {
    let got = run_strategy_vector(v);
    if let Some(kind) = v.get("expect_error").and_then(Value::as_str) {
        return expect_err(got, kind);
    }
    let got = got.map_err(|e| format!("unexpected error: {e}"))?;
    let plain = as_plain(&got);
    let options: Vec<BTreeMap<String, i64>> = match v.get("expect_one_of").and_then(Value::as_array)
    {
        Some(opts) => opts.iter().map(|o| nonzero(int_map(Some(o)))).collect(),
        None => vec![nonzero(int_map(v.get("expect")))],
    };
    if !options.contains(&plain) {
        return Err(format!("got {plain:?}, expected one of {options:?}"));
    }
    if let Some(sorted) = v
        .get("expect_final_counts_sorted")
        .and_then(Value::as_array)
    {
        let want: Vec<i64> = sorted.iter().filter_map(Value::as_i64).collect();
        let mut have: Vec<i64> = infos(v)
            .iter()
            .map(|i| i.count + got.get(&i.node).copied().unwrap_or(0))
            .collect();
        have.sort_unstable();
        if have != want {
            return Err(format!("final counts {have:?}, expected {want:?}"));
        }
    }
    Ok(())
}

// ---------- cpu plans ----------

fn free_node(v: &Value) -> NodeResourceInfo {
    NodeResourceInfo {
        capacity: NodeResource {
            cpu_map: cpu_map(v.get("cpus")),
            memory: i64_of(v, "memory"),
            numa: numa_map(v.get("numa")),
            numa_memory: numa_memory(v.get("numa_memory")),
            ..NodeResource::default()
        },
        usage: NodeResource::default(),
    }
}

fn plan_request(v: &Value) -> ResourceRequest {
    let r = v.get("request").cloned().unwrap_or(Value::Null);
    ResourceRequest::bound(f64_of(&r, "cpu"), i64_of(&r, "memory"))
}

fn check_cpu_plans(v: &Value) -> Check {
    let node = free_node(v);
    let cfg = config(v);
    let req = plan_request(v);
    let origin = v.get("origin_cpu_map").map(|o| cpu_map(Some(o)));
    let plans = cpu_plans(&node, &req, origin.as_ref(), &cfg).map_err(|e| e.to_string())?;
    let count = count_cpu_plans(&node, &req, origin.as_ref(), &cfg).map_err(|e| e.to_string())?;
    let want_cap = i64_of(v, "expect_capacity");
    if plans.len() as i64 != want_cap || count != want_cap {
        return Err(format!(
            "capacity: {} plans, count {count}, expected {want_cap}",
            plans.len()
        ));
    }
    let got: Vec<BTreeMap<String, i64>> = plans.iter().map(|p| cpu_map_str(&p.cpu_map)).collect();
    let want: Vec<BTreeMap<String, i64>> = v
        .get("expect_plans")
        .and_then(Value::as_array)
        .map(|a| a.iter().map(|p| int_map(Some(p))).collect())
        .unwrap_or_default();
    if str_of(v, "plans_order") == "exact" {
        if got != want {
            return Err(format!("plans {got:?}, expected {want:?}"));
        }
    } else {
        let (mut g, mut w) = (got.clone(), want.clone());
        g.sort();
        w.sort();
        if g != w {
            return Err(format!("plans (any order) {got:?}, expected {want:?}"));
        }
    }
    if let Some(with_numa) = v.get("expect_plans_with_numa").and_then(Value::as_array) {
        let mut w: Vec<(String, BTreeMap<String, i64>)> = with_numa
            .iter()
            .map(|p| (str_of(p, "numa_node").to_owned(), int_map(p.get("cpu_map"))))
            .collect();
        let mut g: Vec<(String, BTreeMap<String, i64>)> = plans
            .iter()
            .map(|p| {
                (
                    p.numa_node
                        .as_ref()
                        .map(|n| n.0.clone())
                        .unwrap_or_default(),
                    cpu_map_str(&p.cpu_map),
                )
            })
            .collect();
        g.sort();
        w.sort();
        if g != w {
            return Err(format!("plans with numa {g:?}, expected {w:?}"));
        }
    }
    if let Some(first) = v.get("expect_first_plan") {
        if got.first() != Some(&int_map(Some(first))) {
            return Err(format!("first plan {:?}, expected {first}", got.first()));
        }
    }
    if let Some(k) = v.get("apply_first_k").and_then(Value::as_u64) {
        let mut consumed: BTreeMap<String, i64> = BTreeMap::new();
        for p in got.iter().take(usize::try_from(k).unwrap_or(0)) {
            for (c, n) in p {
                *consumed.entry(c.clone()).or_insert(0) += n;
            }
        }
        let want = nonzero(int_map(v.get("expect_consumed_after_apply")));
        if nonzero(consumed.clone()) != want {
            return Err(format!("consumed {consumed:?}, expected {want:?}"));
        }
    }
    Ok(())
}

// ---------- node capacity ----------

fn capacity_node(n: &Value) -> NodeResourceInfo {
    let usage = n.get("usage").cloned().unwrap_or(Value::Null);
    NodeResourceInfo {
        capacity: NodeResource {
            cpu_map: cpu_map(n.get("cpu_map")),
            memory: i64_of(n, "memory"),
            numa: numa_map(n.get("numa")),
            numa_memory: numa_memory(n.get("numa_memory")),
            ..NodeResource::default()
        },
        usage: NodeResource {
            cpu: f64_of(&usage, "cpu"),
            cpu_map: cpu_map(usage.get("cpu_map")),
            memory: i64_of(&usage, "memory"),
            numa_memory: numa_memory(usage.get("numa_memory")),
            ..NodeResource::default()
        },
    }
}

fn capacity_request(v: &Value) -> ResourceRequest {
    let r = v.get("request").cloned().unwrap_or(Value::Null);
    ResourceRequest {
        cpu_request: f64_of(&r, "cpu"),
        cpu_limit: f64_of(&r, "cpu_limit"),
        memory_request: i64_of(&r, "memory"),
        memory_limit: i64_of(&r, "memory_limit"),
        bind: bool_of(&r, "bind"),
    }
}

fn check_node_capacity(v: &Value) -> Check {
    let cfg = config(v);
    let req = capacity_request(v);
    let nodes: Vec<(NodeName, NodeResourceInfo)> = v
        .get("nodes")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .map(|n| (placement_testkit::node(str_of(n, "node")), capacity_node(n)))
                .collect()
        })
        .unwrap_or_default();
    let got = nodes_capacity(nodes.iter().map(|(n, i)| (n, i)), &req, &cfg);
    if let Some(kind) = v.get("expect_error").and_then(Value::as_str) {
        return expect_err(got, kind);
    }
    let got = got.map_err(|e| format!("unexpected error: {e}"))?;
    let per_node: BTreeMap<String, i64> = got
        .nodes
        .iter()
        .map(|(k, c)| (placement_testkit::label(*k), c.capacity))
        .collect();
    let want = int_map(v.get("expect_per_node"));
    if per_node != want {
        return Err(format!("per node {per_node:?}, expected {want:?}"));
    }
    if got.total != i64_of(v, "expect_total") {
        return Err(format!(
            "total {}, expected {}",
            got.total,
            i64_of(v, "expect_total")
        ));
    }
    for (name, node) in &nodes {
        let c = node_capacity(node, &req, &cfg).map_err(|e| e.to_string())?;
        for (key, have) in [("expect_rate", c.rate), ("expect_usage", c.usage)] {
            if let Some(want) = v.get(key).and_then(Value::as_f64) {
                if !close(have, want) {
                    return Err(format!("{name}: {key} {have}, expected {want}"));
                }
            }
        }
        if let Some(w) = v.get("expect_weight").and_then(Value::as_u64) {
            if u64::from(c.weight) != w {
                return Err(format!("{name}: weight {}, expected {w}", c.weight));
            }
        }
    }
    Ok(())
}

// ---------- deploy calc ----------

fn check_deploy_calc(v: &Value) -> Check {
    let node = capacity_node(v.get("node").unwrap_or(&Value::Null));
    let req = capacity_request(v);
    let count = usize::try_from(i64_of(v, "count")).unwrap_or(0);
    let got = calculate_deploy(&node, count, &req, &SchedConfig::default());
    if let Some(kind) = v.get("expect_error").and_then(Value::as_str) {
        return expect_err(got, kind);
    }
    let got = got.map_err(|e| format!("unexpected error: {e}"))?;
    let maps: Vec<BTreeMap<String, i64>> = got
        .iter()
        .map(|a| cpu_map_str(&a.workload.cpu_map))
        .collect();
    let want: Vec<BTreeMap<String, i64>> = v
        .get("expect_cpu_maps")
        .and_then(Value::as_array)
        .map(|a| a.iter().map(|m| int_map(Some(m))).collect())
        .unwrap_or_default();
    if maps != want {
        return Err(format!("cpu maps {maps:?}, expected {want:?}"));
    }
    Ok(())
}

// ---------- realloc ----------

fn workload(v: &Value) -> WorkloadResource {
    WorkloadResource {
        cpu_request: f64_of(v, "cpu_request"),
        cpu_limit: f64_of(v, "cpu_limit"),
        memory_request: i64_of(v, "memory_request"),
        memory_limit: i64_of(v, "memory_limit"),
        cpu_map: cpu_map(v.get("cpu_map")),
        numa_memory: numa_memory(v.get("numa_memory")),
        numa_node: numa_node(v, "numa_node"),
    }
}

fn realloc_request(v: &Value) -> ReallocRequest {
    ReallocRequest {
        cpu_request: f64_of(v, "cpu_request"),
        cpu_limit: f64_of(v, "cpu_limit"),
        memory_request: i64_of(v, "memory_request"),
        memory_limit: i64_of(v, "memory_limit"),
        cpu_bind: bool_of(v, "cpu_bind"),
        keep_cpu_bind: bool_of(v, "keep_cpu_bind"),
    }
}

fn realloc_node(v: &Value) -> NodeResourceInfo {
    let n = v.get("node").cloned().unwrap_or(Value::Null);
    let cap = n.get("capacity").cloned().unwrap_or(Value::Null);
    let mut node = capacity_node(&cap);
    let usage = n.get("usage").cloned().unwrap_or(Value::Null);
    node.usage = NodeResource {
        cpu: f64_of(&usage, "cpu"),
        cpu_map: cpu_map(usage.get("cpu_map")),
        memory: i64_of(&usage, "memory"),
        numa_memory: numa_memory(usage.get("numa_memory")),
        ..NodeResource::default()
    };
    node
}

fn numa_str(m: &NumaMemory) -> BTreeMap<String, i64> {
    m.iter().map(|(k, v)| (k.0.clone(), *v)).collect()
}

fn check_realloc_option(got: &placement::sched::ReallocOutcome, o: &Value) -> Check {
    let new = o.get("expect_new").unwrap_or(&Value::Null);
    let w = &got.workload;
    let nn = |x: &Option<NumaNodeId>| x.as_ref().map(|n| n.0.clone()).unwrap_or_default();
    let ok_new = close(w.cpu_request, f64_of(new, "cpu_request"))
        && close(w.cpu_limit, f64_of(new, "cpu_limit"))
        && w.memory_request == i64_of(new, "memory_request")
        && w.memory_limit == i64_of(new, "memory_limit")
        && cpu_map_str(&w.cpu_map) == int_map(new.get("cpu_map"))
        && numa_str(&w.numa_memory) == int_map(new.get("numa_memory"))
        && nn(&w.numa_node) == str_of(new, "numa_node");
    if !ok_new {
        return Err(format!("new {w:?}, expected {new}"));
    }
    let eng = o.get("expect_engine").unwrap_or(&Value::Null);
    let e = &got.engine;
    let ok_engine = close(e.cpu, f64_of(eng, "cpu"))
        && e.memory == i64_of(eng, "memory")
        && cpu_map_str(&e.cpu_map) == int_map(eng.get("cpu_map"))
        && nn(&e.numa_node) == str_of(eng, "numa_node");
    if !ok_engine {
        return Err(format!("engine {e:?}, expected {eng}"));
    }
    let d = o.get("expect_delta").unwrap_or(&Value::Null);
    let g = &got.delta;
    let ok_delta = close(g.cpu_request, f64_of(d, "cpu_request"))
        && close(g.cpu_limit, f64_of(d, "cpu_limit"))
        && g.memory_request == i64_of(d, "memory_request")
        && cpu_map_str(&g.cpu_map) == nonzero(int_map(d.get("cpu_map")))
        && numa_str(&g.numa_memory) == nonzero(int_map(d.get("numa_memory")));
    if !ok_delta {
        return Err(format!("delta {g:?}, expected {d}"));
    }
    // Both sides of the NUMA-memory delta anomaly: Go's value differs from ours.
    if let Some(bug) = o.get("go_delta_numa_memory_bug") {
        if numa_str(&g.numa_memory) == int_map(Some(bug)) {
            return Err("delta numa_memory equals Go's buggy value".into());
        }
    }
    Ok(())
}

fn check_realloc(v: &Value) -> Check {
    let node = realloc_node(v);
    let origin = workload(v.get("origin").unwrap_or(&Value::Null));
    let req = realloc_request(v.get("request").unwrap_or(&Value::Null));
    let got = calculate_realloc(&node, &origin, &req, &SchedConfig::default());
    if let Some(kind) = v.get("expect_error").and_then(Value::as_str) {
        return expect_err(got, kind);
    }
    let got = got.map_err(|e| format!("unexpected error: {e}"))?;
    let options: Vec<&Value> = match v.get("expect_one_of").and_then(Value::as_array) {
        Some(a) => a.iter().collect(),
        None => vec![v],
    };
    let errors: Vec<String> = options
        .iter()
        .filter_map(|o| check_realloc_option(&got, o).err())
        .collect();
    if errors.len() == options.len() {
        return Err(errors.join(" | "));
    }
    Ok(())
}

// ---------- go anomalies: Go's result, and our intended one ----------

/// Go FILL eligibility: `count + capacity >= need` in wrapping int64.
fn go_fill_eligible(i: &DeployInfo, need: i64) -> bool {
    i.count.wrapping_add(i.capacity) >= need
}

fn check_anomaly(v: &Value) -> Check {
    let name = str_of(v, "name");
    match name {
        "fill_infinite_capacity_overflow" => {
            let need = i64_of(v, "need");
            let infos = infos(v);
            // Go side: the node with count ≥ 1 wraps negative and is skipped, so limit 0 fails.
            if infos.iter().all(|i| go_fill_eligible(i, need)) {
                return Err("Go arithmetic would not overflow here".into());
            }
            let want = nonzero(int_map(v.pointer("/intended/expect")));
            let got = run_strategy_vector(v).map_err(|e| format!("unexpected error: {e}"))?;
            if as_plain(&got) != want {
                return Err(format!("got {:?}, intended {want:?}", as_plain(&got)));
            }
            Ok(())
        }
        "bind_request_below_one_piece_hangs" => {
            let cfg = config(v);
            let req = plan_request(v);
            // Go side: zero pieces → full = 0 → getFullCPUPlans never terminates.
            if (req.cpu_request * f64::from(cfg.share_base.get())).trunc() != 0.0 {
                return Err("request is not below one piece".into());
            }
            expect_err(cpu_plans(&free_node(v), &req, None, &cfg), "invalid_cpu")
        }
        "max_fragment_cores_below_existing_fragments_panics" => {
            let cfg = config(v);
            let node = free_node(v);
            let existing = node
                .capacity
                .cpu_map
                .values()
                .filter(|&&p| p > 0 && p % cfg.base() != 0)
                .count() as i64;
            let max = i64::from(cfg.max_fragment_cores.unwrap_or(u32::MAX));
            // Go side: diff = max − existing < 0 → slice bounds panic.
            if max - existing >= 0 {
                return Err("Go would not panic here".into());
            }
            let plans =
                cpu_plans(&node, &plan_request(v), None, &cfg).map_err(|e| e.to_string())?;
            let got: Vec<BTreeMap<String, i64>> =
                plans.iter().map(|p| cpu_map_str(&p.cpu_map)).collect();
            let want = parse_intended_plans(str_of(v, "intended"));
            if got != want {
                return Err(format!("plans {got:?}, intended {want:?}"));
            }
            Ok(())
        }
        "negative_available_memory_panics" => {
            let node = free_node(v);
            let req = plan_request(v);
            // Go side: memoryCapacity = free / request is negative → cpuPlans[:negative] panics.
            if node.capacity.memory / req.memory_request >= 0 {
                return Err("Go would not panic here".into());
            }
            let cfg = config(v);
            let plans = cpu_plans(&node, &req, None, &cfg).map_err(|e| e.to_string())?;
            let count = count_cpu_plans(&node, &req, None, &cfg).map_err(|e| e.to_string())?;
            if !plans.is_empty() || count != 0 {
                return Err(format!("capacity {}/{count}, intended 0", plans.len()));
            }
            Ok(())
        }
        "realloc_delta_numa_memory_drops_new_numa" => anomaly_realloc_numa_delta(),
        "cobalt_weighted_average_first_plugin_unweighted" => anomaly_weighted_mean(),
        "cobalt_total_overflow_mixed_infinite" => anomaly_total_overflow(),
        other => Err(format!("unknown anomaly {other}")),
    }
}

/// Parses `plans {"0":20}x1,{"1":20}x2 => capacity 3` into the expanded plan list.
fn parse_intended_plans(text: &str) -> Vec<BTreeMap<String, i64>> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find('{') {
        let Some(end) = rest[start..].find('}') else {
            break;
        };
        let obj: Value = serde_json::from_str(&rest[start..start + end + 1]).unwrap_or(Value::Null);
        let after = &rest[start + end + 1..];
        let times: usize = after
            .strip_prefix('x')
            .map(|s| {
                s.chars()
                    .take_while(char::is_ascii_digit)
                    .collect::<String>()
            })
            .and_then(|s| s.parse().ok())
            .unwrap_or(1);
        for _ in 0..times {
            out.push(int_map(Some(&obj)));
        }
        rest = after;
    }
    out
}

fn anomaly_realloc_numa_delta() -> Check {
    const GIB: i64 = 1 << 30;
    let node = NodeResourceInfo {
        capacity: NodeResource {
            cpu_map: CpuMap::from([(CoreId::from("0"), 100), (CoreId::from("1"), 100)]),
            memory: 4 * GIB,
            numa: BTreeMap::from([
                (CoreId::from("0"), NumaNodeId::from("0")),
                (CoreId::from("1"), NumaNodeId::from("1")),
            ]),
            numa_memory: NumaMemory::from([
                (NumaNodeId::from("0"), 2 * GIB),
                (NumaNodeId::from("1"), 2 * GIB),
            ]),
            ..NodeResource::default()
        },
        usage: NodeResource {
            cpu: 1.0,
            cpu_map: CpuMap::from([(CoreId::from("0"), 100)]),
            memory: GIB,
            numa_memory: NumaMemory::from([(NumaNodeId::from("0"), GIB)]),
            ..NodeResource::default()
        },
    };
    let origin = WorkloadResource {
        cpu_request: 1.0,
        cpu_limit: 1.0,
        memory_request: GIB,
        memory_limit: GIB,
        cpu_map: CpuMap::from([(CoreId::from("0"), 100)]),
        numa_memory: NumaMemory::from([(NumaNodeId::from("0"), GIB)]),
        numa_node: Some(NumaNodeId::from("0")),
    };
    let req = ReallocRequest {
        memory_request: GIB,
        memory_limit: GIB,
        keep_cpu_bind: true,
        ..ReallocRequest::default()
    };
    let got = calculate_realloc(&node, &origin, &req, &SchedConfig::default())
        .map_err(|e| e.to_string())?;
    let mut intended = got.workload.numa_memory.clone();
    for (k, v) in &origin.numa_memory {
        *intended.entry(k.clone()).or_insert(0) -= v;
    }
    intended.retain(|_, v| *v != 0);
    let go: NumaMemory = origin
        .numa_memory
        .iter()
        .map(|(k, v)| (k.clone(), -v))
        .collect();
    if got.delta.numa_memory != intended {
        return Err(format!(
            "delta {:?}, intended {intended:?}",
            got.delta.numa_memory
        ));
    }
    if got.delta.numa_memory == go || intended != NumaMemory::from([(NumaNodeId::from("0"), GIB)]) {
        return Err(format!(
            "delta {:?} should differ from Go's {go:?}",
            got.delta.numa_memory
        ));
    }
    // Applying the intended delta keeps NUMA usage equal to the reservation (2 GiB on "0").
    let mut after = node.clone();
    got.delta.apply(&mut after);
    if after.usage.numa_memory.get(&NumaNodeId::from("0")) != Some(&(2 * GIB)) {
        return Err(format!(
            "numa usage after apply {:?}",
            after.usage.numa_memory
        ));
    }
    Ok(())
}

fn cap(capacity: i64, usage: f64, rate: f64, weight: u32) -> NodeCapacity {
    NodeCapacity {
        capacity,
        usage,
        rate,
        weight,
    }
}

fn anomaly_weighted_mean() -> Check {
    let n = placement_testkit::node("n");
    let cpu = CapacityMap::from_nodes([(n, cap(4, 0.5, 0.25, 100))]);
    let vol = CapacityMap::from_nodes([(n, cap(9, 0.1, 0.05, 1))]);
    let merged = merge_capacity(&[cpu, vol]);
    let got = merged.nodes.get(&n).ok_or("node missing after merge")?;
    let go_rate = (0.25 + 0.05 * 1.0) / 101.0;
    let intended_rate = (0.25 * 100.0 + 0.05 * 1.0) / 101.0;
    let intended_usage = (0.5 * 100.0 + 0.1 * 1.0) / 101.0;
    if close(got.rate, go_rate)
        || !close(got.rate, intended_rate)
        || !close(got.usage, intended_usage)
    {
        return Err(format!(
            "merged {got:?}; intended rate {intended_rate}, Go {go_rate}"
        ));
    }
    if got.capacity != 4 || got.weight != 101 {
        return Err(format!("merged {got:?}"));
    }
    Ok(())
}

fn anomaly_total_overflow() -> Check {
    let nodes = [
        (placement_testkit::node("inf"), cap(UNLIMITED, 0.0, 0.0, 1)),
        (placement_testkit::node("fin"), cap(5, 0.0, 0.0, 1)),
    ];
    let go_total = UNLIMITED.wrapping_add(5);
    let map = CapacityMap::from_nodes(nodes);
    let merged = merge_capacity(&[map.clone(), CapacityMap::from_nodes(nodes)]);
    if go_total >= 0 || map.total != UNLIMITED || merged.total != UNLIMITED {
        return Err(format!(
            "totals {} / {}, Go {go_total}",
            map.total, merged.total
        ));
    }
    Ok(())
}

// ---------- runner ----------

#[test]
fn eru_vectors() {
    let path = vectors_path();
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    let doc: Value = serde_json::from_str(&text).expect("eru.json is valid JSON");

    let sections: [Section; 6] = [
        ("strategies", check_strategy),
        ("cpu_plans", check_cpu_plans),
        ("node_capacity", check_node_capacity),
        ("deploy_calc", check_deploy_calc),
        ("realloc", check_realloc),
        ("go_anomalies", check_anomaly),
    ];
    let (mut passed, mut failed) = (0usize, 0usize);
    for (section, check) in sections {
        let vectors = doc
            .get(section)
            .and_then(Value::as_array)
            .unwrap_or_else(|| panic!("section {section} missing"));
        for v in vectors {
            match check(v) {
                Ok(()) => passed += 1,
                Err(why) => {
                    failed += 1;
                    eprintln!("FAIL {section}/{}: {why}", str_of(v, "name"));
                }
            }
        }
    }
    // Through the stdout handle, not println!, so libtest does not capture it: the summary
    // shows on every run; per-vector failure details (eprintln!) show when the test fails.
    let summary = format!("eru vectors: {passed} passed, {failed} failed\n");
    let _ = std::io::Write::write_all(&mut std::io::stdout().lock(), summary.as_bytes());
    assert!(passed > 0, "no vectors ran");
    assert_eq!(failed, 0, "{failed} eru vectors failed");
}
