//! Unit tests of the pure solver on small trees built in code.

use crate::candidates::snapshot::{Node, Snapshot, Stock};
use crate::candidates::solve::{self as engine, Candidate, Group, Limits, Request, Stopped};

/// The candidates alone, for tests that do not look at the budget.
fn solve(s: &Snapshot, req: &Request, limits: &Limits) -> Vec<Candidate> {
    engine::solve(s, req, limits).candidates
}

const VCPU: i32 = 0;
const DISK: i32 = 2;
const VF: i32 = 4;
const X: i32 = 10000;
const SHARES: i32 = 1;
const PHYS_A: i32 = 500;

fn stock(class: i32, total: i32) -> Stock {
    Stock {
        class,
        inventory: crate::types::Inventory::whole(total),
        used: 0,
    }
}

/// (parent index, stock, traits, aggregates) of one provider.
type Row = (Option<usize>, Vec<Stock>, Vec<i32>, Vec<i32>);

/// Builds a snapshot from rows.
fn snap(rows: Vec<Row>) -> Snapshot {
    let mut nodes: Vec<std::sync::Arc<Node>> = Vec::new();
    for (i, (parent, stock, traits, aggs)) in rows.into_iter().enumerate() {
        let root = parent.map(|p| nodes[p].root).unwrap_or(i);
        nodes.push(std::sync::Arc::new(Node {
            id: i as i64 + 1,
            uuid: uuid::Uuid::from_u128(i as u128 + 1),
            json_uuid: crate::candidates::snapshot::JsonUuid::of(uuid::Uuid::from_u128(
                i as u128 + 1,
            )),
            parent,
            root,
            traits,
            aggs,
            stamp: 0,
            stock,
            report: None,
        }));
    }
    let any_nested = nodes.iter().any(|n| n.parent.is_some());
    let mut s = Snapshot {
        nodes: nodes.into(),
        sharing_trait: Some(SHARES),
        any_nested,
        ..Default::default()
    };
    s.index();
    s
}

fn group(suffix: &str, resources: &[(i32, i64)]) -> Group {
    Group {
        suffix: suffix.into(),
        resources: resources.to_vec(),
        ..Default::default()
    }
}

fn all() -> Limits {
    Limits {
        nested_aware: true,
        ..Default::default()
    }
}

#[test]
fn single_root_and_capacity() {
    let mut s = snap(vec![
        (None, vec![stock(VCPU, 4)], vec![], vec![]),
        (None, vec![stock(VCPU, 1)], vec![], vec![]),
    ]);
    let req = Request {
        groups: vec![group("", &[(VCPU, 2)])],
        ..Default::default()
    };
    let r = solve(&s, &req, &all());
    assert_eq!(r.len(), 1);
    assert_eq!(r[0].allocations, vec![(0, VCPU, 2)]);
    std::sync::Arc::make_mut(&mut s.nodes[0]).stock[0].used = 3;
    assert!(solve(&s, &req, &all()).is_empty());
}

#[test]
fn sharing_provider_joins_through_aggregate() {
    // compute (VCPU) and a sharing disk in aggregate 7; another compute outside it.
    let s = snap(vec![
        (None, vec![stock(VCPU, 8)], vec![], vec![7]),
        (None, vec![stock(DISK, 100)], vec![SHARES], vec![7]),
        (None, vec![stock(VCPU, 8)], vec![], vec![]),
    ]);
    let req = Request {
        groups: vec![group("", &[(VCPU, 1), (DISK, 10)])],
        ..Default::default()
    };
    let r = solve(&s, &req, &all());
    assert_eq!(r.len(), 1);
    assert_eq!(r[0].allocations, vec![(0, VCPU, 1), (1, DISK, 10)]);
    // The sharing provider alone covers a disk-only request, anchored at itself (deduplicated).
    let req = Request {
        groups: vec![group("", &[(DISK, 10)])],
        ..Default::default()
    };
    assert_eq!(solve(&s, &req, &all()).len(), 1);
}

#[test]
fn nested_tree_spans_providers_and_traits_count_only_contributors() {
    // root with VCPU, child PF with VF and trait PHYS_A.
    let s = snap(vec![
        (None, vec![stock(VCPU, 8)], vec![], vec![]),
        (Some(0), vec![stock(VF, 8)], vec![PHYS_A], vec![]),
    ]);
    let mut g = group("", &[(VCPU, 1), (VF, 1)]);
    g.required = vec![vec![PHYS_A]];
    let req = Request {
        groups: vec![g.clone()],
        ..Default::default()
    };
    assert_eq!(solve(&s, &req, &all()).len(), 1);
    // Before 1.29 a result may not use two providers of one tree.
    assert!(solve(&s, &req, &Limits::default()).is_empty());
    // A trait on a non-contributing provider does not count.
    let mut g2 = group("", &[(VCPU, 1)]);
    g2.required = vec![vec![PHYS_A]];
    assert!(solve(
        &s,
        &Request {
            groups: vec![g2],
            ..Default::default()
        },
        &all()
    )
    .is_empty());
}

