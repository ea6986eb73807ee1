//! Weighted, hierarchical Dominant Resource Fairness, as the Mesos DRF
//! sorter computes it (`sorter/drf/sorter.cpp`), and progressive filling
//! (the DRF paper's allocation loop). Pure: plain maps in, orders out.
//!
//! - share(node) = max over counted resources r (total_r > 0, r not
//!   excluded) of alloc_r / total_r, then divided by the node's weight, in
//!   that order in f64 (one upstream test depends on the rounding);
//! - siblings sort by (share, allocation count, path), ascending; the order
//!   is a pre-order walk, so a subtree is placed as one block;
//! - a client that also has children (`a` beside `a/c`) is a virtual leaf
//!   `a/.` with weight 1; the weight of `a` applies to the internal node;
//! - inactive clients are left out of the order.

use std::collections::BTreeMap;

/// Quantities by resource name.
pub type Resources = BTreeMap<String, f64>;

/// One client of the sorter (a project, in this service).
#[derive(Debug, Clone, PartialEq)]
pub struct Client {
    /// Slash-separated path (`eng/ml`).
    pub path: String,
    /// Whether it takes part in the order.
    pub active: bool,
    /// What it holds.
    pub allocation: Resources,
    /// How often it was allocated to (only grows; the tie-break).
    pub allocation_count: u64,
}

/// An internal node's own record (its subtree's allocation and count, which
/// may include history that the clients no longer show).
#[derive(Debug, Clone, PartialEq)]
pub struct Internal {
    /// Path.
    pub path: String,
    /// What its subtree holds.
    pub allocation: Resources,
    /// Allocations in its subtree, history included.
    pub allocation_count: u64,
}

/// Everything the sorter reads.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SortInput {
    /// Totals over the cluster in scope.
    pub totals: Resources,
    /// Resource names that do not count towards shares.
    pub excluded: Vec<String>,
    /// Weights by path (default 1).
    pub weights: BTreeMap<String, f64>,
    /// The clients.
    pub clients: Vec<Client>,
    /// Records of internal nodes; an internal node without one sums its subtree.
    pub internal: Vec<Internal>,
}

/// The dominant share of `allocation`, divided by `weight`.
pub fn share(totals: &Resources, excluded: &[String], allocation: &Resources, weight: f64) -> f64 {
    let dominant = totals
        .iter()
        .filter(|(r, &t)| t > 0.0 && !excluded.contains(r))
        .map(|(r, &t)| allocation.get(r).copied().unwrap_or(0.0) / t)
        .fold(0.0_f64, f64::max);
    dominant / weight
}

/// A node of the sorter's tree.
#[derive(Debug, Default)]
struct Node {
    /// Path for tie-breaks (`a/.` for a virtual leaf).
    key: String,
    /// The client's path to report (None for internal nodes).
    client: Option<String>,
    active: bool,
    allocation: Resources,
    count: u64,
    weight: f64,
    children: Vec<Node>,
}

impl Node {
    fn share(&self, input: &SortInput) -> f64 {
        share(
            &input.totals,
            &input.excluded,
            &self.allocation,
            self.weight,
        )
    }

    /// Pre-order walk of the active clients, siblings in DRF order.
    fn walk(&mut self, input: &SortInput, out: &mut Vec<String>) {
        if let Some(c) = &self.client {
            if self.active {
                out.push(c.clone());
            }
            return;
        }
        let mut keyed: Vec<(f64, u64, String, usize)> = self
            .children
            .iter()
            .enumerate()
            .map(|(i, n)| (n.share(input), n.count, n.key.clone(), i))
            .collect();
        keyed.sort_by(|a, b| {
            a.0.total_cmp(&b.0)
                .then(a.1.cmp(&b.1))
                .then_with(|| a.2.cmp(&b.2))
        });
        for (_, _, _, i) in keyed {
            self.children[i].walk(input, out);
        }
    }
}

fn weight_of(input: &SortInput, path: &str) -> f64 {
    input.weights.get(path).copied().unwrap_or(1.0)
}

