//! Property tests: plans respect free shares and memory, capacity is exact, strategies respect need and capacity.

use std::collections::BTreeMap;
use std::num::NonZeroU32;

use placement::sched::{
    add_usage, calculate_deploy, calculate_realloc, count_cpu_plans, cpu_plans, deploy,
    node_capacity, CoreId, CpuMap, DeployInfo, NodeName, NodeResource, NodeResourceInfo,
    NumaMemory, NumaNodeId, ReallocRequest, ResourceRequest, SchedConfig,
    Strategy as DeployStrategy, UNLIMITED,
};
use proptest::prelude::*;

/// Free pieces per core: idle, busy, fragmented and oversold cores.
fn free_cores() -> impl Strategy<Value = Vec<i64>> {
    prop::collection::vec(
        prop_oneof![
            Just(100i64),
            Just(0),
            Just(200),
            Just(300),
            1i64..100,
            101i64..350,
        ],
        1..14,
    )
}

fn cfg(max_fragment: Option<u32>) -> SchedConfig {
    cfg_with_base(100, max_fragment)
}

fn cfg_with_base(base: u32, max_fragment: Option<u32>) -> SchedConfig {
    SchedConfig {
        share_base: NonZeroU32::new(base).expect("non-zero"),
        max_fragment_cores: max_fragment,
    }
}

fn node_from(free: &[i64], memory: i64, numa_split: Option<usize>) -> NodeResourceInfo {
    let cpu_map: CpuMap = free
        .iter()
        .enumerate()
        .map(|(i, p)| (CoreId(i.to_string()), *p))
        .collect();
    let mut capacity = NodeResource {
        cpu_map,
        memory,
        ..NodeResource::default()
    };
    if let Some(split) = numa_split {
        for i in 0..free.len() {
            let numa = if i < split { "0" } else { "1" };
            capacity
                .numa
                .insert(CoreId(i.to_string()), NumaNodeId::from(numa));
        }
        capacity.numa_memory = NumaMemory::from([
            (NumaNodeId::from("0"), memory / 2),
            (NumaNodeId::from("1"), memory / 2),
        ]);
    }
    NodeResourceInfo {
        capacity,
        usage: NodeResource::default(),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { failure_persistence: None, ..ProptestConfig::with_cases(256) })]

    /// Plans never give a core more than its free pieces (even all plans together), never
    /// exceed memory, match the request's shape, and the counter agrees with the planner.
    #[test]
    fn cpu_plans_respect_free_share_and_memory(
        free in free_cores(),
        tenths in 1i64..40,
        mem_units in 0i64..6,
        total_mem_units in 0i64..40,
        max_fragment in prop::option::of(0u32..6),
        numa in prop::option::of(0usize..8),
        base in prop_oneof![1 => Just(10u32), 4 => Just(100u32), 1 => Just(1000u32)],
    ) {
        let cpu = tenths as f64 / 10.0;
        let unit = 1i64 << 28;
        let memory = mem_units * unit;
        // Free pieces scale with the share base so cores look alike in every unit.
        let free: Vec<i64> = free.iter().map(|p| p * i64::from(base) / 100).collect();
        let node = node_from(&free, total_mem_units * unit, numa.map(|s| s.min(free.len())));
        let cfg = cfg_with_base(base, max_fragment);
        let req = ResourceRequest::bound(cpu, memory);
        let plans = cpu_plans(&node, &req, None, &cfg).expect("valid request");
        let count = count_cpu_plans(&node, &req, None, &cfg).expect("valid request");
        prop_assert_eq!(plans.len() as i64, count);

        let base = cfg.base();
        let pieces = (cpu * base as f64).trunc() as i64;
        let mut used: BTreeMap<CoreId, i64> = BTreeMap::new();
        let mut per_numa: BTreeMap<Option<NumaNodeId>, i64> = BTreeMap::new();
        for plan in &plans {
            prop_assert_eq!(plan.cpu_map.values().sum::<i64>(), pieces);
            let fragments = plan.cpu_map.values().filter(|&&p| p != base).count();
            prop_assert!(fragments <= 1, "more than one fragment core in {:?}", plan);
            for (core, p) in &plan.cpu_map {
                let free_here = node.capacity.cpu_map.get(core).copied().unwrap_or(0);
                prop_assert!(*p <= free_here, "core {} given {} of {}", core, p, free_here);
                *used.entry(core.clone()).or_insert(0) += p;
            }
            *per_numa.entry(plan.numa_node.clone()).or_insert(0) += 1;
        }
        for (core, total) in &used {
            prop_assert!(*total <= node.capacity.cpu_map[core], "core {} over-committed", core);
        }
        if memory > 0 {
            prop_assert!(plans.len() as i64 * memory <= node.capacity.memory);
            for (numa, n) in &per_numa {
                if let Some(numa) = numa {
                    prop_assert!(*n * memory <= node.capacity.numa_memory[numa]);
                }
            }
        }
    }

    /// A deploy of the node's capacity succeeds and one more fails: never placed past capacity.
    #[test]
    fn deploy_never_exceeds_capacity(
        free in free_cores(),
        tenths in 1i64..30,
        mem_units in 0i64..4,
        total_mem_units in 1i64..30,
        bind in any::<bool>(),
    ) {
        let unit = 1i64 << 28;
        // Unbound requests without memory are unlimited; give them memory so a cap exists.
        let mem_units = if bind { mem_units } else { mem_units.max(1) };
        let node = node_from(&free, total_mem_units * unit, None);
        let req = ResourceRequest {
            bind,
            ..ResourceRequest::memory_first(tenths as f64 / 10.0, mem_units * unit)
        };
        let cfg = cfg(None);
        let cap = node_capacity(&node, &req, &cfg).expect("valid").capacity;
        prop_assert!(cap < 10_000, "capacity {} should be bounded", cap);
        let n = usize::try_from(cap).unwrap_or(0);
        if n > 0 {
            let allocs = calculate_deploy(&node, n, &req, &cfg).expect("capacity fits");
            prop_assert_eq!(allocs.len(), n);
            let mut after = node.clone();
            for a in &allocs {
                add_usage(&mut after, &a.workload);
            }
            if bind {
                for (core, used) in &after.usage.cpu_map {
                    prop_assert!(*used <= after.capacity.cpu_map[core]);
                }
            }
            if mem_units > 0 {
                prop_assert!(after.usage.memory <= after.capacity.memory);
            }
        }
        prop_assert!(calculate_deploy(&node, n + 1, &req, &cfg).is_err());
    }

    /// A bound workload reallocated with a zero delta still fits (its own resources come back).
    #[test]
    fn zero_delta_realloc_fits(free in free_cores(), tenths in 1i64..25) {
        let node = node_from(&free, 1 << 34, None);
        let req = ResourceRequest::bound(tenths as f64 / 10.0, 1 << 20);
        let cfg = cfg(None);
        let Ok(allocs) = calculate_deploy(&node, 1, &req, &cfg) else {
            return Ok(());
        };
        let mut placed = node.clone();
        add_usage(&mut placed, &allocs[0].workload);
        let realloc = ReallocRequest { keep_cpu_bind: true, ..ReallocRequest::default() };
        let out = calculate_realloc(&placed, &allocs[0].workload, &realloc, &cfg).expect("fits");
        prop_assert_eq!(
            out.workload.cpu_map.values().sum::<i64>(),
            allocs[0].workload.cpu_map.values().sum::<i64>()
        );
    }
}