#[test]
fn isolate_and_summed_capacity() {
    // One PF with 1 VF: two groups of 1 VF cannot both land on it.
    let s = snap(vec![
        (None, vec![], vec![], vec![]),
        (Some(0), vec![stock(VF, 1)], vec![], vec![]),
        (Some(0), vec![stock(VF, 1)], vec![], vec![]),
    ]);
    let groups = vec![group("1", &[(VF, 1)]), group("2", &[(VF, 1)])];
    let none = Request {
        groups: groups.clone(),
        ..Default::default()
    };
    // Summing re-checks capacity: the same PF twice exceeds 1 unit.
    assert_eq!(solve(&s, &none, &all()).len(), 2);
    let isolate = Request {
        groups,
        isolate: true,
        ..Default::default()
    };
    let r = solve(&s, &isolate, &all());
    assert_eq!(r.len(), 2);
    assert!(r.iter().all(|c| c.mappings[0] != c.mappings[1]));
}

#[test]
fn same_subtree_requires_a_common_ancestor() {
    // root → numa0 → pf0 ; root → numa1 → pf1 ; PCPU-like class on numa, VF on pf.
    let s = snap(vec![
        (None, vec![], vec![], vec![]),
        (Some(0), vec![stock(VCPU, 4)], vec![], vec![]),
        (Some(1), vec![stock(VF, 4)], vec![], vec![]),
        (Some(0), vec![stock(VCPU, 4)], vec![], vec![]),
        (Some(3), vec![stock(VF, 4)], vec![], vec![]),
    ]);
    let groups = vec![group("1", &[(VCPU, 1)]), group("2", &[(VF, 1)])];
    let free = Request {
        groups: groups.clone(),
        ..Default::default()
    };
    assert_eq!(solve(&s, &free, &all()).len(), 4);
    let tied = Request {
        groups,
        same_subtree: vec![vec![0, 1]],
        ..Default::default()
    };
    assert_eq!(solve(&s, &tied, &all()).len(), 2);
}

#[test]
fn wide_tree_w3_is_bounded_by_the_limit() {
    // One root, 8 children with 6 units of X each; 6 groups of X:1 (8^6 = 262,144 results).
    let mut rows = vec![(None, vec![], vec![], vec![])];
    for _ in 0..8 {
        rows.push((Some(0), vec![stock(X, 6)], vec![], vec![]));
    }
    let s = snap(rows);
    let groups: Vec<Group> = (1..=6).map(|i| group(&i.to_string(), &[(X, 1)])).collect();
    let req = Request {
        groups,
        ..Default::default()
    };
    let limits = Limits {
        max_results: Some(1000),
        nested_aware: true,
        ..Default::default()
    };
    let r = solve(&s, &req, &limits);
    assert_eq!(r.len(), 1000);
    // Every result respects capacity once summed.
    for c in &r {
        assert!(c.allocations.iter().all(|&(_, _, n)| n <= 6));
        assert_eq!(c.allocations.iter().map(|a| a.2).sum::<i64>(), 6);
    }
    // Breadth-first and shuffled generation stay bounded too.
    let limits = Limits {
        max_results: Some(10),
        nested_aware: true,
        breadth_first: true,
        shuffle_seed: Some(7),
        ..Default::default()
    };
    assert_eq!(solve(&s, &req, &limits).len(), 10);
}

/// A root with `n` children of 6 units of X, and `groups` numbered groups
/// that each need a whole child: no answer when groups > n, and an
/// unbounded search would try every partial assignment (n! of them).
fn whole_child_request(n: usize, groups: usize) -> (Snapshot, Request) {
    let mut rows = vec![(None, vec![], vec![], vec![])];
    for _ in 0..n {
        rows.push((Some(0), vec![stock(X, 6)], vec![], vec![]));
    }
    let req = Request {
        groups: (1..=groups)
            .map(|i| group(&i.to_string(), &[(X, 6)]))
            .collect(),
        ..Default::default()
    };
    (snap(rows), req)
}

