//! Capacity + AUTO distribution of 10,000 instances (1.7 CPU bound, 2 GiB) over 1K and 10K nodes of 64 cores;
//! one admission round's decision; and the candidate engine's CPU work for Placement's CI query
//! (solve and render 1,000 candidates, no database: the server-side floor `benches/perfload.rs` sits on).

use std::collections::{BTreeMap, BTreeSet};
use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion};
use placement::api::allocation_candidates::answer_json::{render, Shape};
use placement::candidates::snapshot::{Node, Snapshot, Stock};
use placement::candidates::solve;
use placement::sched::admission;
use placement::sched::{
    calculate_deploy, nodes_capacity, plan_deploy, CoreId, CpuMap, NodeName, NodeResource,
    NodeResourceInfo, ResourceRequest, SchedConfig, Strategy,
};
use placement::types::Inventory;

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
            lending_limits: vec![0, 0],
            queueing: placement::sched::admission::Queueing::Strict,
        })
        .collect();
    let requests = (0..10_000)
        .map(|i| admission::Request {
            project: i % 100,
            user: String::new(),
            resources: vec![(0, 2), (1, 4096)],
            allowed: None,
            precedence: Default::default(),
            gang: None,
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

/// The snapshot `placeload` leaves: 1,000 root providers of VCPU 32,
/// MEMORY_MB 8192 and DISK_GB 8192, in the job's aggregate, with AVX2.
fn perfload_snapshot() -> Snapshot {
    const AVX2: i32 = 7;
    let stock = |class, total, min_unit, max_unit| Stock {
        class,
        inventory: Inventory {
            min_unit,
            max_unit,
            ..Inventory::whole(total)
        },
        used: 0,
    };
    let nodes = (0..1_000u128)
        .map(|i| {
            std::sync::Arc::new(Node {
                id: i64::try_from(i).unwrap_or(0) + 1,
                uuid: uuid::Uuid::from_u128(i + 1),
                json_uuid: placement::candidates::snapshot::JsonUuid::of(uuid::Uuid::from_u128(
                    i + 1,
                )),
                parent: None,
                root: usize::try_from(i).unwrap_or(0),
                traits: vec![AVX2],
                aggs: vec![1],
                stock: vec![
                    stock(0, 32, 1, 16),
                    stock(1, 8192, 128, 8192),
                    stock(2, 8192, 5, 8192),
                ],
                report: None,
                stamp: 0,
            })
        })
        .collect();
    let mut snap = Snapshot {
        nodes,
        class_names: [(0, "VCPU"), (1, "MEMORY_MB"), (2, "DISK_GB")]
            .map(|(id, n)| (id, n.to_string()))
            .into_iter()
            .collect(),
        trait_names: [(AVX2, "HW_CPU_X86_AVX2".to_string())]
            .into_iter()
            .collect(),
        ..Snapshot::default()
    };
    snap.index();
    snap
}

fn candidates_bench(c: &mut Criterion) {
    let snap = perfload_snapshot();
    let req = solve::Request {
        groups: vec![solve::Group {
            resources: vec![(0, 1), (2, 10), (1, 256)],
            required: vec![vec![7]],
            member_of: vec![vec![1]],
            ..Default::default()
        }],
        ..Default::default()
    };
    let limits = solve::Limits {
        nested_aware: true,
        ..Default::default()
    };
    let shape = Shape {
        dict_form: true,
        traits: true,
        all_classes: true,
        nested: true,
        mappings: true,
    };
    let requested: BTreeSet<i32> = [0, 1, 2].into();
    let suffixes = [String::new()];
    c.bench_function(
        "candidates: solve 1,000 of 1,000 providers (perfload query)",
        |b| b.iter(|| black_box(solve::solve(&snap, &req, &limits))),
    );
    let found = solve::solve(&snap, &req, &limits).candidates;
    assert_eq!(found.len(), 1_000);
    c.bench_function("candidates: render 1,000 at 1.39", |b| {
        b.iter(|| black_box(render(&snap, &suffixes, &requested, &found, shape)))
    });
}

criterion_group!(benches, bench, admission_bench, candidates_bench);
criterion_main!(benches);