fn deploy_infos() -> impl Strategy<Value = Vec<DeployInfo>> {
    prop::collection::vec(
        (
            prop_oneof![4 => 0i64..15, 1 => Just(UNLIMITED)],
            0i64..10,
            0.0f64..2.0,
            0.0f64..0.3,
        ),
        0..8,
    )
    .prop_map(|v| {
        v.into_iter()
            .enumerate()
            .map(|(i, (capacity, count, usage, rate))| DeployInfo {
                node: placement_testkit::node(&format!("n{i}")),
                capacity,
                count,
                usage,
                rate,
            })
            .collect()
    })
}

proptest! {
    #![proptest_config(ProptestConfig { failure_persistence: None, ..ProptestConfig::with_cases(512) })]

    /// Strategies never return more than needed nor deploy past a node's capacity.
    #[test]
    fn strategies_respect_need_and_capacity(
        infos in deploy_infos(),
        need in 1i64..40,
        limit in 0u32..6,
        which in 0usize..5,
    ) {
        let strategy = [DeployStrategy::Auto, DeployStrategy::Fill, DeployStrategy::Each, DeployStrategy::Global, DeployStrategy::Drained][which];
        let total = infos.iter().fold(0i64, |t, i| t.saturating_add(i.capacity));
        let Ok(map) = deploy(strategy, need, limit, &infos, total) else {
            return Ok(());
        };
        let by_name: BTreeMap<&NodeName, &DeployInfo> = infos.iter().map(|i| (&i.node, i)).collect();
        for (node, n) in &map {
            let info = by_name[node];
            prop_assert!(*n > 0);
            prop_assert!(*n <= info.capacity, "{} gets {} over capacity {}", node, n, info.capacity);
            match strategy {
                DeployStrategy::Fill => prop_assert!(*n <= need - info.count),
                DeployStrategy::Each => prop_assert_eq!(*n, need),
                DeployStrategy::Auto if limit > 0 => prop_assert!(info.count + n <= i64::from(limit)),
                _ => {}
            }
        }
        let placed: i64 = map.values().sum();
        match strategy {
            DeployStrategy::Auto | DeployStrategy::Global | DeployStrategy::Drained => prop_assert_eq!(placed, need),
            DeployStrategy::Each => {
                let nodes = if limit == 0 { infos.len() } else { limit as usize };
                prop_assert_eq!(placed, need * nodes as i64);
            }
            DeployStrategy::Fill => {}
        }
    }
}