#[test]
fn a_request_without_answer_stops_at_the_step_budget() {
    let (s, req) = whole_child_request(8, 12);
    let limits = Limits {
        nested_aware: true,
        max_steps: 200_000,
        ..Default::default()
    };
    let r = engine::solve(&s, &req, &limits);
    assert!(r.candidates.is_empty());
    assert_eq!(r.stopped, Some(Stopped::Budget));
    assert!(r.steps <= 200_000, "took {} steps", r.steps);
    // A small instance finishes well inside the budget and says so.
    let (s, req) = whole_child_request(4, 5);
    let r = engine::solve(&s, &req, &limits);
    assert!(r.candidates.is_empty());
    assert_eq!(r.stopped, None);
}

#[test]
fn a_cancelled_search_stops() {
    let (s, req) = whole_child_request(8, 12);
    let cancel = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let limits = Limits {
        nested_aware: true,
        cancel: Some(cancel),
        ..Default::default()
    };
    let r = engine::solve(&s, &req, &limits);
    assert_eq!(r.stopped, Some(Stopped::Cancelled));
    assert!(r.steps <= 2048, "took {} steps", r.steps);
}

#[test]
fn member_of_needs_the_sharing_provider_itself_in_the_aggregate() {
    // compute in aggregates 7 and 8; a sharing disk only in 8.
    let s = snap(vec![
        (None, vec![stock(VCPU, 8)], vec![], vec![7, 8]),
        (None, vec![stock(DISK, 100)], vec![SHARES], vec![8]),
    ]);
    let mut g = group("", &[(VCPU, 1), (DISK, 10)]);
    g.member_of = vec![vec![7]];
    let req = Request {
        groups: vec![g.clone()],
        ..Default::default()
    };
    // The root is in 7, but the disk is not: no disk may come from it.
    assert!(solve(&s, &req, &all()).is_empty());
    g.member_of = vec![vec![8]];
    let req = Request {
        groups: vec![g],
        ..Default::default()
    };
    assert_eq!(solve(&s, &req, &all()).len(), 1);
}

/// The candidates of a search that visits every root (no narrowing).
fn solve_every_root(s: &Snapshot, req: &Request, limits: &Limits) -> Vec<Candidate> {
    let mut budget = engine::Budget::new(limits.max_steps, None);
    let mut out = engine::Output::new(s, limits);
    let mut anchors = engine::Anchors::new(s, req, limits);
    anchors.narrowed = None;
    match limits.breadth_first {
        true => engine::breadth_first(&mut anchors, &mut out, &mut budget),
        false => engine::depth_first(&mut anchors, &mut out, &mut budget),
    }
    out.found
}

/// Solves `req` with and without the narrowing, for several limits and
/// both orders; how many of those searches were narrowed.
fn narrowed_as_every_root(s: &Snapshot, req: &Request) -> usize {
    let mut narrowed = 0;
    for max_results in [None, Some(2), Some(50)] {
        for breadth_first in [false, true] {
            let limits = Limits {
                max_results,
                breadth_first,
                ..all()
            };
            let expected = solve_every_root(s, req, &limits);
            assert_eq!(solve(s, req, &limits), expected, "{req:?} {limits:?}");
            narrowed += usize::from(engine::order::narrowed(s, req).is_some());
        }
    }
    narrowed
}