fn add(into: &mut Resources, from: &Resources) {
    for (r, q) in from {
        *into.entry(r.clone()).or_default() += q;
    }
}

/// Builds the subtree under `prefix` ("" for the root).
fn subtree(input: &SortInput, prefix: &str) -> Vec<Node> {
    let depth = if prefix.is_empty() {
        0
    } else {
        prefix.split('/').count()
    };
    let mut names: Vec<String> = Vec::new();
    let paths = input
        .clients
        .iter()
        .map(|c| c.path.as_str())
        .chain(input.internal.iter().map(|i| i.path.as_str()));
    for p in paths {
        let under = prefix.is_empty() || p.starts_with(&format!("{prefix}/"));
        if let Some(name) = p.split('/').nth(depth).filter(|_| under) {
            let child = if prefix.is_empty() {
                name.to_string()
            } else {
                format!("{prefix}/{name}")
            };
            if !names.contains(&child) {
                names.push(child);
            }
        }
    }
    names.iter().map(|p| node(input, p)).collect()
}

/// The node at `path`: a client leaf, or an internal node (with a virtual
/// leaf when a client sits at the same path).
fn node(input: &SortInput, path: &str) -> Node {
    let client = input.clients.iter().find(|c| c.path == path);
    let children = subtree(input, path);
    if children.is_empty() {
        let c = client.cloned().unwrap_or(Client {
            path: path.to_string(),
            active: false,
            allocation: Resources::new(),
            allocation_count: 0,
        });
        return Node {
            key: path.to_string(),
            client: Some(c.path),
            active: c.active,
            allocation: c.allocation,
            count: c.allocation_count,
            weight: weight_of(input, path),
            children: Vec::new(),
        };
    }
    let mut children = children;
    if let Some(c) = client {
        children.push(Node {
            key: format!("{path}/."),
            client: Some(c.path.clone()),
            active: c.active,
            allocation: c.allocation.clone(),
            count: c.allocation_count,
            weight: weight_of(input, &format!("{path}/.")),
            children: Vec::new(),
        });
    }
    let (allocation, count) = match input.internal.iter().find(|i| i.path == path) {
        Some(rec) => (rec.allocation.clone(), rec.allocation_count),
        None => {
            let mut sum = Resources::new();
            for ch in &children {
                add(&mut sum, &ch.allocation);
            }
            (sum, children.iter().map(|c| c.count).sum())
        }
    };
    Node {
        key: path.to_string(),
        client: None,
        active: true,
        allocation,
        count,
        weight: weight_of(input, path),
        children,
    }
}

/// The active clients in DRF order: least served (by weighted dominant
/// share) first.
pub fn sort(input: &SortInput) -> Vec<String> {
    let mut root = Node {
        children: subtree(input, ""),
        weight: 1.0,
        ..Default::default()
    };
    let mut out = Vec::new();
    root.walk(input, &mut out);
    out
}

/// A user of progressive filling: one task shape, a weight.
#[derive(Debug, Clone, PartialEq)]
pub struct FillUser {
    /// Name (the last tie-break).
    pub name: String,
    /// Weight (default 1).
    pub weight: f64,
    /// What one task takes.
    pub task: Resources,
}

/// The outcome of progressive filling.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Filled {
    /// Tasks launched per user.
    pub tasks: BTreeMap<String, u64>,
    /// Which user got each task, in order.
    pub sequence: Vec<String>,
    /// What all tasks use.
    pub used: Resources,
    /// Each user's unweighted dominant share at the end.
    pub dominant_share: BTreeMap<String, f64>,
}

