//! Property-based fuzzing of the candidate engine's pure parts:
//! - the query parser never panics, whatever the keys, values and version;
//! - the solver, on random small trees with sharing providers, traits and
//!   aggregates and random groups, gives exactly the answers a brute-force
//!   oracle gives (every combination of providers, checked one by one);
//! - it never takes more steps than its budget, and what a budget or a
//!   `limit` cuts short is still a subset of the true answer;
//! - stopping each tree at its first candidate (explain's search) finds
//!   exactly the trees that anchor a candidate, with true candidates only.
//!
//! The oracle applies Placement's per-provider rules (capacity, units,
//! traits over the contributing providers, member_of through the root for
//! tree members but not for sharing providers, isolate) by enumeration,
//! independently of the solver's lazy, pruned search.

use placement::api::allocation_candidates::query;
use placement::candidates::snapshot::{JsonUuid, Node, Snapshot, Stock};
use placement::candidates::solve::{anchor_of, solve, Candidate, Group, Limits, Request, Stopped};
use placement::types::Inventory;
use proptest::prelude::*;
use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

const SHARES: i32 = 1;
const CLASSES: [i32; 3] = [0, 1, 2];
const TRAITS: [i32; 3] = [SHARES, 100, 101];
const AGGS: [i32; 2] = [7, 8];

// ---------------------------------------------------------------- parser

fn query_key() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("resources".to_string()),
        Just("required".to_string()),
        Just("member_of".to_string()),
        Just("in_tree".to_string()),
        Just("group_policy".to_string()),
        Just("limit".to_string()),
        Just("root_required".to_string()),
        Just("same_subtree".to_string()),
        "(resources|required|member_of|in_tree)[0-9a-z_-]{0,4}",
        "[a-z_]{0,12}",
    ]
}