/// A `member_of`, a required trait or a root trait narrows the anchors to
/// the trees with a member (a holder; through the root or a child) when no
/// provider is shared, and the answer and its order are those of a search
/// over every root.
#[test]
fn narrowed_anchors_answer_as_every_root_does() {
    let mut rows: Vec<Row> = Vec::new();
    for i in 0..40usize {
        let root = rows.len();
        let aggs = if i % 5 == 0 { vec![7] } else { vec![9] };
        let traits = if i % 4 == 0 { vec![100] } else { vec![] };
        rows.push((None, vec![stock(VCPU, 4)], traits, aggs));
        if i % 3 == 0 {
            let aggs = if i % 7 == 0 { vec![7, 8] } else { vec![] };
            let traits = if i % 2 == 0 { vec![101] } else { vec![] };
            rows.push((
                Some(root),
                vec![stock(VCPU, 4), stock(DISK, 50)],
                traits,
                aggs,
            ));
        }
    }
    let s = snap(rows);
    let mut narrowed = 0;
    for member_of in [
        vec![vec![7]],
        vec![vec![8]],
        vec![vec![7, 8]],
        vec![vec![7], vec![8]],
    ] {
        let mut one = group("", &[(VCPU, 1), (DISK, 10)]);
        one.member_of = member_of.clone();
        let mut numbered = group("1", &[(VCPU, 1)]);
        numbered.member_of = member_of;
        for groups in [
            vec![one.clone()],
            vec![numbered.clone()],
            vec![one, group("2", &[(DISK, 5)])],
        ] {
            let req = Request {
                groups,
                ..Default::default()
            };
            narrowed += narrowed_as_every_root(&s, &req);
        }
    }
    for required in [vec![vec![100]], vec![vec![101]], vec![vec![100, 101]]] {
        let mut one = group("", &[(VCPU, 1), (DISK, 10)]);
        one.required = required.clone();
        let mut numbered = group("1", &[(VCPU, 1)]);
        numbered.required = required;
        for groups in [
            vec![one.clone()],
            vec![numbered],
            vec![one, group("2", &[(DISK, 5)])],
        ] {
            let req = Request {
                groups,
                ..Default::default()
            };
            narrowed += narrowed_as_every_root(&s, &req);
        }
    }
    for root_required in [vec![100], vec![101]] {
        let req = Request {
            groups: vec![group("", &[(VCPU, 1)])],
            root_required,
            ..Default::default()
        };
        narrowed += narrowed_as_every_root(&s, &req);
    }
    assert!(narrowed >= 90, "the narrowing was tried ({narrowed})");
}

/// With a sharing provider, a tree with no member may anchor a candidate
/// whose `member_of` group takes the shared disk: every root is visited.
#[test]
fn sharing_providers_keep_every_root_as_an_anchor() {
    let s = snap(vec![
        (None, vec![stock(VCPU, 8)], vec![], vec![8]),
        (None, vec![stock(DISK, 100)], vec![SHARES], vec![7, 8]),
    ]);
    let mut disk = group("1", &[(DISK, 10)]);
    disk.member_of = vec![vec![7]];
    let req = Request {
        groups: vec![group("", &[(VCPU, 1)]), disk],
        ..Default::default()
    };
    let found = solve(&s, &req, &all());
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found, solve_every_root(&s, &req, &all()));
}

#[test]
fn root_required_filters_anchors() {
    let s = snap(vec![
        (None, vec![stock(VCPU, 4)], vec![PHYS_A], vec![]),
        (None, vec![stock(VCPU, 4)], vec![], vec![]),
    ]);
    let req = Request {
        groups: vec![group("", &[(VCPU, 1)])],
        root_required: vec![PHYS_A],
        ..Default::default()
    };
    let r = solve(&s, &req, &all());
    assert_eq!(r.len(), 1);
    assert_eq!(r[0].allocations[0].0, 0);
    let req = Request {
        groups: vec![group("", &[(VCPU, 1)])],
        root_forbidden: vec![PHYS_A],
        ..Default::default()
    };
    assert_eq!(solve(&s, &req, &all())[0].allocations[0].0, 1);
}

#[test]
#[ignore = "timing probe: cargo test --release --lib budget_probe -- --ignored --nocapture"]
fn budget_probe() {
    // 11 children, 12 groups: about 1.2e9 steps unbounded.
    let (s, req) = whole_child_request(11, 12);
    let limits = Limits {
        nested_aware: true,
        max_steps: crate::config::DEFAULT_MAX_STEPS,
        ..Default::default()
    };
    let t = std::time::Instant::now();
    let r = engine::solve(&s, &req, &limits);
    eprintln!("{} steps in {:?} ({:?})", r.steps, t.elapsed(), r.stopped);
}

/// The roots' lazy shuffle visits every root once, in an order that
/// depends on the seed, and each root comes first, and last, about
/// equally often (as with a whole shuffle).
#[test]
fn the_lazy_shuffle_is_a_uniform_permutation() {
    use rand::SeedableRng;
    let roots: Vec<usize> = (0..5).collect();
    let (mut firsts, mut lasts) = ([0u32; 5], [0u32; 5]);
    for seed in 0..5000 {
        let order: Vec<usize> = super::Order::Shuffled {
            roots: roots.clone(),
            next: 0,
            rng: Box::new(rand::rngs::StdRng::seed_from_u64(seed)),
        }
        .collect();
        let mut sorted = order.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, roots);
        firsts[order[0]] += 1;
        lasts[order[4]] += 1;
    }
    // 1,000 each expected; the bounds are five standard deviations.
    let even = |counts: &[u32; 5]| counts.iter().all(|n| (860..1140).contains(n));
    assert!(even(&firsts) && even(&lasts), "{firsts:?} {lasts:?}");
}
