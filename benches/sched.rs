//! Capacity + AUTO distribution of 10,000 instances (1.7 CPU bound, 2 GiB) over 1K and 10K nodes of 64 cores.

use std::collections::BTreeMap;
use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion};
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
            existing.insert(NodeName(format!("node-{i:05}")), (i % 5) as i64);
        }
        nodes.insert(
            NodeName(format!("node-{i:05}")),
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

criterion_group!(benches, bench);
criterion_main!(benches);