fn query_value() -> impl Strategy<Value = String> {
    prop_oneof![
        "[A-Z_]{0,8}:[0-9]{0,22}(,[A-Z_]{0,8}:-?[0-9]{0,3}){0,3}",
        "(!|in:|!in:)?[A-Z_,!]{0,20}",
        "[0-9a-f-]{0,40}(,[0-9a-f-]{0,36}){0,2}",
        "(none|isolate|[0-9]{1,25}|-1|0)",
        any::<String>(),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn the_query_parser_never_panics(
        pairs in prop::collection::vec((query_key(), query_value()), 0..8),
        minor in 0u16..=45,
    ) {
        let _ = query::parse(&pairs, placement::microversions::Microversion::new(1, minor));
    }
}

// ---------------------------------------------------------------- solver

/// (parent, stock per class, traits, aggregates) of one provider.
type Row = (
    Option<usize>,
    Vec<(i32, i64, i64, i64, i64)>,
    Vec<i32>,
    Vec<i32>,
);

fn row(i: usize) -> impl Strategy<Value = Row> {
    let parent = if i == 0 {
        Just(None).boxed()
    } else {
        prop_oneof![2 => Just(None), 3 => (0..i).prop_map(Some)].boxed()
    };
    // (class, total, max_unit, step, used)
    let stock = prop::collection::vec((0usize..3, 1i64..=8, 1i64..=8, 1i64..=2, 0i64..=8), 0..=3);
    let traits = prop::sample::subsequence(TRAITS.to_vec(), 0..=3);
    let aggs = prop::sample::subsequence(AGGS.to_vec(), 0..=2);
    (parent, stock, traits, aggs).prop_map(|(parent, stock, traits, aggs)| {
        let mut seen = HashSet::new();
        let stock = stock
            .into_iter()
            .filter(|s| seen.insert(s.0))
            .map(|(c, total, max_unit, step, used)| {
                (
                    CLASSES[c],
                    total,
                    max_unit.min(total),
                    step,
                    used.min(total),
                )
            })
            .collect();
        (parent, stock, traits, aggs)
    })
}

fn snapshot() -> impl Strategy<Value = Snapshot> {
    (1usize..=6)
        .prop_flat_map(|n| (0..n).map(row).collect::<Vec<_>>())
        .prop_map(build)
}

fn build(rows: Vec<Row>) -> Snapshot {
    let mut nodes: Vec<Arc<Node>> = Vec::new();
    for (i, (parent, stock, traits, aggs)) in rows.into_iter().enumerate() {
        let root = parent.map(|p| nodes[p].root).unwrap_or(i);
        nodes.push(Arc::new(Node {
            id: i64::try_from(i).unwrap() + 1,
            uuid: uuid::Uuid::from_u128(u128::try_from(i).unwrap() + 1),
            json_uuid: JsonUuid::of(uuid::Uuid::from_u128(u128::try_from(i).unwrap() + 1)),
            parent,
            root,
            traits,
            aggs,
            report: None,
            stamp: 0,
            stock: stock
                .into_iter()
                .map(|(class, total, max_unit, step_size, used)| Stock {
                    class,
                    inventory: Inventory {
                        max_unit: i32::try_from(max_unit).expect("a small max_unit"),
                        step_size: i32::try_from(step_size).expect("a small step_size"),
                        ..Inventory::whole(i32::try_from(total).expect("a small total"))
                    },
                    used,
                })
                .collect(),
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

fn group(suffix: String) -> impl Strategy<Value = Group> {
    let resources = prop::sample::subsequence(CLASSES.to_vec(), 1..=2)
        .prop_flat_map(|cs| {
            let n = cs.len();
            (Just(cs), prop::collection::vec(1i64..=4, n))
        })
        .prop_map(|(cs, ns)| cs.into_iter().zip(ns).collect::<Vec<_>>());
    let required = prop_oneof![
        Just(vec![]),
        Just(vec![vec![100]]),
        Just(vec![vec![100, 101]])
    ];
    let forbidden = prop_oneof![3 => Just(vec![]), 1 => Just(vec![101])];
    let member_of = prop_oneof![
        2 => Just(vec![]),
        1 => Just(vec![vec![7]]),
        1 => Just(vec![vec![7, 8]])
    ];
    let forbidden_aggs = prop_oneof![3 => Just(vec![]), 1 => Just(vec![8])];
    (resources, required, forbidden, member_of, forbidden_aggs).prop_map(
        move |(resources, required, forbidden, member_of, forbidden_aggs)| Group {
            suffix: suffix.clone(),
            resources,
            required,
            forbidden,
            member_of,
            forbidden_aggs,
            in_tree: None,
        },
    )
}

fn request() -> impl Strategy<Value = Request> {
    (any::<bool>(), 1usize..=3, any::<bool>())
        .prop_flat_map(|(unnumbered, n, isolate)| {
            let groups: Vec<_> = (0..n)
                .map(|i| {
                    let suffix = if unnumbered && i == 0 {
                        String::new()
                    } else {
                        (i + 1).to_string()
                    };
                    group(suffix)
                })
                .collect();
            (groups, Just(isolate))
        })
        .prop_map(|(groups, isolate)| Request {
            groups,
            isolate,
            ..Default::default()
        })
}

// ---------------------------------------------------------------- oracle

/// One group's way of being satisfied: (node, class, amount) and providers.
type Way = (Vec<(usize, i32, i64)>, Vec<usize>);

fn fits(s: &Snapshot, p: usize, class: i32, n: i64) -> bool {
    s.nodes[p].stock(class).is_some_and(|st| st.fits(n))
}

fn traits_ok(s: &Snapshot, providers: &[usize], g: &Group) -> bool {
    let has = |t: i32| providers.iter().any(|&p| s.nodes[p].has_trait(t));
    g.forbidden.iter().all(|&t| !has(t)) && g.required.iter().all(|set| set.iter().any(|&t| has(t)))
}

/// Sharing providers of other trees that share an aggregate with `anchor`'s tree.
fn sharing_for(s: &Snapshot, anchor: usize) -> Vec<usize> {
    let tree_aggs: HashSet<i32> = s
        .tree(anchor)
        .iter()
        .flat_map(|&m| s.nodes[m].aggs.clone())
        .collect();
    (0..s.nodes.len())
        .filter(|&p| s.is_sharing(p) && s.nodes[p].root != anchor)
        .filter(|&p| s.nodes[p].aggs.iter().any(|a| tree_aggs.contains(a)))
        .collect()
}

fn numbered_ways(s: &Snapshot, g: &Group, reachable: &[usize]) -> Vec<Way> {
    reachable
        .iter()
        .copied()
        .filter(|&p| {
            let n = &s.nodes[p];
            g.resources.iter().all(|&(c, a)| fits(s, p, c, a))
                && traits_ok(s, &[p], g)
                && g.member_of
                    .iter()
                    .all(|set| set.iter().any(|&a| n.in_agg(a)))
                && !g.forbidden_aggs.iter().any(|&a| n.in_agg(a))
        })
        .map(|p| {
            (
                g.resources.iter().map(|&(c, a)| (p, c, a)).collect(),
                vec![p],
            )
        })
        .collect()
}

fn unnumbered_ways(s: &Snapshot, g: &Group, anchor: usize, reachable: &[usize]) -> Vec<Way> {
    let root = &s.nodes[anchor];
    let agg_ok = |p: usize| {
        let n = &s.nodes[p];
        let own_tree = n.root == anchor;
        g.member_of.iter().all(|set| {
            set.iter()
                .any(|&a| n.in_agg(a) || (own_tree && root.in_agg(a)))
        }) && g
            .forbidden_aggs
            .iter()
            .all(|&a| !n.in_agg(a) && !root.in_agg(a))
    };
    let per_class: Vec<Vec<usize>> = g
        .resources
        .iter()
        .map(|&(c, a)| {
            reachable
                .iter()
                .copied()
                .filter(|&p| fits(s, p, c, a) && agg_ok(p))
                .collect()
        })
        .collect();
    let mut ways = Vec::new();
    for chosen in cartesian(&per_class) {
        let mut providers = Vec::new();
        for &p in &chosen {
            if !providers.contains(&p) {
                providers.push(p);
            }
        }
        if traits_ok(s, &providers, g) {
            let alloc = g
                .resources
                .iter()
                .zip(&chosen)
                .map(|(&(c, a), &p)| (p, c, a))
                .collect();
            let way = (alloc, providers);
            if !ways.contains(&way) {
                ways.push(way);
            }
        }
    }
    ways
}

fn cartesian<T: Clone>(lists: &[Vec<T>]) -> Vec<Vec<T>> {
    lists.iter().fold(vec![vec![]], |acc, list| {
        acc.iter()
            .flat_map(|prefix| {
                list.iter().map(move |x| {
                    let mut v = prefix.clone();
                    v.push(x.clone());
                    v
                })
            })
            .collect()
    })
}

/// Every candidate, by enumeration.
fn oracle(s: &Snapshot, req: &Request) -> HashSet<Candidate> {
    let mut out = HashSet::new();
    for &anchor in &s.index.roots {
        let mut reachable = s.tree(anchor).to_vec();
        reachable.extend(sharing_for(s, anchor));
        let ways: Vec<Vec<Way>> = req
            .groups
            .iter()
            .map(|g| {
                if g.suffix.is_empty() {
                    unnumbered_ways(s, g, anchor, &reachable)
                } else {
                    numbered_ways(s, g, &reachable)
                }
            })
            .collect();
        for combo in cartesian(&ways) {
            if let Some(c) = combine(s, req, &combo) {
                out.insert(c);
            }
        }
    }
    out
}

/// A combination of group ways as one candidate, if capacity and isolate allow.
fn combine(s: &Snapshot, req: &Request, combo: &[Way]) -> Option<Candidate> {
    let mut sums: BTreeMap<(usize, i32), i64> = BTreeMap::new();
    for (alloc, _) in combo {
        for &(p, c, a) in alloc {
            *sums.entry((p, c)).or_default() += a;
        }
    }
    let capacity_ok = sums.iter().all(|(&(p, c), &sum)| {
        let st = s.nodes[p].stock(c).unwrap();
        st.used + sum <= st.capacity_int() && sum <= i64::from(st.inventory.max_unit)
    });
    let numbered: Vec<usize> = req
        .groups
        .iter()
        .zip(combo)
        .filter(|(g, _)| !g.suffix.is_empty())
        .map(|(_, (_, providers))| providers[0])
        .collect();
    let isolated = !req.isolate || numbered.iter().collect::<HashSet<_>>().len() == numbered.len();
    (capacity_ok && isolated).then(|| Candidate {
        allocations: sums.into_iter().map(|((p, c), n)| (p, c, n)).collect(),
        mappings: combo
            .iter()
            .map(|(_, providers)| providers.clone())
            .collect(),
    })
}

fn unbounded() -> Limits {
    Limits {
        nested_aware: true,
        ..Default::default()
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1500))]

    #[test]
    fn the_solver_agrees_with_brute_force(s in snapshot(), req in request(), seed in any::<u64>()) {
        let solved = solve(&s, &req, &unbounded());
        prop_assert_eq!(solved.stopped, None);
        let got: HashSet<Candidate> = solved.candidates.iter().cloned().collect();
        prop_assert_eq!(got.len(), solved.candidates.len(), "duplicates in the answer");
        let want = oracle(&s, &req);
        prop_assert_eq!(&got, &want);
        // Breadth-first and shuffled generation find the same set.
        let other = Limits { breadth_first: true, shuffle_seed: Some(seed), ..unbounded() };
        let again: HashSet<Candidate> = solve(&s, &req, &other).candidates.into_iter().collect();
        prop_assert_eq!(again, want);
    }

    #[test]
    fn budgets_and_limits_cut_to_a_subset(
        s in snapshot(),
        req in request(),
        max_steps in 1u64..300,
        limit in 1usize..4,
    ) {
        let want = oracle(&s, &req);
        let budgeted = solve(&s, &req, &Limits { max_steps, ..unbounded() });
        prop_assert!(budgeted.steps <= max_steps, "{} steps for a budget of {}", budgeted.steps, max_steps);
        if budgeted.stopped.is_none() {
            prop_assert_eq!(budgeted.candidates.iter().cloned().collect::<HashSet<_>>(), want.clone());
        } else {
            prop_assert_eq!(budgeted.stopped, Some(Stopped::Budget));
        }
        prop_assert!(budgeted.candidates.iter().all(|c| want.contains(c)));
        let limited = solve(&s, &req, &Limits { max_results: Some(limit), ..unbounded() });
        prop_assert_eq!(limited.candidates.len(), want.len().min(limit));
        prop_assert!(limited.candidates.iter().all(|c| want.contains(c)));
    }

    #[test]
    fn one_per_anchor_finds_every_anchoring_tree(
        s in snapshot(),
        req in request(),
        seed in any::<u64>(),
        breadth_first in any::<bool>(),
    ) {
        let want = oracle(&s, &req);
        let trees = |cs: &mut dyn Iterator<Item = &Candidate>| -> HashSet<usize> {
            cs.filter_map(|c| anchor_of(&s, &req, c)).collect()
        };
        let limits = Limits {
            one_per_anchor: true,
            breadth_first,
            shuffle_seed: Some(seed),
            ..unbounded()
        };
        let first = solve(&s, &req, &limits);
        prop_assert_eq!(first.stopped, None);
        prop_assert!(first.candidates.iter().all(|c| want.contains(c)));
        prop_assert_eq!(trees(&mut first.candidates.iter()), trees(&mut want.iter()));
    }
}
