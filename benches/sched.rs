//! Capacity + AUTO distribution of 10,000 instances (1.7 CPU bound, 2 GiB) over 1K and 10K nodes of 64 cores.

use std::collections::BTreeMap;
use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion};
use placement::sched::admission;
use placement::sched::{
    calculate_deploy, nodes_capacity, plan_deploy, CoreId, CpuMap, NodeName, NodeResource,
    NodeResourceInfo, ResourceRequest, SchedConfig, Strategy,
};

const GIB: i64 = 1 << 30;
const INSTANCES: i64 = 10_000;

/// `n` nodes of 64 idle cores and 256 GiB; every 7th node has some cores partly used and
/// existing instances, so the planner sees fragments and AUTO sees uneven counts.
fn cluster(
    n: usize,
) -> (
    BTreeMap<NodeName, NodeResourceInfo>,
    BTreeMap<NodeName, i64>,
) {
    let mut nodes = BTreeMap::new();
    let mut existing = BTreeMap::new();
    for i in 0..n {
        let cpu_map: CpuMap = (0..64).map(|c| (CoreId(c.to_string()), 100)).collect();
        let mut usage = NodeResource::default();
        if i % 7 == 0 {
            for c in 0..6 {
                usage.cpu_map.insert(CoreId(c.to_string()), 30 + 10 * c);
            }
            usage.memory = 8 * GIB;
            existing.insert(
                placement_testkit::node(&format!("node-{i:05}")),
                (i % 5) as i64,
            );
        }
        nodes.insert(
            placement_testkit::node(&format!("node-{i:05}")),
            NodeResourceInfo {
                capacity: NodeResource {
                    cpu_map,
                    memory: 256 * GIB,
                    ..NodeResource::default()
                },
                usage,
            },
        );
    }
    (nodes, existing)
}

fn bench(c: &mut Criterion) {
    let req = ResourceRequest::bound(1.7, 2 * GIB);
    let cfg = SchedConfig::default();
    for n in [1_000usize, 10_000] {
        let (nodes, existing) = cluster(n);
        c.bench_function(
            &format!("capacity+auto 10k instances / {n} nodes x 64 cores"),
            |b| {
                b.iter(|| {
                    let caps = nodes_capacity(&nodes, &req, &cfg).expect("valid request");
                    let map = plan_deploy(Strategy::Auto, INSTANCES, 0, &caps, &existing)
                        .expect("enough capacity");
                    black_box(map)
                })
            },
        );
    }
    // The allocation step for the chosen nodes (CPU plans with core maps), for reference.
    let (nodes, existing) = cluster(1_000);
    let caps = nodes_capacity(&nodes, &req, &cfg).expect("valid request");
    let map = plan_deploy(Strategy::Auto, INSTANCES, 0, &caps, &existing).expect("fits");
    c.bench_function("cpu plans for the 10k placed instances / 1000 nodes", |b| {
        b.iter(|| {
            for (name, count) in &map {
                let node = &nodes[name];
                let n = usize::try_from(*count).unwrap_or(0);
                black_box(calculate_deploy(node, n, &req, &cfg).expect("fits"));
            }
        })
    });
}

/// One admission round's pool: `providers` of 64 VCPU / 256 GiB, and
/// 10,000 requests (2 VCPU, 4 GiB) from 100 projects with weights 1–3;
/// every tenth project has a guarantee, every seventh a limit.
fn admission_round(providers: usize) -> admission::Round {
    let stock = |cap: f64| {
        Some(admission::Stock {
            capacity: cap,
            used: 0,
            min_unit: 1,
            max_unit: i64::MAX,
            step_size: 1,
        })
    };
    let pool: Vec<admission::Provider> = (0..providers)
        .map(|_| admission::Provider {
            stock: vec![stock(64.0), stock(262_144.0)],
            reservations: Vec::new(),
        })
        .collect();
    let projects = (0..100)
        .map(|p| admission::Project {
            name: format!("project-{p:03}"),
            parent: None,
            weight: f64::from(1 + p % 3),
            allocation_count: 0,
            allocated: vec![0, 0],
            consumed: vec![0, 0],
            limits: if p % 7 == 0 {
                vec![Some(150), None]
            } else {
                vec![None, None]
            },
            guarantees: if p % 10 == 0 { vec![64, 0] } else { vec![0, 0] },
        })
        .collect();
    let requests = (0..10_000)
        .map(|i| admission::Request {
            project: i % 100,
            user: String::new(),
            resources: vec![(0, 2), (1, 4096)],
            allowed: None,
        })
        .collect();
    admission::Round {
        classes: 2,
        totals: vec![64.0 * providers as f64, 262_144.0 * providers as f64],
        excluded: vec![false, false],
        providers: pool,
        projects,
        requests,
        declines: Vec::new(),
        max_steps: u64::MAX,
    }
}

/// The decision of one admission round (no database): room for all, and
/// room for half.
fn admission_bench(c: &mut Criterion) {
    for (providers, label) in [(1_000, "room for all"), (160, "room for half")] {
        let round = admission_round(providers);
        c.bench_function(
            &format!(
                "admission round: 10k requests, 100 projects, {providers} providers ({label})"
            ),
            |b| b.iter(|| black_box(admission::admit(&round))),
        );
    }
}

criterion_group!(benches, bench, admission_bench);
criterion_main!(benches);