/// DRF progressive filling: repeatedly launch one task for the user with
/// the lowest (weighted dominant share, tasks launched, name); a user whose
/// next task no longer fits is saturated and skipped from then on.
pub fn progressive_fill(capacity: &Resources, users: &[FillUser]) -> Filled {
    let mut held: Vec<Resources> = vec![Resources::new(); users.len()];
    let mut launched = vec![0u64; users.len()];
    let mut saturated = vec![false; users.len()];
    let mut out = Filled::default();
    loop {
        let next = (0..users.len())
            .filter(|&i| !saturated[i])
            .min_by(|&a, &b| {
                let sa = share(capacity, &[], &held[a], users[a].weight);
                let sb = share(capacity, &[], &held[b], users[b].weight);
                sa.total_cmp(&sb)
                    .then(launched[a].cmp(&launched[b]))
                    .then_with(|| users[a].name.cmp(&users[b].name))
            });
        let Some(i) = next else { break };
        let fits = users[i].task.iter().all(|(r, q)| {
            let used = out.used.get(r).copied().unwrap_or(0.0);
            used + q <= capacity.get(r).copied().unwrap_or(0.0) + 1e-9
        });
        if !fits {
            saturated[i] = true;
            continue;
        }
        add(&mut held[i], &users[i].task);
        add(&mut out.used, &users[i].task);
        launched[i] += 1;
        out.sequence.push(users[i].name.clone());
    }
    for (i, u) in users.iter().enumerate() {
        out.tasks.insert(u.name.clone(), launched[i]);
        out.dominant_share
            .insert(u.name.clone(), share(capacity, &[], &held[i], 1.0));
    }
    out
}

/// Mesos' coarse-grained offers: each agent in turn is offered whole to
/// the client first in the DRF order (`UpdateWeight`, `CoarseGrained`);
/// with `recover` the client hands it straight back without a filter, so
/// only the allocation count remembers it (`SameShareFairness`). Returns
/// how many agents (or offers) each client got.
pub fn offer_whole(
    agents: &[Resources],
    weights: &BTreeMap<String, f64>,
    recover: bool,
) -> BTreeMap<String, u64> {
    let mut totals = Resources::new();
    for a in agents {
        for (r, q) in a {
            *totals.entry(r.clone()).or_default() += q;
        }
    }
    let mut clients: Vec<Client> = weights
        .keys()
        .map(|path| Client {
            path: path.clone(),
            active: true,
            allocation: Resources::new(),
            allocation_count: 0,
        })
        .collect();
    let mut got: BTreeMap<String, u64> = weights.keys().map(|k| (k.clone(), 0)).collect();
    for agent in agents {
        let input = SortInput {
            totals: totals.clone(),
            weights: weights.clone(),
            clients: clients.clone(),
            ..Default::default()
        };
        let Some(first) = sort(&input).into_iter().next() else {
            break;
        };
        let Some(c) = clients.iter_mut().find(|c| c.path == first) else {
            break;
        };
        c.allocation_count += 1;
        if !recover {
            for (r, q) in agent {
                *c.allocation.entry(r.clone()).or_default() += q;
            }
        }
        *got.entry(first).or_default() += 1;
    }
    got
}

#[cfg(test)]
mod tests {
    use super::*;

    fn res(pairs: &[(&str, f64)]) -> Resources {
        pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
    }

    #[test]
    fn the_drf_paper_example() {
        let users = [
            FillUser {
                name: "A".into(),
                weight: 1.0,
                task: res(&[("cpu", 1.0), ("mem", 4.0)]),
            },
            FillUser {
                name: "B".into(),
                weight: 1.0,
                task: res(&[("cpu", 3.0), ("mem", 1.0)]),
            },
        ];
        let f = progressive_fill(&res(&[("cpu", 9.0), ("mem", 18.0)]), &users);
        assert_eq!(f.tasks["A"], 3);
        assert_eq!(f.tasks["B"], 2);
    }

    #[test]
    fn weight_divides_the_dominant_share() {
        let totals = res(&[("cpus", 100.0), ("mem", 100.0)]);
        assert_eq!(share(&totals, &[], &res(&[("cpus", 6.0)]), 2.0), 0.03);
        assert_eq!(
            share(&totals, &["cpus".into()], &res(&[("cpus", 6.0)]), 1.0),
            0.0
        );
    }
}
